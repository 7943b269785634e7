"""The verify-only shapes on the tuner's side: each finalist verified there before it can be
named best, what was verified recorded in the study, and read back for the summary.

A serving stack captures many more shapes than are worth tuning at (vLLM: batch 1, 2, 4, then
multiples of 8). The model file names them in ``verify_shapes()``: never timed, never tuned
at, but the plan named best must be bitwise at each (``finalists.py`` asks ``verify_plan``
before naming one). The study stores the names (``StudyAttr.VERIFY_SHAPES``) and, per
verified trial, shape -> bitwise / mismatches / reason (``StudyAttr.VERIFIED``).
"""

from __future__ import annotations

import logging
from datetime import datetime
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import optuna

from sktune.backends import REGISTRY, backend_class
from sktune.pipe.protocol import WorkerFailure
from sktune.pipe.verify_shapes import VerifyOnlyShapes, VerifyRequest, VerifyResult, plan_decided, turns_down
from sktune.plan import Plan
from sktune.tuning.attrs import StudyAttr, last_change_at

if TYPE_CHECKING:  # the summary reads this module without starting any worker
    from sktune.tuning.supervisor import SupervisedWorker

log = logging.getLogger(__name__)


def verify_shape_names(study: optuna.Study, worker: SupervisedWorker, timeout: float) -> tuple[str, ...]:
    """The model's verify-only shapes, asked of the worker once and stored in the study.

    A worker that cannot verify (a test double answering only the timing round) declares none."""
    ask = getattr(worker, "verify_shapes", None)
    answer = ask(timeout) if ask is not None else None
    if isinstance(answer, WorkerFailure):
        log.warning("asking the worker for the verify-only shapes failed: %s", answer.reason)
    names = answer.names if isinstance(answer, VerifyOnlyShapes) else ()
    record_verify_shapes(study, names)
    return names


def record_verify_shapes(study: optuna.Study, names: Sequence[str]) -> None:
    """``StudyAttr.VERIFY_SHAPES``: at preparation (resume.py) and again as the finalists' worker
    declares them; a model that dropped them says so too (an empty list)."""
    known = study.user_attrs.get(StudyAttr.VERIFY_SHAPES)
    if (names or known is not None) and known != list(names):
        study.set_user_attr(StudyAttr.VERIFY_SHAPES, list(names))


def verify_plan(worker: SupervisedWorker, plan: Plan, names: Sequence[str], timeout: float,
                known: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``plan`` verified at each verify-only shape in order: shape -> outcome as JSON. It stops at
    the first shape where it is not bitwise (the plan is out then; the rest would cost compiles).
    ``known``: this plan's outcomes from an earlier round or run, since the study's last change;
    those the plan decided (bitwise or not) stand without a compile, which costs minutes on a
    device; a worker's earlier time-out or crash is asked again."""
    outcomes: dict[str, Any] = {}
    for name in names:
        earlier = (known or {}).get(name)
        if earlier is not None and (earlier.get("bitwise") or plan_decided(earlier)):
            outcomes[name] = earlier
        else:
            # The first plan verified at a shape also pays its capture and references: twice a trial's time.
            result = worker.verify(VerifyRequest(plan, name), 2 * timeout)
            if isinstance(result, WorkerFailure):  # a compile error or a hang there: not verified
                result = VerifyResult(name, 0, f"the worker gave no answer ({result.reason})")
            outcomes[name] = {k: v for k, v in result.to_json().items() if k != "shape"}
            outcomes[name]["at"] = datetime.now().isoformat(timespec="seconds")  # which change it follows
        if not outcomes[name].get("bitwise"):
            break
    return outcomes


def all_bitwise(outcomes: dict[str, Any], names: Sequence[str]) -> bool:
    return all(outcomes.get(name, {}).get("bitwise") for name in names)


def first_failure(outcomes: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The first shape a plan failed at, one the plan decided first (a mismatch before a time-out)."""
    failed = [(name, o) for name, o in outcomes.items() if not o["bitwise"]]
    return next((f for f in failed if plan_decided(f[1])), failed[0] if failed else None)


def describe_failure(number: int, outcomes: dict[str, Any]) -> dict[str, Any]:
    """A finalist passed over: its trial, the first shape it failed at, the mismatch count or
    the reason, whether that failure is the plan's own doing (``plan_decided``), and ``why`` in
    words (``trial #5 is not bitwise at verify-only shape 'bs4' (...)``)."""
    failed = first_failure(outcomes)
    assert failed is not None
    name, o = failed
    why = o["reason"] or mismatch_words(o["mismatches"])
    found = "is not bitwise" if plan_decided(o) else "could not be verified"  # a crash or time-out may pass later
    return {"trial": number, "shape": name, "mismatches": o["mismatches"], "reason": o["reason"],
            "plan_decided": plan_decided(o), "why": f"trial #{number} {found} at verify-only shape {name!r} ({why})"}


def record(study: optuna.Study, verified: dict[int, dict[str, Any]]) -> None:
    """What was verified, per trial (``StudyAttr.VERIFIED``), added to what earlier rounds
    verified: a plan turned down there stays turned down (records.verify_turned_down)."""
    merged = {**verified_outcomes(study), **verified}
    study.set_user_attr(StudyAttr.VERIFIED, [{"trial": n, "shapes": o} for n, o in sorted(merged.items())])


def verify_summary(study: optuna.Study, best_trial: int | None) -> dict[str, Any] | None:
    """The summary's ``verify_shapes``: the declared verify-only shapes, the best plan's outcome
    at each (None: not verified, e.g. no finalists' round), the finalists rejected there and the
    seconds all verification took. None: the model declares none."""
    names = study.user_attrs.get(StudyAttr.VERIFY_SHAPES) or []
    if not names and not study.user_attrs.get(StudyAttr.LEFT_OUT_SHAPES):  # none declared, none left out
        return None
    verified = verified_outcomes(study)
    best = verified.get(best_trial) if best_trial is not None else None
    confirm = study.user_attrs.get(StudyAttr.CONFIRM_BEST) or {}
    return {
        "shapes": list(names),
        "left_out": list(study.user_attrs.get(StudyAttr.LEFT_OUT_SHAPES) or []),  # by --shapes: verified only
        "best": best,
        "verified_bitwise": best is not None and all_bitwise(best, names),
        "rejected": confirm.get("verify_rejected") or [],
        "seconds": sum(o.get("seconds") or 0.0 for shapes in verified.values() for o in shapes.values()),
    }


def verified_outcomes(study: optuna.Study) -> dict[int, dict[str, Any]]:
    """Each verified trial's outcomes: shape -> {bitwise, mismatches, reason, seconds}."""
    return {v["trial"]: v["shapes"] for v in study.user_attrs.get(StudyAttr.VERIFIED) or []}


def not_bitwise_at(study: optuna.Study) -> dict[int, list[str]]:
    """Each verified trial's verify-only shapes where its plan was found not bitwise, by its own
    doing (``plan_decided``: [] where there is none); one read of the study's record, for a
    summary's every plan."""
    changed_at = last_change_at(study.user_attrs)  # found before a resume across a change: it may pass now
    return {number: [name for name, o in shapes.items() if turns_down(o, changed_at)]
            for number, shapes in verified_outcomes(study).items()}


def not_verified_at(study: optuna.Study) -> dict[int, list[str]]:
    """Each verified trial's verify-only shapes where its worker gave no answer (a time-out, a
    crash: not the plan's doing, so not "not bitwise"); [] where there is none."""
    return {number: [name for name, o in shapes.items() if not o.get("bitwise") and not plan_decided(o)]
            for number, shapes in verified_outcomes(study).items()}


def declared_shapes(attrs: dict[str, Any]) -> tuple[int, int]:
    """How many shapes a study's model declares: tuned (1 without ``input_shapes()``) and verify-only."""
    return len(attrs.get(StudyAttr.SHAPES) or {}) or 1, len(attrs.get(StudyAttr.VERIFY_SHAPES) or [])


def capture_limit_warning(study: optuna.Study) -> str | None:
    """One line when the tuned plus verify-only shapes exceed the backend's ``capture_limit`` (npu: npugraph_ex's)."""
    backend = study.user_attrs.get(StudyAttr.BACKEND)
    limit = backend_class(backend).capture_limit if backend in REGISTRY else None
    if limit is None:
        return None
    tuned, verify = declared_shapes(study.user_attrs)
    if tuned + verify <= limit:
        return None
    return (f"{tuned + verify} shapes declared ({tuned} tuned + {verify} verify-only), more than npugraph_ex's "
            f"capture_limit ({limit} by default): past it a graph runs eager, without SuperKernel; set "
            f"capture_limit to at least {tuned + verify} in the torch.compile options, and Dynamo's recompile "
            "limit (torch._dynamo.config.cache_size_limit, 8 by default) as high, or the next shape fails "
            "(the exported snippet raises both)")


def round_rejections(study: optuna.Study) -> list[dict[str, Any]]:
    """The summary's ``round_rejected``: each plan a finalists' round found not bitwise as it
    compiled it, since the study's last change (``records.round_turned_down``), with why."""
    from sktune.tuning.records import round_turned_down

    live = round_turned_down(study.user_attrs)
    return [{**r, "why": f"trial #{r['trial']} is not bitwise as the finalists' round compiled it "
                         f"({r['mismatches']} output mismatch(es) where tuned; its trial was bitwise)"}
            for r in study.user_attrs.get(StudyAttr.ROUND_REJECTED) or [] if r["trial"] in live]


def round_rejected_line(data: dict[str, Any]) -> str | None:
    """The finalists a round found not bitwise as it compiled them, where tuned (a summary's
    ``round_rejected``: their trials were bitwise, on the model before a change), or None."""
    rejected = data.get("round_rejected") or []
    return "passed over in the finalists' round: " + "; ".join(r["why"] for r in rejected) if rejected else None


def verify_shapes_line(verify: dict[str, Any]) -> str:
    """The CLI's one line on the verify-only shapes (the summary's ``verify_shapes``), and on
    the input_shapes() that --shapes left out."""
    names, best = verify["shapes"], verify["best"]
    left_out = verify.get("left_out") or []
    other_ops = [n for n in left_out if n not in names]  # start-up found other ops there: never verified
    apart = (f"{', '.join(other_ops)}: left out by --shapes and NOT verified (its graph runs other ops)"
             if other_ops else "")
    if not names:
        return apart
    verified_there = [n for n in left_out if n in names]
    apart = (f"; {', '.join(verified_there)}: input_shapes() left out by --shapes" if verified_there else "") + (
        f"; {apart}" if apart else "")
    rejected = "".join(f"; passed over: {r['why']}" for r in verify["rejected"])
    if best is None:
        return f"verify-only shapes {', '.join(names)}{apart}: the best plan was not verified there{rejected}"
    failed = [n for n in names if n in best and not best[n].get("bitwise")]
    unchecked = [n for n in names if n not in best]  # verification stops at the first failure
    why = "; ".join(f"{n}: {_first_line(best[n].get('reason')) or mismatch_words(best[n].get('mismatches'))}"
                    for n in failed)
    passed = [n for n in names if n in best and best[n].get("bitwise")]
    listed = f"{', '.join(unchecked[:5])}{', …' if len(unchecked) > 5 else ''}"
    if failed:
        verdict = f"NOT bitwise at {', '.join(failed)} ({why})" + (f"; not verified after it: {listed}" if unchecked
                                                                 else "")
    elif unchecked:  # the declared list grew since it was verified
        verdict = (f"bitwise at {', '.join(passed)}; not verified at {listed}" if passed
                   else "not verified at any")
    else:
        verdict = "bitwise at all"
    return (f"verify-only shapes ({len(names)}: {', '.join(names)}; not timed{apart}): best plan {verdict}"
            f"{rejected}; verification took {verify['seconds']:.1f} s")


def fuse_all_bitwise(fuse_all: dict[str, Any]) -> str:
    """The summary's ``fuse_all`` bitwise cell: yes, no, or where it was not (a verify-only shape)."""
    if fuse_all["bitwise"]:
        return "yes where tuned (not verified at the verify-only shapes)" if fuse_all.get("not_verified_at") else "yes"
    at = fuse_all.get("not_bitwise_at")
    return f"no (at verify-only {', '.join(at)})" if at else "no"


def mismatch_words(count: int | None) -> str:
    """A mismatch count in words: outputs that differ, summed over the input sets verified."""
    return f"{count or 0} output mismatch(es) over its input sets"


def _first_line(reason: str | None, limit: int = 160) -> str | None:
    """A reason's first line, cut to ``limit`` characters (a compiler's message runs to pages)."""
    if not reason:
        return None
    line = reason.strip().splitlines()[0]
    return line if len(line) <= limit else line[:limit - 1] + "…"
