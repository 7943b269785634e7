"""The best plan as the export runs it: through ``sktune.apply``, i.e. ``torch.compile``.

The trials call the captured graph directly, fused and unfused alike; a user calls the
tuned model through ``sktune.apply``, and Dynamo (its frame hook and guards) adds a fixed
cost to every call that the table does not hold (docs/measured.md, "What a call through
torch.compile adds"). After the finalists' round the best is timed that way too
(``time_through_compile``); the summary, the CLI, the report and the export say it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import optuna

from sktune.graph.grouping import group_ops
from sktune.measure.stats import PairedTiming
from sktune.pipe.protocol import CONFIRM_ROUNDS, ThroughCompileRequest, WorkerFailure, rounds_timeout
from sktune.plan import Plan
from sktune.tuning.attrs import StudyAttr
from sktune.tuning.records import best_record

if TYPE_CHECKING:  # the report and the export read the record without a worker
    from sktune.tuning.supervisor import SupervisedWorker

log = logging.getLogger(__name__)


def time_through_compile(study: optuna.Study, worker: SupervisedWorker, timeout: float,
                         timed_by_clock: bool, n_rounds: int = CONFIRM_ROUNDS) -> None:
    """Time the named best as the export runs it: ``sktune.apply`` is ``torch.compile``, and
    Dynamo runs on every call (its frame hook and guards), a cost the trials, which call the
    captured graph directly, never pay (README: on a small model it has turned a plan timed
    faster than eager into one slower). Only where a clock times the trials (a device
    profiler's step time holds no host cost) and the best fuses something. ``n_rounds``: the
    effort's, as the finalists' round."""
    best = best_record(study)
    plan = None if best is None or best.plan is None else Plan.from_json(best.plan)
    n_ops = len(study.user_attrs.get(StudyAttr.OPS) or [])
    if not timed_by_clock or best is None or plan is None or not group_ops(n_ops, plan.scopes):
        study.set_user_attr(StudyAttr.THROUGH_COMPILE, None)
        return
    result = worker.through_compile(ThroughCompileRequest(plan, n_rounds), rounds_timeout(timeout, n_rounds))
    if isinstance(result, WorkerFailure):
        log.warning("timing the best plan through sktune.apply failed: %s", result.reason)
        study.set_user_attr(StudyAttr.THROUGH_COMPILE, {"trial": best.number, "failed": result.reason})
        return
    shapes = study.user_attrs.get(StudyAttr.SHAPES) or {}
    study.set_user_attr(StudyAttr.THROUGH_COMPILE, {
        "trial": best.number, "shape": next(iter(shapes), None), "applied": result.applied.to_json(),
        "over_direct": result.over_direct.to_json(), "mismatches": result.mismatches,
        "compile_s": result.compile_s})


def through_compile_summary(study: optuna.Study, best_trial: int | None) -> dict[str, Any] | None:
    """The best plan as the export runs it, through ``sktune.apply``: its speedup over the eager
    model, and what the call adds to the plan called directly (paired, with its interval);
    None where it was not timed (an emulated or device-timed backend, a best that fuses
    nothing) or was timed for a best since replaced."""
    entry = study.user_attrs.get(StudyAttr.THROUGH_COMPILE)
    # An entry without over_direct (the record's first form, commits 868d846 to 1ce869a): not timed.
    if not entry or entry.get("trial") != best_trial or "over_direct" not in entry and not entry.get("failed"):
        return None
    if entry.get("failed"):
        return {"trial": entry["trial"], "failed": entry["failed"], "bitwise": None}
    applied, over = PairedTiming.from_json(entry["applied"]), PairedTiming.from_json(entry["over_direct"])
    direct_s = over.baseline_s
    return {"trial": entry["trial"], "shape": entry.get("shape"), "bitwise": entry["mismatches"] == 0,
            "mismatches": entry["mismatches"], "eager_s": applied.baseline_s, "step_s": applied.candidate_s,
            "speedup": applied.speedup, "speedup_ci": list(applied.speedup_ci), "direct_s": direct_s,
            "call_cost_s": over.candidate_s - direct_s,
            "call_cost_ci": [(over.ratio_ci[0] - 1) * direct_s, (over.ratio_ci[1] - 1) * direct_s],
            "compile_s": entry.get("compile_s"), "failed": None}


def through_compile_line(entry: dict[str, Any] | None) -> str | None:
    """One line for the CLI, the report and the export: the best through ``sktune.apply``."""
    if not entry:
        return None
    head = "through torch.compile (sktune.apply, as the export runs it)"
    if entry.get("failed"):
        return f"{head}: FAILED, so the exported call is untested ({entry['failed']})"
    lo, hi = entry["speedup_ci"]
    at = f" at shape {entry['shape']}" if entry.get("shape") else ""
    exact = ("" if entry["bitwise"] else
             f"; its outputs are NOT bitwise those of the unfused model ({entry['mismatches']} elements differ)")
    cost, (cost_lo, cost_hi) = entry["call_cost_s"] * 1e6, (v * 1e6 for v in entry["call_cost_ci"])
    unsure = " (not significant: the interval includes 1)" if lo <= 1.0 <= hi else ""
    slower = ("; so the exported call is SLOWER than the eager model here: the call's cost outweighs the plan's "
              "gain" if hi < 1.0 else "")
    return (f"{head}{at}: {entry['speedup']:.2f}× [{lo:.2f}, {hi:.2f}]{unsure} over the eager model; the call adds "
            f"{cost:.1f} µs [{cost_lo:.1f}, {cost_hi:.1f}] to the plan called directly, as the table times "
            f"it{slower}{exact}")


def through_compile_warns(entry: dict[str, Any] | None) -> bool:
    """Whether the best as the export runs it is a warning, not a figure: the call failed, its
    outputs are not bitwise, or it is measurably slower than the eager model (the table's
    verdict is the plan called directly)."""
    if not entry:
        return False
    return bool(entry.get("failed")) or entry.get("bitwise") is not True or entry["speedup_ci"][1] < 1.0
