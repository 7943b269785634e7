"""What the report shows, extracted from a study with pandas: one pure function per
figure or table, no plotly, so each is testable on its own.

Text in these frames is raw (as the study holds it); ``html.py`` and ``figures.py``
escape it where it enters the page.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import optuna
import pandas as pd

from sktune.graph.grouping import group_ops
from sktune.space.plan import Plan
from sktune.tuning import study as studies

FINISHED = ("COMPLETE", "FAIL", "PRUNED")
_FAILURE_KINDS = ("hang", "crash", "error")


# ---------------------------------------------------------------- 1. summary

def environment(study: optuna.Study) -> dict[str, str]:
    """Where the study ran: versions, device, threads (``sktune`` is the report's own)."""
    import sktune

    env = study.user_attrs.get("environment") or {}
    backend = str(study.user_attrs.get("backend") or env.get("backend") or "?")
    out = {"model": str(study.user_attrs.get("model") or "?"), "backend": backend,
           "sktune (report)": sktune.__version__, "torch": str(env.get("torch", "?"))}
    for key in sorted(set(env) - {"torch", "backend", "threads", "device"}):
        out[key] = str(env[key])
    out["device"] = str(env.get("device") or ("CPU" if backend == "inductor" else "?"))
    out["threads"] = str(study.user_attrs.get("threads", env.get("threads", "?")))
    out["input sets verified"] = str(study.user_attrs.get("input_sets", "?"))
    return out


def comparison(summary: dict[str, Any]) -> pd.DataFrame:
    """Unfused baseline, fuse-everything and the best exact plan: time, ratio, interval, bitwise.

    ``ratio`` is candidate time / baseline time of the same run (< 1: faster).
    """
    rows: list[dict[str, Any]] = []
    if summary.get("baseline_s") is not None:
        rows.append({"plan": "unfused baseline", "trial": None, "time_s": summary["baseline_s"],
                     "ratio": 1.0, "ratio_lo": None, "ratio_hi": None, "verified": "reference"})
    fuse_all = summary.get("fuse_all")
    if fuse_all:
        lo, hi = fuse_all["ratio_ci"]
        rows.append({"plan": "fuse everything", "trial": fuse_all["trial"], "time_s": fuse_all["time_s"],
                     "ratio": fuse_all["ratio"], "ratio_lo": lo, "ratio_hi": hi,
                     "verified": "yes" if fuse_all["bitwise"] else "no"})
    if summary.get("best_s") is not None:
        lo, hi = summary["speedup_ci"]
        rows.append({"plan": "best exact plan", "trial": summary["best_trial"], "time_s": summary["best_s"],
                     "ratio": summary["best_s"] / summary["baseline_s"], "ratio_lo": 1.0 / hi, "ratio_hi": 1.0 / lo,
                     "verified": "yes" if summary["verified_bitwise"] else "no"})
    return pd.DataFrame(rows, columns=["plan", "trial", "time_s", "ratio", "ratio_lo", "ratio_hi", "verified"])


def anchors(summary: dict[str, Any]) -> pd.DataFrame:
    """Every measured starting point and how many times faster the best exact plan is."""
    rows = [{"anchor": a["anchor"], "trial": a["trial"], "ratio": a["ratio"],
             "bitwise": "yes" if a["bitwise"] else "no", "best_speedup_over": a["best_speedup_over"]}
            for a in summary.get("anchors") or []]
    return pd.DataFrame(rows, columns=["anchor", "trial", "ratio", "bitwise", "best_speedup_over"])


def fusion_fail_reasons(study: optuna.Study) -> pd.DataFrame:
    """Scopes or ops the backend could not fuse, grouped by its reason (npu: CANN's names)."""
    rows = []
    for t in study.get_trials(deepcopy=False):
        for item in (t.user_attrs.get("observed") or {}).get("fusion_fail_reasons") or []:
            if item.get("reason"):  # lines without a reason are headers or scope listings
                rows.append({"reason": item["reason"], "op": item.get("op") or "?", "trial": t.number})
    frame = pd.DataFrame(rows, columns=["reason", "op", "trial"])
    if frame.empty:
        return pd.DataFrame(columns=["reason", "lines", "trials", "ops"])
    grouped = frame.groupby("reason").agg(lines=("op", "size"), trials=("trial", "nunique"),
                                          ops=("op", lambda ops: ", ".join(sorted(set(ops))[:8])))
    return grouped.reset_index().sort_values(["lines", "reason"], ascending=[False, True], ignore_index=True)


def verdict(summary: dict[str, Any]) -> str:
    """One line: what to do with this study's result."""
    if summary.get("best_trial") is None:
        return "No bitwise-exact plan completed: there is nothing to recommend."
    speed, (lo, hi) = summary["speedup"], summary["speedup_ci"]
    interval = f"{speed:.2f}× [{lo:.2f}, {hi:.2f}]"
    if not summary.get("groups"):
        return (f"Keep the model unfused: the best exact plan (trial #{summary['best_trial']}) fuses nothing, "
                f"so its {interval} against the unfused baseline is measurement noise.")
    if not summary.get("verified_bitwise"):
        return f"Trial #{summary['best_trial']} was not bitwise-exact when re-measured: do not use it."
    if not summary.get("significant"):
        return (f"No measurable gain: the best exact plan (trial #{summary['best_trial']}) is {interval}, "
                "an interval that includes 1.")
    kept = summary.get("gain_kept")
    tail = f", keeping {100 * kept:.0f} % of fuse-everything's gain" if kept is not None else ""
    return (f"Use trial #{summary['best_trial']}: {interval} faster than unfused, bitwise-exact on "
            f"{summary.get('input_sets', '?')} input sets{tail}.")


# ---------------------------------------------------------------- 2. fusion map

@dataclass(frozen=True)
class FusionMap:
    """One row per op and per row kind (``planned``; ``actual`` when the backend reported it).

    ``kind`` is ``fused`` (with ``group``, 1-based), ``never`` (under a ``None`` scope)
    or ``unfused`` (no scope marks it, or the backend did not fuse its scope);
    ``fallback``: a fused op whose type the plan runs as its own ATen kernel.
    """

    trial: int | None
    ops: pd.DataFrame
    n_groups: int
    has_actual: bool
    notes: tuple[str, ...] = field(default=())


_OP_COLUMNS = ["row", "op", "name", "target", "module", "module_type", "source", "kind", "group", "scopes",
               "fallback"]


def fusion_map(study: optuna.Study) -> FusionMap:
    """The best exact plan's groups over the op sequence, planned and (npu) actual."""
    ops = study.user_attrs.get("ops") or []
    best = studies.best_record(study)
    if best is None or best.plan is None:
        return FusionMap(None, pd.DataFrame(columns=_OP_COLUMNS), 0, False, ("no bitwise-exact plan",))
    plan = Plan.from_json(best.plan)
    groups = group_ops(len(ops), plan.scopes)
    group_of = {op: k + 1 for k, g in enumerate(groups) for op in g}
    never = {op for s in plan.scopes if s.name is None for op in range(s.first_op, s.last_op + 1)}
    names = {op["index"]: sorted({s.name for s in plan.scopes if s.name is not None and s.covers(op["index"])})
             for op in ops}
    fallbacks = set(plan.option_dict.get("fallback_ops") or ())
    fusion = (study.trials[best.number].user_attrs.get("observed") or {}).get("fusion")
    rows = []
    automatic = bool(fusion and fusion.get("automatic"))  # no scopes: the compiler chose
    for row in ("planned", "actual") if fusion else ("planned",):
        fused = set(fusion["fused"]) if fusion else set()
        for op in ops:
            i = op["index"]
            kind = "never" if i in never else "fused" if i in group_of else "unfused"
            if row == "actual" and kind == "fused" and not automatic and not fused & set(names[i]):
                kind = "unfused"
            rows.append({"row": row, "op": i, "name": op.get("name", ""), "target": op.get("target", ""),
                         "module": op.get("module", ""), "module_type": op.get("module_type", ""),
                         "source": op.get("source", ""), "kind": kind,
                         "group": group_of.get(i) if kind == "fused" else None, "scopes": ",".join(names[i]),
                         "fallback": kind == "fused" and op.get("target") in fallbacks})
    notes = []
    if fusion and fusion.get("not_fused"):
        notes.append("planned but not fused by the backend: " + ", ".join(fusion["not_fused"]))
    if fusion and fusion.get("unexpected"):
        notes.append("fused without being planned: " + ", ".join(fusion["unexpected"]))
    if automatic:
        notes.append("no scopes: the backend chose what to fuse (SuperKernels of " + ", ".join(fusion["automatic"])
                     + "); the lower row assumes it fused every op it could")
    return FusionMap(best.number, pd.DataFrame(rows, columns=_OP_COLUMNS), len(groups), bool(fusion), tuple(notes))


# ---------------------------------------------------------------- 3. where time goes

def time_breakdown(study: optuna.Study) -> pd.DataFrame:
    """Per-step busy time and gap (µs) of the baseline and the best plan, from the profiler."""
    rows = []
    for key, label in (("profile_baseline", "unfused baseline"), ("profile_best", "best exact plan")):
        prof = study.user_attrs.get(key)
        if prof:
            rows.append({"which": label, "step_us": prof["step_us"], "busy_us": prof["busy_us"],
                         "gap_us": prof["gap_us"], "steps": prof.get("steps")})
    return pd.DataFrame(rows, columns=["which", "step_us", "busy_us", "gap_us", "steps"])


def top_kernels(study: optuna.Study, top: int = 10) -> pd.DataFrame:
    """Per-step time of the most expensive kernels, baseline and best side by side (long form)."""
    rows = []
    for key, label in (("profile_baseline", "unfused baseline"), ("profile_best", "best exact plan")):
        for k in ((study.user_attrs.get(key) or {}).get("top_kernels") or [])[:top]:
            rows.append({"which": label, "name": k["name"], "total_us": k["total_us"], "count": k.get("count")})
    return pd.DataFrame(rows, columns=["which", "name", "total_us", "count"])


# ---------------------------------------------------------------- 4. history, importances, parallel coordinates

def _status(r: studies.TrialRecord) -> str:
    if r.state == "PRUNED":  # stopped early (partly measured) or skipped by the probe (never compiled)
        return "pruned" if r.ratio is not None else "skipped"
    if r.state != "COMPLETE":
        return "failed"
    return "exact" if r.feasible else "not exact"


def history(study: optuna.Study) -> pd.DataFrame:
    """One row per finished trial, in order: ratio, status, and the best exact ratio so far."""
    rows, best = [], math.inf
    for r in studies.records(study):
        if r.state not in FINISHED:
            continue
        ratio = r.ratio if r.ratio is not None and math.isfinite(r.ratio) else None
        if r.feasible and ratio is not None:
            best = min(best, ratio)
        rows.append({"number": r.number, "state": r.state, "status": _status(r), "anchor": r.anchor or "",
                     "ratio": ratio, "best_so_far": best if math.isfinite(best) else None,
                     "failure": r.failure or ""})
    return pd.DataFrame(rows, columns=["number", "state", "status", "anchor", "ratio", "best_so_far", "failure"])


def _feasible_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
            if all(v <= 0 for v in t.constraints.values()) and t.value is not None and math.isfinite(t.value)]


def importances(study: optuna.Study, min_trials: int = 4) -> tuple[pd.DataFrame, str | None]:
    """Optuna's PED-ANOVA parameter importances over the complete bitwise-exact trials.

    PED-ANOVA needs only numpy (fANOVA, Optuna's default, needs scikit-learn) and is
    deterministic. It asks which parameter values the best 10 % of trials concentrate on.

    Returns ``(frame, note)``; the frame is empty and the note says why when there are too
    few trials or no parameter varies.
    """
    empty = pd.DataFrame(columns=["param", "importance"])
    trials = _feasible_trials(study)
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
        found = optuna.importance.get_param_importances(
            copy, params=sorted(varying), evaluator=optuna.importance.PedAnovaImportanceEvaluator())
    except (ValueError, RuntimeError) as exc:
        return empty, f"importances could not be computed: {exc}"
    frame = pd.DataFrame({"param": list(found), "importance": list(found.values())})
    return frame, None


def parallel(study: optuna.Study) -> tuple[pd.DataFrame, list[str]]:
    """Complete trials: number, ratio, bitwise and the parameters that vary among them.

    Returns the frame and the varying parameter names (ordered as Optuna lists them).
    """
    trials = [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
              if t.value is not None and math.isfinite(t.value)]
    names: list[str] = []
    for t in trials:
        names += [p for p in t.params if p not in names]
    varying = [p for p in names if len({repr(t.params.get(p)) for t in trials}) > 1]
    rows = [{"number": t.number, "ratio": t.value, "bitwise": all(v <= 0 for v in t.constraints.values()),
             **{p: t.params.get(p) for p in varying}} for t in trials]
    return pd.DataFrame(rows, columns=["number", "ratio", "bitwise", *varying]), varying


# ---------------------------------------------------------------- 5. trials table, 6. failures

def _mismatch_line(mismatches: list[dict[str, Any]]) -> str:
    if not mismatches:
        return ""
    worst = max((m.get("max_ulp") or 0 for m in mismatches), default=0)
    sets = len({m.get("input_set") for m in mismatches})
    return f"{len(mismatches)} output mismatch(es) on {sets} input set(s), max ULP {worst}"


def trials_table(study: optuna.Study) -> pd.DataFrame:
    """Every finished trial: state, anchor, step time, ratio with interval, bitwise, failure reason."""
    rows = []
    for t in study.get_trials(deepcopy=False):
        if t.state.name not in FINISHED:
            continue
        timing = t.user_attrs.get("timing") or {}
        lo, hi = timing.get("ratio_ci") or (None, None)
        complete = t.state == optuna.trial.TrialState.COMPLETE
        exact = complete and all(v <= 0 for v in t.constraints.values())
        rows.append({"number": t.number, "state": t.state.name, "anchor": t.user_attrs.get(studies.ANCHOR_ATTR, ""),
                     "step_s": timing.get("candidate_s"), "baseline_s": timing.get("baseline_s"),
                     "ratio": timing.get("ratio"), "ratio_lo": lo, "ratio_hi": hi,
                     "bitwise": ("yes" if exact else "no") if complete else "",
                     "reason": t.user_attrs.get("failure") or t.user_attrs.get("skipped") or t.user_attrs.get("pruned")
                     or _mismatch_line(t.user_attrs.get("mismatches") or [])})
    return pd.DataFrame(rows, columns=["number", "state", "anchor", "step_s", "baseline_s", "ratio",
                                       "ratio_lo", "ratio_hi", "bitwise", "reason"])


def failures(study: optuna.Study) -> list[dict[str, Any]]:
    """Mismatching trials (outputs, element counts, max ULP) and failed ones (hang, crash,
    error), each with its plan and, when recorded, the smallest failing range."""
    out = []
    for t in study.get_trials(deepcopy=False):
        mismatches = t.user_attrs.get("mismatches") or []
        if t.state == optuna.trial.TrialState.FAIL:
            reason = str(t.user_attrs.get("failure") or "failed (no reason recorded)")
            head = reason.split(":", 1)[0].strip()
            kind = head if head in _FAILURE_KINDS else "error"
        elif t.state == optuna.trial.TrialState.COMPLETE and mismatches:
            kind, reason = "mismatch", _mismatch_line(mismatches)
        else:
            continue
        frame = pd.DataFrame(mismatches, columns=["input_set", "output_index", "count", "first_index", "max_ulp",
                                                  "reason", "detail"])
        out.append({"trial": t.number, "kind": kind, "reason": reason, "anchor": t.user_attrs.get("anchor", ""),
                    "mismatches": frame, "plan": t.user_attrs.get("plan"),
                    "smallest_failing_range": t.user_attrs.get("smallest_failing_range"),
                    "diagnosis": t.user_attrs.get("diagnosis")})
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
