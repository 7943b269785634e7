"""One C-heap regime for the process that times, so that eager's speed does not depend on
what the process did before.

glibc's malloc gives freed memory back to the kernel once the free space at the top of the
heap exceeds ``M_TRIM_THRESHOLD``, and serves blocks above a moving ``M_MMAP_THRESHOLD``
with fresh ``mmap`` pages. An eager graph allocates a new output per op: in a young
process its freed tensors sit at the top of the heap, are trimmed after every call and
faulted in again on the next. On ``studies/shared_gate`` (1 MiB activations) that is
~2,900 page faults per call and eager 1.4-2.3x slower; a compile that leaves live objects
above the tensors ends it, and the next compile may bring it back (docs/measured.md,
"Timing on CPU"). The baseline then runs in a different regime from trial to trial, and
its ratios read up to 2.3x too good in bursts.

Fixing both thresholds keeps every call in the regime a long-running process settles
into: blocks up to 32 MiB come from the heap, and the heap is never trimmed. pyperf
likewise asks for a stable system rather than correcting noisy figures after the fact.
Other C libraries (musl, macOS) are left alone: the regime is reported, not assumed.
"""

from __future__ import annotations

import ctypes
import logging

__all__ = ["steady_heap"]

log = logging.getLogger(__name__)

# mallopt's parameter numbers (<malloc.h>).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_NEVER = -1  # as a trim threshold: never trim (mallopt(3))
# glibc's ceiling for M_MMAP_THRESHOLD on this word size (DEFAULT_MMAP_THRESHOLD_MAX):
# 32 MiB on 64-bit; mallopt refuses a larger value.
MMAP_THRESHOLD = 4 * 1024 * 1024 * ctypes.sizeof(ctypes.c_long)


def _glibc() -> ctypes.CDLL | None:
    """The process's C library when it is glibc (it exports ``gnu_get_libc_version``)."""
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 -- raises AttributeError outside glibc
        libc.mallopt  # noqa: B018
    except (OSError, AttributeError, TypeError):  # TypeError: Windows has no default library
        return None
    return libc


def steady_heap() -> str:
    """Fix glibc malloc's trim and mmap thresholds for this process; what was done, in words
    (the study's environment records it).

    Both must be set: setting either one turns off glibc's dynamic thresholds, and with the
    mmap threshold left at its 128 KiB start every 1 MiB tensor would be ``mmap``-ed.
    """
    libc = _glibc()
    if libc is None:
        return "default (not glibc)"
    mmap_set = libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    trim_set = mmap_set and libc.mallopt(_M_TRIM_THRESHOLD, _NEVER) == 1
    if not trim_set:  # mallopt returns 0 when it refuses a value
        log.warning("mallopt refused the heap thresholds: eager timings may vary with the process's history")
        return "default (mallopt refused)"
    return f"glibc: never trimmed, mmap above {MMAP_THRESHOLD >> 20} MiB"
