"""After the search: the finalists re-measured side by side with the unfused plan and, before
one is named best, verified at the model's verify-only shapes (``verified.py``); then the
baseline and the best plan profiled (busy time and gap explain the speedup)."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

import optuna

from sktune.graph.grouping import group_ops
from sktune.plan import Plan
from sktune.measure.stats import PairedTiming
from sktune.pipe.protocol import (CONFIRM_ROUNDS, ConfirmRequest, ConfirmResult, ProfileRequest, WorkerFailure,
                                  rounds_timeout)
from sktune.pipe.verify_shapes import verified_since
from sktune.tuning.attrs import StudyAttr, TrialAttr, last_change_at
from sktune.tuning.records import FUSE_ALL, TrialRecord, anchor_record, best_record, records, speedup_of, top_records
from sktune.tuning.shapes import ShapeOutcome, outcomes_of, weighted_timing
from sktune.tuning.supervisor import SupervisedWorker
from sktune.tuning.verified import (all_bitwise, describe_failure, record, round_rejections, verified_outcomes,
                                   verify_plan, verify_shape_names)

log = logging.getLogger(__name__)


#: Rounds after one that turned down every fused finalist at a verify-only shape: the next
#: exact plans by search value (those turned down are no longer feasible) get their turn.
EXTRA_ROUNDS = 2


def confirm_finalists(study: optuna.Study, worker: SupervisedWorker, timeout: float, top: int,
                      shapes: tuple[tuple[str, float], ...] = (), n_rounds: int = CONFIRM_ROUNDS) -> None:
    """The finalists' round (``_confirm_round``), again while a round was left with no fused
    finalist because verify-only shapes turned each down and other exact plans remain untried
    (at most ``EXTRA_ROUNDS`` more). The study keeps every round's finalists (the best's
    check that nothing outside them entered the top reads them all: records.best_record) and
    every turned-down plan, earlier runs' included."""
    earlier = study.user_attrs.get(StudyAttr.CONFIRM_BEST) or {}
    turned_down: list[dict[str, Any]] = list(earlier.get("verify_rejected") or [])
    entries: dict[int, dict[str, Any]] = {}
    for _ in range(1 + EXTRA_ROUNDS):
        timed = _confirm_round(study, worker, timeout, top, shapes, n_rounds)
        verdict = study.user_attrs.get(StudyAttr.CONFIRM_BEST)
        if timed is None or verdict is None:
            break
        entries.update({e["trial"]: e for e in study.user_attrs.get(StudyAttr.FINALISTS) or []})
        study.set_user_attr(StudyAttr.FINALISTS, list(entries.values()))
        rejected = verdict.get("verify_rejected") or []
        turned_down += [r for r in rejected if r not in turned_down]
        rejected = rejected + (verdict.get("round_rejected") or [])  # either way: the next plans get a round
        if turned_down:
            study.set_user_attr(StudyAttr.CONFIRM_BEST, {**verdict, "verify_rejected": turned_down})
        fresh = {r.number for r in top_records(study, top)} - timed
        # "Keep unfused" with no fused finalist left to compare (rejected_best: the fastest fused
        # one that was not faster): each was turned down, so the next exact plans get a round.
        if not rejected or not verdict.get("keep_unfused_reason") or verdict.get("rejected_best") or not fresh:
            break
        log.info("every fused finalist was turned down at a verify-only shape: the next exact plans (%s) get a round",
                 ", ".join(f"#{n}" for n in sorted(fresh)))


def _confirm_round(study: optuna.Study, worker: SupervisedWorker, timeout: float, top: int,
                   shapes: tuple[tuple[str, float], ...], n_rounds: int) -> set[int] | None:
    """Re-time the ``top`` best exact plans, fuse-all and the unfused plan in one interleaved round.

    The best trial is the minimum of many noisy ratios; the measurement that picked it is
    biased low (winner's curse). The finalists are re-measured side by side, and a fused
    plan is named best only when its re-measured interval lies wholly below 1.0
    (``finalist_verdict``); otherwise the verdict is "keep unfused". The unfused plan
    timed as a candidate against its own baseline is the round's noise floor.
    ``n_rounds`` rounds of 5 pairs per plan (the effort's). Several shapes: one round per
    shape, combined into the weighted timing. A model with verify-only shapes: the plan the
    rule would name is verified bitwise at each first; one that is not is passed over for
    the next (``named_after_verification``). The trials timed; None when nothing was.
    """
    finalists = top_records(study, top)
    previous = _previous_best(study, finalists)
    finalists += previous
    fuse_all = anchor_record(study, FUSE_ALL)
    unfused = anchor_record(study, "unfused")
    unfused = unfused if unfused is not None and unfused.feasible else None
    measured = finalists + [r for r in (fuse_all, unfused) if r is not None]
    plans: list[dict[str, Any]] = []  # each distinct plan once (unfused may be a finalist too)
    for r in measured:
        if r.plan not in plans:
            plans.append(r.plan)  # type: ignore[arg-type]
    names = verify_shape_names(study, worker, timeout)  # recorded even when there is nothing to verify
    if not plans:
        return None
    rounds_at: list[str | None] = [name for name, _ in shapes] or [None]
    rounds: dict[str | None, ConfirmResult] = {}
    for name in rounds_at:
        request = ConfirmRequest(tuple(Plan.from_json(p) for p in plans), name, n_rounds)
        result = worker.confirm(request, rounds_timeout(timeout * len(plans), n_rounds))
        if isinstance(result, WorkerFailure):
            log.warning("re-measuring the finalists failed: %s", result.reason)
            study.set_user_attr(StudyAttr.FINALISTS_FAILED, result.reason)  # the summary says why it is provisional
            return None
        rounds[name] = result
    if study.user_attrs.get(StudyAttr.FINALISTS_FAILED):
        study.set_user_attr(StudyAttr.FINALISTS_FAILED, None)
    at = datetime.now().isoformat(timespec="seconds")  # verified as compiled now: after any change before it
    entry = {r.number: {**_remeasured(study, r.number, plans.index(r.plan), rounds, shapes), "at": at}  # type: ignore[arg-type]
             for r in measured}
    # The previous best is marked: it came in beside the top by search value, which
    # best_record checks against the round (records.best_record).
    remeasured = [{**entry[r.number], **({"previous_best": True} if r in previous else {})} for r in finalists]
    n_ops = len(study.user_attrs.get(StudyAttr.OPS) or [])
    fused = [entry[r.number] for r in finalists if group_ops(n_ops, Plan.from_json(r.plan).scopes)]
    # Not bitwise as the round compiled it (its trial was, on the model before a change): never named.
    differ = [e for e in fused if e["round_mismatches"]]
    if differ:  # turned down for good, as at a verify-only shape (records.round_turned_down)
        study.set_user_attr(StudyAttr.ROUND_REJECTED, (study.user_attrs.get(StudyAttr.ROUND_REJECTED) or []) + [
            {"trial": e["trial"], "mismatches": e["round_mismatches"], "at": at} for e in differ])
    verdict = named_after_verification(study, worker, timeout, names, [e for e in fused if e not in differ],
                                       entry[unfused.number] if unfused else None)
    verdict = _passed_over_in_round(study, verdict, differ)
    # Recorded once the round is whole: a run stopped while verifying leaves no half round
    # that the summary would take for a finished one (summary._provisional).
    study.set_user_attr(StudyAttr.FINALISTS, remeasured)
    if unfused is not None:
        study.set_user_attr(StudyAttr.CONFIRM_UNFUSED, entry[unfused.number])
    if verdict is not None:
        study.set_user_attr(StudyAttr.CONFIRM_BEST, verdict)
    if fuse_all is not None:
        study.set_user_attr(StudyAttr.CONFIRM_FUSE_ALL, {**entry[fuse_all.number], "bitwise": (
            fuse_all.feasible and not entry[fuse_all.number]["round_mismatches"])})
    return {r.number for r in finalists}


def _passed_over_in_round(study: optuna.Study, verdict: dict[str, Any] | None,
                          differ: list[dict[str, Any]]) -> dict[str, Any] | None:
    """``verdict``, saying which fused finalists the round found not bitwise as it compiled them
    (``round_rejected``); where none is left to name, "keep unfused" says why."""
    if not differ:
        return verdict
    numbers = {e["trial"] for e in differ}
    rejected = [r for r in round_rejections(study) if r["trial"] in numbers]
    why = "; ".join(r["why"] for r in rejected)
    if verdict is None:
        return {"trial": None, "bitwise": True, "keep_unfused_reason": why, "rejected_best": None,
                "round_rejected": rejected}
    if verdict.get("keep_unfused_reason"):
        verdict = {**verdict, "keep_unfused_reason": f"{why}; of the other finalists: {verdict['keep_unfused_reason']}"}
    return {**verdict, "round_rejected": rejected}


def _previous_best(study: optuna.Study, finalists: list[TrialRecord]) -> list[TrialRecord]:
    """The plan an earlier round named best, when it is not among ``finalists`` by search
    value (a resumed run with a smaller --effort takes fewer): re-measured beside them, so
    a resume cannot overturn that verdict without timing it again."""
    number = (study.user_attrs.get(StudyAttr.CONFIRM_BEST) or {}).get("trial")
    if number is None or any(r.number == number for r in finalists):
        return []
    previous = next((r for r in records(study) if r.number == number), None)
    if previous is None or not previous.feasible or any(r.plan == previous.plan for r in finalists):
        return []
    return [previous]


def named_after_verification(study: optuna.Study, worker: SupervisedWorker, timeout: float, names: tuple[str, ...],
                             fused: list[dict[str, Any]], unfused: dict[str, Any] | None) -> dict[str, Any] | None:
    """``finalist_verdict``, with each plan it would name verified at every verify-only shape
    first: one that is not bitwise at one of them is dropped and the rule asked again, so a
    plan inexact there is never named (none left: "keep unfused"). The unfused plan named is
    verified too, for the record (it is the model's own run: it stays named)."""
    verdict = finalist_verdict(fused, unfused)
    if not names:
        return verdict
    verified: dict[int, dict[str, Any]] = {}
    # An earlier round's or run's outcomes stand, not compiled again; those from before a resume
    # across a change (--allow-changed: the verify-only shapes' inputs may differ now) are asked again.
    changed_at = last_change_at(study.user_attrs)
    earlier = {n: {name: o for name, o in shapes.items() if verified_since(o, changed_at)}
               for n, shapes in verified_outcomes(study).items()}
    rejected: list[dict[str, Any]] = []
    while verdict is not None and verdict["trial"] is not None:
        number = verdict["trial"]
        outcomes = verify_plan(worker, Plan.from_json(study.trials[number].user_attrs[TrialAttr.PLAN]), names, timeout,
                               known=earlier.get(number))
        verified[number] = outcomes
        if all_bitwise(outcomes, names) or verdict.get("keep_unfused_reason"):
            break
        rejected.append(describe_failure(number, outcomes))
        log.info("finalist passed over: %s", rejected[-1]["why"])
        fused = [e for e in fused if e["trial"] != number]
        verdict = finalist_verdict(fused, unfused)
    record(study, verified)
    if not rejected:
        return verdict
    why = "; ".join(r["why"] for r in rejected)
    if verdict is None:  # every fused finalist passed over and no exact unfused trial to name
        return {"trial": None, "bitwise": True, "keep_unfused_reason": why, "rejected_best": None,
                "verify_rejected": rejected}
    if verdict.get("keep_unfused_reason"):
        verdict = {**verdict, "keep_unfused_reason": f"{why}; of the other finalists: {verdict['keep_unfused_reason']}"}
    return {**verdict, "verify_rejected": rejected}


def finalist_verdict(fused: list[dict[str, Any]], unfused: dict[str, Any] | None) -> dict[str, Any] | None:
    """The study's best after the finalists' round (``StudyAttr.CONFIRM_BEST``).

    ``fused``: the re-measured entries of the finalists that fuse something; ``unfused``:
    the unfused plan's entry in the same round. Every entry's timing is paired against the
    baseline in that round, so a fused plan is named best only when its ratio interval lies
    wholly below 1.0 (design.md, "Measuring": faster only when the interval excludes 1);
    among those, the smallest ratio. Otherwise "keep unfused": the unfused plan's entry,
    with the reason. None: nothing to name (no fused finalist and no unfused trial).
    """
    faster = [e for e in fused if _timing(e).faster]
    if faster:
        return {**min(faster, key=lambda e: _timing(e).ratio), "bitwise": True}
    if not fused and unfused is None:
        return None
    rejected = None
    reason = "no exact finalist fuses anything"
    if fused:
        best = min(fused, key=lambda e: _timing(e).ratio)
        timing = _timing(best)
        lo, hi = timing.ratio_ci
        rejected = {"trial": best["trial"], "ratio": timing.ratio, "ratio_ci": [lo, hi]}
        reason = (f"the fastest fused finalist (trial #{best['trial']}, {speedup_of(timing.ratio):.2f}x) "
                  f"re-measured at a time-ratio interval [{lo:.3f}, {hi:.3f}] against unfused: not wholly below 1.0")
    # No exact unfused trial to name instead (it failed): best_record then names no plan.
    named = unfused if unfused is not None else {"trial": None}
    return {**named, "bitwise": True, "keep_unfused_reason": reason, "rejected_best": rejected}


def _timing(entry: dict[str, Any]) -> PairedTiming:
    """A re-measured entry's timing, read back."""
    return PairedTiming.from_json(entry["timing"])


def _remeasured(study: optuna.Study, number: int, k: int, rounds: dict[str | None, ConfirmResult],
                shapes: tuple[tuple[str, float], ...]) -> dict[str, Any]:
    """Plan ``k``'s re-measurement, and its output mismatches as the round compiled it
    (``round_mismatches``, every shape); several shapes: per shape, and their weighted timing
    (each shape's ``mismatches`` is the trial's own)."""
    differ = sum(result.mismatches[k] for result in rounds.values())
    if None in rounds:
        return {"trial": number, "timing": rounds[None].timings[k].to_json(), "round_mismatches": differ}
    searched = outcomes_of(study.trials[number].user_attrs.get(TrialAttr.SHAPES))
    outcomes = {name: ShapeOutcome(w, rounds[name].timings[k], searched[name].mismatches if name in searched else 0)
                for name, w in shapes}
    per_shape = {name: {"weight": o.weight, "timing": o.timing.to_json(), "mismatches": o.mismatches,
                        "round_mismatches": rounds[name].mismatches[k]} for name, o in outcomes.items()}
    return {"trial": number, "timing": weighted_timing(outcomes).to_json(), "shapes": per_shape,
            "round_mismatches": differ}


def profile_baseline_and_best(study: optuna.Study, worker: SupervisedWorker, timeout: float) -> None:
    """Record busy time and gap of the baseline and the best plan (explains the speedup)."""
    best = best_record(study)
    targets: list[tuple[str, dict[str, Any] | None]] = [(StudyAttr.PROFILE_BASELINE, None)]
    if best is not None:
        targets.append((StudyAttr.PROFILE_BEST, best.plan))
        study.set_user_attr(StudyAttr.PROFILE_BEST_TRIAL, best.number)
    for key, plan in targets:
        result = worker.profile(ProfileRequest(None if plan is None else Plan.from_json(plan)), timeout)
        if isinstance(result, WorkerFailure):
            log.warning("profiling %s failed: %s", key, result.reason)
        else:
            study.set_user_attr(key, result.profile)
