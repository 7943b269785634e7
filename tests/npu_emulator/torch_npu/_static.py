"""The static-kernel compile npugraph_ex runs at a graph's first forward, with its caches
keyed as each torch-npu release keys them (docs/npu_api.md, "Static kernels"), and its
cost in EMULATED seconds.

Caches, as read from the wheels' ``static_kernel.py``:
- In the process (every release): an op is compiled once per key. 2.10.0.post4+: the op
  hash plus the SuperKernel config string (``_get_super_kernel_config_str``: ``"False"``
  when off, else the on value followed by the optimize and debug maps as sorted JSON).
  Old key set (read on 2.10.0.post2): the op hash alone, so a compile under other
  options, or with SuperKernel off, counts as done: a stale hit.
- On disk (2.10.0.post4+ only; ``disable_static_kernel_compile_cache`` skips it): one
  run package per key of the ops still to compile (``_get_static_kernel_cache_key``:
  sorted op hashes + config string + determinism flag; 2.13.0+ also the determinism
  level, 0 here). Emulator simplification: this "disk" lives as long as the process.
- Scopes are in no key: the op hashes come from per-op dumps, where markers are no-ops.

Cost: ``SECONDS_PER_KERNEL`` emulated seconds per kernel compiled (nothing on a hit). It
is a chosen constant, not a measurement: vendor reports give minutes to tens of minutes of
static compile per model, i.e. some seconds per kernel for models of 100-200 kernels.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import torch

from torch_npu._config import DEBUG, OPTIMIZE
from torch_npu._kernels import Kernel
from torch_npu._options import is_legacy, version_tuple

SECONDS_PER_KERNEL = 10.0  # EMULATED: a chosen constant (module docstring)

COMPILED_OPS: set[str] = set()  # the process's ``_compiled_op_set``
DISK_CACHE: set[str] = set()  # keys of the on-disk cache (static_kernel_cache/CANN-*.json)
_BUILT: set[tuple[str, str]] = set()  # (op hash, config) really built: tells a stale hit from a true one


@dataclass(frozen=True)
class StaticCompile:
    """One first forward's static compile: what it cost, emulated."""

    kernels: int  # distinct kernels of the graph
    compiled: int  # kernels op_compiler built this time
    stale: int  # kernels skipped because an op-hash-only key matched (old key set)
    disk_hit: bool  # the whole remainder came from the on-disk cache
    seconds: float  # EMULATED, with the caches as they were
    uncached_s: float  # EMULATED, every kernel compiled (no cache at all)

    def to_json(self) -> dict[str, Any]:
        return {"kernels": self.kernels, "compiled": self.compiled, "stale": self.stale, "disk_hit": self.disk_hit,
                "seconds": self.seconds, "uncached_s": self.uncached_s, "emulated": True}


def op_hash(kernel: Kernel) -> str:
    """The content hash of the op's dumped JSON: its type, shapes and dtypes."""
    text = f"{kernel.aten}|{kernel.in_shapes}|{kernel.in_dtypes}|{kernel.out_shapes}|{kernel.out_dtypes}"
    return hashlib.sha256(text.encode()).hexdigest()


def config_str(local: dict[str, Any]) -> str:
    """``_get_super_kernel_config_str`` on the config's local options."""
    on = local.get("super_kernel_optimize", False)
    if not on:
        return str(on)
    maps = {"debug_options": local.get(DEBUG), "optimize_options": local.get(OPTIMIZE)}
    return str(on) + json.dumps(maps, sort_keys=True, separators=(",", ":"), default=str)


def disk_key(hashes: list[str], config: str, version: str) -> str:
    """``_get_static_kernel_cache_key`` of the ops still to compile."""
    key = hashlib.sha256()
    for h in sorted(hashes):
        key.update(h.encode())
    key.update(config.encode())
    key.update(("1" if torch.are_deterministic_algorithms_enabled() else "0").encode())
    if version_tuple(version) >= (2, 13, 0):
        key.update(b"0")  # the determinism level
    return key.hexdigest()


def compile_static(kernels: list[Kernel], local: dict[str, Any], version: str) -> StaticCompile:
    """Run the emulated static compile of one graph (its first forward)."""
    legacy = is_legacy(version)
    # The old key set gives op_compiler no option map, only --enable_super_kernel: on/off is
    # all a kernel can be stale about there.
    config = str(bool(local.get("super_kernel_optimize"))) if legacy else config_str(local)
    hashes = sorted({op_hash(k) for k in kernels})
    todo, stale = [], 0
    for h in hashes:
        key = h if legacy else f"{h}:{config}"
        if key in COMPILED_OPS:
            if (h, config) not in _BUILT:  # only an op-hash-only key can match another config
                stale += 1
            continue
        COMPILED_OPS.add(key)
        _BUILT.add((h, config))
        todo.append(h)
    disk_hit = False
    # The full key set (2.10.0.post4+) is where the disk cache exists.
    if todo and not legacy and not local.get("disable_static_kernel_compile_cache", False):
        key = disk_key(todo, config, version)
        disk_hit = key in DISK_CACHE
        DISK_CACHE.add(key)
    compiled = 0 if disk_hit else len(todo)
    return StaticCompile(len(hashes), compiled, stale, disk_hit, compiled * SECONDS_PER_KERNEL,
                         len(hashes) * SECONDS_PER_KERNEL)



def clear() -> None:
    """Forget every cache (a fresh process on a fresh host)."""
    COMPILED_OPS.clear()
    DISK_CACHE.clear()
    _BUILT.clear()
