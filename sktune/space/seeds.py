"""Profile-guided seeds: plans worth measuring before the sampler takes over.

From the baseline's per-op profile (``measure/op_profile.py``) and the exactness probe
(``space/exactness.py``): fuse where the gaps between kernels are largest, keep ops the
probe found inexact either as fallbacks or outside the scopes, and give every repeated
unit a scope of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sktune.space.exactness import Exactness
from sktune.space.search_space import SearchSpace

Seed = tuple[str, dict[str, Any]]


def block_gap_share(space: SearchSpace, span_us: Sequence[float], gap_us: Sequence[float]) -> list[float]:
    """Share of each block's time that is gap; blocks decided by one stamped key share a score."""
    totals: dict[str, list[float]] = {}
    for key, (first, last) in zip(space.layout.block_keys, space.blocks):
        gap, span = sum(gap_us[first:last + 1]), sum(span_us[first:last + 1])
        entry = totals.setdefault(key, [0.0, 0.0])
        entry[0] += gap
        entry[1] += span
    return [totals[k][0] / totals[k][1] if totals[k][1] > 0 else 0.0 for k in space.layout.block_keys]


def profile_seeds(space: SearchSpace, targets: Sequence[str], span_us: Sequence[float], gap_us: Sequence[float],
                  exactness: Exactness) -> list[Seed]:
    """Named parameter sets, best guesses first (duplicates of anchors are dropped by the caller)."""
    exact = space.exact_options
    fixed = exactness.fixed_by_options if exact else frozenset()
    # A fallback only where no exact option makes the fused op bitwise (cheaper: it stays fused).
    fallbacks = [op for op in space.fallbacks if op in exactness.inexact and op not in fixed]
    blocking = exactness.inexact - set(fallbacks) - fixed
    usable = [not any(t in blocking for t in targets[first:last + 1]) for first, last in space.blocks]
    seeds: list[Seed] = []
    if len(span_us) == space.n_ops and any(span_us):
        share = block_gap_share(space, span_us, gap_us)
        ranked = sorted(s for s, ok in zip(share, usable) if ok)
        # On a host, every op has a gap: fusing most blocks beats fusing a few scattered ones.
        for label, quantile in (("gap-top-three-quarters", 0.25), ("gap-top-half", 0.5)):
            if not ranked:
                break
            threshold = ranked[min(int(len(ranked) * quantile), len(ranked) - 1)]
            fuse = [ok and s >= threshold for s, ok in zip(share, usable)]
            seeds.append((f"{label}+probe", space.params_for(fuse, fallbacks=fallbacks, **exact)))
    seeds.append(("probe-safe-runs", space.params_for(usable, fallbacks=fallbacks, **exact)))
    if space.repeats is not None:
        seeds.append(("scope-per-unit+probe",
                      space.params_for(usable, split=space.unit_edges(), fallbacks=fallbacks, **exact)))
    return seeds
