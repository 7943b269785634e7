"""What the report's search and trials sections show, extracted from a study with pandas:
history, parameter importances, parallel coordinates, the trials table and the failures.

Text in these frames is raw (as the study holds it); ``html.py`` and ``figures.py``
escape it where it enters the page.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import optuna
import pandas as pd

from sktune.tuning.attrs import TrialAttr
from sktune.tuning.records import (TrialRecord, feasible_trials, has_ratio, interrupted, is_yardstick, records,
                                   round_turned_down, stopped_failure)
from sktune.tuning.verified import (describe_failure, first_failure, not_bitwise_at, not_verified_at,
                                   verified_outcomes)

FINISHED = ("COMPLETE", "FAIL", "PRUNED")
_FAILURE_KINDS = ("hang", "crash", "error", "interrupted")


# ---------------------------------------------------------------- 4. history, importances, parallel coordinates

def _status(r: TrialRecord) -> str:
    if r.state == "PRUNED":  # stopped early (partly measured) or skipped (never compiled)
        return "pruned" if r.ratio is not None else "skipped"
    if stopped_failure(r.state, r.failure):  # its run stopped: nothing of its plan, which runs again
        return "interrupted"
    if r.state != "COMPLETE":
        return "failed"
    if r.yardstick is not None:  # measured at one shape only: never the best, whether exact there or not
        return "yardstick"
    return "exact" if r.feasible else "not exact"


def _bitwise(r: TrialRecord, verify_failed: list[str] | None = None, unanswered: list[str] | None = None,
             in_round: bool = False) -> str:
    """The trials table's bitwise cell: a yardstick says the one shape it was checked at, a plan
    turned down at a verify-only shape says where (``verify_failed``: where this trial was),
    one whose worker gave no answer there says so (``unanswered``), one a finalists' round found
    not bitwise as it compiled it says that (``in_round``)."""
    if r.state != "COMPLETE":
        return ""
    if r.yardstick is not None:
        return f"yes, at {r.yardstick} only" if r.exact else f"no, at {r.yardstick}"
    if r.turned_down:
        return (f"no, at verify-only {', '.join(verify_failed)}" if verify_failed
                else "no, as the finalists' round compiled it" if in_round else "no, at a verify-only shape")
    if r.feasible and unanswered:  # its worker gave no answer there: a crash or a time-out, not the plan's doing
        return f"yes where tuned (not verified at {', '.join(unanswered)})"
    return "yes" if r.feasible else "no"


def history(study: optuna.Study) -> pd.DataFrame:
    """One row per finished trial, in order: ratio, status, and the best exact ratio so far."""
    rows, best = [], math.inf
    for r in records(study):
        if r.state not in FINISHED:
            continue
        ratio = r.ratio if r.ratio is not None and math.isfinite(r.ratio) else None
        if r.feasible and ratio is not None:
            best = min(best, ratio)
        rows.append({"number": r.number, "state": r.state, "status": _status(r), "anchor": r.anchor or "",
                     "ratio": ratio, "best_so_far": best if math.isfinite(best) else None,
                     "failure": r.failure or ""})
    return pd.DataFrame(rows, columns=["number", "state", "status", "anchor", "ratio", "best_so_far", "failure"])


def history_note(hist: pd.DataFrame, named_best: int | None) -> str | None:
    """Why the named best is not where the history's line ends, when it is not: the line follows
    the search's one measurement per trial; the finalists' round re-timed the top plans side by
    side with unfused (a lowest single reading is biased low) and verified them."""
    lowest = hist["best_so_far"].dropna()
    row = hist[hist["number"] == named_best]
    if named_best is None or row.empty or lowest.empty:
        return None
    ratio = row["ratio"].iloc[0]
    if pd.notna(ratio) and float(ratio) == float(lowest.iloc[-1]):
        return None
    searched = f"its search ratio {float(ratio):.3f}" if pd.notna(ratio) else "no search ratio"
    return (f"The line is each trial's one search measurement. The named best (★, trial #{named_best}, "
            f"{searched}; the line's lowest {float(lowest.iloc[-1]):.3f}) is the finalists' round's choice: "
            "the top plans re-timed side by side with unfused and verified (section 1).")


def importances(study: optuna.Study, min_trials: int = 4) -> tuple[pd.DataFrame, str | None]:
    """Optuna's PED-ANOVA parameter importances over the complete bitwise-exact trials.

    PED-ANOVA needs only numpy (fANOVA, Optuna's default, needs scikit-learn) and is
    deterministic. It asks which parameter values the best 10 % of trials concentrate on.

    Returns ``(frame, note)``; the frame is empty and the note says why when there are too
    few trials or no parameter varies.
    """
    empty = pd.DataFrame(columns=["param", "importance"])
    trials = feasible_trials(study)
    if len(trials) < min_trials:
        return empty, (f"only {len(trials)} complete bitwise-exact trial(s): importances need at least "
                       f"{min_trials}; run more trials")
    varying = {p for p in trials[0].params if len({repr(t.params.get(p)) for t in trials}) > 1}
    if not varying:
        return empty, "no parameter varies among the complete bitwise-exact trials"
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "new study created in memory"
    try:
        copy = optuna.create_study(direction="minimize")
    finally:
        optuna.logging.set_verbosity(verbosity)
    copy.add_trials(trials)
    try:
        with warnings.catch_warnings():  # "importances will be equal": the note below says so
            warnings.filterwarnings("ignore", message=".*importances will be equal", category=UserWarning)
            found = optuna.importance.get_param_importances(
                copy, params=sorted(varying), evaluator=optuna.importance.PedAnovaImportanceEvaluator())
    except (ValueError, RuntimeError) as exc:
        return empty, f"importances could not be computed: {exc}"
    frame = pd.DataFrame({"param": list(found), "importance": list(found.values())})
    if frame["importance"].nunique() <= 1:  # PED-ANOVA found nothing to tell the parameters apart
        return empty, (f"all {len(frame)} varying parameters weigh the same over {len(trials)} complete "
                       "bitwise-exact trials: too few for the best of them to concentrate anywhere; run more trials")
    return frame, None


def parallel(study: optuna.Study) -> tuple[pd.DataFrame, list[str]]:
    """Complete trials (not the shapes' yardsticks): number, ratio, bitwise and the parameters
    that vary among them.

    Returns the frame and the varying parameter names (ordered as Optuna lists them).
    """
    # A shape's yardstick is timed at that shape alone: its ratio is on another scale (trials table).
    trials = [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
              if has_ratio(t) and not is_yardstick(t)]
    feasible = {r.number for r in records(study) if r.feasible}  # a verify-only shape may turn one down
    names: list[str] = []
    for t in trials:
        names += [p for p in t.params if p not in names]
    varying = [p for p in names if len({repr(t.params.get(p)) for t in trials}) > 1]
    rows = [{"number": t.number, "ratio": t.value, "bitwise": t.number in feasible,
             **{p: t.params.get(p) for p in varying}} for t in trials]
    return pd.DataFrame(rows, columns=["number", "ratio", "bitwise", *varying]), varying


# ---------------------------------------------------------------- 5. trials table, 6. failures

def _mismatch_line(mismatches: list[dict[str, Any]]) -> str:
    if not mismatches:
        return ""
    worst = max((m.get("max_ulp") or 0 for m in mismatches), default=0)
    sets = len({m.get("input_set") for m in mismatches})
    shapes = sorted({m["shape"] for m in mismatches if m.get("shape")})  # a multi-shape study's
    at = f" at shape {', '.join(shapes)}" if shapes else ""
    return f"{len(mismatches)} output mismatch(es){at} on {sets} input set(s), max ULP {worst}"


def trials_table(study: optuna.Study) -> pd.DataFrame:
    """Every finished trial: state, anchor, step time, ratio with interval, bitwise, failure reason."""
    rows = []
    recorded = {r.number: r for r in records(study)}
    verify_failed, unanswered = not_bitwise_at(study), not_verified_at(study)
    in_round = round_turned_down(study.user_attrs)  # not bitwise as a finalists' round compiled it
    for t in study.get_trials(deepcopy=False):
        if t.state.name not in FINISHED:
            continue
        r = recorded[t.number]
        lo, hi = r.ratio_ci or (None, None)
        refined = t.user_attrs.get(TrialAttr.REFINED_FROM)  # best+…: the search's best, not the final one
        anchor = t.user_attrs.get(TrialAttr.ANCHOR, "") + (f" (of #{refined})" if refined is not None else "")
        rows.append({"number": t.number, "state": t.state.name, "anchor": anchor, "step_s": r.candidate_s, "baseline_s": r.baseline_s,
                     "ratio": r.ratio, "ratio_lo": lo, "ratio_hi": hi,
                     "bitwise": _bitwise(r, verify_failed.get(t.number), unanswered.get(t.number),
                                         t.number in in_round),
                     "reason": r.failure or _mismatch_line(t.user_attrs.get(TrialAttr.MISMATCHES) or [])})
    return pd.DataFrame(rows, columns=["number", "state", "anchor", "step_s", "baseline_s", "ratio",
                                       "ratio_lo", "ratio_hi", "bitwise", "reason"])


def failures(study: optuna.Study) -> list[dict[str, Any]]:
    """Mismatching trials (outputs, element counts, max ULP) and failed ones (hang, crash,
    error), each with its plan and, when recorded, the smallest failing range."""
    out = []
    verified = verified_outcomes(study)
    for t in study.get_trials(deepcopy=False):
        mismatches = t.user_attrs.get(TrialAttr.MISMATCHES) or []
        if t.state == optuna.trial.TrialState.COMPLETE and not mismatches and first_failure(verified.get(t.number, {})):
            failed = describe_failure(t.number, verified[t.number])  # turned down, or no answer from the worker
            kind, reason = "verify-only" if failed["plan_decided"] else "not verified", failed["why"]
        elif t.state == optuna.trial.TrialState.FAIL:
            reason = str(t.user_attrs.get(TrialAttr.FAILURE) or "interrupted: its run stopped before it said why")
            head = reason.split(":", 1)[0].strip()
            kind = "interrupted" if interrupted(t) else head if head in _FAILURE_KINDS else "error"
        elif t.state == optuna.trial.TrialState.COMPLETE and mismatches:
            kind, reason = "mismatch", _mismatch_line(mismatches)
        else:
            continue
        shaped = ["shape"] if any(m.get("shape") for m in mismatches) else []
        frame = pd.DataFrame(mismatches, columns=[*shaped, "input_set", "output_index", "count", "first_index",
                                                  "max_ulp", "reason", "detail"])
        out.append({"trial": t.number, "kind": kind, "reason": reason, "anchor": t.user_attrs.get(TrialAttr.ANCHOR, ""),
                    "mismatches": frame, "plan": t.user_attrs.get(TrialAttr.PLAN),
                    "smallest_failing_range": t.user_attrs.get(TrialAttr.SMALLEST_FAILING_RANGE),
                    "dcci_repair": t.user_attrs.get(TrialAttr.DCCI_REPAIR),
                    "diagnosis": t.user_attrs.get(TrialAttr.DIAGNOSIS)})
    return out


def plan_text(plan: dict[str, Any] | None) -> str:
    """``sk0 0–15, never 3–4 · fallback_ops=mean,softmax; max_fusion_size=64``."""
    if not plan:
        return "(no plan recorded)"
    scopes = ", ".join(f"{s['name'] if s['name'] is not None else 'never'} {s['first_op']}–{s['last_op']}"
                       for s in plan.get("scopes", [])) or "no scopes"
    options = "; ".join(f"{k}={(','.join(map(str, v)) or 'none') if isinstance(v, list) else v}"
                        for k, v in sorted((plan.get("options") or {}).items()))
    return f"{scopes} · {options}" if options else scopes
