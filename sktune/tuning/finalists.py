"""After the search: the finalists re-measured side by side, then the baseline and the
best plan profiled (busy time and gap explain the speedup)."""

from __future__ import annotations

import logging
from typing import Any

import optuna

from sktune.tuning.protocol import WorkerFailure
from sktune.tuning.records import StudyAttr, TrialAttr, anchor_record, best_record, top_records
from sktune.tuning.shapes import outcomes_of, weighted_timing
from sktune.tuning.worker import SupervisedWorker

log = logging.getLogger(__name__)


def confirm_finalists(study: optuna.Study, worker: SupervisedWorker, timeout: float, top: int,
                      shapes: tuple[tuple[str, float], ...] = ()) -> None:
    """Re-time the ``top`` best exact plans and fuse-all together, in one interleaved round.

    The best trial is the minimum of many noisy ratios; the measurement that picked it is
    biased low (winner's curse). The finalists are re-measured side by side and the one
    with the best re-measured ratio is named best; the summary reports these times.
    Several shapes: one round per shape, combined into the weighted timing.
    """
    finalists = top_records(study, top)
    fuse_all = anchor_record(study, "fuse-all")
    plans = [r.plan for r in finalists] + ([fuse_all.plan] if fuse_all is not None else [])
    if not plans:
        return
    names: list[str | None] = [name for name, _ in shapes] or [None]
    rounds: dict[str | None, list[dict[str, Any]]] = {}
    for name in names:
        result = worker.request("confirm", {"plans": plans, "shape": name}, timeout * len(plans))
        if isinstance(result, WorkerFailure):
            log.warning("re-measuring the finalists failed: %s", result.reason)
            return
        rounds[name] = result["timings"]
    records = finalists + ([fuse_all] if fuse_all is not None else [])
    entries = [_remeasured(study, r.number, k, rounds, shapes) for k, r in enumerate(records)]
    remeasured = entries[:len(finalists)]
    study.set_user_attr(StudyAttr.FINALISTS, remeasured)
    if remeasured:
        best = min(remeasured, key=lambda f: f["timing"]["ratio"])
        study.set_user_attr(StudyAttr.CONFIRM_BEST, {**best, "bitwise": True})
    if fuse_all is not None:
        study.set_user_attr(StudyAttr.CONFIRM_FUSE_ALL, {**entries[-1], "bitwise": fuse_all.feasible})


def _remeasured(study: optuna.Study, number: int, k: int, rounds: dict[str | None, list[dict[str, Any]]],
                shapes: tuple[tuple[str, float], ...]) -> dict[str, Any]:
    """Plan ``k``'s re-measurement; several shapes: per shape, and their weighted timing.
    Exactness is not re-checked: each shape's mismatch count is the trial's own."""
    if None in rounds:
        return {"trial": number, "timing": rounds[None][k]}
    searched = outcomes_of(study.trials[number].user_attrs.get(TrialAttr.SHAPES))
    per_shape = {name: {"weight": w, "timing": rounds[name][k],
                        "mismatches": searched[name].mismatches if name in searched else 0}
                 for name, w in shapes}
    return {"trial": number, "timing": weighted_timing(outcomes_of(per_shape)).to_json(), "shapes": per_shape}


def profile_baseline_and_best(study: optuna.Study, worker: SupervisedWorker, timeout: float) -> None:
    """Record busy time and gap of the baseline and the best plan (explains the speedup)."""
    best = best_record(study)
    targets: list[tuple[str, dict[str, Any] | None]] = [(StudyAttr.PROFILE_BASELINE, None)]
    if best is not None:
        targets.append((StudyAttr.PROFILE_BEST, best.plan))
        study.set_user_attr(StudyAttr.PROFILE_BEST_TRIAL, best.number)
    for key, plan in targets:
        result = worker.request("profile", plan, timeout)
        if isinstance(result, WorkerFailure):
            log.warning("profiling %s failed: %s", key, result.reason)
        else:
            study.set_user_attr(key, result)
