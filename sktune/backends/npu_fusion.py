"""Which named scopes really became SuperKernels: a scope is a request to CANN, not a
guarantee (docs/superkernel.md), so every timed npu candidate is checked against the
SuperKernel rows of its profile (``measure/sk_names.py`` reads their names)."""

from __future__ import annotations

from typing import Any

from sktune.measure.sk_names import fused_scopes
from sktune.plan import Plan


def planned_vs_actual(plan: Plan, superkernels: list[dict[str, Any]]) -> dict[str, Any]:
    """Planned, fused, not fused and unexpected scope names. A plan without scopes leaves
    the choice to the compiler: what it fused is ``automatic``, as is a SuperKernel of scope
    ``none`` (no named scope; docs/npu_api.md, "Profiler")."""
    planned = sorted({s.name for s in plan.scopes if s.name is not None})
    fused, automatic = fused_scopes(superkernels, planned)  # SuperKernel names read with the plan's scopes
    if not plan.scopes:
        return {"planned": [], "fused": [], "not_fused": [], "unexpected": [], "automatic": sorted(fused + automatic)}
    out = {"planned": planned, "fused": [n for n in planned if n in fused],
           "not_fused": [n for n in planned if n not in fused], "unexpected": [n for n in fused if n not in planned]}
    return {**out, "automatic": automatic} if automatic else out


__all__ = ["planned_vs_actual"]
