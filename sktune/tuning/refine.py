"""After the search: the best plan once more with each costly option value.

Some option values make a compile much slower without often making the model faster:
whole regions over 24 layers instead of stitched ones (``stitch_units``: one compile
per distinct layer, seconds instead of a minute), a C++ wrapper per region (a C++
compile against torch's headers each). The sampler never picks them
(``OptionSpec.costly_choices``); the winner alone pays for them, one trial per value,
queued like an anchor, verified and timed like any other, kept only if it is faster
(docs/measured.md "Compile cost"). Cheap candidates first, where that loses nothing.

Whole regions are left out where their compile would cost more than a few trials (the
effort's ``whole_region_cap``, priced by the fuse-all yardstick's own compile): on a 24-layer
stack one costs 1-1.5 minutes and gave the best plan in none of four studies (the stitched
plan with a C++ wrapper was faster each time).
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Iterator
from typing import Any

import optuna

from sktune.backends import backend_class
from sktune.graph.grouping import regions
from sktune.graph.structure import unit_starts
from sktune.plan import Plan
from sktune.space.search_space import SearchSpace
from sktune.tuning.objective import TrialFailed
from sktune.tuning.attrs import StudyAttr, TrialAttr
from sktune.tuning.records import FUSE_ALL, REFINED, anchor_record, top_records

log = logging.getLogger(__name__)



def changes_anything(study: optuna.Study, plan: Plan, space: SearchSpace, option: str) -> bool:
    """Whether setting ``option`` can change how ``plan`` runs, as the study's backend says
    (``Backend.option_changes_plan``: e.g. stitching needs a region it would cut at a unit edge)."""
    backend = backend_class(study.user_attrs[StudyAttr.BACKEND])
    return backend.option_changes_plan(option, regions(space.n_ops, plan.scopes),
                                       unit_starts(space.repeats, space.n_ops),
                                       set(study.user_attrs.get(StudyAttr.BOUNDARIES) or ()))


def next_refinement(study: optuna.Study, space: SearchSpace,
                    whole_region_cap: float | None = None) -> tuple[str, dict[str, Any], dict[str, Any], int] | None:
    """(name, params, option overrides, the trial refined) of the next untried costly variant of the search's
    best exact plan, or None. One costly value at a time, never two together: a C++
    wrapper around a whole 3,000-op region takes minutes to compile. Whole regions are
    left out where they would cost more than ``whole_region_cap`` trials (``whole_region_cost``)."""
    if study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
        return None  # starting points the budget did not reach would run first (Optuna's queue is FIFO)
    searched = [r for r in top_records(study, len(study.trials)) if not str(r.anchor or "").startswith(REFINED)]
    if not searched:
        return None
    best = study.trials[searched[0].number]
    tried = {json_key(t.user_attrs.get(TrialAttr.PLAN)) for t in study.trials}
    for name, value, overrides, variant in costly_variants(study, space, best, whole_region_cap):
        if json_key(variant.to_json()) not in tried:
            return f"{REFINED}{name}={value}", dict(best.params), overrides, best.number
    return None


def costly_variants(study: optuna.Study, space: SearchSpace, best: optuna.trial.FrozenTrial,
                    whole_region_cap: float | None) -> Iterator[tuple[str, Any, dict[str, Any], Plan]]:
    """(option, value, option overrides, plan) for each costly option value that can change
    ``best``'s plan, one at a time; whole regions only where they cost at most
    ``whole_region_cap`` trials. The refinement's rule, also each shape's yardstick's."""
    plan = Plan.from_json(best.user_attrs[TrialAttr.PLAN])
    whole_regions = backend_class(study.user_attrs[StudyAttr.BACKEND]).whole_region_option
    for option in space.options:
        for value in option.costly_choices:
            if plan.option_dict.get(option.name) == value or not changes_anything(study, plan, space, option.name):
                continue
            if option.name == whole_regions and too_costly(study, whole_region_cap) is not None:
                continue
            overrides = {**(best.user_attrs.get(TrialAttr.OPTION_OVERRIDES) or {}), option.name: value}
            yield option.name, value, overrides, space.with_options(plan, overrides)


def whole_region_cost(study: optuna.Study) -> dict[str, float] | None:
    """What compiling the whole model as one region costs, in trials: the fuse-all
    yardstick's compile (one region over everything, measured in this study, by the
    compile helper if it compiled it; with fallbacks it costs more, 2-4x on a 24-layer
    stack) against the median compile of the other trials. None before both are known."""
    yardstick = anchor_record(study, FUSE_ALL)
    attrs = study.trials[yardstick.number].user_attrs if yardstick else {}
    observed = attrs.get(TrialAttr.OBSERVED) or {}
    whole = max(attrs.get(TrialAttr.COMPILE_S) or 0.0, observed.get("helper_compile_s") or 0.0)
    others = [t.user_attrs[TrialAttr.COMPILE_S] for t in study.get_trials(deepcopy=False)
              if t.user_attrs.get(TrialAttr.COMPILE_S) and t.user_attrs.get(TrialAttr.ANCHOR) != FUSE_ALL]
    if not whole or not others:
        return None
    median = statistics.median(others)
    return {"whole_compile_s": whole, "median_trial_compile_s": median, "trials": whole / median}


def too_costly(study: optuna.Study, cap: float | None) -> dict[str, float] | None:
    """``whole_region_cost`` with the cap, if the whole-region refinement would cost more
    than ``cap`` trials; None if not (or no cap)."""
    cost = whole_region_cost(study) if cap is not None else None
    return {**cost, "cap_trials": cap} if cost is not None and cost["trials"] > cap else None


def json_key(plan_json: dict[str, Any] | None) -> str | None:
    return None if plan_json is None else Plan.from_json(plan_json).dumps()


def refine_best(study: optuna.Study, space: SearchSpace, objective: Callable[[optuna.Trial], float],
                callbacks: list[Callable[[optuna.Study, optuna.trial.FrozenTrial], None]] | None = None,
                whole_region_cap: float | None = None) -> None:
    """Try the best plan with each costly option value, one trial each (module docstring).
    A whole-region refinement left out for its cost is noted in the study."""
    best = top_records(study, 1)
    whole_regions = backend_class(study.user_attrs[StudyAttr.BACKEND]).whole_region_option
    stitched_best = bool(best) and whole_regions is not None and changes_anything(
        study, Plan.from_json(best[0].plan), space, whole_regions)
    if stitched_best and (skipped := too_costly(study, whole_region_cap)) is not None:
        study.set_user_attr(StudyAttr.WHOLE_REGION_SKIPPED, skipped)
    while (refinement := next_refinement(study, space, whole_region_cap)) is not None:
        name, params, overrides, refined = refinement
        log.info("trying the best plan (trial #%d) with %s", refined, name.removeprefix(REFINED))
        study.enqueue_trial(params, user_attrs={TrialAttr.ANCHOR: name, TrialAttr.OPTION_OVERRIDES: overrides,
                                                TrialAttr.REFINED_FROM: refined})
        study.optimize(objective, n_trials=1, catch=(TrialFailed,), callbacks=callbacks or [])
        if study.trials[-1].state == optuna.trial.TrialState.WAITING:  # it did not run: do not loop
            return
