"""sktune: profiling-driven autotuner for kernel fusion in PyTorch.

Public API is re-exported here; heavy modules (torch, optuna) load on first use.
"""

from sktune.space.plan import Plan, Scope

__version__ = "0.1.0"
__all__ = ["Plan", "Scope", "__version__"]
