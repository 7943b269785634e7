"""What a study holds, read back: the feasibility rule, the ``TrialRecord`` read model that
the summary, the report and the export use, and stored timings read back as ``PairedTiming``
(``stored_timing``, ``timing_of``). The attribute keys are in ``attrs.py``; the trial
attributes' writers sit beside it (``trial_writer.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from sktune.graph.grouping import group_ops
from sktune.measure.stats import PairedTiming
from sktune.pipe.verify_shapes import turns_down, verified_since
from sktune.plan import Plan
from sktune.space.ascend_anchors import FULL_MODEL
from sktune.space.search_space import FUSE_ALL
from sktune.tuning.attrs import StudyAttr, TrialAttr, last_change_at

def is_exact(trial: FrozenTrial) -> bool:
    """Complete with no mismatch at the shapes it was measured at (its constraint ≤ 0)."""
    return trial.state == TrialState.COMPLETE and all(v <= 0 for v in trial.constraints.values())


def is_feasible(trial: FrozenTrial) -> bool:
    """Complete and bitwise-exact: the one rule for which trials may become the best. A
    yardstick never may: it was measured at one shape only (tuning/yardsticks.py)."""
    return is_exact(trial) and not is_yardstick(trial)


def is_yardstick(trial: FrozenTrial) -> bool:
    """One shape's own candidate, measured at that shape only (tuning/yardsticks.py)."""
    return TrialAttr.YARDSTICK in trial.user_attrs


def has_ratio(trial: FrozenTrial) -> bool:
    return trial.value is not None and math.isfinite(trial.value)


FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
REFINED = "best+"  # refinement trials (tuning/refine.py) are anchors named "best+<option>=<value>"
FIXED = "fixed_params"  # Optuna's system attribute of an enqueued trial: its parameters
INTERRUPTED = "interrupted:"  # the start of the failure reason of a trial whose run was stopped or killed


def interrupted(trial: FrozenTrial) -> bool:
    """Failed because its run stopped (Ctrl-C, SIGTERM, a kill), not because of its plan: its
    reason says so, or there is none (a stop before the objective wrote one). Its plan is
    measured again: not reused (reuse.py), and a starting point is queued again (resume.py)."""
    return stopped_failure(trial.state.name, trial.user_attrs.get(TrialAttr.FAILURE))


def stopped_failure(state: str, reason: str | None) -> bool:
    """``interrupted`` from a trial's state name and failure reason (a ``TrialRecord``'s too)."""
    return state == "FAIL" and (not reason or str(reason).startswith(INTERRUPTED))


def planned_params(study: optuna.Study) -> list[dict[str, Any]]:
    """The parameters of every trial that has or will have an outcome: queued, running, or
    finished other than ``interrupted`` (Optuna's ``skip_if_exists`` counts those too, and a
    plan stopped midway was then never measured)."""
    return [t.system_attrs.get(FIXED, t.params) for t in study.get_trials(deepcopy=False)
            if not interrupted(t)]


def started_at(trial: FrozenTrial) -> float | None:
    """When ``trial`` started, in epoch seconds: its worker tag's (``workers.worker_tag``),
    else Optuna's start read as this host's local time (a trial not tagged yet)."""
    tag = trial.user_attrs.get(TrialAttr.WORKER) or {}
    if isinstance(tag.get("at"), (int, float)):
        return float(tag["at"])
    return trial.datetime_start.timestamp() if trial.datetime_start is not None else None


def plan_of(trial: FrozenTrial, *, as_queued: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """A trial's plan: its parameters and the option overrides set when it was queued.
    ``as_queued``: the parameters fixed at queueing, which a trial that has not run yet
    holds in place of its own."""
    params = trial.system_attrs.get(FIXED, trial.params) if as_queued else trial.params
    return params, trial.user_attrs.get(TrialAttr.OPTION_OVERRIDES) or {}


def planned_plans(study: optuna.Study) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """``planned_params`` with each trial's option overrides: the plans, for a starting
    point that is more than its parameters (resume.StartingQueue)."""
    return [plan_of(t, as_queued=True) for t in study.get_trials(deepcopy=False) if not interrupted(t)]


def skipped(trial: FrozenTrial) -> bool:
    """Skipped without a compile: hopeless by the exactness probe, or over the scope cap."""
    return TrialAttr.SKIPPED in trial.user_attrs


def reused(trial: FrozenTrial) -> bool:
    """Not compiled: the study had measured its plan already and it took that outcome."""
    return TrialAttr.REUSED_FROM in trial.user_attrs


def feasible_trials(study: optuna.Study) -> list[FrozenTrial]:
    """The complete, bitwise-exact trials that have a time ratio, but for plans turned down at a
    verify-only shape (``verify_turned_down``: patience, the seeds and the yardsticks ignore them)."""
    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    down = verify_turned_down(study.user_attrs, trials)
    return [t for t in trials if is_feasible(t) and has_ratio(t) and t.user_attrs.get(TrialAttr.PLAN) not in down]


def feasible_ratios(study: optuna.Study) -> list[float]:
    """Time ratios of the complete, bitwise-exact trials."""
    return [t.value for t in feasible_trials(study)]  # type: ignore[misc]


def stored_timing(data: dict[str, Any] | None) -> PairedTiming | None:
    """A timing as the study stores it (``PairedTiming`` as JSON) read back; None: none stored."""
    return PairedTiming.from_json(data) if data else None


def timing_of(trial: FrozenTrial) -> PairedTiming | None:
    """The trial's timing (``TrialAttr.TIMING``; the weighted one for several shapes), or None."""
    return stored_timing(trial.user_attrs.get(TrialAttr.TIMING))


def heaviest_shape_ratio(trial: FrozenTrial) -> float:
    """The trial's time ratio at the heaviest shape (its only ratio for a one-shape model)."""
    shapes = trial.user_attrs.get(TrialAttr.SHAPES)
    if shapes:
        return PairedTiming.from_json(next(iter(shapes.values()))["timing"]).ratio
    return float(trial.value)  # type: ignore[arg-type]


def speedup_of(ratio: float) -> float:
    """A time ratio (candidate / baseline) as a speedup (baseline / candidate)."""
    return 1.0 / ratio


def speedup_interval(ratio_ci: tuple[float, float] | list[float]) -> tuple[float, float]:
    """A time ratio's interval as a speedup interval (ratio < 1 is a speedup > 1)."""
    lo, hi = ratio_ci
    return speedup_of(hi), speedup_of(lo)


@dataclass(frozen=True)
class TrialRecord:
    """One trial as the summary and the report read it."""

    number: int
    state: str
    feasible: bool
    timing: PairedTiming | None  # None: never timed (failed, skipped)
    plan: dict[str, Any] | None
    anchor: str | None
    failure: str | None  # failed, skipped or pruned: why
    yardstick: str | None = None  # the one shape it was measured at: never the best (tuning/yardsticks.py)
    exact: bool = False  # complete with no mismatch (a yardstick at its one shape; feasible adds "not a yardstick")
    turned_down: bool = False  # its plan was found not bitwise at a verify-only shape (verify_turned_down)

    @property
    def ratio(self) -> float | None:
        return None if self.timing is None else self.timing.ratio

    @property
    def ratio_ci(self) -> tuple[float, float] | None:
        return None if self.timing is None else self.timing.ratio_ci

    @property
    def baseline_s(self) -> float | None:
        return None if self.timing is None else self.timing.baseline_s

    @property
    def candidate_s(self) -> float | None:
        return None if self.timing is None else self.timing.candidate_s

    @classmethod
    def of(cls, t: FrozenTrial, turned_down: Sequence[dict[str, Any]] = ()) -> "TrialRecord":
        """``turned_down``: plans found not bitwise at a verify-only shape (``verify_turned_down``)."""
        attrs = t.user_attrs
        down = t.state == TrialState.COMPLETE and attrs.get(TrialAttr.PLAN) in turned_down
        return cls(
            number=t.number, state=t.state.name, feasible=is_feasible(t) and not down, timing=timing_of(t),
            plan=attrs.get(TrialAttr.PLAN), anchor=attrs.get(TrialAttr.ANCHOR),
            failure=attrs.get(TrialAttr.FAILURE) or attrs.get(TrialAttr.SKIPPED) or attrs.get(TrialAttr.PRUNED),
            yardstick=attrs.get(TrialAttr.YARDSTICK),
            exact=is_exact(t), turned_down=down,
        )


def records(study: optuna.Study) -> list[TrialRecord]:
    trials = study.get_trials(deepcopy=False)
    turned_down = verify_turned_down(study.user_attrs, trials)
    return [TrialRecord.of(t, turned_down) for t in trials]


def verify_turned_down(attrs: Mapping[str, Any], trials: Sequence[FrozenTrial]) -> list[dict[str, Any]]:
    """The plans a finalists' round found not bitwise at a verify-only shape (``StudyAttr.VERIFIED``,
    tuning/verified.py): exact where tuned, yet never a finalist again, never named best, refined
    or carried to another study (any trial of the same plan). Only what the plan decides counts:
    mismatches there, or a shape whose graph the plan cannot run; not a worker that gave no
    answer (a crash or a timeout may pass). A plan that fuses nothing is never turned down: it
    is the model's own run, named where nothing else is."""
    changed_at = last_change_at(attrs)  # found before a resume across a change: it may pass now
    failed = {v["trial"] for v in attrs.get(StudyAttr.VERIFIED) or []
              if any(turns_down(o, changed_at) for o in v["shapes"].values())}
    failed |= round_turned_down(attrs)
    n_ops = len(attrs.get(StudyAttr.OPS) or [])
    return [plan for t in trials if t.number in failed and (plan := t.user_attrs.get(TrialAttr.PLAN)) is not None
            and _fuses(n_ops, Plan.from_json(plan))]


def round_turned_down(attrs: Mapping[str, Any]) -> set[int]:
    """The trials whose plan a finalists' round found not bitwise where tuned, as it compiled it
    (``StudyAttr.ROUND_REJECTED``), since the study's last change: turned down as at a
    verify-only shape (``verify_turned_down``)."""
    changed_at = last_change_at(attrs)
    return {r["trial"] for r in attrs.get(StudyAttr.ROUND_REJECTED) or [] if verified_since(r, changed_at)}


def _fuses(n_ops: int, plan: Plan) -> bool:
    """Whether ``plan`` fuses any op (``n_ops`` 0: unknown, its scopes' reach stands in)."""
    reach = max((s.last_op + 1 for s in plan.scopes), default=0)
    return bool(group_ops(max(n_ops, reach), plan.scopes))


def top_records(study: optuna.Study, k: int, with_turned_down: bool = False) -> list[TrialRecord]:
    """The ``k`` feasible (bitwise-exact) complete trials with the smallest time ratios, one per plan
    (``with_turned_down``: also those turned down at a verify-only shape, as a finalists' round
    that was about to turn them down ranked them)."""
    feasible = sorted((r for r in records(study) if (r.feasible or (with_turned_down and r.turned_down))
                       and r.ratio is not None and math.isfinite(r.ratio)),
                      key=lambda r: r.ratio)  # type: ignore[arg-type, return-value]
    out: list[TrialRecord] = []
    for r in feasible:
        if len(out) < k and all(r.plan != o.plan for o in out):
            out.append(r)
    return out


def best_record(study: optuna.Study) -> TrialRecord | None:
    """The best exact trial: the finalists' round verdict when there was one (a fused plan
    measurably faster than unfused, else the unfused trial: tuning/finalists.py), else
    the feasible complete trial with the smallest time ratio."""
    confirmed = study.user_attrs.get(StudyAttr.CONFIRM_BEST)
    entries = study.user_attrs.get(StudyAttr.FINALISTS) or []
    finalists = {f["trial"] for f in entries}
    ranked = sum(1 for f in entries if not f.get("previous_best"))  # the top by search value the round took
    # Valid while no later trial (a resumed run) has entered the top that was re-measured.
    if confirmed is not None and not _entered_top_since(study, entries, finalists, ranked):
        for r in records(study):
            if r.number == confirmed["trial"] and r.feasible:
                return r
        if confirmed.get("keep_unfused_reason"):
            return None  # "keep unfused" without an exact unfused trial: never fall back to a fused plan
    top = top_records(study, 1)
    return top[0] if top else None


def _entered_top_since(study: optuna.Study, entries: list[dict[str, Any]], finalists: set[int], ranked: int) -> bool:
    """Whether a trial outside the round's finalists has entered the top ``ranked`` since the
    round. Rounds stamped ``at``: a feasible trial completed after the last of them (a plan
    turned down in an earlier run ranks high yet is never a finalist again: it must not
    void the round, which then fell back to an unverified search best). Older rounds: the
    top by search value, turned-down plans included, as that round ranked them."""
    stamps = [str(e["at"]) for e in entries if e.get("at")]
    if not stamps or len(stamps) < len(entries):
        return not {r.number for r in top_records(study, ranked, with_turned_down=True)} <= finalists
    last = max(stamps)
    trials = study.get_trials(deepcopy=False)
    return any(r.number not in finalists and (done := trials[r.number].datetime_complete) is not None
               and done.isoformat(timespec="seconds") > last for r in top_records(study, ranked))


FUSE_EVERYTHING = (FUSE_ALL, FULL_MODEL)  # the fuse-everything anchor of each anchor set


def anchor_record(study: optuna.Study, anchor: str) -> TrialRecord | None:
    """The complete trial of a named anchor; ``fuse-all`` also finds npu's ``full-model``."""
    names = FUSE_EVERYTHING if anchor in FUSE_EVERYTHING else (anchor,)
    return next((r for r in records(study) if r.anchor in names and r.state == "COMPLETE"), None)


def ran_anchor(study: optuna.Study, anchor: str) -> bool:
    """Whether the study already ran (or began) the named anchor; one only queued, or whose
    run was stopped (``interrupted``), has not."""
    return any(t.user_attrs.get(TrialAttr.ANCHOR) == anchor and t.state != optuna.trial.TrialState.WAITING
               and not interrupted(t) for t in study.get_trials(deepcopy=False))


def best_plan(study: optuna.Study) -> Plan | None:
    best = best_record(study)
    return Plan.from_json(best.plan) if best and best.plan else None
