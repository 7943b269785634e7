"""A repair from the culprit: after a mismatch is bisected to an op range, the same plan
with the option choice that guards that range's op types (``OptionSpec.guards``), queued
as the study's next trial. Any backend may declare guard choices; npu does (dcci).

On npu the repair disables the data-cache flush everywhere except around the gather-class
kernels of that range (``only:<types>``). A gather-class kernel in a SuperKernel without a flush can read stale scalars
(docs/superkernel.md, "Options that may change results"), while every other flush only
costs time. The bisection names the culprit's Ascend op types (``TrialRunner.bisect``,
``kernel_types``), so the fastest repair to try is to flush around those alone. The trial
goes through ``study.enqueue_trial`` like the starting points (``resume.py``), so resume and
many workers keep working; it is named ``dcci-from-culprit`` and says which trial it came
from and that trial's time ratio. The starting points wait one at a time
(``resume.StartingQueue``), so the repair runs next, not behind them.

Only the repair that matters is queued, not one per mismatch: none when an earlier repair
of a plan at least as fast is waiting, running or came out exact (the same gathers
flushed in a slower plan cannot win), and none for a plan whose choice guards less than the
repair's (npu: ``none``, no flush at all) that is no faster than the best exact trial
(flushing adds time: its repair cannot beat it).
"""

from __future__ import annotations

import logging
from typing import Any

import optuna
from optuna.trial import TrialState

from sktune.capabilities import OptionSpec
from sktune.space.search_space import SearchSpace
from sktune.pipe.protocol import BisectResult
from sktune.tuning.attrs import TrialAttr
from sktune.tuning.records import FIXED, feasible_ratios, interrupted, is_feasible, planned_params
from sktune.tuning.trial_writer import record_dcci_repair

log = logging.getLogger(__name__)

DCCI_FROM_CULPRIT = "dcci-from-culprit"  # the seed's anchor name


def guarded_option(space: SearchSpace, params: dict[str, Any]) -> OptionSpec | None:
    """The space's option with guard choices that ``params`` sets, or None."""
    return next((o for o in space.options if o.guards and o.name in params), None)


def dcci_seed(space: SearchSpace, params: dict[str, Any], found: BisectResult) -> dict[str, Any] | None:
    """``params`` with the guard choice that covers the culprit's guardable types, or None:
    no guarded option in the space, no types known, none guardable, or nothing new."""
    option = guarded_option(space, params)
    if option is None or not found.kernel_types:
        return None
    choice = option.guard_for(found.kernel_types)
    if choice is None or params[option.name] == choice:
        return None  # already guarded there: the mismatch has another cause
    return {**params, option.name: choice}


def _why_none(option: OptionSpec, params: dict[str, Any], found: BisectResult) -> str:
    """Why a bisected culprit gives ``option`` no repair choice (``dcci_seed`` gave None)."""
    if found.kernel_types == ():
        return "the culprit's ops launch no device kernel (they lined up with the baseline's): nothing to flush around"
    if not found.kernel_types:
        return ("the culprit's device op types are unknown: the baseline profile's kernels do not line up one to one "
                "with the graph's ops (an op launched several kernels, or none, where one was expected)")
    choice = option.guard_for(found.kernel_types)
    if choice is None:
        return f"no {option.name} choice guards its device op types ({', '.join(found.kernel_types)})"
    return f"{option.name}={choice} already guards its device op types: the mismatch has another cause"


def not_worth_it(study: optuna.Study, ratio: float, option: OptionSpec, choice: Any, repair: Any) -> str | None:
    """Why a repair (``option`` from ``choice`` to ``repair``) of an inexact plan timed at
    ``ratio`` is not worth a trial (module docstring), or None."""
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get(TrialAttr.ANCHOR) != DCCI_FROM_CULPRIT:
            continue
        source = (t.user_attrs.get(TrialAttr.SEEDED_FROM) or {}).get("ratio")
        if source is not None and source <= ratio and (t.state in (TrialState.WAITING, TrialState.RUNNING)
                                                       or is_feasible(t)):
            return f"trial {t.number} repairs a plan at least as fast ({source:.3f})"
    best = min(feasible_ratios(study), default=None)
    had, gets = option.guarded(choice), option.guarded(repair)
    adds_only = had is not None and gets is not None and had <= gets  # more guards, none dropped
    if adds_only and best is not None and best <= ratio:
        return f"flushes only add time, and the best exact trial is faster ({best:.3f})"
    return None


def enqueue_dcci_seed(trial: optuna.Trial, space: SearchSpace, found: BisectResult,
                      ratio: float | None = None) -> str | None:
    """Queue the culprit's ``only:`` variant of ``trial``'s plan, timed at ``ratio`` (None:
    unknown, queued whatever it is); its strategy, or None when there is none worth a trial
    (module docstring). Options set outside the sampled domain (a refinement's, fuse-all's)
    go with it."""
    params = dcci_seed(space, dict(trial.params), found)
    option = guarded_option(space, dict(trial.params))
    if option is not None and found.range is not None and (params is None or found.kernel_types is None):
        # Said on the trial (the report's failures): a culprit with no repair looked like a repair forgotten.
        record_dcci_repair(trial, f"none: {_why_none(option, dict(trial.params), found)}")
    if params is None or option is None or found.kernel_types is None:
        return None
    kernel_types = list(found.kernel_types)
    choice, repair = trial.params[option.name], params[option.name]
    if ratio is not None and (why_not := not_worth_it(trial.study, ratio, option, choice, repair)):
        log.info("trial %d: mismatch in %s; not repaired: %s", trial.number, kernel_types, why_not)
        record_dcci_repair(trial, f"none: {why_not}")
        return None
    record_dcci_repair(trial, f"queued with {option.name}={repair}")
    overrides = trial.user_attrs.get(TrialAttr.OPTION_OVERRIDES) or {}
    why = {"trial": trial.number, "range": None if found.range is None else list(found.range),
           "kernel_types": kernel_types,
           **({} if ratio is None else {"ratio": ratio})}
    attrs: dict[str, Any] = {TrialAttr.ANCHOR: DCCI_FROM_CULPRIT, TrialAttr.SEEDED_FROM: why}
    if overrides:
        attrs[TrialAttr.OPTION_OVERRIDES] = overrides
    if params in planned_params(trial.study):  # a repeat culprit: queued once (a stopped one again)
        return str(repair)
    trial.study.enqueue_trial(params, user_attrs=attrs)
    log.info("trial %d: mismatch in %s; queued it with %s=%s", trial.number, kernel_types, option.name, repair)
    return str(repair)


def requeue_stopped_seeds(study: optuna.Study) -> list[int]:
    """Queue again each repair whose run was stopped (``records.interrupted``); the numbers
    of the trials requeued. A repair is queued once, when its culprit is bisected, so a
    Ctrl-C during it lost it for good: on npu, where a trial is minutes of compile and the
    repair may be the fastest exact plan. A resumed study calls this (``resume.prepare``)."""
    requeued = []
    for t in study.get_trials(deepcopy=False):
        params = t.system_attrs.get(FIXED)
        if t.user_attrs.get(TrialAttr.ANCHOR) != DCCI_FROM_CULPRIT or not interrupted(t) or params is None:
            continue
        if params in planned_params(study):
            continue
        keep = (TrialAttr.ANCHOR, TrialAttr.SEEDED_FROM, TrialAttr.OPTION_OVERRIDES)
        study.enqueue_trial(params, user_attrs={k: t.user_attrs[k] for k in keep if k in t.user_attrs})
        requeued.append(t.number)
    return requeued


__all__ = ["DCCI_FROM_CULPRIT", "dcci_seed", "enqueue_dcci_seed", "guarded_option", "not_worth_it", "requeue_stopped_seeds"]
