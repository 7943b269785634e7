"""The timing process's heap regime (measure/heap.py). Each case runs in a fresh
interpreter, as a worker does, and reads glibc's own account of its heap (mallinfo2).

Whether a young process under the default thresholds trims its freed tensors after every
call depends on where small objects landed (3,040 faults per call in some fresh processes,
0-13 in others, measured), so the default case asserts only what is deterministic: a 1 MiB
block starts out as an mmap."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sktune.measure.heap import _glibc

# What an eager call does: a dozen 1 MiB outputs, written, then all freed.
CALLS = """
import ctypes, json, resource, sys
import torch
from sktune.measure.heap import steady_heap
regime = steady_heap() if sys.argv[1] == "steady" else "default"
libc = ctypes.CDLL(None)
fields = ["arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost"]
info_fn, kind = (libc.mallinfo2, ctypes.c_size_t) if hasattr(libc, "mallinfo2") else (libc.mallinfo, ctypes.c_int)
class Info(ctypes.Structure):
    _fields_ = [(f, kind) for f in fields]
info_fn.restype = Info
def info():
    i = info_fn()
    return {"arena": i.arena, "mmapped_blocks": i.hblks}
def call():
    outs = [torch.empty(256 * 1024).fill_(1.0) for _ in range(12)]
    during = info()
    del outs
    return during, info()
start = info()
during, after = call()
for _ in range(2):
    call()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    call()
faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20
print(json.dumps({"regime": regime, "start": start, "during": during, "after": after, "faults": faults}))
"""


def first_call(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CALLS, mode], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def steady() -> dict:
    """One fresh interpreter with ``steady_heap`` for both tests (each costs a torch import)."""
    return first_call("steady")


@pytest.mark.skipif(_glibc() is None, reason="the thresholds are glibc's; elsewhere steady_heap changes nothing")
def test_steady_heap_keeps_tensors_on_a_heap_it_never_trims(steady: dict) -> None:
    default = first_call("default")
    assert steady["regime"].startswith("glibc: never trimmed")
    # glibc's dynamic threshold starts at 128 KiB: the first 1 MiB outputs are each an mmap,
    # faulted in when written and unmapped when freed.
    assert default["during"]["mmapped_blocks"] - default["start"]["mmapped_blocks"] == 12
    # Fixed: they come from the heap, which keeps its pages once they are freed ...
    assert steady["during"]["mmapped_blocks"] == steady["start"]["mmapped_blocks"]
    assert steady["during"]["arena"] - steady["start"]["arena"] > 8 << 20  # less what was free before
    assert steady["after"]["arena"] == steady["during"]["arena"]
    # ... so a call writes pages it already has (1 MiB is 256 pages of 4 KiB).
    assert steady["faults"] < 50


def test_steady_heap_says_what_it_did(steady: dict) -> None:
    regime = steady["regime"]
    assert regime.startswith("glibc: never trimmed") if _glibc() is not None else regime.startswith("default")
