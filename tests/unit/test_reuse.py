"""No plan is measured twice (tuning/reuse.py): a plan the study has measured takes that
trial's outcome without the worker, costs no trial of the budget, and the loop still ends
when the sampler proposes nothing new; the replay benchmark counts compiles and measurements."""

from __future__ import annotations

from typing import Any

import optuna
import pytest

from sktune.benchlib.replay import Run, TableWorker, summarize
from sktune.space.exactness import Exactness
from sktune.space.search_space import SearchSpace
from sktune.tuning.budget import ClearlyWorsePruner, Effort
from sktune.tuning.loop import search
from sktune.tuning.objective import ObjectiveRules, make_objective
from sktune.pipe.protocol import WorkerFailure
from sktune.tuning.attrs import StudyAttr, TrialAttr
from sktune.tuning.records import is_feasible
from sktune.tuning.summary import summary
from tests.unit.test_objective import CHUNKS, TARGETS, ScriptedWorker, distinct, fuse_all, result, run_study
from tests.unit.test_objective import space as space  # noqa: F401  (the fixture)

State = optuna.trial.TrialState


def runs(worker: ScriptedWorker) -> int:
    return sum(1 for call in worker.calls if call[0] == "run")


def test_a_measured_plan_is_not_sent_again_and_takes_the_earlier_value(space: SearchSpace) -> None:
    worker = ScriptedWorker([result(0.5, mismatches=2), result(0.7)])
    params, other, _ = distinct(space)
    study = run_study(space, worker, [(params, {}), (params, {}), (other, {})], budget=2)
    first, again, _ = study.trials
    sent = [c[1].plan for c in worker.calls if c[0] == "run"]
    assert len(sent) == 2 and sent[0] != sent[1]
    assert again.state == State.COMPLETE and again.value == first.value == pytest.approx(0.5)
    assert again.constraints == first.constraints == {"bitwise": 2.0} and not is_feasible(again)  # sampler sees it
    assert again.user_attrs[TrialAttr.REUSED_FROM] == 0 and again.user_attrs[TrialAttr.COMPILED] is False
    assert again.user_attrs[TrialAttr.TIMING] == first.user_attrs[TrialAttr.TIMING]
    assert first.user_attrs[TrialAttr.COMPILED] is True and TrialAttr.REUSED_FROM not in first.user_attrs
    assert TrialAttr.COMPILE_S in first.user_attrs and TrialAttr.COMPILE_S not in again.user_attrs  # no cost paid
    study.set_user_attr(StudyAttr.OPS, [{"target": t} for t in TARGETS])  # what the summary reads the plan against
    data = summary(study)
    assert data["n_reused"] == 1 and data["n_trials"] == 3


def test_a_failed_plan_is_not_retried_unless_its_run_was_killed(space: SearchSpace) -> None:
    crash = WorkerFailure("crash", "worker killed by signal 11")
    worker = ScriptedWorker([crash, result(0.8)])
    params, other, _ = distinct(space)
    study = run_study(space, worker, [(params, {}), (params, {}), (other, {})], budget=2)
    failed, again, _ = study.trials
    assert runs(worker) == 2 and again.state == State.FAIL
    assert again.user_attrs[TrialAttr.FAILURE] == failed.user_attrs[TrialAttr.FAILURE]
    assert again.user_attrs[TrialAttr.REUSED_FROM] == failed.number

    # A trial failed because its process was killed (workers.fail_orphaned_trials) says nothing about its plan.
    study = optuna.create_study(direction="minimize")
    objective = make_objective(space, ScriptedWorker([result(0.7)]), ObjectiveRules(CHUNKS, 60.0), TARGETS, None)
    plan = space.decode(params).to_json()
    killed = {TrialAttr.PLAN: plan, TrialAttr.FAILURE: "interrupted: its sktune process was killed"}
    study.add_trial(optuna.trial.create_trial(state=State.FAIL, user_attrs=killed))
    study.enqueue_trial(params)
    study.optimize(objective, n_trials=1)
    assert study.trials[-1].state == State.COMPLETE and TrialAttr.REUSED_FROM not in study.trials[-1].user_attrs


def test_a_pruned_plan_is_pruned_again_but_an_anchor_with_it_runs(space: SearchSpace) -> None:
    worker = ScriptedWorker([result(0.5), result(0.9, width=0.02), result(0.9)])
    best, slow, _ = distinct(space)
    study = run_study(space, worker, [(best, {}), (slow, {}), (slow, {}), (slow, {TrialAttr.ANCHOR: "seed"})],
                      budget=3)
    _, pruned, again, anchor = study.trials
    assert pruned.state == again.state == State.PRUNED and again.user_attrs[TrialAttr.REUSED_FROM] == 1
    assert again.intermediate_values == pruned.intermediate_values  # what TPE ranks pruned trials by
    assert anchor.state == State.COMPLETE and TrialAttr.REUSED_FROM not in anchor.user_attrs  # timed in full
    assert runs(worker) == 3


def test_a_skipped_trial_says_it_did_not_compile_and_is_never_reused(space: SearchSpace) -> None:
    worker = ScriptedWorker([result(0.6)])
    params = fuse_all(space)  # "mean" fused: hopeless by the probe, but an anchor is never skipped
    study = run_study(space, worker, [(params, {}), (params, {TrialAttr.ANCHOR: "fuse-all"})],
                      exactness=Exactness(inexact=frozenset({"mean"})), budget=1)
    skipped, anchor = study.trials
    assert skipped.user_attrs[TrialAttr.COMPILED] is False and TrialAttr.SKIPPED in skipped.user_attrs
    assert anchor.state == State.COMPLETE and anchor.user_attrs[TrialAttr.COMPILED] is True


def test_a_reused_trial_does_not_use_up_the_budget(space: SearchSpace) -> None:
    worker = ScriptedWorker([result(0.6), result(0.7)])
    a, b, _ = distinct(space)
    study = run_study(space, worker, [(a, {}), (a, {}), (a, {}), (b, {})], budget=2)
    assert len(study.trials) == 4 and runs(worker) == 2
    assert [t.user_attrs.get(TrialAttr.REUSED_FROM) for t in study.trials] == [None, 0, 0, None]


class Always(optuna.samplers.RandomSampler):
    """A sampler that has converged: it proposes the same parameters every time."""

    def __init__(self, params: dict[str, Any]) -> None:
        super().__init__(seed=0)
        self.params = params

    def sample_independent(self, study: optuna.Study, trial: Any, name: str, distribution: Any) -> Any:
        return self.params[name]


def test_the_loop_ends_when_the_sampler_proposes_only_measured_plans(space: SearchSpace) -> None:
    worker = ScriptedWorker([result(0.6)])
    study = optuna.create_study(direction="minimize", sampler=Always(fuse_all(space, fallbacks=["mean"])),
                                pruner=ClearlyWorsePruner())
    objective = make_objective(space, worker, ObjectiveRules(CHUNKS, 60.0), TARGETS, None)
    search(study, objective, Effort(3, CHUNKS, 2, 0))  # patience 2 never fires: reused trials are not gains, nor losses
    # One measured trial, 10 free reuses, then each reuse counts: 2 more use up the budget of 3.
    assert runs(worker) == 1 and len(study.trials) == 1 + 10 + 2
    assert all(t.user_attrs[TrialAttr.REUSED_FROM] == 0 for t in study.trials[1:])


def test_a_resumed_run_reuses_what_the_stored_study_measured(space: SearchSpace, tmp_path: Any) -> None:
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    params = fuse_all(space, fallbacks=["mean"])
    for expected_runs in (1, 0):  # the second run, a new objective and worker, must not compile it
        study = optuna.create_study(study_name="s", storage=storage, direction="minimize", load_if_exists=True)
        study.enqueue_trial(params)
        worker = ScriptedWorker([result(0.6)] * expected_runs)
        study.optimize(make_objective(space, worker, ObjectiveRules(CHUNKS, 60.0), TARGETS, None), n_trials=1)
        assert runs(worker) == expected_runs
    assert [t.value for t in study.trials] == [pytest.approx(0.6)] * 2


def test_the_replay_worker_counts_compiles_and_measurements(space: SearchSpace) -> None:
    a, b, _ = distinct(space)
    table = {space.decode(a).dumps(): {"ratio": 0.8, "bitwise": True},
             space.decode(b).dumps(): {"ratio": None, "bitwise": False, "error": "did not compile"}}
    worker = TableWorker(table)
    study = optuna.create_study(direction="minimize")
    for params in (a, a, b, b):
        study.enqueue_trial(params)
    objective = make_objective(space, worker, ObjectiveRules(CHUNKS, 60.0), TARGETS, None)
    study.optimize(objective, n_trials=4, catch=(Exception,))
    assert (worker.compiles, worker.timed) == (2, 1)  # each plan once; the failed one gave no timing

    def run(seed: int, best: tuple[float, ...], compiles: tuple[int, ...], timed: tuple[int, ...]) -> Run:
        return Run("s", seed, best, 10, compiles, timed)

    rows = summarize([run(0, (0.9, 0.5), (1, 1), (1, 1)), run(1, (0.9, 0.9, 0.5), (1, 2, 3), (1, 1, 2)),
                      run(2, (0.9,), (1,), (1,))], best=0.5)["s"]
    assert rows["trials_to_target_median"] == 3  # 2, 3 and never (11)
    assert rows["compiles_to_target_median"] == 3 and rows["measurements_to_target_median"] == 2


def test_a_plan_another_worker_is_measuring_now_waits_for_it_and_takes_its_outcome(
        space: SearchSpace, monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers that start together queue the same first plan: the later trial is not measured."""
    import time

    import sktune.tuning.reuse as reuse

    params, other, _ = distinct(space)
    plan = space.decode(params)
    study = optuna.create_study(direction="minimize")
    twin = study.ask()  # another worker's trial of the plan, RUNNING
    twin.set_user_attr(TrialAttr.PLAN, plan.to_json())
    twin.set_user_attr(TrialAttr.ANCHOR, "fuse-all+fallbacks")
    study.enqueue_trial(params, user_attrs={TrialAttr.ANCHOR: "fuse-all+fallbacks"})
    study.enqueue_trial(other)
    waits: list[float] = []

    def other_worker_finishes(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 2:
            twin.set_user_attr(TrialAttr.TIMING, {"ratio": 0.4})
            study.tell(twin, 0.4)

    monkeypatch.setattr(reuse, "pause", other_worker_finishes)
    worker = ScriptedWorker([result(0.7)])
    objective = make_objective(space, worker, ObjectiveRules(CHUNKS, 60.0), TARGETS, None)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    search(study, objective, Effort(1, CHUNKS, None, 0))  # a reused trial does not use up the budget
    _, waited, measured = study.trials
    assert len(waits) == 2 and waited.user_attrs[TrialAttr.WAITED_FOR] == 0
    assert waited.state == State.COMPLETE and waited.value == pytest.approx(0.4)
    assert waited.user_attrs[TrialAttr.REUSED_FROM] == 0 and waited.user_attrs[TrialAttr.COMPILED] is False
    assert runs(worker) == 1 and worker.calls[0][1].plan == space.decode(other)
    assert TrialAttr.WAITED_FOR not in measured.user_attrs

    running = optuna.create_study()
    late = running.ask()
    late.set_user_attr(TrialAttr.PLAN, plan.to_json())
    assert reuse.in_flight(running, plan, 5, time.time(), 600.0) is not None
    assert reuse.in_flight(running, plan, 5, time.time() + 3600, 600.0) is None  # taken for dead
    assert reuse.in_flight(running, plan, 0, time.time(), 600.0) is None  # only an earlier trial counts
    assert reuse.in_flight(running, space.decode(other), 5, time.time(), 600.0) is None
    # Optuna's start is the naive local time of the host that wrote it: a worker in another
    # time zone started hours "ago" or "ahead". Its worker tag's epoch time decides.
    late.set_user_attr(TrialAttr.WORKER, {"host": "elsewhere", "pid": 1, "at": time.time() - 3600})
    assert reuse.in_flight(running, plan, 5, time.time(), 600.0) is None  # its tag: started an hour ago
    late.set_user_attr(TrialAttr.WORKER, {"host": "elsewhere", "pid": 1, "at": time.time() - 5.0})
    assert reuse.in_flight(running, plan, 5, time.time(), 600.0) is not None
    # Two workers topping up together start both twins within milliseconds: the earlier has not
    # recorded its plan yet, and is known by the plan it was queued as.
    queued = optuna.create_study()
    queued.enqueue_trial(params, user_attrs={TrialAttr.ANCHOR: "safe-runs"})
    queued.ask()  # RUNNING, its plan not recorded yet
    assert reuse.in_flight(queued, plan, 5, time.time(), 600.0, (dict(params), {})) is not None
    assert reuse.in_flight(queued, plan, 5, time.time(), 600.0) is None  # nothing to tell it by
    assert reuse.in_flight(queued, plan, 5, time.time(), 600.0, (dict(params), {"cpp_wrapper": True})) is None
    assert reuse.in_flight(queued, plan, 5, time.time(), 600.0, (dict(other), {})) is None


def test_a_trial_waiting_for_an_interrupted_twin_measures_the_plan(space: SearchSpace,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import sktune.tuning.reuse as reuse

    params, _, _ = distinct(space)
    study = optuna.create_study(direction="minimize")
    twin = study.ask()
    twin.set_user_attr(TrialAttr.PLAN, space.decode(params).to_json())
    study.enqueue_trial(params)

    def other_worker_is_killed(seconds: float) -> None:
        twin.set_user_attr(TrialAttr.FAILURE, "interrupted: its sktune process was killed")
        study.tell(twin, state=State.FAIL)

    monkeypatch.setattr(reuse, "pause", other_worker_is_killed)
    worker = ScriptedWorker([result(0.7)])
    objective = make_objective(space, worker, ObjectiveRules(CHUNKS, 60.0), TARGETS, None)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study.optimize(objective, n_trials=1)
    waited = study.trials[1]
    assert waited.user_attrs[TrialAttr.WAITED_FOR] == 0 and runs(worker) == 1
    assert waited.state == State.COMPLETE and TrialAttr.REUSED_FROM not in waited.user_attrs
