"""The origin table credits each exact trial to the proposal that put its plan in the study
(hand-made study: no compile), a reused trial to the trial it reused."""

from __future__ import annotations

from typing import Any

import optuna

from sktune.benchlib.origins import (CULPRIT, LOCAL, RANDOM, REFINEMENT, STARTING_POINT, TPE, origin_table,
                                     sampled)
from sktune.tuning.attrs import TrialAttr
from tests.report_fixtures import _timing


def _study(trials: list[tuple[float, bool, dict[str, Any]]]) -> optuna.Study:
    study = optuna.create_study(direction="minimize")
    dist = {"x": optuna.distributions.IntDistribution(0, 100)}
    for i, (ratio, exact, attrs) in enumerate(trials):
        study.add_trial(optuna.trial.create_trial(
            value=ratio, params={"x": i}, distributions=dist, user_attrs={TrialAttr.PLAN: {"i": i}, TrialAttr.TIMING: _timing(ratio), **attrs},
            constraints={"bitwise": 0.0 if exact else 3.0}))
    return study


def test_each_exact_trial_is_credited_to_its_proposal() -> None:
    study = _study([
        (1.0, True, {TrialAttr.ANCHOR: "unfused"}),
        (0.5, False, {TrialAttr.ANCHOR: "fuse-all"}),  # fastest, but inexact: never the best
        (0.70, True, {TrialAttr.PROPOSED: "local: cut 3 moved"}),
        (0.60, True, {TrialAttr.PROPOSED: "tpe"}),
        (0.61, True, {TrialAttr.ANCHOR: "best+max_fusion_size=16"}),  # no earlier trial has its params
        (0.80, True, {TrialAttr.PROPOSED: "random"}),
        (0.60, True, {TrialAttr.REUSED_FROM: 3}),  # the TPE trial's plan again
        (0.90, True, {TrialAttr.ANCHOR: "dcci-from-culprit"}),
    ])
    rows = {r.origin: r for r in origin_table(study)}
    assert set(rows) == {STARTING_POINT, LOCAL, TPE, REFINEMENT, RANDOM, CULPRIT}
    assert rows[TPE].best and not any(r.best for k, r in rows.items() if k != TPE)
    assert (rows[TPE].trials, rows[TPE].exact, rows[TPE].within) == (2, 2, 2)
    assert (rows[STARTING_POINT].trials, rows[STARTING_POINT].exact, rows[STARTING_POINT].within) == (2, 1, 0)
    assert rows[REFINEMENT].within == 1  # 0.61 is within 2 % of 0.60
    assert rows[LOCAL].within == 0 and rows[RANDOM].within == 0 and rows[CULPRIT].within == 0


def test_a_refinement_is_credited_to_the_plan_it_refined() -> None:
    study = _study([(1.0, True, {TrialAttr.ANCHOR: "unfused"}), (0.6, True, {TrialAttr.PROPOSED: "local: cut:0 on"})])
    dist = {"x": optuna.distributions.IntDistribution(0, 100)}
    study.add_trial(optuna.trial.create_trial(  # the local plan again, with the C++ wrapper
        value=0.5, params={"x": 1}, distributions=dist, constraints={"bitwise": 0.0},
        user_attrs={TrialAttr.PLAN: {"i": 2}, TrialAttr.TIMING: _timing(0.5), TrialAttr.ANCHOR: "best+cpp_wrapper=True"}))
    rows = {r.origin: r for r in origin_table(study)}
    assert rows[f"{REFINEMENT} of {LOCAL}"].best and sampled(f"{REFINEMENT} of {LOCAL}")
    assert not sampled(STARTING_POINT) and not sampled(f"{REFINEMENT} of {STARTING_POINT}")
