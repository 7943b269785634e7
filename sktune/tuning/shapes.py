"""One plan, several served shapes: the weighted score and the per-shape results.

A multi-shape trial stores ``TrialAttr.SHAPES`` = ``{name: ShapeOutcome JSON}``, the
heaviest shape first, and its ``TrialAttr.TIMING`` is the weighted timing below, so every
reader of a trial's ratio (best, finalists, report) sees the weighted score.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from optuna.trial import TrialState

from sktune.measure.stats import PairedTiming
from sktune.tuning.records import TrialAttr


@dataclass(frozen=True)
class ShapeOutcome:
    """One shape of one trial: its weight, its timing against its own unfused baseline
    (same run), and how many outputs differed from that shape's references."""

    weight: float
    timing: PairedTiming
    mismatches: int

    @property
    def bitwise(self) -> bool:
        return self.mismatches == 0

    def to_json(self) -> dict[str, Any]:
        return {"weight": self.weight, "timing": self.timing.to_json(), "mismatches": self.mismatches,
                "bitwise": self.bitwise}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ShapeOutcome":
        return cls(float(data["weight"]), PairedTiming.from_json(data["timing"]), int(data["mismatches"]))


def _geomean(values: list[float], weights: list[float]) -> float:
    total = sum(weights)
    return math.exp(sum(w * math.log(v) for v, w in zip(values, weights)) / total)


def weighted_timing(outcomes: Mapping[str, ShapeOutcome]) -> PairedTiming:
    """The weighted geometric mean over shapes of each timing field.

    The score is the weighted geometric mean of the per-shape ratios. Its interval
    combines the per-shape interval ends the same way, which assumes the shapes' errors
    move together: wider than independent errors would give, never narrower.
    Times are combined the same way, so ``baseline_s / candidate_s`` matches the ratio.
    """
    timings = [o.timing for o in outcomes.values()]
    weights = [o.weight for o in outcomes.values()]

    def mean(field: list[float]) -> float:
        return _geomean(field, weights)

    return PairedTiming(
        baseline_s=mean([t.baseline_s for t in timings]), candidate_s=mean([t.candidate_s for t in timings]),
        ratio=mean([t.ratio for t in timings]),
        ratio_ci=(mean([t.ratio_ci[0] for t in timings]), mean([t.ratio_ci[1] for t in timings])),
        n_batches=min(t.n_batches for t in timings),
    )


def outcomes_of(data: Mapping[str, Any] | None) -> dict[str, ShapeOutcome]:
    """``TrialAttr.SHAPES`` read back ({} for a one-shape trial)."""
    return {name: ShapeOutcome.from_json(o) for name, o in (data or {}).items()}


def best_alone(trials: list[Any]) -> dict[str, tuple[int, float]]:
    """Per shape, the complete trial with the smallest ratio among those exact at that shape,
    whatever they did at the others: (trial number, ratio). Robustness is measured against it."""
    best: dict[str, tuple[int, float]] = {}
    for t in trials:
        if t.state != TrialState.COMPLETE:
            continue
        for name, o in outcomes_of(t.user_attrs.get(TrialAttr.SHAPES)).items():
            if o.bitwise and (name not in best or o.timing.ratio < best[name][1]):
                best[name] = (t.number, o.timing.ratio)
    return best


def shapes_summary(study_shapes: Mapping[str, Any], chosen: Mapping[str, Any], searched: Mapping[str, Any],
                   trials: list[Any]) -> dict[str, dict[str, Any]]:
    """The summary's ``shapes``: per shape, the one plan's times (``chosen``: re-measured when
    it was) and its regret against the best plan for that shape alone (search times, both)."""
    alone, chosen_at, searched_at = best_alone(trials), outcomes_of(chosen), outcomes_of(searched)
    out: dict[str, dict[str, Any]] = {}
    for name, declared in study_shapes.items():
        o, s = chosen_at.get(name), searched_at.get(name)
        if o is None:
            continue
        entry: dict[str, Any] = {
            "weight": declared["weight"], "input_shapes": declared.get("input_shapes"),
            "baseline_s": o.timing.baseline_s, "best_s": o.timing.candidate_s, "speedup": o.timing.speedup,
            "speedup_ci": list(o.timing.speedup_ci), "verified_bitwise": o.bitwise,
            "best_alone_trial": None, "best_alone_speedup": None, "regret": None,
        }
        if name in alone and s is not None and len(study_shapes) > 1:  # one shape: nothing to trade off
            trial, ratio = alone[name]
            # How much slower the one plan is at this shape than the best plan for it alone.
            entry.update(best_alone_trial=trial, best_alone_speedup=1.0 / ratio, regret=s.timing.ratio / ratio - 1.0)
        out[name] = entry
    return out
