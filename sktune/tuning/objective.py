"""The objective: one trial from suggested parameters to its told value.

The same objective runs in ``sktune run`` (a supervised worker process) and in the search
benchmark's replay (a table of measurements): it takes any ``TrialWorker``. A trial is
skipped without a compile when the exactness probe calls its plan hopeless or it has more
scopes than the backend allows, takes the outcome of an earlier trial of the same plan
without a compile (``reuse.py``), timed in steps with pruning between them, constrained by
its mismatch count (≤ 0: bitwise-exact), and, when not exact, bisected for the smallest
failing op range.

For a model served at several shapes, a trial is measured first at the heaviest shape,
where it may be pruned; only a plan that is still exact (or an anchor) is then verified
and timed at every other shape. Its score is the weighted geometric mean of the
per-shape ratios and its constraint the mismatch count over all shapes. A yardstick
(``tuning/yardsticks.py``) is measured at its one shape only, like an anchor, and never
takes an earlier trial's outcome.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import optuna
from optuna.trial import TrialState

from sktune.space.exactness import Exactness
from sktune.plan import Plan
from sktune.space.search_space import FUSE_ALL, SearchSpace
from sktune.tuning.dcci_seed import enqueue_dcci_seed
from sktune.pipe.protocol import TrialRequest, TrialWorker, WorkerFailure
from sktune.tuning.attrs import BITWISE_CONSTRAINT, TrialAttr
from sktune.tuning.reuse import MeasuredPlans, take_outcome, wait_for_twin
from sktune.tuning.sampler import hopeless_filter
from sktune.tuning.shapes import ShapeOutcome, weighted_timing
from sktune.tuning.workers import worker_tag
from sktune.tuning.trial_notes import note_result
from sktune.tuning.trial_writer import (mark_pruned, mark_skipped, mark_stopped, record_compiled, record_diagnosis,
                                        record_failing_range, record_mismatches, record_overhead, record_plan,
                                        record_shapes, record_waited_for, record_worker, write_failure, write_result,
                                        write_timing)

DEVICE_LOG_HINT = "per-core op progress is in the device log (ASCEND_PROCESS_LOG_PATH, else ~/ascend/log)"


class TrialFailed(Exception):
    """The worker gave no result for a trial (hang, crash, compile error): recorded as FAIL."""


@dataclass(frozen=True)
class ObjectiveRules:
    """How a trial is spent: timing steps, limits, and what to do after a failure."""

    chunks: tuple[int, ...]  # batch pairs per timing step; pruning is checked between steps
    trial_timeout: float
    bisect_runs: int = 0  # compile+verify runs to locate the op range behind a mismatch
    diagnoses: int = 0  # hung trials rerun with the diagnostic plan, at most this many
    diagnostic_plan: Callable[[Plan], Plan | None] = lambda plan: None
    shapes: tuple[tuple[str, float], ...] = ()  # (name, weight), heaviest first; (): a model without shapes


def make_objective(space: SearchSpace, worker: TrialWorker, rules: ObjectiveRules, targets: Sequence[str],
                   exactness: Exactness | None) -> Callable[[optuna.Trial], float]:
    """``exactness`` None: no skipping (strategies that do not use the probe)."""
    diagnoses_left = [rules.diagnoses]
    # The one skip rule (scope cap, exactness probe), shared with the sampler's proposals.
    probe_skip = None if exactness is None else hopeless_filter(space, targets, exactness)
    measured = MeasuredPlans()
    chunks, timeout = rules.chunks, rules.trial_timeout
    # Each worker call of a trial ends within the trial timeout: a trial RUNNING longer is dead.
    running_limit_s = timeout * (len(chunks) + len(rules.shapes) + 2)

    def fail(trial: optuna.Trial, failure: WorkerFailure) -> TrialFailed:
        write_failure(trial, failure)
        return TrialFailed(failure.reason)

    def diagnose(trial: optuna.Trial, plan: Plan) -> None:
        diagnostic = rules.diagnostic_plan(plan)
        if diagnostic is None or diagnoses_left[0] <= 0:
            return
        diagnoses_left[0] -= 1
        rerun = worker.run(TrialRequest(diagnostic), timeout)
        outcome = rerun.reason if isinstance(rerun, WorkerFailure) else "completed with debug options"
        record_diagnosis(trial, diagnostic, outcome, DEVICE_LOG_HINT)

    def objective(trial: optuna.Trial) -> float:
        # sktune's sampler tagged the trial as Optuna created it; here for any other sampler
        # (an untagged RUNNING trial is failed only past the grace period: workers.fail_orphaned_trials).
        if TrialAttr.WORKER not in trial.user_attrs:
            record_worker(trial, worker_tag())
        anchor = trial.user_attrs.get(TrialAttr.ANCHOR)
        yardstick = trial.user_attrs.get(TrialAttr.YARDSTICK)  # the one shape it runs at (an anchor there)
        shapes = rules.shapes if yardstick is None else tuple((n, w) for n, w in rules.shapes if n == yardstick)
        # Costly option values never come from the sampler: fuse-all takes them as the
        # yardstick, a refinement trial names them (tuning/refine.py).
        overrides = space.fuse_all_overrides if anchor == FUSE_ALL else (
            trial.user_attrs.get(TrialAttr.OPTION_OVERRIDES) or {})
        plan = space.with_options(space.suggest(trial), overrides)
        record_plan(trial, plan, overrides)
        # Over the backend's scope cap the compile would be refused: skipped, anchor or not
        # (a decoded plan never is; a plan from elsewhere may be, space/scope_cap.py).
        hopeless = space.over_cap(plan) if anchor or probe_skip is None else probe_skip(plan)
        if hopeless:  # refused or known not to be bitwise: not worth a compile
            mark_skipped(trial, hopeless)
            raise optuna.TrialPruned(hopeless)
        # No plan is measured twice (tuning/reuse.py); an anchor is timed fully, never pruned.
        earlier = None
        if not yardstick:  # another worker measuring this plan now: its outcome, once it has one
            record_waited_for(trial, wait_for_twin(trial.study, plan, trial.number, running_limit_s,
                                                   (dict(trial.params), overrides)))
            earlier = measured.find(trial.study, plan, pruned=not anchor)
        record_compiled(trial, earlier is None)
        if earlier is not None:
            state = take_outcome(trial, earlier)
            if state == TrialState.FAIL:
                raise TrialFailed(earlier.user_attrs[TrialAttr.FAILURE])
            if state == TrialState.PRUNED:
                raise optuna.TrialPruned(earlier.user_attrs[TrialAttr.PRUNED])
            return float(earlier.value)  # type: ignore[arg-type]
        started = time.perf_counter()
        result = worker.run(TrialRequest(plan, chunks[0], yardstick), timeout)
        wall = time.perf_counter() - started
        if isinstance(result, WorkerFailure):
            error = fail(trial, result)
            if result.kind == "hang":
                diagnose(trial, plan)
            raise error
        write_result(trial, result)
        note_result(trial, result)
        overhead_s = wall - result.measure_s
        record_overhead(trial, overhead_s)
        timing, measure_s = result.timing, result.measure_s
        # An inexact candidate is rejected whatever its speed: one step of timing is enough
        # (anchors are timed fully: fuse-all's time is the yardstick for what exactness costs).
        steps = chunks[1:] if result.bitwise or anchor else ()
        done = chunks[0]
        for chunk in steps:
            trial.report(timing.ratio_ci[0], step=done)
            if not anchor and trial.should_prune():
                reason = f"pruned: slower than the best exact trial after {done} batch pairs"
                write_timing(trial, timing, measure_s)
                mark_pruned(trial, reason)
                raise optuna.TrialPruned(reason)
            more = worker.more(chunk, timeout)
            if isinstance(more, WorkerFailure):
                raise fail(trial, more)
            timing, measure_s, done = more.timing, measure_s + more.measure_s, done + chunk
        mismatches = len(result.mismatches)
        if shapes:  # named shapes (even one: the summary and export name it)
            outcomes = {shapes[0][0]: ShapeOutcome(shapes[0][1], timing, mismatches)}
            found = [{"shape": shapes[0][0], **m} for m in result.mismatches]  # every shape's, each tagged with its shape
            if found:  # the first shape's too: the report's table named no shape for them
                record_mismatches(trial, found)
            if result.bitwise or anchor:  # an inexact plan is rejected already: spare the other shapes
                for name, weight in shapes[1:]:
                    started = time.perf_counter()
                    other = worker.run(TrialRequest(plan, sum(chunks), name), timeout)
                    if isinstance(other, WorkerFailure):
                        raise fail(trial, other)
                    note_result(trial, other)
                    overhead_s += time.perf_counter() - started - other.measure_s
                    record_overhead(trial, overhead_s)  # compile + verify at every shape
                    outcomes[name] = ShapeOutcome(weight, other.timing, len(other.mismatches))
                    measure_s += other.measure_s
                    if other.mismatches:
                        found += [{"shape": name, **m} for m in other.mismatches]
                        record_mismatches(trial, found[:20])
                        if not anchor:
                            break  # not exact at this shape: rejected, the rest would not change that
            record_shapes(trial, outcomes)
            timing = weighted_timing(outcomes)
            mismatches = sum(o.mismatches for o in outcomes.values())
        write_timing(trial, timing, measure_s)
        trial.set_constraint(BITWISE_CONSTRAINT, float(mismatches))
        if result.mismatches and rules.bisect_runs > 0 and not yardstick:
            failing = worker.bisect(plan, rules.bisect_runs, timeout)
            if not isinstance(failing, WorkerFailure):
                record_failing_range(trial, failing)
                # npu: the plan again, flushed only at the culprit (the fastest inexact plan's only)
                enqueue_dcci_seed(trial, space, failing, float(timing.ratio))
        return float(timing.ratio)

    def stoppable(trial: optuna.Trial) -> float:
        try:
            return objective(trial)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM (cli/run_cmd.py): not the plan's failure
            mark_stopped(trial)
            raise

    return stoppable
