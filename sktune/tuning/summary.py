"""The machine-readable result of a study (the README documents this contract)."""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

import optuna

from sktune.graph.grouping import group_ops
from sktune.measure.stats import PairedTiming
from sktune.plan import Plan
from sktune.space.search_space import UNFUSED
from sktune.tuning.attrs import StudyAttr, TrialAttr, is_emulated, last_change_at
from sktune.tuning.records import (FINISHED, FUSE_ALL, REFINED, TrialRecord, anchor_record, best_record, interrupted,
                                   is_yardstick, plan_of, records, reused, speedup_interval, speedup_of,
                                   stopped_failure)
from sktune.pipe.verify_shapes import verified_since
from sktune.tuning.host_time import effective_options_checked, static_compile_summary
from sktune.tuning.shapes import shapes_summary
from sktune.tuning.through_compile import through_compile_summary
from sktune.tuning.verified import (capture_limit_warning, not_bitwise_at, not_verified_at, round_rejections,
                                   verify_summary)


def confirmed_timing(study: optuna.Study, key: str, record: TrialRecord) -> tuple[PairedTiming, bool, str]:
    """The re-measurement of ``record`` when one was made for it, else the trial's own
    (``record`` has a timing)."""
    confirm = study.user_attrs.get(key)
    if confirm and confirm["trial"] == record.number:
        return PairedTiming.from_json(confirm["timing"]), bool(confirm["bitwise"]) and record.feasible, "re-measured"
    assert record.timing is not None
    return record.timing, record.feasible, "search"


# A search trial's speedup: the least of many noisy times, so the speedup is biased high.
OPTIMISTIC = "optimistic (the best of many noisy timings)"


def _provisional(study: optuna.Study, best: int, source: str) -> str | None:
    """Why the best is named by its search trial, not by a finalists' round (README: a fused
    plan is named best only when re-measured): no round has completed yet (a run stopped, or
    one still running), or the best finished after the last one (another worker's trial, or
    a resumed run's). None where the round named it."""
    if source != "search":
        return None
    if failed := study.user_attrs.get(StudyAttr.FINALISTS_FAILED):
        return (f"the finalists' round failed ({failed}): the figures are the search trial's, {OPTIMISTIC}; "
                "run the same command again to re-measure")
    if not study.user_attrs.get(StudyAttr.FINALISTS):
        return ("no finalists' round has completed (a run stopped before its end, or one is still running): the "
                f"figures are the search trial's, {OPTIMISTIC}; run the same command again to finish the study")
    return (f"trial #{best} finished after the last finalists' round (another worker's trial, or a resumed "
            f"run's): its figures are the search trial's, {OPTIMISTIC}; the last worker to finish re-measures it")


def _verified_before_change(study: optuna.Study, number: int) -> bool:
    """Whether the best's outputs were verified only before the last resume across a change
    (--allow-changed): on the model or machine as it was (README, "Resuming"). A finalists'
    round since verified it as it compiled it (``round_mismatches``, stamped ``at``)."""
    changed_at = last_change_at(study.user_attrs)
    if changed_at is None:
        return False
    if any(e.get("trial") == number and e.get("round_mismatches") == 0 and verified_since(e, changed_at)
           for e in study.user_attrs.get(StudyAttr.FINALISTS) or []):
        return False
    done = study.get_trials(deepcopy=False)[number].datetime_complete
    return done is not None and done.isoformat(timespec="seconds") < changed_at


def _interrupted(r: TrialRecord) -> bool:
    return stopped_failure(r.state, r.failure)


def failure_reasons(recs: list[TrialRecord], top: int = 3) -> list[list[Any]]:
    """The most frequent reasons why trials failed, ``[[reason, count], ...]``: where a run
    that produced no result says why (e.g. every trial hung past --trial-timeout)."""
    reasons = Counter((r.failure or "no reason recorded").splitlines()[0][:160] for r in recs
                      if r.state == "FAIL" and not _interrupted(r))
    return [[reason, count] for reason, count in reasons.most_common(top)]


def warm_start_outcomes(study: optuna.Study) -> list[dict[str, Any]] | None:
    """The study's warm-start notes, each with ``ran_as``: the trial here that measured its
    plan (under its name, else the same plan measured before it was queued), or None while
    none has (the trial budget ended first). A plan ``same_as`` another ran as that one."""
    notes = study.user_attrs.get(StudyAttr.WARM_START)
    if not notes:
        return notes
    done = [t for t in study.get_trials(deepcopy=False, states=FINISHED) if not interrupted(t)]
    out = []
    for note in notes:
        entry = {k: v for k, v in note.items() if k != "params"}  # the parameters are the trial's
        if not note.get("same_as"):
            plan = (note.get("params"), note.get("overrides") or {})
            ran = ([t.number for t in done if t.user_attrs.get(TrialAttr.ANCHOR) == note["anchor"]]
                   or [t.number for t in done if plan_of(t) == plan])
            entry["ran_as"] = ran[0] if ran else None
        out.append(entry)
    return out


def summary(study: optuna.Study) -> dict[str, Any]:
    """The machine-readable result (the README documents this contract)."""
    recs = [r for r in records(study) if r.state in ("COMPLETE", "FAIL", "PRUNED")]
    yardsticks = {t.number for t in study.get_trials(deepcopy=False) if is_yardstick(t)}
    complete = [r for r in recs if r.state == "COMPLETE"]
    best = best_record(study)
    n_ops = len(study.user_attrs.get(StudyAttr.OPS, []))
    fuse_all = anchor_record(study, FUSE_ALL)
    overheads = [t.user_attrs[TrialAttr.OVERHEAD_S] for t in study.get_trials(deepcopy=False)
                 if TrialAttr.OVERHEAD_S in t.user_attrs]
    env = study.user_attrs.get(StudyAttr.ENVIRONMENT) or {}
    emulated = is_emulated(study.user_attrs)
    out: dict[str, Any] = {
        "study": study.study_name,
        "backend": study.user_attrs.get(StudyAttr.BACKEND),
        # An emulated device's times come from its model, never from hardware: say so everywhere.
        "device": "npu-emulator" if emulated else env.get("device") or "cpu",
        # The CPU a CPU backend compiled for: exactness follows its vector width (host_cpu.py).
        "cpu": ({"name": env.get("cpu"), "capability": env["cpu_capability"], "vec_isa": env.get("vec_isa")}
                if "cpu_capability" in env else None),
        "emulated": emulated,
        "model": study.user_attrs.get(StudyAttr.MODEL),
        "n_ops": n_ops,
        "n_trials": len(recs),
        "n_complete": len(complete),
        # A yardstick is never feasible (measured at one shape only): counted apart (tuning/yardsticks.py).
        "n_infeasible": sum(1 for r in complete if not r.feasible and r.number not in yardsticks),
        "n_yardsticks": len(yardsticks),
        # A trial its stopped run failed says nothing of its plan (it runs again): counted apart.
        "n_failed": sum(1 for r in recs if r.state == "FAIL" and not _interrupted(r)),
        "n_interrupted": sum(1 for r in recs if _interrupted(r)),
        "failure_reasons": failure_reasons(recs),
        "n_pruned": sum(1 for r in recs if r.state == "PRUNED"),
        # Counted above too, by the state they took: each reused an earlier trial of its plan (tuning/reuse.py).
        "n_reused": sum(1 for t in study.get_trials(deepcopy=False) if reused(t)),
        "stopped_early": study.user_attrs.get(StudyAttr.STOPPED_EARLY),
        "stopped_at_timeout": study.user_attrs.get(StudyAttr.STOPPED_AT_TIMEOUT),
        "finalists": study.user_attrs.get(StudyAttr.FINALISTS),
        "input_sets": study.user_attrs.get(StudyAttr.INPUT_SETS),
        "threads": study.user_attrs.get(StudyAttr.THREADS),
        "baseline_s": None, "best_s": None, "speedup": None, "speedup_ci": None, "significant": False,
        "provisional": None,
        "best_fuses_nothing": False, "keep_unfused_reason": None, "rejected_best": None,
        # The unfused plan timed as a finalist against its own baseline: how far the round's noise reaches.
        "noise_floor": _noise_floor(study),
        "verified_bitwise": False, "best_trial": None, "best_plan": None, "groups": [],
        "fuse_all": None, "gain_kept": None,
        "median_overhead_s": statistics.median(overheads) if overheads else None,
        "profile_baseline": stored_profile(study, StudyAttr.PROFILE_BASELINE),
        "profile_best": stored_profile(study, StudyAttr.PROFILE_BEST),
        "warm_start": warm_start_outcomes(study),  # earlier plans tried first, their mapping, where each ran
    }
    best_timing_ratio = None if best is None else best.ratio
    if best is not None and best.plan is not None and best.timing is not None:
        plan = Plan.from_json(best.plan)
        timing, bitwise, source = confirmed_timing(study, StudyAttr.CONFIRM_BEST, best)
        best_timing_ratio = timing.ratio
        groups = group_ops(n_ops, plan.scopes)
        lo, hi = timing.ratio_ci
        out.update(
            baseline_s=timing.baseline_s, best_s=timing.candidate_s,
            speedup=timing.speedup, speedup_ci=list(speedup_interval((lo, hi))),
            # An unfused best runs the baseline itself: any "speedup" is noise by construction.
            significant=hi < 1.0 and bool(groups), best_fuses_nothing=not groups,
            timing_source=source, search_speedup=speedup_of(best.ratio),
            verified_bitwise=bitwise, best_trial=best.number, best_plan=plan.to_json(),
            groups=[list(g) for g in groups], provisional=_provisional(study, best.number, source),
            verified_before_change=_verified_before_change(study, best.number),
        )
        study_shapes = study.user_attrs.get(StudyAttr.SHAPES)
        if study_shapes:  # the top-level figures above are the weighted ones
            confirm = study.user_attrs.get(StudyAttr.CONFIRM_BEST) or {}
            searched = study.trials[best.number].user_attrs.get(TrialAttr.SHAPES) or {}
            chosen = confirm.get("shapes") if source == "re-measured" and confirm.get("shapes") else searched
            out["shapes"] = shapes_summary(study_shapes, chosen, searched, study.get_trials(deepcopy=False),
                                           best.number, study.user_attrs.get(StudyAttr.FINALISTS) or [])
        if not groups:
            _fuses_nothing(out)
            # Why: the finalists' round verdict (tuning/finalists.py), else the search's best was unfused.
            verdict = (study.user_attrs.get(StudyAttr.CONFIRM_BEST) if source == "re-measured" else None) or {}
            out.update(keep_unfused_reason=verdict.get("keep_unfused_reason")
                       or "the best exact plan is the unfused plan itself", rejected_best=verdict.get("rejected_best"))
    elif (study.user_attrs.get(StudyAttr.CONFIRM_BEST) or {}).get("keep_unfused_reason"):
        # "Keep unfused" but the unfused trial failed: no plan is named, the reason still is.
        out["keep_unfused_reason"] = study.user_attrs[StudyAttr.CONFIRM_BEST]["keep_unfused_reason"]
    # Finalists not bitwise as the round compiled them (after a change of the model): never named.
    out["round_rejected"] = round_rejections(study)
    if study.user_attrs.get(StudyAttr.SHAPES) and "shapes" not in out:
        out["shapes"] = {}  # tuned for several shapes, but no plan is exact at all of them
    if fuse_all is not None and fuse_all.ratio is not None:
        # Re-measured: as the round compiled it, its outputs checked too (finalists.py).
        timing, bitwise, source = confirmed_timing(study, StudyAttr.CONFIRM_FUSE_ALL, fuse_all)
        out["fuse_all"] = {"trial": fuse_all.number, "anchor": fuse_all.anchor, "baseline_s": timing.baseline_s,
                           "time_s": timing.candidate_s, "ratio": timing.ratio,
                           "ratio_ci": list(timing.ratio_ci), "bitwise": bitwise, "timing_source": source}
        decided, undecided = not_bitwise_at(study), not_verified_at(study)
        if at := decided.get(fuse_all.number):  # exact where tuned, not at a verify-only shape
            out["fuse_all"].update(bitwise=False, not_bitwise_at=at)
        elif fuse_all.feasible and study.user_attrs.get(StudyAttr.VERIFY_SHAPES):
            # Only a plan about to be named is verified there (and a worker may give no answer):
            # fuse-all's "yes" holds where tuned only.
            never = list(study.user_attrs[StudyAttr.VERIFY_SHAPES]) if fuse_all.number not in decided else []
            if never or undecided.get(fuse_all.number):
                out["fuse_all"]["not_verified_at"] = never or undecided[fuse_all.number]
        if out["best_s"] is not None and timing.ratio < 1 and out["baseline_s"]:
            # Share of fuse-everything's gain that the best exact plan keeps (ratios: same-run baselines).
            best_ratio = out["best_s"] / out["baseline_s"]
            out["gain_kept"] = (1 - best_ratio) / (1 - timing.ratio)
    # The best's ratio as the table gives it, re-measured where the finalists' round ran: the
    # search's figure is the least of many noisy ones, biased low, and one disturbed baseline
    # once made "best vs fuse-all" read 1.24x beside a table of 1.12x and 1.09x.
    best_ratio = None if best is None else 1.0 if out["best_fuses_nothing"] else best_timing_ratio
    out["anchors"] = anchor_comparison(study, best_ratio, None if best is None else best.number, recs)
    out.update(static_compile_summary(study))  # static_compile, estimated_host_time (emulated only)
    # Which profiles left some of the step unrecorded (their unrecorded_us is neither busy nor gap).
    out["profile_partial"] = [which for which, key in (("baseline", "profile_baseline"), ("best", "profile_best"))
                              if (out[key] or {}).get("partial")]
    out["effective_options_checked"] = effective_options_checked(study)
    out["effective_options_warning"] = study.user_attrs.get(StudyAttr.EFFECTIVE_OPTIONS_UNCHECKED)
    # verify_shapes(): the best plan checked bitwise there, untimed (tuning/verified.py); npu: capture_limit.
    out["verify_shapes"] = verify_summary(study, out["best_trial"])
    out["capture_limit_warning"] = capture_limit_warning(study)
    out["through_compile"] = through_compile_summary(study, out["best_trial"])
    return out


LEGACY_CPP_WRAPPER_REASON = (
    "profiled by an sktune that did not count a C++ wrapper's extern calls (GEMMs, C shims) as busy: its gap "
    "holds them, so the gap is shown as not recorded")


def stored_profile(study: optuna.Study, key: str) -> dict[str, Any] | None:
    """The stored profile (measure/profile.py's StepProfile as JSON, or the backend's own).
    A best plan with a C++ wrapper profiled before profiles knew what they had not recorded
    (no ``partial`` key) counted its extern calls as gap: that gap is returned as not recorded."""
    prof = study.user_attrs.get(key)
    if not prof or "partial" in prof or key != StudyAttr.PROFILE_BEST or "superkernels" in prof:
        return prof
    number = study.user_attrs.get(StudyAttr.PROFILE_BEST_TRIAL)
    plan = study.trials[number].user_attrs.get(TrialAttr.PLAN) if number is not None else None
    if not (plan or {}).get("options", {}).get("cpp_wrapper"):
        return prof
    return {**prof, "gap_us": 0.0, "unrecorded_us": prof["gap_us"], "partial": True,
            "partial_reason": LEGACY_CPP_WRAPPER_REASON}


def _noise_floor(study: optuna.Study) -> dict[str, Any] | None:
    """The unfused plan's ratio and interval in the finalists' round (tuning/finalists.py), and
    ``warning`` when that interval excludes 1.0: the same program read as faster or slower than
    itself, so the round's differences of that size are the machine's noise, not the plans'."""
    entry = study.user_attrs.get(StudyAttr.CONFIRM_UNFUSED)
    if not entry:
        return None
    timing = PairedTiming.from_json(entry["timing"])
    lo, hi = timing.ratio_ci
    warning = None if lo <= 1.0 <= hi else (
        f"noisy finalists' round: the unfused plan timed against itself read {speedup_of(timing.ratio):.2f}× "
        f"[{speedup_of(hi):.2f}, {speedup_of(lo):.2f}], an interval that excludes 1.0; differences of that size "
        "between the plans are noise (other work on the cores?): rerun on a quieter machine to trust the verdict")
    return {"trial": entry["trial"], "ratio": timing.ratio, "ratio_ci": list(timing.ratio_ci), "warning": warning}


def _fuses_nothing(out: dict[str, Any]) -> None:
    """The best exact plan runs the unfused graph itself: its time is the baseline's by
    construction, and any measured difference between the two is noise. Say exactly that."""
    out.update(best_s=out["baseline_s"], speedup=1.0, speedup_ci=None, significant=False, search_speedup=1.0)
    for shape in (out.get("shapes") or {}).values():
        # search_speedup too: the regret below is against 1.0, and the line that shows it says so
        shape.update(best_s=shape["baseline_s"], speedup=1.0, speedup_ci=None, search_speedup=1.0)
        # Keeping unfused is ratio 1 by construction: the regret is the fastest plan exact there.
        alone = [v for v in (shape.get("best_alone_speedup"), shape.get("yardstick_speedup")) if v is not None]
        if shape.get("regret") is not None and alone:
            shape.update(regret=max(alone) - 1.0, regret_timing="search")


def _remeasured_ratios(study: optuna.Study) -> dict[int, float]:
    """Each trial's ratio in the finalists' round: the finalists, fuse-all and the unfused plan."""
    entries = list(study.user_attrs.get(StudyAttr.FINALISTS) or [])
    entries += [study.user_attrs[k] for k in (StudyAttr.CONFIRM_FUSE_ALL, StudyAttr.CONFIRM_UNFUSED)
                if study.user_attrs.get(k)]
    return {e["trial"]: PairedTiming.from_json(e["timing"]).ratio for e in entries}


def anchor_comparison(study: optuna.Study, best_ratio: float | None, best_trial: int | None = None,
                      recs: list[TrialRecord] | None = None) -> list[dict[str, Any]]:
    """Each measured starting point (anchor, seed or warm plan) and how much faster the best
    plan is (ratios to the unfused baseline of each one's own run, so they compare across
    runs). A starting point re-measured in the finalists' round is compared by that figure,
    as the best is, so the line agrees with the table above it; the others by their search
    trial. Left out: the best itself (it read 1.00×), the unfused plan (the headline is the
    best against it; its search ratio against itself is noise), refinement trials (not
    starting points) and the shapes' yardsticks (their panel has them); a starting point
    measured again (a resumed run) counts by its latest trial. ``recs``: the study's
    ``records``, where the caller has them."""
    trials = study.get_trials(deepcopy=False)
    # Copies (a twin queued by two workers took the other's outcome) are no measurement of their own.
    skip = {t.number for t in trials if is_yardstick(t) or reused(t)}
    remeasured = _remeasured_ratios(study)
    recs = records(study) if recs is None else recs
    best_plan = next((r.plan for r in recs if r.number == best_trial), None)
    turned_down = not_bitwise_at(study)
    latest: dict[str, dict[str, Any]] = {}
    for r in recs:
        if (r.anchor is None or r.state != "COMPLETE" or not r.ratio or r.number in skip
                or r.number == best_trial or (best_plan is not None and r.plan == best_plan)
                or r.anchor == UNFUSED or r.anchor.startswith(REFINED)):
            continue
        if latest.get(r.anchor, {}).get("timing_source") == "re-measured" and r.number not in remeasured:
            continue  # a later search trial of it does not replace the finalists' round figure
        ratio = remeasured.get(r.number, r.ratio)
        # Exact where tuned is not enough: a verify-only shape may have turned it down (tuning/verified.py).
        latest[r.anchor] = {"anchor": r.anchor, "trial": r.number, "ratio": ratio,
                            "bitwise": r.feasible and not turned_down.get(r.number),
                            "timing_source": "re-measured" if r.number in remeasured else "search",
                            "best_speedup_over": best_ratio and ratio / best_ratio}
    return list(latest.values())
