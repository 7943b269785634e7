"""A search that ends before the unfused plan ran runs it then (loop.run_unfused_if_missing):
alone, marked past the budget, and the starting points after it wait for the next run."""

from __future__ import annotations

from collections.abc import Callable

import optuna

from sktune.space.search_space import UNFUSED, SearchSpace
from sktune.tuning.budget import ClearlyWorsePruner, Effort
from sktune.tuning.loop import search
from sktune.tuning.objective import ObjectiveRules, make_objective
from sktune.tuning.attrs import TrialAttr
from sktune.tuning.resume import StartingQueue
from tests.unit.test_objective import CHUNKS, TARGETS, ScriptedWorker, distinct, result
from tests.unit.test_objective import space as space  # noqa: F401  (the fixture)


def anchors(study: optuna.Study) -> list[str | None]:
    return [t.user_attrs.get(TrialAttr.ANCHOR) for t in study.trials]


def test_unfused_runs_alone_past_a_spent_budget_and_the_next_point_waits_for_the_next_run(space: SearchSpace) -> None:
    a, b, c = distinct(space)
    queue = StartingQueue([("a", a), ("b", b), (UNFUSED, space.params_for([False] * len(space.blocks))), ("c", c)])
    worker = ScriptedWorker([result(0.5), result(1.0), result(0.6)])
    objective = make_objective(space, worker, ObjectiveRules(CHUNKS, 60.0), TARGETS, None)
    study = optuna.create_study(direction="minimize", pruner=ClearlyWorsePruner())
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    queue.top_up(study)

    search(study, objective, Effort(1, CHUNKS, None, 0), starting=queue)  # --trials 1
    assert anchors(study) == ["a", UNFUSED]  # b was not queued: it would have run past the budget too
    assert study.trials[1].user_attrs[TrialAttr.PAST_BUDGET] is True
    assert TrialAttr.PAST_BUDGET not in study.trials[0].user_attrs
    assert not study.get_trials(states=(optuna.trial.TrialState.WAITING,))

    queue.top_up(study)  # a resumed run, as resume.prepare starts one
    search(study, objective, Effort(1, CHUNKS, None, 0), starting=queue)
    assert anchors(study) == ["a", UNFUSED, "b"]  # unfused ran once; no second past-budget trial


def with_another_workers_point(space: SearchSpace) -> tuple[optuna.Study, Callable[[optuna.Trial], float],
                                                               StartingQueue]:
    """A study whose next starting point is "a", with another worker's point queued after it;
    the unfused plan is this worker's next point."""
    a, b, _ = distinct(space)
    queue = StartingQueue([("a", a), (UNFUSED, space.params_for([False] * len(space.blocks)))])
    worker = ScriptedWorker([result(0.5), result(0.6), result(0.7)])
    objective = make_objective(space, worker, ObjectiveRules(CHUNKS, 60.0), TARGETS, None)
    study = optuna.create_study(direction="minimize", pruner=ClearlyWorsePruner())
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    queue.top_up(study)
    study.enqueue_trial(b, user_attrs={TrialAttr.ANCHOR: "other worker's"})
    return study, objective, queue


def test_with_many_workers_what_runs_ahead_of_unfused_is_past_the_budget_too(space: SearchSpace) -> None:
    """Another worker's queued starting point waits before the unfused plan: it runs here, past
    this worker's budget (CI once counted 13 trials that 3 workers × --trials 4 paid for)."""
    study, objective, queue = with_another_workers_point(space)
    search(study, objective, Effort(1, CHUNKS, None, 0), starting=queue)  # --trials 1
    assert anchors(study) == ["a", "other worker's", UNFUSED]
    assert [TrialAttr.PAST_BUDGET in t.user_attrs for t in study.trials] == [False, True, True]


def test_nothing_more_runs_once_another_worker_began_the_unfused_plan(space: SearchSpace) -> None:
    study, objective, queue = with_another_workers_point(space)

    def other_worker_takes_unfused(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if trial.user_attrs.get(TrialAttr.ANCHOR) == "other worker's":
            study.ask()  # pops the oldest waiting trial, the unfused plan: RUNNING elsewhere

    search(study, objective, Effort(1, CHUNKS, None, 0), callbacks=[other_worker_takes_unfused], starting=queue)
    assert anchors(study) == ["a", "other worker's", UNFUSED]  # no sampled plan in place of unfused
    assert study.trials[2].state == optuna.trial.TrialState.RUNNING


def test_an_unfused_trial_whose_run_was_stopped_runs_again(space: SearchSpace) -> None:
    """A Ctrl-C during the unfused plan: it counted as run (and Optuna's skip_if_exists saw its
    plan), so no later run measured it and the finalists' round had no unfused plan."""
    from sktune.tuning.trial_writer import mark_stopped

    a, _, _ = distinct(space)
    unfused = space.params_for([False] * len(space.blocks))
    queue = StartingQueue([("a", a), (UNFUSED, unfused)])
    worker = ScriptedWorker([result(0.5), result(1.0)])
    objective = make_objective(space, worker, ObjectiveRules(CHUNKS, 60.0), TARGETS, None)
    study = optuna.create_study(direction="minimize", pruner=ClearlyWorsePruner())
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study.enqueue_trial(unfused, user_attrs={TrialAttr.ANCHOR: UNFUSED})
    stopped = study.ask()
    mark_stopped(stopped)
    study.tell(stopped, state=optuna.trial.TrialState.FAIL)

    queue.top_up(study)  # the resumed run
    search(study, objective, Effort(1, CHUNKS, None, 0), starting=queue)  # --trials 1
    assert anchors(study) == [UNFUSED, "a", UNFUSED]
    assert study.trials[-1].state == optuna.trial.TrialState.COMPLETE


def test_a_search_ended_by_its_timeout_says_so_and_a_later_one_clears_it(space: SearchSpace) -> None:
    """Optuna stops at the timeout without a word: the progress bar stood at 8/52 and nothing
    said why the run ended."""
    import time

    from sktune.tuning.attrs import StudyAttr

    a, b, c = distinct(space)
    queue = StartingQueue([("a", a), ("b", b), ("c", c)])
    worker = ScriptedWorker([result(0.5), result(0.6), result(0.7), result(0.8)])
    objective = make_objective(space, worker, ObjectiveRules(CHUNKS, 60.0), TARGETS, None)

    def slow(trial: optuna.Trial) -> float:
        time.sleep(0.3)
        return objective(trial)

    study = optuna.create_study(direction="minimize", pruner=ClearlyWorsePruner())
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    queue.top_up(study)
    search(study, slow, Effort(50, CHUNKS, None, 0), timeout=0.1, starting=queue)
    stop = study.user_attrs[StudyAttr.STOPPED_AT_TIMEOUT]
    assert stop["timeout_s"] == 0.1 and stop["after_trial"] == max(t.number for t in study.trials
                                                                    if t.state.is_finished())
    queue.top_up(study)
    search(study, objective, Effort(1, CHUNKS, None, 0), starting=queue)  # a resume without --timeout
    assert study.user_attrs[StudyAttr.STOPPED_AT_TIMEOUT] is None
