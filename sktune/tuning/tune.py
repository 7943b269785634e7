"""The tuning loop: worker + space + study, one trial at a time."""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from sktune.backends import Backend, get_backend
from sktune.graph.grouping import group_ops
from sktune.space.plan import Plan
from sktune.space.search_space import SearchSpace
from sktune.tuning import study as studies
from sktune.tuning.budget import EFFORTS, Effort, Patience, TrialBudget
from sktune.tuning.storage import WORKER_ATTR, worker_tag
from sktune.tuning.worker import SupervisedWorker, WorkerFailure, runner_config

log = logging.getLogger(__name__)


RESULT_KEYS = ("bitwise", "timing", "mismatches", "groups", "regions", "compile_s", "verify_s", "measure_s",
               "observed")


class TrialFailed(Exception):
    """The worker gave no result for a trial (hang, crash, compile error): recorded as FAIL."""


@dataclass(frozen=True)
class TuneSettings:
    model_path: Path
    backend: str = "inductor"
    trials: int | None = None  # None: the effort's
    effort: str = "default"
    timeout: float | None = None
    study_name: str | None = None
    storage: str = studies.DEFAULT_STORAGE
    seed: int | None = 0
    threads: int = 1
    input_sets: int = 3
    trial_timeout: float = 300.0
    bisect_runs: int | None = None  # None: the backend's default
    diagnose: int = 1  # hung trials rerun with the backend's diagnostic plan, at most this many
    allow_changed: bool = False  # resume a study although its fingerprint changed
    cache_root: Path = Path(".sktune/cache")
    probe: bool = True  # per-op exactness probe (inductor), cached under cache_root
    patience: int | None = -1  # -1: the effort's; None: never stop early

    @property
    def plan(self) -> Effort:
        """The effort preset with this run's overrides."""
        effort = EFFORTS[self.effort]
        return Effort(trials=self.trials or effort.trials, chunks=effort.chunks,
                      patience=effort.patience if self.patience == -1 else self.patience,
                      confirm_top=effort.confirm_top)

    @property
    def study(self) -> str:
        return self.study_name or f"{self.model_path.stem}-{self.backend}"


TrialCallback = Callable[[optuna.Study, optuna.trial.FrozenTrial], None]


def make_objective(space: SearchSpace, worker: SupervisedWorker, backend: Backend, settings: TuneSettings,
                   description: dict[str, Any]) -> Callable[[optuna.Trial], float]:
    bisect_runs = backend.default_bisect_runs if settings.bisect_runs is None else settings.bisect_runs
    diagnoses_left = [settings.diagnose]
    chunks = settings.plan.chunks
    targets = [o["target"] for o in description["ops"]]
    exactness = studies.exactness_from_description(description)

    def objective(trial: optuna.Trial) -> float:
        plan = space.suggest(trial)
        trial.set_user_attr("plan", plan.to_json())
        trial.set_user_attr(WORKER_ATTR, worker_tag())  # lets a resumed run fail this trial if we die
        anchor = trial.user_attrs.get(studies.ANCHOR_ATTR)
        hopeless = None if anchor else exactness.hopeless(plan, targets, space.exact_options)
        if hopeless:  # known not to be bitwise: not worth a compile
            trial.set_user_attr("skipped", f"skipped: {hopeless}")
            raise optuna.TrialPruned(hopeless)
        started = time.perf_counter()
        result = worker.request("run", {"plan": plan.to_json(), "n_batches": chunks[0]}, settings.trial_timeout)
        wall = time.perf_counter() - started
        if isinstance(result, WorkerFailure):
            trial.set_user_attr("failure", result.reason)
            if result.trace:
                trial.set_user_attr("failure_trace", result.trace[-4000:])
            diagnostic = backend.diagnostic_plan(plan) if result.kind == "hang" else None
            if diagnostic is not None and diagnoses_left[0] > 0:
                diagnoses_left[0] -= 1
                rerun = worker.request("run", diagnostic.to_json(), settings.trial_timeout)
                trial.set_user_attr("diagnosis", {
                    "plan": diagnostic.to_json(),
                    "outcome": rerun.reason if isinstance(rerun, WorkerFailure) else "completed with debug options",
                    "where": "per-core op progress is in the device log (ASCEND_PROCESS_LOG_PATH, else ~/ascend/log)",
                })
            raise TrialFailed(result.reason)
        missing = [k for k in RESULT_KEYS if k not in result]
        if missing:  # a worker that answers nonsense is as broken as one that crashes
            reason = f"error: malformed result from the worker (missing {', '.join(missing)})"
            trial.set_user_attr("failure", reason)
            raise TrialFailed(reason)
        for key in ("mismatches", "groups", "regions", "compile_s", "verify_s", "observed"):
            trial.set_user_attr(key, result[key])
        trial.set_user_attr("overhead_s", wall - result["measure_s"])
        timing, measure_s = result["timing"], result["measure_s"]
        # An inexact candidate is rejected whatever its speed: one step of timing is enough
        # (anchors are timed fully: fuse-all's time is the yardstick for what exactness costs).
        steps = chunks[1:] if result["bitwise"] or anchor else ()
        done = chunks[0]
        for chunk in steps:
            trial.report(timing["ratio_ci"][0], step=done)
            if not anchor and trial.should_prune():
                reason = f"pruned: slower than the best exact trial after {done} batch pairs"
                trial.set_user_attr("timing", timing)
                trial.set_user_attr("measure_s", measure_s)
                trial.set_user_attr("pruned", reason)
                raise optuna.TrialPruned(reason)
            more = worker.request("more", {"n_batches": chunk}, settings.trial_timeout)
            if isinstance(more, WorkerFailure):
                trial.set_user_attr("failure", more.reason)
                raise TrialFailed(more.reason)
            timing, measure_s, done = more["timing"], measure_s + more["measure_s"], done + chunk
        trial.set_user_attr("timing", timing)
        trial.set_user_attr("measure_s", measure_s)
        trial.set_constraint("bitwise", float(len(result["mismatches"])))  # ≤ 0: exact
        if result["mismatches"] and bisect_runs > 0:
            found = worker.request("bisect", {"plan": plan.to_json(), "max_runs": bisect_runs}, settings.trial_timeout)
            if not isinstance(found, WorkerFailure):
                trial.set_user_attr("smallest_failing_range", found)
        return float(timing["ratio"])

    return objective


def tune(settings: TuneSettings, callbacks: list[TrialCallback] | None = None,
         on_ready: Callable[[optuna.Study, dict[str, Any]], None] | None = None) -> optuna.Study:
    """Run ``settings.trials`` more trials on the study (created or resumed)."""
    cache_dir = (settings.cache_root / settings.study).resolve()
    cache_dir.mkdir(parents=True, exist_ok=True)
    effort = settings.plan
    probe_cache = str((settings.cache_root / "exactness-probe.json").resolve()) if settings.probe else None
    config = runner_config(model_path=str(settings.model_path), backend=settings.backend,
                           threads=settings.threads, input_sets=settings.input_sets, n_batches=effort.n_batches,
                           probe_cache=probe_cache)
    # Failed trials are recorded with their reason; Optuna's own warning + traceback would
    # only tear through the progress display.
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    backend = get_backend(settings.backend)  # e.g. no torch-npu: fail before starting a worker
    study = studies.open_study(settings.study, settings.storage, settings.seed)  # bad URL: fail fast
    with SupervisedWorker(config, str(cache_dir)) as worker:
        description = studies.reuse_space_inputs(study, worker.start())
        space = studies.space_from_description(description)
        studies.prepare(study, description, space, settings.model_path,
                        {"threads": settings.threads, "input_sets": settings.input_sets}, settings.allow_changed)
        if on_ready:
            on_ready(study, description)
        stop: list[TrialCallback] = [TrialBudget(effort.trials)]
        if effort.patience:
            stop.append(Patience(effort.patience))
        study.optimize(make_objective(space, worker, backend, settings, description), n_trials=None,
                       timeout=settings.timeout, catch=(TrialFailed,), callbacks=stop + (callbacks or []))
        _confirm_finalists(study, worker, settings.trial_timeout, effort.confirm_top)
        _profile_baseline_and_best(study, worker, settings.trial_timeout)
    return study


def _confirm_finalists(study: optuna.Study, worker: SupervisedWorker, timeout: float, top: int) -> None:
    """Re-time the ``top`` best exact plans and fuse-all together, in one interleaved round.

    The best trial is the minimum of many noisy ratios; the measurement that picked it is
    biased low (winner's curse). The finalists are re-measured side by side and the one
    with the best re-measured ratio is named best; the summary reports these times.
    """
    finalists = studies.top_records(study, top)
    fuse_all = studies.anchor_record(study, "fuse-all")
    plans = [r.plan for r in finalists] + ([fuse_all.plan] if fuse_all is not None else [])
    if not plans:
        return
    result = worker.request("confirm", {"plans": plans}, timeout * len(plans))
    if isinstance(result, WorkerFailure):
        log.warning("re-measuring the finalists failed: %s", result.reason)
        return
    timings = result["timings"]
    remeasured = [{"trial": r.number, "timing": t} for r, t in zip(finalists, timings)]
    study.set_user_attr("finalists", remeasured)
    if remeasured:
        best = min(remeasured, key=lambda f: f["timing"]["ratio"])
        study.set_user_attr("confirm_best", {**best, "bitwise": True})
    if fuse_all is not None:
        study.set_user_attr("confirm_fuse_all", {"trial": fuse_all.number, "timing": timings[-1],
                                                 "bitwise": fuse_all.feasible})


def _profile_baseline_and_best(study: optuna.Study, worker: SupervisedWorker, timeout: float) -> None:
    """Record busy time and gap of the baseline and the best plan (explains the speedup)."""
    best = studies.best_record(study)
    targets: list[tuple[str, dict[str, Any] | None]] = [("profile_baseline", None)]
    if best is not None:
        targets.append(("profile_best", best.plan))
        study.set_user_attr("profile_best_trial", best.number)
    for key, plan in targets:
        result = worker.request("profile", plan, timeout)
        if isinstance(result, WorkerFailure):
            log.warning("profiling %s failed: %s", key, result.reason)
        else:
            study.set_user_attr(key, result)


def _confirmed(study: optuna.Study, key: str, record: studies.TrialRecord) -> tuple[dict[str, Any], bool, str]:
    """The re-measurement of ``record`` when one was made for it, else the trial's own."""
    confirm = study.user_attrs.get(key)
    if confirm and confirm["trial"] == record.number:
        return confirm["timing"], bool(confirm["bitwise"]) and record.feasible, "re-measured"
    trial = study.trials[record.number]
    return trial.user_attrs["timing"], record.feasible, "search"


def summary(study: optuna.Study) -> dict[str, Any]:
    """The machine-readable result (the README documents this contract)."""
    recs = [r for r in studies.records(study) if r.state in ("COMPLETE", "FAIL", "PRUNED")]
    complete = [r for r in recs if r.state == "COMPLETE"]
    best = studies.best_record(study)
    n_ops = len(study.user_attrs.get("ops", []))
    fuse_all = studies.anchor_record(study, "fuse-all")
    overheads = [t.user_attrs["overhead_s"] for t in study.get_trials(deepcopy=False) if "overhead_s" in t.user_attrs]
    env = study.user_attrs.get("environment") or {}
    emulated = env.get("emulated") == "true"
    out: dict[str, Any] = {
        "study": study.study_name,
        "backend": study.user_attrs.get("backend"),
        # An emulated device's times come from its model, never from hardware: say so everywhere.
        "device": "npu-emulator" if emulated else env.get("device") or "cpu",
        "emulated": emulated,
        "model": study.user_attrs.get("model"),
        "n_ops": n_ops,
        "n_trials": len(recs),
        "n_complete": len(complete),
        "n_infeasible": sum(1 for r in complete if not r.feasible),
        "n_failed": sum(1 for r in recs if r.state == "FAIL"),
        "n_pruned": sum(1 for r in recs if r.state == "PRUNED"),
        "stopped_early": study.user_attrs.get("stopped_early"),
        "finalists": study.user_attrs.get("finalists"),
        "input_sets": study.user_attrs.get("input_sets"),
        "threads": study.user_attrs.get("threads"),
        "baseline_s": None, "best_s": None, "speedup": None, "speedup_ci": None, "significant": False,
        "best_fuses_nothing": False,
        "verified_bitwise": False, "best_trial": None, "best_plan": None, "groups": [],
        "fuse_all": None, "gain_kept": None,
        "median_overhead_s": statistics.median(overheads) if overheads else None,
        "profile_baseline": study.user_attrs.get("profile_baseline"),
        "profile_best": study.user_attrs.get("profile_best"),
    }
    if best is not None and best.plan is not None and best.ratio_ci is not None:
        plan = Plan.from_json(best.plan)
        timing, bitwise, source = _confirmed(study, "confirm_best", best)
        groups = group_ops(n_ops, plan.scopes)
        lo, hi = timing["ratio_ci"]
        out.update(
            baseline_s=timing["baseline_s"], best_s=timing["candidate_s"],
            speedup=timing["baseline_s"] / timing["candidate_s"], speedup_ci=[1.0 / hi, 1.0 / lo],
            # An unfused best runs the baseline itself: any "speedup" is noise by construction.
            significant=hi < 1.0 and bool(groups), best_fuses_nothing=not groups,
            timing_source=source, search_speedup=1.0 / best.ratio,
            verified_bitwise=bitwise, best_trial=best.number, best_plan=plan.to_json(),
            groups=[list(g) for g in groups],
        )
    if fuse_all is not None and fuse_all.ratio is not None:
        timing, _, source = _confirmed(study, "confirm_fuse_all", fuse_all)
        out["fuse_all"] = {"trial": fuse_all.number, "anchor": fuse_all.anchor, "baseline_s": timing["baseline_s"],
                           "time_s": timing["candidate_s"], "ratio": timing["ratio"],
                           "ratio_ci": timing["ratio_ci"], "bitwise": fuse_all.feasible, "timing_source": source}
        if out["best_s"] is not None and timing["ratio"] < 1 and out["baseline_s"]:
            # Share of fuse-everything's gain that the best exact plan keeps (ratios: same-run baselines).
            best_ratio = out["best_s"] / out["baseline_s"]
            out["gain_kept"] = (1 - best_ratio) / (1 - timing["ratio"])
    # The best's search ratio: the anchors' ratios are search ratios too (same kind of measurement).
    out["anchors"] = anchor_comparison(study, best.ratio if best is not None else None)
    return out


def anchor_comparison(study: optuna.Study, best_ratio: float | None) -> list[dict[str, Any]]:
    """Each measured starting point (anchor or seed) and how much faster the best plan is
    (ratios to the unfused baseline of each one's own run, so they compare across runs)."""
    out = []
    for r in studies.records(study):
        if r.anchor is None or r.state != "COMPLETE" or not r.ratio:
            continue
        out.append({"anchor": r.anchor, "trial": r.number, "ratio": r.ratio, "bitwise": r.feasible,
                    "best_speedup_over": best_ratio and r.ratio / best_ratio})
    return out
