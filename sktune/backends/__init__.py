"""Backends: the compilers that apply a plan. ``get_backend`` resolves a name.

``REGISTRY`` is the one place that names them: adding a backend is a module with a
``Backend`` subclass and one line here (docs/architecture.md, "Adding a backend"). The
generic code asks a backend what it knows (``Backend``'s methods) and never tests its name.
"""

from __future__ import annotations

import importlib

from sktune.backends._base import Backend, CompiledModel
from sktune.capabilities import OptionSpec
from sktune.errors import SktuneError

# name -> "module:class", imported only when asked for (torch-npu is an optional extra).
REGISTRY: dict[str, str] = {
    "inductor": "sktune.backends.inductor:InductorBackend",
    "npu": "sktune.backends.npu:NpuBackend",
}
AUTO = "auto"
DEFAULT_BACKEND = "inductor"  # where no device is named: real fusion on any host
BACKEND_NAMES = (AUTO, *REGISTRY)


def resolve_backend_name(name: str) -> str:
    """``auto`` → ``npu`` when torch_npu imports and a device is present, else ``inductor``."""
    if name not in BACKEND_NAMES:
        raise SktuneError(f"unknown backend {name!r}; choose one of {', '.join(BACKEND_NAMES)}")
    if name != AUTO:
        return name
    try:
        import torch
        import torch_npu  # noqa: F401  (optional extra, Ascend hosts only)

        if torch.npu.is_available():  # type: ignore[attr-defined]
            return "npu"
    except Exception:  # no torch-npu, or no CANN: this is not an Ascend host
        pass
    return DEFAULT_BACKEND


def backend_class(name: str) -> type[Backend]:
    """The class registered as ``name`` (``auto`` resolved), not instantiated: what it knows
    without a device (its stitching rule, its export snippet) is asked of the class."""
    module, _, cls = REGISTRY[resolve_backend_name(name)].partition(":")
    return getattr(importlib.import_module(module), cls)


def get_backend(name: str, profile_kernels: bool = False, for_trials: bool = False) -> Backend:
    """The backend called ``name``; ``for_trials`` when its compiles are measured and compared
    (the trial worker), not used in production (``sktune.apply``)."""
    return backend_class(name)(profile_kernels=profile_kernels, for_trials=for_trials)


__all__ = ["BACKEND_NAMES", "DEFAULT_BACKEND", "REGISTRY", "Backend", "CompiledModel", "OptionSpec", "backend_class", "get_backend",
           "resolve_backend_name"]
