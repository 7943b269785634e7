"""What the per-op exactness probe found, and the plans it makes hopeless (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sktune.graph.grouping import regions
from sktune.plan import Plan


@dataclass(frozen=True)
class Exactness:
    """Op types that are not bitwise when compiled alone, on real inputs.

    ``inexact``: not bitwise with the backend's default options. ``fixed_by_options``:
    the subset that is bitwise alone once every option is at its exact value (e.g.
    ``emulate_precision_casts`` for bf16).
    """

    inexact: frozenset[str] = frozenset()
    fixed_by_options: frozenset[str] = frozenset()

    @classmethod
    def from_probe(cls, probe: dict[str, dict[str, Any]]) -> "Exactness":
        inexact = frozenset(t for t, r in probe.items() if not r["alone"])
        fixed = frozenset(t for t in inexact if probe[t].get("exact_options"))
        return cls(inexact, fixed)

    def hopeless(self, plan: Plan, targets: Sequence[str], exact_options: dict[str, Any],
                 fallback_option: str | None) -> str | None:
        """Why ``plan`` cannot be bitwise, or None: it fuses an op type the probe found
        inexact even alone, without that op's fallback (the plan option ``fallback_option``
        lists them, where the backend has fallbacks) or the options that fix it."""
        options = plan.option_dict
        fallbacks = set(options.get(fallback_option) or ()) if fallback_option else set()
        exact = bool(exact_options) and all(options.get(k) == v for k, v in exact_options.items())
        for first, last in regions(len(targets), plan.scopes):
            for i in range(first, last + 1):
                t = targets[i]
                if t in self.inexact and t not in fallbacks and not (exact and t in self.fixed_by_options):
                    return f"fuses {t} (op {i}), which the exactness probe found not bitwise even alone"
        return None
