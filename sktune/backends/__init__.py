"""Backends: the compilers that apply a plan. ``get_backend`` resolves a name."""

from __future__ import annotations

from sktune.backends._base import Backend, CompiledModel
from sktune.capabilities import OptionSpec
from sktune.errors import SktuneError

BACKEND_NAMES = ("auto", "inductor", "npu")


def resolve_backend_name(name: str) -> str:
    """``auto`` → ``npu`` when torch_npu imports and a device is present, else ``inductor``."""
    if name not in BACKEND_NAMES:
        raise SktuneError(f"unknown backend {name!r}; choose one of {', '.join(BACKEND_NAMES)}")
    if name != "auto":
        return name
    try:
        import torch
        import torch_npu  # noqa: F401  (optional extra, Ascend hosts only)

        if torch.npu.is_available():  # type: ignore[attr-defined]
            return "npu"
    except Exception:  # no torch-npu, or no CANN: this is not an Ascend host
        pass
    return "inductor"


def get_backend(name: str, profile_kernels: bool = False, for_trials: bool = False) -> Backend:
    """The backend called ``name``; ``for_trials`` when its compiles are measured and compared
    (the trial worker), not used in production (``sktune.apply``)."""
    name = resolve_backend_name(name)
    if name == "inductor":
        from sktune.backends.inductor import InductorBackend

        return InductorBackend(profile_kernels=profile_kernels, for_trials=for_trials)
    from sktune.backends.npu import NpuBackend

    return NpuBackend(profile_kernels=profile_kernels, for_trials=for_trials)


__all__ = ["Backend", "CompiledModel", "OptionSpec", "get_backend", "resolve_backend_name", "BACKEND_NAMES"]
