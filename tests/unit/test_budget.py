"""Effort presets, the clearly-worse pruner, the trial budget and patience, on in-memory studies."""

from __future__ import annotations

import os

import optuna
import pytest

from sktune.measure.stats import PairedTiming
from sktune.tuning.budget import EFFORTS, ClearlyWorsePruner, Patience, TrialBudget
from sktune.tuning.attrs import TrialAttr
from sktune.tuning.settings import TuneSettings


def add_trial(study: optuna.Study, ratio: float, ci: tuple[float, float], exact: bool = True,
              **attrs: object) -> optuna.trial.FrozenTrial:
    trial = optuna.trial.create_trial(
        value=ratio, user_attrs={"timing": PairedTiming(1e-3, ratio * 1e-3, ratio, ci, 10).to_json(), **attrs},
        system_attrs={"constraints:bitwise": 0.0 if exact else 3.0},
    )
    study.add_trial(trial)
    return study.trials[-1]


def test_effort_presets_and_overrides() -> None:
    assert EFFORTS["quick"].trials < EFFORTS["default"].trials < EFFORTS["thorough"].trials
    assert EFFORTS["thorough"].n_batches > EFFORTS["quick"].n_batches
    settings = TuneSettings(model_path=__file__, effort="quick", trials=7, stop_early=False)  # type: ignore[arg-type]
    assert settings.resolved_effort.trials == 7 and settings.resolved_effort.patience is None
    assert TuneSettings(model_path=__file__).resolved_effort == EFFORTS["default"]  # type: ignore[arg-type]
    assert TuneSettings(model_path=__file__, patience=4).resolved_effort.patience == 4  # type: ignore[arg-type]


def test_pruner_prunes_only_when_the_whole_interval_is_worse_than_the_best_exact() -> None:
    study = optuna.create_study(pruner=ClearlyWorsePruner())
    add_trial(study, 0.60, (0.58, 0.62))
    add_trial(study, 0.40, (0.38, 0.42), exact=False)  # inexact: not a yardstick
    trial = study.ask()
    trial.report(0.59, step=10)  # lower end of the interval below the best exact: keep measuring
    assert not trial.should_prune()
    trial.report(0.65, step=20)
    assert trial.should_prune()


def test_budget_does_not_count_skipped_trials() -> None:
    study = optuna.create_study()
    budget = TrialBudget(2)

    def objective(trial: optuna.Trial) -> float:
        if trial.number % 2 == 0:
            trial.set_user_attr("skipped", "hopeless")
            raise optuna.TrialPruned()
        return 1.0

    study.optimize(objective, n_trials=None, callbacks=[budget])
    states = [t.state for t in study.trials]
    assert states.count(optuna.trial.TrialState.COMPLETE) == 2 and len(states) == 4


def test_patience_stops_after_k_sampled_trials_without_a_significant_gain() -> None:
    study = optuna.create_study()
    patience = Patience(3)
    ratios = iter([0.8, 0.79, 0.81, 0.80, 0.5, 0.9, 0.9, 0.9, 0.9, 0.9])

    def objective(trial: optuna.Trial) -> float:
        ratio = next(ratios)
        ci = (ratio - 0.02, ratio + 0.02)
        trial.set_user_attr("timing", PairedTiming(1e-3, ratio * 1e-3, ratio, ci, 10).to_json())
        trial.set_constraint("bitwise", 0.0)
        return ratio

    study.optimize(objective, n_trials=10, callbacks=[patience])
    # 0.8 gains (CI below 1); 0.79/0.81/0.80 do not clear 0.8 → stop after trial 3.
    assert len(study.trials) == 4
    assert study.user_attrs["stopped_early"]["after_trial"] == 3


def test_patience_ignores_queued_starting_points() -> None:
    study = optuna.create_study()
    for _ in range(5):
        study.enqueue_trial({}, user_attrs={TrialAttr.ANCHOR: "seed"})
    study.optimize(lambda t: 1.0, n_trials=8, callbacks=[Patience(2)])
    assert len(study.trials) == 7  # 5 anchors, then 2 sampled trials without gain


@pytest.mark.parametrize("name", sorted(EFFORTS))
def test_every_effort_measures_at_least_two_steps(name: str) -> None:
    assert len(EFFORTS[name].chunks) >= 2 and EFFORTS[name].confirm_top >= 2


def test_a_later_search_that_is_not_stopped_early_clears_the_earlier_stop() -> None:
    # It was never cleared: a resume with --no-stop, or another worker that ran its whole
    # budget, still reported "stopped after trial #N (--patience)".
    from dataclasses import replace

    from sktune.tuning.loop import search

    study = optuna.create_study()

    def objective(trial: optuna.Trial) -> float:  # the first gains; none after it
        ratio = 0.8 if trial.number == 0 else 0.85
        trial.set_user_attr("timing", PairedTiming(1e-3, ratio * 1e-3, ratio, (ratio - 0.02, ratio + 0.02), 10).to_json())
        trial.set_constraint("bitwise", 0.0)
        return ratio

    search(study, objective, replace(EFFORTS["quick"], trials=10, patience=1))
    stop = study.user_attrs["stopped_early"]
    assert {k: stop[k] for k in ("after_trial", "patience")} == {"after_trial": 1, "patience": 1}
    assert stop["worker"]["pid"] == os.getpid() and len(study.trials) == 2  # whose stop it was
    search(study, objective, replace(EFFORTS["quick"], trials=2, patience=None))
    assert study.user_attrs["stopped_early"] is None and len(study.trials) == 4


def test_a_stop_by_another_worker_is_not_claimed_as_this_runs(capsys: pytest.CaptureFixture) -> None:
    # Two workers: the one that ran out of --trials printed the other's patience stop as its own.
    from sktune.cli.summary_view import print_summary
    from sktune.tuning.summary import summary

    study = optuna.create_study()
    study.set_user_attr("stopped_early", {"after_trial": 16, "patience": 6, "worker": {"host": "elsewhere", "pid": 7}})
    print_summary(summary(study))
    printed = " ".join(capsys.readouterr().out.split())
    assert "another worker (pid 7 on elsewhere) stopped after trial #16: 6 trials in a row" in printed


def test_another_live_worker_s_stop_is_kept_by_a_worker_that_ran_its_whole_budget() -> None:
    # The worker that ran out of --trials usually finishes last, and erased the other's stop.
    from dataclasses import replace

    from sktune.tuning.loop import search

    study = optuna.create_study()
    beside = {"after_trial": 5, "patience": 6, "worker": {"host": "elsewhere", "pid": 7}}  # another host: may live
    study.set_user_attr("stopped_early", beside)
    search(study, lambda t: 0.9, replace(EFFORTS["quick"], trials=1, patience=None))
    assert study.user_attrs["stopped_early"] == beside
