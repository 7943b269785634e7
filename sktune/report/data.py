"""What the report's summary, fusion map and time sections show, extracted from a study
with pandas: one pure function per figure or table, no plotly, so each is testable on its
own (the search and trials sections: ``trials_data.py``).

Text in these frames is raw (as the study holds it); ``html.py`` and ``figures.py``
escape it where it enters the page.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import optuna
import pandas as pd

from sktune.graph.grouping import group_ops
from sktune.plan import Plan
from sktune.tuning.attrs import StudyAttr, TrialAttr
from sktune.tuning.records import best_record, speedup_interval
from sktune.tuning.shapes import exact_where_text
from sktune.tuning.verified import fuse_all_bitwise

# ---------------------------------------------------------------- 1. summary

def environment(study: optuna.Study) -> dict[str, str]:
    """Where the study ran: versions, device, threads (``sktune`` is the report's own)."""
    import sktune

    env = study.user_attrs.get(StudyAttr.ENVIRONMENT) or {}
    backend = str(study.user_attrs.get(StudyAttr.BACKEND) or env.get("backend") or "?")
    out = {"model": str(study.user_attrs.get(StudyAttr.MODEL) or "?"), "backend": backend,
           "sktune (report)": sktune.__version__, "torch": str(env.get("torch", "?"))}
    for key in sorted(set(env) - {"torch", "backend", "threads", "device"}):
        out[key] = str(env[key])
    out["device"] = str(env.get("device") or ("CPU" if backend == "inductor" else "?"))
    out["threads"] = str(study.user_attrs.get(StudyAttr.THREADS, env.get("threads", "?")))
    out["input sets verified"] = str(study.user_attrs.get(StudyAttr.INPUT_SETS, "?"))
    return out


def comparison(summary: dict[str, Any]) -> pd.DataFrame:
    """Unfused baseline, fuse-everything and the best exact plan: time, ratio, interval, bitwise.

    ``ratio`` is candidate time / baseline time of the same run (< 1: faster).
    Each row has the unfused baseline of its own run (``baseline_s``): fuse-everything's ratio
    is against the baseline timed beside it, not the first row's.
    """
    rows: list[dict[str, Any]] = []
    if summary.get("baseline_s") is not None:
        rows.append({"plan": "unfused baseline" + (" (weighted over the shapes)" if len(summary.get("shapes") or {}) > 1 else ""),
                     "trial": None, "time_s": summary["baseline_s"],
                     "baseline_s": summary["baseline_s"], "ratio": 1.0, "ratio_lo": None, "ratio_hi": None,
                     "verified": "reference"})
    fuse_all = summary.get("fuse_all")
    if fuse_all:
        lo, hi = fuse_all["ratio_ci"]
        rows.append({"plan": "fuse everything", "trial": fuse_all["trial"], "time_s": fuse_all["time_s"],
                     "baseline_s": fuse_all.get("baseline_s"), "ratio": fuse_all["ratio"], "ratio_lo": lo,
                     "ratio_hi": hi, "verified": fuse_all_bitwise(fuse_all)})
    if summary.get("best_s") is not None:
        # The inversion is its own inverse; a best that fuses nothing has no interval (it is the baseline).
        ratio_lo, ratio_hi = speedup_interval(summary["speedup_ci"]) if summary["speedup_ci"] else (None, None)
        # Several shapes: the top-level times are weighted geometric means over them (the CLI says so too).
        weighted = " (weighted over the shapes)" if len(summary.get("shapes") or {}) > 1 else ""
        rows.append({"plan": f"best exact plan{weighted}", "trial": summary["best_trial"], "time_s": summary["best_s"],
                     "baseline_s": summary["baseline_s"], "ratio": summary["best_s"] / summary["baseline_s"],
                     "ratio_lo": ratio_lo, "ratio_hi": ratio_hi,
                     "verified": "yes" if summary["verified_bitwise"] else "no"})
    return pd.DataFrame(rows, columns=["plan", "trial", "time_s", "baseline_s", "ratio", "ratio_lo", "ratio_hi",
                                       "verified"])


def anchors(summary: dict[str, Any]) -> pd.DataFrame:
    """Every measured starting point and how many times faster the best exact plan is."""
    rows = [{"anchor": a["anchor"], "trial": a["trial"], "ratio": a["ratio"], "timed": a.get("timing_source"),
             "bitwise": "yes" if a["bitwise"] else "no", "best_speedup_over": a["best_speedup_over"]}
            for a in summary.get("anchors") or []]
    return pd.DataFrame(rows, columns=["anchor", "trial", "ratio", "timed", "bitwise", "best_speedup_over"])


def shapes(summary: dict[str, Any]) -> pd.DataFrame:
    """Per served shape: the one plan against unfused and against the best plan for that shape
    alone: the search's best trial exact there and the shape's yardstick (tuning/yardsticks.py)."""
    columns = ["shape", "weight", "share", "baseline_s", "best_s", "speedup", "speedup_lo", "speedup_hi", "bitwise",
               "search_speedup", "best_alone_trial", "best_alone_speedup", "yardstick_trial", "yardstick_speedup",
               "yardstick_exact", "regret", "regret_against", "regret_timing"]
    rows = [{"shape": name, "weight": s["weight"], "share": s.get("share"), "baseline_s": s["baseline_s"], "best_s": s["best_s"],
             "speedup": s["speedup"], "speedup_lo": (s["speedup_ci"] or [None])[0],
             "speedup_hi": (s["speedup_ci"] or [None, None])[1],
             "bitwise": "yes" if s["verified_bitwise"] else "no", "search_speedup": s.get("search_speedup"),
             "best_alone_trial": s.get("best_alone_trial"),
             "best_alone_speedup": s.get("best_alone_speedup"), "yardstick_trial": s.get("yardstick_trial"),
             "yardstick_speedup": s.get("yardstick_speedup"),
             "yardstick_exact": exact_where_text(s.get("yardstick_exact")),  # "" where none ran
             "regret": s.get("regret"), "regret_against": s.get("regret_against"),
             "regret_timing": s.get("regret_timing")}
            for name, s in (summary.get("shapes") or {}).items()]
    return pd.DataFrame(rows, columns=columns)


def fusion_fail_reasons(study: optuna.Study) -> pd.DataFrame:
    """Scopes or ops the backend could not fuse, grouped by its reason (npu: CANN's names)."""
    rows = []
    for t in study.get_trials(deepcopy=False):
        for item in (t.user_attrs.get(TrialAttr.OBSERVED) or {}).get("fusion_fail_reasons") or []:
            if item.get("reason"):  # lines without a reason are headers or scope listings
                rows.append({"reason": item["reason"], "op": item.get("op") or "?", "trial": t.number})
    frame = pd.DataFrame(rows, columns=["reason", "op", "trial"])
    if frame.empty:
        return pd.DataFrame(columns=["reason", "lines", "trials", "ops"])
    grouped = frame.groupby("reason").agg(lines=("op", "size"), trials=("trial", "nunique"),
                                          ops=("op", lambda ops: ", ".join(sorted(set(ops))[:8])))
    return grouped.reset_index().sort_values(["lines", "reason"], ascending=[False, True], ignore_index=True)


def verdict_kind(summary: dict[str, Any]) -> str:
    """How the verdict reads at a glance: ``use`` (a measurable, confirmed gain), ``caution``
    (keep unfused, no measurable gain, or provisional figures) or ``none`` (nothing usable)."""
    if summary.get("best_trial") is None and summary.get("keep_unfused_reason"):
        return "caution"
    if summary.get("best_trial") is None or not summary.get("verified_bitwise"):
        return "none"
    if summary.get("best_fuses_nothing") or not summary.get("significant") or summary.get("provisional"):
        return "caution"
    return "use"


def verdict(summary: dict[str, Any]) -> str:
    """One line: what to do with this study's result."""
    if summary.get("best_trial") is None and summary.get("keep_unfused_reason"):
        return f"Keep the model unfused: {summary['keep_unfused_reason']}."
    if summary.get("best_trial") is None:
        from sktune.report.export import no_result

        why = no_result(summary)
        return f"Nothing to recommend: {why}." if summary.get("n_trials") else (
            "No bitwise-exact plan completed: there is nothing to recommend.")
    if summary.get("best_fuses_nothing"):
        reason = summary.get("keep_unfused_reason") or "no fused plan beat the unfused baseline"
        return (f"Keep the model unfused: {reason} (the best, trial #{summary['best_trial']}, fuses nothing: "
                "speedup 1.00× by construction).")
    speed, (lo, hi) = summary["speedup"], summary["speedup_ci"]
    interval = f"{speed:.2f}× [{lo:.2f}, {hi:.2f}]"
    if not summary.get("verified_bitwise"):
        return f"Trial #{summary['best_trial']} was not bitwise-exact when re-measured: do not use it."
    if not summary.get("significant"):
        return (f"No measurable gain: the best exact plan (trial #{summary['best_trial']}) is {interval}, "
                "an interval that includes 1.")
    kept = summary.get("gain_kept")
    inexact = "" if (summary.get("fuse_all") or {}).get("bitwise", True) else " (which is not bitwise-exact)"
    tail = ("" if kept is None else f", faster than fuse-everything{inexact}" if kept > 1
            else f", keeping {100 * kept:.0f} % of fuse-everything's gain{inexact}")
    emulated = " (emulated)" if summary.get("emulated") else ""
    use = (f"Use trial #{summary['best_trial']}: {interval} faster than unfused{emulated}, bitwise-exact on "
           f"{summary.get('input_sets', '?')} input sets{tail}.")
    return f"Provisional: {summary['provisional']}. {use}" if summary.get("provisional") else use


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
    ops = study.user_attrs.get(StudyAttr.OPS) or []
    best = best_record(study)
    if best is None or best.plan is None:
        return FusionMap(None, pd.DataFrame(columns=_OP_COLUMNS), 0, False, ("no bitwise-exact plan",))
    plan = Plan.from_json(best.plan)
    groups = group_ops(len(ops), plan.scopes)
    group_of = {op: k + 1 for k, g in enumerate(groups) for op in g}
    never = {op for s in plan.scopes if s.name is None for op in range(s.first_op, s.last_op + 1)}
    names = {op["index"]: sorted({s.name for s in plan.scopes if s.name is not None and s.covers(op["index"])})
             for op in ops}
    fallbacks = set(plan.option_dict.get("fallback_ops") or ())
    fusion = (study.trials[best.number].user_attrs.get(TrialAttr.OBSERVED) or {}).get("fusion")
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
        # "none" is the scope label real profiles give a SuperKernel made without any scope.
        found = ", ".join("scope label 'none'" if n == "none" else n for n in fusion["automatic"])
        notes.append(f"no scopes: the backend chose what to fuse (SuperKernels found: {found}); the lower row "
                     "assumes it fused every op it could")
    return FusionMap(best.number, pd.DataFrame(rows, columns=_OP_COLUMNS), len(groups), bool(fusion), tuple(notes))


# ---------------------------------------------------------------- 3. where time goes

def time_breakdown(study: optuna.Study) -> pd.DataFrame:
    """Per-step busy time, gap and time not recorded (µs) of the baseline and the best plan,
    from the profiler; ``shape``: the input shape profiled (None for a one-shape model);
    ``partial_reason`` says why a profile left time unrecorded (else None)."""
    from sktune.tuning.summary import stored_profile

    rows = []
    for key, label in ((StudyAttr.PROFILE_BASELINE, "unfused baseline"), (StudyAttr.PROFILE_BEST, "best exact plan")):
        prof = stored_profile(study, key)
        if prof:
            rows.append({"which": label, "step_us": prof["step_us"], "busy_us": prof["busy_us"],
                         "gap_us": prof["gap_us"], "unrecorded_us": prof.get("unrecorded_us") or 0.0,
                         "steps": prof.get("steps"), "shape": prof.get("shape"),
                         "partial_reason": prof.get("partial_reason") if prof.get("partial") else None})
    return pd.DataFrame(rows, columns=["which", "step_us", "busy_us", "gap_us", "unrecorded_us", "steps",
                                       "shape", "partial_reason"])


def top_kernels(study: optuna.Study, top: int = 10) -> pd.DataFrame:
    """Per-step time of the most expensive kernels, baseline and best side by side (long form)."""
    rows = []
    for key, label in ((StudyAttr.PROFILE_BASELINE, "unfused baseline"), (StudyAttr.PROFILE_BEST, "best exact plan")):
        profile = study.user_attrs.get(key) or {}
        # An npu study from before kernels_per_step stored totals over its profiled steps.
        steps = max(int(profile.get("steps") or 1), 1) if "superkernels" in profile and not profile.get(
            "kernels_per_step") else 1
        for k in (profile.get("top_kernels") or [])[:top]:
            rows.append({"which": label, "name": k["name"], "total_us": k["total_us"] / steps,
                         "count": None if k.get("count") is None else k["count"] / steps})
    return pd.DataFrame(rows, columns=["which", "name", "total_us", "count"])
