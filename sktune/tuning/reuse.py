"""No plan is measured twice: a trial whose plan the study has already measured takes
that trial's outcome instead of a compile (issue 24: on an Ascend host a compile costs
minutes).

Plans match on their JSON (``TrialAttr.PLAN``: scopes and options after every override).
The earlier trial is looked up in the study's own stored trials, so the rule holds across
resumed runs and across workers sharing one storage. Only finished trials give their
outcome: a trial whose plan another worker is measuring right now (an earlier trial,
RUNNING) waits for it first (``wait_for_twin``): workers that start together queue the
same first plan.

What is taken, by the earlier trial's state:

* COMPLETE: its value and its bitwise constraint, so that the sampler learns from the
  copy as from the original, and its result attributes (timing, mismatches, shapes,
  groups, regions), so that the summary, the report and the anchors read it like any
  measured trial (``records.top_records`` keeps one trial per plan).
* PRUNED by the clearly-worse pruner: pruned again, with the same intermediate values.
  The best exact ratio only falls during a study, so the plan would be pruned again.
  An anchor is timed in full (its time is a yardstick), so it does not take a pruned
  outcome: it runs.
* FAIL with a reason from the worker (hang, crash, compile error): failed again, not
  retried. A hang may take an Ascend device down (docs/superkernel.md), and a compile
  error repeats. A trial that failed only because its run was killed
  (``workers.fail_orphaned_trials``), or that failed with no recorded reason (the run
  was interrupted), did not fail because of its plan, so its plan runs again.

Skipped trials (exactness probe, scope cap) are never reused: the objective decides a
skip before this lookup, for each trial anew. An anchor is never skipped by the probe,
even when a sampled trial with its plan was. Reused trials are never reused either: a
copy always names the trial that was measured. A yardstick (``tuning/yardsticks.py``) ran
at one shape only: it neither gives its outcome nor takes another's.
"""

from __future__ import annotations

import json
import time
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from sktune.plan import Plan
from sktune.tuning.attrs import TrialAttr
from sktune.tuning.records import FINISHED, FIXED, interrupted, is_yardstick, plan_of, reused, skipped, started_at
from sktune.tuning.trial_writer import record_reused

# The result attributes a copy carries. Costs (compile_s, measure_s, overhead_s,
# static_compile) and the run's own facts (observed) stay with the trial that paid them.
RESULT_ATTRS = (TrialAttr.TIMING, TrialAttr.MISMATCHES, TrialAttr.SHAPES, TrialAttr.GROUPS, TrialAttr.REGIONS,
                TrialAttr.SMALLEST_FAILING_RANGE, TrialAttr.PRUNED, TrialAttr.FAILURE)
NOT_PRUNED = (TrialState.COMPLETE, TrialState.FAIL)


def reusable(trial: FrozenTrial) -> bool:
    """Whether a finished trial's outcome stands for its plan (module docstring)."""
    if skipped(trial) or reused(trial) or is_yardstick(trial) or TrialAttr.PLAN not in trial.user_attrs:
        return False  # a yardstick ran at one shape only: no outcome for the plan as a whole
    if trial.state == TrialState.FAIL:
        return not interrupted(trial)
    if trial.state == TrialState.PRUNED:
        return TrialAttr.PRUNED in trial.user_attrs
    return trial.state == TrialState.COMPLETE and trial.value is not None


def plan_key(trial: FrozenTrial) -> str:
    """The trial's plan as ``Plan.dumps`` writes it: equal keys, equal plans."""
    return json.dumps(trial.user_attrs[TrialAttr.PLAN], sort_keys=True)


class MeasuredPlans:
    """The study's reusable trials by plan. One per objective, hence per study: each
    finished trial's key is computed once (a finished trial does not change)."""

    def __init__(self) -> None:
        self._keys: dict[int, str | None] = {}

    def find(self, study: optuna.Study, plan: Plan, pruned: bool = True) -> FrozenTrial | None:
        """The earliest reusable trial of ``plan`` in ``study``, or None. ``pruned`` False:
        not a pruned one (an anchor is timed in full: it is a yardstick)."""
        key = plan.dumps()
        for trial in study.get_trials(deepcopy=False, states=FINISHED if pruned else NOT_PRUNED):
            if trial.number not in self._keys:
                self._keys[trial.number] = plan_key(trial) if reusable(trial) else None
            if self._keys[trial.number] == key:
                return trial
        return None


POLL_S = 2.0  # how often a trial waiting for its twin looks at the study


def pause(seconds: float) -> None:
    time.sleep(seconds)


def in_flight(study: optuna.Study, plan: Plan, number: int, now: float, limit_s: float,
              queued: tuple[dict[str, Any], dict[str, Any]] | None = None) -> FrozenTrial | None:
    """An earlier trial (lower number) measuring ``plan`` right now: another worker's.

    An earlier trial that has not recorded its plan yet is one when it was queued as the same
    plan (``queued``: this trial's parameters and option overrides; ``records.plan_of``):
    two workers that top up the starting queue together start both twins within
    milliseconds, before either records its plan, and both used to measure it. A trial
    RUNNING for over ``limit_s`` is taken for dead (its worker killed on another host:
    ``workers.fail_orphaned_trials`` fails only this host's)."""
    key = plan.dumps()
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if trial.number >= number or skipped(trial) or is_yardstick(trial):  # a yardstick is never reused
            continue
        started = started_at(trial)
        if started is None or now - started > limit_s:
            continue
        if TrialAttr.PLAN in trial.user_attrs:
            if plan_key(trial) == key:
                return trial
        elif queued is not None and FIXED in trial.system_attrs and plan_of(trial, as_queued=True) == queued:
            return trial
    return None


def wait_for_twin(study: optuna.Study, plan: Plan, number: int, limit_s: float,
                  queued: tuple[dict[str, Any], dict[str, Any]] | None = None) -> int | None:
    """Wait while another worker's earlier trial measures ``plan``; the number of the last
    trial waited for, or None.

    Workers that start together top up the starting queue at the same moment and may queue
    one plan twice (``resume.StartingQueue``). The later trial waits, then takes the
    earlier's outcome (``MeasuredPlans.find``) instead of measuring the plan again; if that
    trial was interrupted, it measures the plan itself. Waiting ends ``limit_s`` after the
    earlier trial started at most. An earlier twin that has not recorded its plan yet is
    known by the plan it was queued as (``queued``).
    """
    waited = None
    while (twin := in_flight(study, plan, number, time.time(), limit_s, queued)) is not None:
        waited = twin.number
        pause(POLL_S)
    return waited


def take_outcome(trial: optuna.Trial, earlier: FrozenTrial) -> TrialState:
    """Record ``earlier``'s outcome on ``trial`` (attributes, constraint, intermediate
    values) and return the state ``trial`` must end in; the caller ends it so."""
    record_reused(trial, earlier, RESULT_ATTRS)
    for name, value in earlier.constraints.items():
        trial.set_constraint(name, value)
    if earlier.state == TrialState.PRUNED:
        for step, value in sorted(earlier.intermediate_values.items()):
            trial.report(value, step)
    return earlier.state

