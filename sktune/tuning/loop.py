"""The tuning loop: a worker, the space and the study, one trial at a time.

``search`` is the loop itself (objective, budget, patience, failures recorded); ``tune``
wraps it for ``sktune run``: worker start, study creation or resume, refinement, each
shape's yardsticks, finalists, profiles.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import optuna

from sktune.backends import get_backend
from sktune.errors import SktuneError
from sktune.tuning.budget import Effort, Patience, TrialBudget
from sktune.tuning.finalists import confirm_finalists, profile_baseline_and_best
from sktune.tuning.through_compile import time_through_compile
from sktune.tuning.unprepared import dropped_unless_prepared
from sktune.tuning.objective import ObjectiveRules, TrialFailed, make_objective
from sktune.space.search_space import UNFUSED
from sktune.tuning.attrs import StudyAttr, TrialAttr, is_prepared
from sktune.tuning.records import FUSE_ALL, ran_anchor
from sktune.tuning.refine import refine_best
from sktune.tuning.creator import (awaited_creator, creator_heartbeat, measures_space_inputs, take_over,
                                   wait_for_creator)
from sktune.tuning.resume import StartingQueue, open_study, prepare
from sktune.tuning.settings import TuneSettings
from sktune.tuning.workers import fail_orphaned_trials, is_this_process, may_be_alive
from sktune.tuning.trial_writer import mark_past_budget
from sktune.tuning.space_setup import reuse_space_inputs, space_from_workload
from sktune.tuning.host_time import record_earlier_runs, record_run
from sktune.tuning.warm_start import check_warm_start_names, warm_plans
from sktune.tuning.yardsticks import run_yardsticks
from sktune.tuning.supervisor import SupervisedWorker, runner_config
from sktune.pipe.workload import Workload

log = logging.getLogger(__name__)

TrialCallback = Callable[[optuna.Study, optuna.trial.FrozenTrial], None]


def search(study: optuna.Study, objective: Callable[[optuna.Trial], float], effort: Effort,
           timeout: float | None = None, callbacks: list[TrialCallback] | None = None,
           starting: StartingQueue | None = None) -> None:
    """Run trials until ``effort.trials`` have cost something, patience runs out, or ``timeout``.

    ``starting``: the starting points not yet queued, one queued after each trial when none
    waits and the budget is not spent (before patience reads the queue)."""
    budget = TrialBudget(effort.trials)
    patience = [Patience(effort.patience)] if effort.patience else []
    top_up: list[TrialCallback] = []
    if starting is not None:
        def queue_next(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
            # Not after the budget's last trial: a point queued then would run past it, beside
            # the unfused plan (run_unfused_if_missing), or first thing on resume.
            if not budget.exhausted:
                starting(study, trial)
        top_up = [queue_next]
    started = time.monotonic()
    study.optimize(objective, n_trials=None, timeout=timeout, catch=(TrialFailed,),
                   callbacks=[budget, *top_up, *patience, *(callbacks or [])])
    # Optuna ends at the timeout without a word: the study says so (the last run's; a resume
    # without --timeout clears it), and the summary does.
    at_timeout = (timeout is not None and time.monotonic() - started >= timeout and not budget.exhausted
                  and not any(p.stopped for p in patience))
    last = max((t.number for t in study.get_trials(deepcopy=False) if t.state.is_finished()), default=None)
    study.set_user_attr(StudyAttr.STOPPED_AT_TIMEOUT, {"timeout_s": timeout, "after_trial": last} if at_timeout else None)
    if not any(p.stopped for p in patience) and _stale_stop(study.user_attrs.get(StudyAttr.STOPPED_EARLY)):
        study.set_user_attr(StudyAttr.STOPPED_EARLY, None)
    if starting is not None:
        run_unfused_if_missing(study, objective, starting, callbacks)


def _stale_stop(stop: dict[str, Any] | None) -> bool:
    """Whether a patience stop on record is an earlier run's (this search was not stopped): not
    when another live worker stopped its own search beside this one (its summary says so)."""
    worker = (stop or {}).get("worker")
    if not stop or not worker:
        return bool(stop)
    return is_this_process(worker) or not may_be_alive(worker)


def run_unfused_if_missing(study: optuna.Study, objective: Callable[[optuna.Trial], float], starting: StartingQueue,
                           callbacks: list[TrialCallback] | None = None) -> None:
    """The unfused plan as a trial of its own when the search ended before it ran.

    It runs after the starting points that can be the best (space_setup.likely_best_first),
    so a small budget or a timeout can end the search first; the finalists' round needs it
    (a fused plan is named only when measurably faster than it). It is marked PAST_BUDGET,
    and so is every trial this worker runs ahead of it: with several workers, a point that
    another worker queued waits before it. Once unfused has begun (here or in another
    worker), nothing more runs here.
    """
    params = next((p for name, p in starting.points if name == UNFUSED), None)
    if params is None or ran_anchor(study, UNFUSED):
        return
    log.info("running the unfused plan for the finalists' round: the search ended before it ran")
    # Unless a trial has its plan (queued, run, sampled): Optuna's skip_if_exists, except
    # that a trial whose run was stopped does not count (it would never run again).
    if (UNFUSED, params) in starting.pending(study):
        study.enqueue_trial(params, user_attrs={TrialAttr.ANCHOR: UNFUSED, TrialAttr.PAST_BUDGET: True})
    trials = study.get_trials(deepcopy=False)
    unfused = max((t.number for t in trials if t.user_attrs.get(TrialAttr.ANCHOR) == UNFUSED), default=-1)
    # Optuna runs the waiting trials oldest first: those queued before it (another worker's,
    # a killed run's) run too, none after it.
    ahead = sum(t.state == optuna.trial.TrialState.WAITING and t.number <= unfused for t in trials)

    def past_budget(trial: optuna.Trial) -> float:
        mark_past_budget(trial)
        return objective(trial)

    def stop_once_unfused_began(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        # Another worker may have taken a waiting trial: this one would then sample a plan.
        if ran_anchor(study, UNFUSED):
            study.stop()

    study.optimize(past_budget, n_trials=ahead, catch=(TrialFailed,),
                   callbacks=[*(callbacks or []), stop_once_unfused_began])


def startup_steps(space_inputs: bool, probing: bool) -> str:
    """What the worker's start-up does, as the progress line names it."""
    steps = ["load", "capture", "reference"]
    if space_inputs:  # else the study's own are used (creator.measures_space_inputs)
        steps += ["op profile", "exactness probe"] if probing else ["op profile"]
    return ", ".join(steps)


def check_same_backend(study: optuna.Study, created: bool, backend: str, asked: str) -> None:
    """A resumed study continues with the backend it was tuned with (refused: SktuneError),
    said before a worker starts: the refusal came after seconds of start-up, and named
    neither backend."""
    tuned = study.user_attrs.get(StudyAttr.BACKEND)
    if created or tuned is None or tuned == backend:
        return
    picked = f" (--backend {asked} picked {backend} on this host)" if asked != backend else ""
    raise SktuneError(f"study {study.study_name!r} was tuned with backend {tuned}, not {backend}{picked}; its "
                      f"trials would not compare. Resume it with --backend {tuned}, or name a new --study")


def tune(settings: TuneSettings, callbacks: list[TrialCallback] | None = None,
         on_ready: Callable[[optuna.Study, Workload, bool], None] | None = None,
         on_status: Callable[[str], None] | None = None) -> optuna.Study:
    """Run ``settings.trials`` more trials on the study (created or resumed); ``on_status``
    hears what the start-up is doing (a progress line)."""
    status = on_status or (lambda text: None)
    backend = get_backend(settings.backend)  # e.g. no torch-npu: fail before a worker or a folder is made
    cache_dir = settings.compile_cache
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # e.g. run from a folder the user cannot write: the cache lives under it
        raise SktuneError(f"cannot create sktune's cache folder {cache_dir.resolve()} (under the folder sktune "
                          f"runs in): {exc.strerror or exc}; run sktune from a folder you can write") from None
    effort = settings.resolved_effort
    probe_cache = str((settings.cache_root / "exactness-probe.json").resolve()) if settings.probe else None
    # Failed trials are recorded with their reason; Optuna's own warning + traceback would
    # only tear through the progress display.
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    if settings.warm_start:  # before the study is created and a worker starts
        check_warm_start_names(settings.warm_start, settings.warm_storage or settings.storage, settings.study)
    study, created = open_study(settings.study, settings.storage, settings.seed)  # bad URL: fail fast
    check_same_backend(study, created, backend.name, settings.backend)
    joined = not created and not is_prepared(study.user_attrs)  # another worker is creating it now
    # From the study's creation on, a failure (or a stop) leaves no empty study behind.
    with dropped_unless_prepared(study, created, settings.storage):
        measures = measures_space_inputs(study, created)
        # The helper compiles the fuse-all yardstick while the worker probes: only a worker that
        # probes (a second one would compile it again beside the creator's probe).
        prefetch = settings.compile_helper and not ran_anchor(study, FUSE_ALL)
        config = runner_config(model_path=str(settings.model_path), backend=settings.backend,
                               threads=settings.threads, input_sets=settings.input_sets, n_batches=effort.n_batches,
                               probe_cache=probe_cache, shapes=settings.shapes,
                               capture_cache=str((settings.cache_root / "captures").resolve()),
                               compile_helper=settings.compile_helper,
                               prefetch_fuse_all=prefetch and measures, space_inputs=measures)
        probing = probe_cache is not None and backend.probes_exactness
        status(f"starting worker ({startup_steps(measures, probing)})…")
        with creator_heartbeat(study, created) as heartbeat, SupervisedWorker(config, str(cache_dir)) as worker:
            started = worker.start()
            if not measures:
                def waiting_for(creator: str) -> None:
                    status(f"waiting for {creator} (it measures the op profile and probe answers)…")

                if creator := awaited_creator(study):
                    waiting_for(creator)
                while not wait_for_creator(study, on_new_creator=waiting_for):
                    if take_over(study):  # its creator is gone: this run prepares the study
                        heartbeat.start()
                        status(f"its creator is gone: this run prepares the study; starting worker again "
                               f"({startup_steps(True, probing)})…")
                        started = worker.restart_with(space_inputs=True, prefetch_fuse_all=prefetch)
                        break
                    if creator := awaited_creator(study):  # another waiter's record stood
                        waiting_for(creator)
            workload = reuse_space_inputs(study, started)
            space = space_from_workload(workload)
            warm = warm_plans(settings.warm_start, settings.warm_storage or settings.storage, workload, space,
                              settings.study) if settings.warm_start else []
            starting = prepare(study, workload, space, settings.model_path,
                               {StudyAttr.THREADS: settings.threads, StudyAttr.INPUT_SETS: settings.input_sets},
                               settings.allow_changed, first=[(w.anchor, w.params) for w in warm if not w.same_as],
                               overrides={w.anchor: w.overrides for w in warm if w.overrides})
            # The study notes where its first plans came from, each once: a resumed run and
            # workers started together with the same --warm-start map the same plans.
            noted = study.user_attrs.get(StudyAttr.WARM_START) or []
            if new_notes := [w.to_json() for w in warm if w.anchor not in {n["anchor"] for n in noted}]:
                study.set_user_attr(StudyAttr.WARM_START, noted + new_notes)
            if on_ready:
                on_ready(study, workload, joined)
            rules = ObjectiveRules(
                chunks=effort.chunks, trial_timeout=settings.trial_timeout,
                bisect_runs=backend.default_bisect_runs if settings.bisect_runs is None else settings.bisect_runs,
                diagnoses=settings.diagnose, diagnostic_plan=backend.diagnostic_plan,
                shapes=workload.shape_weights,
            )
            objective = make_objective(space, worker, rules, workload.targets, workload.exact())
            phases = PhaseClock()  # where this run's time went after start-up
            with _recorded_if_stopped(study, started, phases, worker), phases("search"):
                search(study, objective, effort, settings.timeout, callbacks, starting)
            # A worker of this host killed meanwhile left its trial RUNNING; Optuna's heartbeat
            # fails it only when a trial starts 30 s later, which a finishing study may never do.
            fail_orphaned_trials(study, study._storage, untagged=False)
            with _recorded_if_stopped(study, started, phases, worker):
                with phases("refine"):
                    refine_best(study, space, objective, callbacks, effort.whole_region_cap)
                with phases("yardsticks"):  # each shape's own candidates, at that shape only: the regret's yardstick
                    run_yardsticks(study, space, workload, objective, callbacks, effort.whole_region_cap)
                with phases("finalists"):
                    confirm_finalists(study, worker, settings.trial_timeout, effort.confirm_top, rules.shapes,
                                      effort.confirm_rounds)
                with phases("through_compile"):
                    time_through_compile(study, worker, settings.trial_timeout,
                                         backend.device_profiler is None, effort.confirm_rounds)
                with phases("profiles"):
                    profile_baseline_and_best(study, worker, settings.trial_timeout)
            record_earlier_runs(study)  # before this run's phases replace the last one's
            study.set_user_attr(StudyAttr.PHASES_S, phases.seconds)
            record_run(study, started, phases.seconds, worker.verify_static)
    return study


@contextlib.contextmanager
def _recorded_if_stopped(study: optuna.Study, started: Workload, phases: "PhaseClock",
                         worker: SupervisedWorker) -> Iterator[None]:
    """A run stopped (Ctrl-C, SIGTERM) still records its worker time: the estimated host time
    of the study counts every run (it dropped the stopped ones). Best effort: the stop stands.
    The stop says whether it came after this run's finalists' round (``after_finalists``)."""
    try:
        yield
    except KeyboardInterrupt as stop:
        # Past the finalists' round the run's result stands (the CLI shows it).
        stop.after_finalists = bool({"through_compile", "profiles"} & set(phases.seconds))  # type: ignore[attr-defined]
        try:
            record_earlier_runs(study)
            record_run(study, started, phases.seconds, worker.verify_static, stopped=True)
        except Exception as exc:  # the storage may be what failed: say so, and stop as asked
            log.warning("this stopped run's time was not recorded: %s", exc)
        raise


class PhaseClock:
    """Seconds spent in each named phase (``with clock("name"): ...``)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started
