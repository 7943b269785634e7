"""The scope-marker ops, registered like torch-npu 2.14.0 (``torch_npu/npu/graphs.py``).

``npu::super_kernel_scope_begin(str? scope_name=None) -> ()`` and ``_end``: impls for
CPU, PrivateUse1 and BackendSelect, a no-op fake impl, and ``has_side_effect`` so dead-code elimination
keeps them. The eager impl validates the name and, while a profiler step is recording,
launches the tiny marker kernels (``sk_scope_kernel_begin`` ...).

Checked on torch 2.13: an op without tensor arguments dispatches through BackendSelect;
with only a CPU or only a PrivateUse1 impl an eager call fails ("There were no tensor
arguments to this function ..."), so the BackendSelect impl is the one that runs.
"""

from __future__ import annotations

import warnings

import torch
import torch.fx

from torch_npu import _device

NAMES = ("super_kernel_scope_begin", "super_kernel_scope_end")
DISPATCH_KEYS = ("CPU", "PrivateUse1", "BackendSelect")
_LIBS: list[torch.library.Library] = []  # kept alive: a dropped Library deregisters its ops


def check_scope_name(scope_name: str | None) -> None:
    """torch-npu's run-time check of a marker's name."""
    if scope_name is not None and (not isinstance(scope_name, str) or not scope_name.strip()):
        raise RuntimeError("scope_name should be None or a non-empty string")


def _impl(kind: str):  # type: ignore[no-untyped-def]
    def impl(scope_name: str | None = None) -> None:
        check_scope_name(scope_name)
        _device.launch(_device.marker_tasks(kind))

    impl.__name__ = f"super_kernel_scope_{kind}_impl"
    return impl


def _defined(name: str) -> bool:
    return torch._C._dispatch_has_kernel(f"npu::{name}") or hasattr(torch.ops.npu, name)


def register() -> None:
    """Define the two ops (once per process) and install the emulator's eager impls."""
    if _LIBS:
        return
    lib = torch.library.Library("npu", "FRAGMENT")
    _LIBS.append(lib)
    for name in NAMES:
        kind = name.rsplit("_", 1)[-1]
        fresh = not _defined(name)
        if fresh:
            lib.define(f"{name}(str? scope_name=None) -> ()")
        else:
            warnings.warn(f"npu::{name} was already defined elsewhere; the emulator only adds its impls",
                          stacklevel=2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for key in DISPATCH_KEYS:
                lib.impl(name, _impl(kind), key)
        if fresh:
            torch.library.register_fake(f"npu::{name}", lambda scope_name=None: None, lib=lib)
        torch.fx.node.has_side_effect(getattr(torch.ops.npu, name).default)
