"""After the search: the best plan once more with each costly option value.

Some option values make a compile much slower without often making the model faster:
whole regions over 24 layers instead of stitched ones (``stitch_units``: one compile
per distinct layer, seconds instead of a minute), a C++ wrapper per region (a C++
compile against torch's headers each). The sampler never picks them
(``OptionSpec.costly_choices``); the winner alone pays for them, one trial per value,
queued like an anchor, verified and timed like any other, kept only if it is faster
(docs/measured.md "Compile cost"). Cheap candidates first, where that loses nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import optuna

from sktune.backends.inductor import STITCH_OPTION
from sktune.graph.grouping import regions
from sktune.graph.structure import stitched, unit_starts
from sktune.space.plan import Plan
from sktune.space.search_space import SearchSpace
from sktune.tuning.objective import TrialFailed
from sktune.tuning.records import TrialAttr, top_records

log = logging.getLogger(__name__)

REFINED = "best+"  # refinement trials are anchors named "best+<option>=<value>"


def changes_anything(plan: Plan, space: SearchSpace, option: str) -> bool:
    """Whether setting ``option`` can change how ``plan`` runs: it needs a region, and
    stitching needs a region that the backend would cut at a unit edge (``stitched``)."""
    spans = regions(space.n_ops, plan.scopes)
    if option != STITCH_OPTION:
        return bool(spans)
    return stitched(spans, unit_starts(space.repeats, space.n_ops)) != spans


def next_refinement(study: optuna.Study, space: SearchSpace) -> tuple[str, dict[str, Any], dict[str, Any]] | None:
    """(name, params, option overrides) of the next untried costly variant of the search's
    best exact plan, or None. One costly value at a time, never two together: a C++
    wrapper around a whole 3,000-op region takes minutes to compile."""
    if study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
        return None  # starting points the budget did not reach would run first (Optuna's queue is FIFO)
    searched = [r for r in top_records(study, len(study.trials)) if not str(r.anchor or "").startswith(REFINED)]
    if not searched:
        return None
    best = study.trials[searched[0].number]
    plan = Plan.from_json(best.user_attrs[TrialAttr.PLAN])
    tried = {json_key(t.user_attrs.get(TrialAttr.PLAN)) for t in study.trials}
    for option in space.options:
        for value in option.costly_choices:
            if plan.option_dict.get(option.name) == value or not changes_anything(plan, space, option.name):
                continue
            overrides = {**(best.user_attrs.get(TrialAttr.OPTION_OVERRIDES) or {}), option.name: value}
            variant = space.with_options(plan, overrides)
            if json_key(variant.to_json()) not in tried:
                return f"{REFINED}{option.name}={value}", dict(best.params), overrides
    return None


def json_key(plan_json: dict[str, Any] | None) -> str | None:
    return None if plan_json is None else Plan.from_json(plan_json).dumps()


def refine_best(study: optuna.Study, space: SearchSpace, objective: Callable[[optuna.Trial], float],
                callbacks: list[Callable[[optuna.Study, optuna.trial.FrozenTrial], None]] | None = None) -> None:
    """Try the best plan with each costly option value, one trial each (module docstring)."""
    while (refinement := next_refinement(study, space)) is not None:
        name, params, overrides = refinement
        log.info("trying the best plan with %s", name.removeprefix(REFINED))
        study.enqueue_trial(params, user_attrs={TrialAttr.ANCHOR: name, TrialAttr.OPTION_OVERRIDES: overrides})
        study.optimize(objective, n_trials=1, catch=(TrialFailed,), callbacks=callbacks or [])
        if study.trials[-1].state == optuna.trial.TrialState.WAITING:  # it did not run: do not loop
            return
