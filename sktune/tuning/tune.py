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
    trials: int = 30
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

    @property
    def study(self) -> str:
        return self.study_name or f"{self.model_path.stem}-{self.backend}"


TrialCallback = Callable[[optuna.Study, optuna.trial.FrozenTrial], None]


def make_objective(space: SearchSpace, worker: SupervisedWorker, backend: Backend,
                   settings: TuneSettings) -> Callable[[optuna.Trial], float]:
    bisect_runs = backend.default_bisect_runs if settings.bisect_runs is None else settings.bisect_runs
    diagnoses_left = [settings.diagnose]

    def objective(trial: optuna.Trial) -> float:
        plan = space.suggest(trial)
        trial.set_user_attr("plan", plan.to_json())
        trial.set_user_attr(WORKER_ATTR, worker_tag())  # lets a resumed run fail this trial if we die
        started = time.perf_counter()
        result = worker.request("run", plan.to_json(), settings.trial_timeout)
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
        for key in ("timing", "mismatches", "groups", "regions", "compile_s", "verify_s", "measure_s", "observed"):
            trial.set_user_attr(key, result[key])
        trial.set_user_attr("overhead_s", wall - result["measure_s"])
        trial.set_constraint("bitwise", float(len(result["mismatches"])))  # ≤ 0: exact
        if result["mismatches"] and bisect_runs > 0:
            found = worker.request("bisect", {"plan": plan.to_json(), "max_runs": bisect_runs}, settings.trial_timeout)
            if not isinstance(found, WorkerFailure):
                trial.set_user_attr("smallest_failing_range", found)
        return float(result["timing"]["ratio"])

    return objective


def tune(settings: TuneSettings, callbacks: list[TrialCallback] | None = None,
         on_ready: Callable[[optuna.Study, dict[str, Any]], None] | None = None) -> optuna.Study:
    """Run ``settings.trials`` more trials on the study (created or resumed)."""
    cache_dir = (settings.cache_root / settings.study).resolve()
    cache_dir.mkdir(parents=True, exist_ok=True)
    config = runner_config(model_path=str(settings.model_path), backend=settings.backend,
                           threads=settings.threads, input_sets=settings.input_sets)
    # Failed trials are recorded with their reason; Optuna's own warning + traceback would
    # only tear through the progress display.
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    backend = get_backend(settings.backend)  # e.g. no torch-npu: fail before starting a worker
    study = studies.open_study(settings.study, settings.storage, settings.seed)  # bad URL: fail fast
    with SupervisedWorker(config, str(cache_dir)) as worker:
        description = worker.start()
        space = studies.space_from_description(description)
        studies.prepare(study, description, space, settings.model_path,
                        {"threads": settings.threads, "input_sets": settings.input_sets}, settings.allow_changed)
        if on_ready:
            on_ready(study, description)
        study.optimize(make_objective(space, worker, backend, settings), n_trials=settings.trials,
                       timeout=settings.timeout, catch=(TrialFailed,), callbacks=callbacks or [])
        _confirm_best_and_fuse_all(study, worker, settings.trial_timeout)
        _profile_baseline_and_best(study, worker, settings.trial_timeout)
    return study


def _confirm_best_and_fuse_all(study: optuna.Study, worker: SupervisedWorker, timeout: float) -> None:
    """Re-time the best exact plan and fuse-all in a fresh interleaved run.

    The best trial is the minimum of many noisy ratios; the measurement that picked it is
    biased low (winner's curse). The summary reports this independent measurement.
    """
    for key, record in (("confirm_best", studies.best_record(study)),
                        ("confirm_fuse_all", studies.anchor_record(study, "fuse-all"))):
        if record is None or record.plan is None:
            continue
        result = worker.request("run", record.plan, timeout)
        if isinstance(result, WorkerFailure):
            log.warning("re-measuring trial %d failed: %s", record.number, result.reason)
            continue
        study.set_user_attr(key, {"trial": record.number, "timing": result["timing"], "bitwise": result["bitwise"]})


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
    out: dict[str, Any] = {
        "study": study.study_name,
        "backend": study.user_attrs.get("backend"),
        "model": study.user_attrs.get("model"),
        "n_ops": n_ops,
        "n_trials": len(recs),
        "n_complete": len(complete),
        "n_infeasible": sum(1 for r in complete if not r.feasible),
        "n_failed": sum(1 for r in recs if r.state == "FAIL"),
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
        out["fuse_all"] = {"trial": fuse_all.number, "baseline_s": timing["baseline_s"],
                           "time_s": timing["candidate_s"], "ratio": timing["ratio"],
                           "ratio_ci": timing["ratio_ci"], "bitwise": fuse_all.feasible, "timing_source": source}
        if out["best_s"] is not None and timing["ratio"] < 1:
            # Share of fuse-everything's gain that the best exact plan keeps (ratios: same-run baselines).
            best_ratio = out["best_s"] / out["baseline_s"]
            out["gain_kept"] = (1 - best_ratio) / (1 - timing["ratio"])
    return out
