"""The weighted score over shapes, the best plan per shape alone, and the regret the summary
and the report show (hand-made trials, no compile)."""

from __future__ import annotations

import math

import optuna
import pytest

from sktune.measure.stats import PairedTiming
from sktune.report import data
from sktune.report.html_summary import _shapes
from sktune.tuning.shapes import ShapeOutcome, best_alone, shapes_summary, weighted_timing

WEIGHTS = {"bs1": 0.5, "bs8": 0.3, "bs64": 0.2}


def outcome(name: str, ratio: float, mismatches: int = 0) -> ShapeOutcome:
    return ShapeOutcome(WEIGHTS[name], PairedTiming(1e-3, 1e-3 * ratio, ratio, (ratio * 0.9, ratio * 1.1), 30),
                        mismatches)


def test_weighted_timing_is_the_weighted_geometric_mean_and_keeps_speedup_consistent() -> None:
    timing = weighted_timing({"bs1": outcome("bs1", 0.5), "bs8": outcome("bs8", 0.8), "bs64": outcome("bs64", 1.0)})
    expected = math.exp(0.5 * math.log(0.5) + 0.3 * math.log(0.8))
    assert timing.ratio == pytest.approx(expected)
    assert timing.ratio_ci == pytest.approx((expected * 0.9, expected * 1.1))
    assert timing.speedup == pytest.approx(1 / expected)  # baseline_s / candidate_s matches the ratio


def study_with(trials: list[dict[str, ShapeOutcome]]) -> optuna.Study:
    study = optuna.create_study()
    for outcomes in trials:
        trial = study.ask()
        trial.set_user_attr("shapes", {n: o.to_json() for n, o in outcomes.items()})
        study.tell(trial, weighted_timing(outcomes).ratio)
    return study


def test_regret_is_measured_against_the_best_plan_exact_at_that_shape_alone() -> None:
    robust = {"bs1": outcome("bs1", 0.8), "bs8": outcome("bs8", 0.6), "bs64": outcome("bs64", 0.9)}
    bs1_only = {"bs1": outcome("bs1", 0.5), "bs8": outcome("bs8", 0.4, mismatches=2)}  # rejected as a whole
    study = study_with([robust, bs1_only])
    assert best_alone(study.trials) == {"bs1": (1, 0.5), "bs8": (0, 0.6), "bs64": (0, 0.9)}
    declared = {n: {"weight": w, "input_shapes": [[[int(n[2:]), 8], "torch.float32"]]} for n, w in WEIGHTS.items()}
    chosen = {n: o.to_json() for n, o in robust.items()}
    summary = shapes_summary(declared, chosen, chosen, study.trials)
    assert summary["bs1"]["regret"] == pytest.approx(0.8 / 0.5 - 1) and summary["bs1"]["best_alone_trial"] == 1
    assert summary["bs8"]["regret"] == pytest.approx(0.0)
    assert summary["bs64"]["speedup"] == pytest.approx(1 / 0.9) and summary["bs64"]["verified_bitwise"]

    frame = data.shapes({"shapes": summary})
    assert list(frame["shape"]) == ["bs1", "bs8", "bs64"] and list(frame["bitwise"]) == ["yes"] * 3
    html = _shapes({"shapes": summary})
    assert "One plan for every served shape" in html and "+60.0%" in html and "(trial 1)" in html
    assert _shapes({}) == ""  # a model without input_shapes(): no panel

    # Both re-measured in the finalists' round, as fast as each other at bs1: no regret there,
    # whatever the bs1-only trial's lucky search minimum said.
    finalists = [{"trial": t, "shapes": {"bs1": {"timing": outcome("bs1", 0.7).timing.to_json()}}} for t in (0, 1)]
    again = shapes_summary(declared, chosen, chosen, study.trials, 0, finalists)
    assert again["bs1"]["regret"] == pytest.approx(0.0) and again["bs1"]["regret_timing"] == "re-measured"
    assert again["bs8"]["regret_timing"] == "search"  # trial 0 is its own best alone: no round figure beside it
    assert "+0.0% (both re-measured)" in _shapes({"shapes": again})
    assert again["bs8"]["regret"] == 0.0 and again["bs8"]["regret_against"] == "itself"
    assert "+0.0% (the plan is this shape's best alone)" in _shapes({"shapes": again})
    # Re-measured faster than its best alone: that best is the plan, no negative regret (it read -3.6 %).
    faster = [{"trial": t, "shapes": {"bs1": {"timing": outcome("bs1", r).timing.to_json()}}} for t, r in ((0, 0.6),
                                                                                                       (1, 0.7))]
    assert shapes_summary(declared, chosen, chosen, study.trials, 0, faster)["bs1"]["regret"] == 0.0


def test_the_python_export_names_each_served_shape() -> None:
    from sktune.report.export import _measured
    from sktune.plan import Plan, Scope

    shape = {"speedup": 1.21, "verified_bitwise": True}
    lines = _measured({"speedup": 1.16, "speedup_ci": [1.1, 1.2], "significant": True, "verified_bitwise": True,
                       "n_ops": 4, "shapes": {"bs1": shape, "bs64": {**shape, "speedup": 1.01}}},
                      Plan.make([Scope(0, 3, "sk0")], {}), 3)
    assert any("weighted mean): bs1 1.21x, bs64 1.01x;" in line for line in lines)


def test_each_shape_shows_its_share_of_the_traffic_as_the_weighted_figures_use_it() -> None:
    """input_shapes() may declare 3 and 1: the score normalises them, so the summary shows 75 % and 25 %."""
    declared = {"bs1": {"weight": 3, "input_shapes": [[[1, 8], "torch.float32"]]},
                "bs8": {"weight": 1, "input_shapes": [[[8, 8], "torch.float32"]]}}
    chosen = {"bs1": outcome("bs1", 0.8).to_json(), "bs8": outcome("bs8", 0.6).to_json()}
    summary = shapes_summary(declared, chosen, chosen, [])
    assert [s["share"] for s in summary.values()] == [0.75, 0.25]
    html = _shapes({"shapes": summary})
    assert "75% (weight 3)" in html and "25% (weight 1)" in html
