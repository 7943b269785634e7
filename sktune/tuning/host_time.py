"""The static-kernel compile of a study's trials, summed, and for an emulated study the
host time it stands for (README, "Reading the result": the summary contract).

On an Ascend host each trial's seconds are measured (compile + first forward) and already
inside the study's wall time. On an emulated Ascend the wall time holds almost none of it:
the emulator states what each static compile would cost, with the static-kernel caches as
a host would have them, and what it would cost with no cache at all. The estimated host
time is the wall time plus either figure; every such number is labelled emulated.
"""

from __future__ import annotations

import uuid
from typing import Any

import optuna

from sktune.backends import REGISTRY, backend_class
from sktune.pipe.workload import Workload
from sktune.tuning.attrs import StudyAttr, TrialAttr
from sktune.tuning.workers import worker_tag


def record_run(study: optuna.Study, workload: Workload, phases_s: dict[str, float],
               verify_static: list[dict[str, Any]] | None = None, stopped: bool = False) -> None:
    """This run's worker time (its start-up and phases), its start-up's static compiles and
    its verifications' (emulated only: the verify-only shapes' references and plans), under a
    key of its own: workers that share the study never overwrite each other's, and a resumed
    study adds its runs instead of replacing the last one's. ``stopped``: the run was stopped
    (its time up to the stop)."""
    tag = worker_tag()
    key = f"{StudyAttr.RUN}{tag['host']}:{tag['pid']}:{uuid.uuid4().hex[:8]}"
    study.set_user_attr(key, {"wall_s": sum((workload.startup_s or {}).values()) + sum(phases_s.values()),
                              "startup_static": workload.startup_static,
                              **({"verify_static": verify_static} if verify_static else {}),
                              **({"stopped": True} if stopped else {})})


def record_earlier_runs(study: optuna.Study) -> None:
    """A study whose runs finished under an older sktune (no run records): their time as one
    record, from what it kept (the creator's start-up and the last run's phases), so that a
    resume under this one adds to it instead of dropping it."""
    if run_records(study) or StudyAttr.PHASES_S not in study.user_attrs:
        return
    wall = sum((study.user_attrs.get(StudyAttr.STARTUP_S) or {}).values()) + sum(
        study.user_attrs[StudyAttr.PHASES_S].values())
    study.set_user_attr(f"{StudyAttr.RUN}earlier runs", {"wall_s": wall, "startup_static": None})


def run_records(study: optuna.Study) -> list[dict[str, Any]]:
    return [v for k, v in study.user_attrs.items() if k.startswith(StudyAttr.RUN)]


def study_wall_s(study: optuna.Study, runs: list[dict[str, Any]] | None = None) -> float:
    """The worker time of every finished run (start-up plus phases); a study from before
    those records: the creator's start-up plus the last run's phases; without those, the
    span from the first trial's start to the last one's end. ``runs``: the study's run
    records where the caller has read them already (each read goes to the storage)."""
    runs = run_records(study) if runs is None else runs
    if runs:
        return float(sum(r["wall_s"] for r in runs))
    attrs = study.user_attrs
    startup = attrs.get(StudyAttr.STARTUP_S) or {}
    phases = attrs.get(StudyAttr.PHASES_S) or {}
    if phases:
        return float(sum(startup.values()) + sum(phases.values()))
    trials = [t for t in study.get_trials(deepcopy=False) if t.datetime_start and t.datetime_complete]
    if not trials:
        return 0.0
    end = max(t.datetime_complete for t in trials)  # type: ignore[type-var]
    start = min(t.datetime_start for t in trials)  # type: ignore[type-var]
    return (end - start).total_seconds()


def static_compile_summary(study: optuna.Study) -> dict[str, Any]:
    """``static_compile`` (None when no trial recorded one) and ``estimated_host_time``
    (emulated studies only, else None)."""
    trials = [t.user_attrs[TrialAttr.STATIC_COMPILE] for t in study.get_trials(deepcopy=False)
              if t.user_attrs.get(TrialAttr.STATIC_COMPILE)]
    if not trials:
        return {"static_compile": None, "estimated_host_time": None}
    # The references' compiles at each run's start-up (emulated only: a host's wall time holds them).
    runs = run_records(study)
    startups = [r["startup_static"] for r in runs if r.get("startup_static")]
    verifications = [v for r in runs for v in r.get("verify_static") or []]
    records = trials + startups + verifications
    emulated = any(r.get("emulated") for r in records)
    seconds = sum(float(r["seconds"]) for r in records)
    uncached = [r.get("uncached_s") for r in records]
    uncached_s = None if any(u is None for u in uncached) else sum(float(u) for u in uncached)  # type: ignore[arg-type]
    static = {"trials": len(trials), "startups": len(startups), "verifications": len(verifications),
              "seconds": seconds, "uncached_s": uncached_s, "emulated": emulated}
    if not emulated:
        return {"static_compile": static, "estimated_host_time": None}
    wall = study_wall_s(study, runs)
    return {"static_compile": static, "estimated_host_time": {
        "wall_s": wall, "runs": len(runs) or 1, "with_cache_s": wall + seconds,
        "without_cache_s": None if uncached_s is None else wall + uncached_s, "emulated": True}}


def effective_options_checked(study: optuna.Study) -> bool | None:
    """Where the backend checks them (npu): whether the effective options (CANN's) were compared (no study warning, and
    at least one trial found a recognised dump); None for other backends."""
    backend = study.user_attrs.get(StudyAttr.BACKEND)
    if backend not in REGISTRY or not backend_class(backend).checks_effective_options:
        return None
    if StudyAttr.EFFECTIVE_OPTIONS_UNCHECKED in study.user_attrs:
        return False
    return any((t.user_attrs.get(TrialAttr.OBSERVED) or {}).get("effective_options") == "checked"
               for t in study.get_trials(deepcopy=False))


def _runs(n: int) -> str:
    return "its run" if n == 1 else f"its {n} runs"


def _duration(seconds: float) -> str:
    hours, rest = divmod(round(seconds), 3600)
    return f"{hours} h {rest // 60:02d} min" if hours else f"{rest // 60} min {rest % 60:02d} s"


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def host_time_lines(summary: dict[str, Any]) -> list[str]:
    """The static-compile and effective-options lines of the CLI's closing output and the report."""
    lines = []
    static, host = summary.get("static_compile"), summary.get("estimated_host_time")
    if host:
        without = host["without_cache_s"]
        compiles = [_count(static["trials"], "trial")]
        if static.get("startups"):
            compiles.append(f"the references of {_count(static['startups'], 'start-up')}")
        if static.get("verifications"):
            compiles.append(f"{_count(static['verifications'], 'verification')} at verify-only shapes")
        lines.append(
            f"estimated host time (emulated): {_duration(host['with_cache_s'])} with the static-kernel cache"
            + ("" if without is None else f", {_duration(without)} without it")
            + f" (the worker time of {_runs(host.get('runs', 1))}, {_duration(host['wall_s'])}, plus the emulated "
            f"static compiles of {', '.join(compiles[:-1]) + ' and ' if len(compiles) > 1 else ''}{compiles[-1]})")
    elif static:
        lines.append(f"static-kernel compile: {static['seconds']:.1f} s over {static['trials']} trials "
                     "(wall time of compile + first forward)")
    if summary.get("effective_options_checked") is False:
        lines.append("effective options not checked: " + (summary.get("effective_options_warning") or
                                                          "no trial found a dump in a recognised form"))
    return lines
