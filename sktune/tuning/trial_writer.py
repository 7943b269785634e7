"""The writers of a trial's attributes, beside ``records.TrialRecord``'s reader: one
function per fact the tuner records, so that each ``TrialAttr`` key the tuner sets is
written here only. Keys and values are the stored form (stored studies, the summary and
the report read them back): a change here changes what studies hold.

Attributes given when a trial is enqueued (``ANCHOR``, ``OPTION_OVERRIDES``,
``SEEDED_FROM``) are the enqueuer's arguments, not written here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import optuna
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial

from sktune.measure.stats import PairedTiming
from sktune.pipe.protocol import BisectResult, StaticCompile, TrialResult, WorkerFailure
from sktune.plan import Plan
from sktune.tuning.attrs import TrialAttr
from sktune.tuning.records import INTERRUPTED
from sktune.tuning.shapes import ShapeOutcome

TRACE_CHARS = 4000  # the end of a failure's traceback kept in the study


# -- before the compile -------------------------------------------------------------
def record_plan(trial: optuna.Trial, plan: Plan, overrides: dict[str, Any]) -> None:
    """The trial's plan, and the options set outside the sampled domain (when any)."""
    if overrides:
        trial.set_user_attr(TrialAttr.OPTION_OVERRIDES, overrides)
    trial.set_user_attr(TrialAttr.PLAN, plan.to_json())


def mark_past_budget(trial: optuna.Trial) -> None:
    """Run after this worker's ``--trials`` were spent (``loop.run_unfused_if_missing``)."""
    trial.set_user_attr(TrialAttr.PAST_BUDGET, True)


def record_worker(trial: optuna.Trial, tag: dict[str, Any]) -> None:
    """Which process runs the trial (``workers.worker_tag``): a resumed run fails it if that one died."""
    trial.set_user_attr(TrialAttr.WORKER, tag)


def record_worker_at_ask(study: optuna.Study, trial: FrozenTrial, tag: dict[str, Any]) -> None:
    """``record_worker`` as the trial is created (the sampler's ``before_trial``), where only
    the storage can take it: a run killed before the objective's first write left a RUNNING
    trial that named no worker, which no later run could fail (workers.fail_orphaned_trials)."""
    study._storage.set_trial_user_attr(trial._trial_id, TrialAttr.WORKER, tag)


def record_proposed(study: optuna.Study, trial: FrozenTrial, how: str) -> None:
    """How the sampler chose a sampled trial; written before the trial asks for its
    parameters, when only the storage can take it (sampler.py)."""
    study._storage.set_trial_user_attr(trial._trial_id, TrialAttr.PROPOSED, how)


def mark_skipped(trial: optuna.Trial, reason: str) -> None:
    """Not compiled: refused (scope cap) or hopeless (exactness probe)."""
    trial.set_user_attr(TrialAttr.COMPILED, False)
    trial.set_user_attr(TrialAttr.SKIPPED, f"skipped: {reason}")


def record_waited_for(trial: optuna.Trial, number: int | None) -> None:
    """The other worker's trial of the same plan that this one waited for (``reuse.wait_for_twin``)."""
    if number is not None:
        trial.set_user_attr(TrialAttr.WAITED_FOR, number)


def record_compiled(trial: optuna.Trial, compiled: bool) -> None:
    """Whether its plan goes to the worker (False: it takes an earlier trial's outcome)."""
    trial.set_user_attr(TrialAttr.COMPILED, compiled)


def record_reused(trial: optuna.Trial, earlier: FrozenTrial, keys: Sequence[str]) -> None:
    """The earlier trial of the same plan, and its attributes named in ``keys`` copied as stored."""
    trial.set_user_attr(TrialAttr.REUSED_FROM, earlier.number)
    for key in keys:
        if key in earlier.user_attrs:
            trial.set_user_attr(key, earlier.user_attrs[key])


# -- the worker's answers -----------------------------------------------------------
def write_result(trial: optuna.Trial, result: TrialResult) -> None:
    """A worker's result on ``trial``: mismatches, groups, regions, compile and verify
    seconds, observed facts (the timing is written once the last step is timed: ``write_timing``)."""
    record_mismatches(trial, list(result.mismatches))
    trial.set_user_attr(TrialAttr.GROUPS, [list(g) for g in result.groups])
    trial.set_user_attr(TrialAttr.REGIONS, [list(r) for r in result.regions])
    trial.set_user_attr(TrialAttr.COMPILE_S, result.compile_s)
    trial.set_user_attr(TrialAttr.VERIFY_S, result.verify_s)
    trial.set_user_attr(TrialAttr.OBSERVED, result.observed)


def record_mismatches(trial: optuna.Trial, mismatches: list[dict[str, Any]]) -> None:
    """The outputs that differed (with several shapes, each tagged with its shape)."""
    trial.set_user_attr(TrialAttr.MISMATCHES, mismatches)


def add_static_compile(trial: optuna.Trial, static: StaticCompile) -> None:
    """One more run's static-kernel compile added to the trial's (summed over its shapes)."""
    total = trial.user_attrs.get(TrialAttr.STATIC_COMPILE) or {"seconds": 0.0, "uncached_s": None,
                                                                "emulated": static.emulated}
    uncached = None if static.uncached_s is None else (total["uncached_s"] or 0.0) + static.uncached_s
    trial.set_user_attr(TrialAttr.STATIC_COMPILE, {"seconds": total["seconds"] + static.seconds,
                                                   "uncached_s": uncached, "emulated": static.emulated})


def record_overhead(trial: optuna.Trial, seconds: float) -> None:
    """Wall time of the trial's runs minus their timing (compile and verify, at every shape so far)."""
    trial.set_user_attr(TrialAttr.OVERHEAD_S, seconds)


def write_timing(trial: optuna.Trial, timing: PairedTiming, measure_s: float) -> None:
    """The trial's timing so far (``TrialRecord.timing`` reads it back) and the seconds it took."""
    trial.set_user_attr(TrialAttr.TIMING, timing.to_json())
    trial.set_user_attr(TrialAttr.MEASURE_S, measure_s)


def record_shapes(trial: optuna.Trial, outcomes: Mapping[str, ShapeOutcome]) -> None:
    """Each served shape's outcome, heaviest first (``TIMING`` holds their weighted mean)."""
    trial.set_user_attr(TrialAttr.SHAPES, {n: o.to_json() for n, o in outcomes.items()})


def mark_pruned(trial: optuna.Trial, reason: str) -> None:
    """Why its measurement was stopped early."""
    trial.set_user_attr(TrialAttr.PRUNED, reason)


def write_failure(trial: optuna.Trial, failure: WorkerFailure) -> None:
    """Why the worker gave no answer (``TrialRecord.failure``), and its traceback's end."""
    trial.set_user_attr(TrialAttr.FAILURE, failure.reason)
    if failure.trace:
        trial.set_user_attr(TrialAttr.FAILURE_TRACE, failure.trace[-TRACE_CHARS:])


def mark_stopped(trial: optuna.Trial) -> None:
    """The run was stopped (Ctrl-C, SIGTERM) during this trial: not its plan's failure."""
    trial.set_user_attr(TrialAttr.FAILURE, f"{INTERRUPTED} the run was stopped (Ctrl-C or SIGTERM)")


def mark_interrupted(storage: BaseStorage, trial_id: int) -> None:
    """A RUNNING trial whose process was killed (``workers.fail_orphaned_trials``): it did
    not fail because of its plan (reuse.py runs its plan again)."""
    storage.set_trial_user_attr(trial_id, TrialAttr.FAILURE, f"{INTERRUPTED} its sktune process was killed")


def record_diagnosis(trial: optuna.Trial, plan: Plan, outcome: str, where: str) -> None:
    """The rerun of a hung plan with the backend's debug options: its plan, how it ended,
    and where the device's own log of it is."""
    trial.set_user_attr(TrialAttr.DIAGNOSIS, {"plan": plan.to_json(), "outcome": outcome, "where": where})


def record_failing_range(trial: optuna.Trial, found: BisectResult) -> None:
    """The smallest failing op range that bisecting a mismatch found."""
    trial.set_user_attr(TrialAttr.SMALLEST_FAILING_RANGE, found.to_json())


def record_dcci_repair(trial: optuna.Trial, said: str) -> None:
    """What came of a bisected culprit (tuning/dcci_seed.py): the repair queued, or why none."""
    trial.set_user_attr(TrialAttr.DCCI_REPAIR, said)
