"""sktune: profiling-driven autotuner for kernel fusion in PyTorch.

Public API is re-exported here; heavy modules (torch, optuna) load on first use.
"""

from typing import Any

from sktune.plan import Plan, Scope

__version__ = "0.1.0"
__all__ = ["Plan", "Scope", "__version__", "apply", "applied_plan"]

_LAZY = {"apply": "sktune._apply", "applied_plan": "sktune._apply"}


def __getattr__(name: str) -> Any:
    """``sktune.apply`` and ``sktune.applied_plan`` import torch only when first used."""
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'sktune' has no attribute {name!r}")
