"""One plan, several served shapes: the weighted score and the per-shape results.

A multi-shape trial stores ``TrialAttr.SHAPES`` = ``{name: ShapeOutcome JSON}``, the
heaviest shape first, and its ``TrialAttr.TIMING`` is the weighted timing below, so every
reader of a trial's ratio (best, finalists, report) sees the weighted score.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from optuna.trial import TrialState

from sktune.measure.stats import PairedTiming
from sktune.tuning.attrs import TrialAttr


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


def best_alone(trials: list[Any], yardsticks: bool = False) -> dict[str, tuple[int, float]]:
    """Per shape, the complete trial with the smallest ratio among those exact at that shape,
    whatever they did at the others: (trial number, ratio). Robustness is measured against it.
    ``yardsticks``: among the yardsticks (each measured at its one shape) instead of the search's trials."""
    best: dict[str, tuple[int, float]] = {}
    for t in trials:
        if t.state != TrialState.COMPLETE or (TrialAttr.YARDSTICK in t.user_attrs) != yardsticks:
            continue
        for name, o in outcomes_of(t.user_attrs.get(TrialAttr.SHAPES)).items():
            if o.bitwise and (name not in best or o.timing.ratio < best[name][1]):
                best[name] = (t.number, o.timing.ratio)
    return best


def exact_where(trial: Any) -> dict[str, list[str]]:
    """Where a trial's plan is exact: the shapes it was checked at (compiled and compared),
    those where it was bitwise, and (a yardstick's) those whose probe answers allow it."""
    outcomes = outcomes_of(trial.user_attrs.get(TrialAttr.SHAPES))
    return {"checked": list(outcomes), "bitwise": [n for n, o in outcomes.items() if o.bitwise],
            "probe_exact": list(trial.user_attrs.get(TrialAttr.PROBE_EXACT_AT) or outcomes)}


def exact_where_text(where: Mapping[str, list[str]] | None) -> str:
    """``exact_where`` in words, e.g. "bitwise at bs1 (checked there only; probe: bs1, bs8)"."""
    if not where:
        return ""
    bitwise = ", ".join(where["bitwise"]) or "no shape"
    checked = "there only" if where["checked"] == where["bitwise"] else "at " + ", ".join(where["checked"])
    return f"bitwise at {bitwise} (checked {checked}; probe: {', '.join(where['probe_exact']) or 'none'})"


def shapes_summary(study_shapes: Mapping[str, Any], chosen: Mapping[str, Any], searched: Mapping[str, Any],
                   trials: list[Any], plan_trial: int | None = None,
                   finalists: Sequence[Mapping[str, Any]] = ()) -> dict[str, dict[str, Any]]:
    """The summary's ``shapes``: per shape, the one plan's times (``chosen``: re-measured when
    it was) and its regret against the best plan for that shape alone (search times, both):
    the faster of the search's best trial exact there and the shape's yardsticks (tuning/yardsticks.py).
    Where the plan (``plan_trial``) and that best were both re-measured in the finalists' round
    (``finalists``: its entries), the regret compares those figures (``regret_timing``): a
    search minimum that lost its re-measurement made "+44 %" of a plan the round found as fast."""
    alone, chosen_at, searched_at = best_alone(trials), outcomes_of(chosen), outcomes_of(searched)
    yard, by_number = best_alone(trials, yardsticks=True), {t.number: t for t in trials}
    again = {(f["trial"], name): PairedTiming.from_json(o["timing"]).ratio  # (trial, shape) -> re-measured ratio
             for f in finalists for name, o in (f.get("shapes") or {}).items()}
    out: dict[str, dict[str, Any]] = {}
    total = sum(float(declared["weight"]) for declared in study_shapes.values())
    for name, declared in study_shapes.items():
        o, s = chosen_at.get(name), searched_at.get(name)
        if o is None:
            continue
        entry: dict[str, Any] = {
            # share: the weight as the weighted figures use it (input_shapes() may declare 3 and 1).
            "weight": declared["weight"], "share": float(declared["weight"]) / total,
            "input_shapes": declared.get("input_shapes"),
            "baseline_s": o.timing.baseline_s, "best_s": o.timing.candidate_s, "speedup": o.timing.speedup,
            "speedup_ci": list(o.timing.speedup_ci), "verified_bitwise": o.bitwise,
            "search_speedup": None, "best_alone_trial": None, "best_alone_speedup": None, "regret": None,
            "yardstick_trial": None, "yardstick_speedup": None, "yardstick_exact": None, "regret_against": None,
        }
        if len(study_shapes) > 1 and name in yard:
            trial, ratio = yard[name]
            entry.update(yardstick_trial=trial, yardstick_speedup=1.0 / ratio,
                         yardstick_exact=exact_where(by_number[trial]))
        if name in alone and len(study_shapes) > 1:  # one shape: nothing to trade off
            entry.update(best_alone_trial=alone[name][0], best_alone_speedup=1.0 / alone[name][1])
        candidates = [(alone[name][1], "best_alone")] if entry["best_alone_trial"] is not None else []
        candidates += [(yard[name][1], "yardstick")] if entry["yardstick_trial"] is not None else []
        if s is not None:  # the plan's search figure: the regret compares search with search
            entry["search_speedup"] = 1.0 / s.timing.ratio
        if candidates and s is not None:
            ratio, against = min(candidates)
            # How much slower the one plan is at this shape than the best plan for it alone.
            entry.update(regret=s.timing.ratio / ratio - 1.0, regret_against=against, regret_timing="search")
            other = entry["best_alone_trial"] if against == "best_alone" else entry["yardstick_trial"]
            if other == plan_trial:  # the plan is this shape's best alone: nothing to trade off there
                entry.update(regret=0.0, regret_against="itself")
            elif (mine := again.get((plan_trial, name))) and (theirs := again.get((other, name))):
                # Re-measured faster than the best alone: that best is the plan, and nothing is lost.
                entry.update(regret=max(0.0, mine / theirs - 1.0), regret_timing="re-measured")
        out[name] = entry
    return out
