"""After the search: the best plan once more in its expensive-to-compile form.

The search compiles regions that span repeated layers layer by layer (``stitch_units``:
one compile per distinct layer, seconds instead of a minute on a deep model). A stitched
region calls each layer separately, which costs a little at run time. So the cheap form
is searched and the winner alone pays for the whole-region compile: one more trial,
queued like an anchor, timed and verified like any other, and kept only if it is faster
(docs/measured.md "Compile cost").
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import optuna

from sktune.graph.grouping import regions
from sktune.space.plan import Plan
from sktune.space.search_space import SearchSpace
from sktune.tuning.objective import TrialFailed
from sktune.tuning.records import TrialAttr, top_records

log = logging.getLogger(__name__)

STITCH_OPTION = "stitch_units"  # the Inductor backend's option (backends/inductor.py)
UNSTITCHED = "best-unstitched"  # the refinement trial's anchor name


def stitches(plan: Plan, space: SearchSpace) -> bool:
    """Whether ``plan`` has a stitched region that spans a repeated unit's start."""
    if not plan.option_dict.get(STITCH_OPTION) or space.repeats is None:
        return False
    starts = [first for first, _ in space.repeats.units]
    return any(first < s <= last for first, last in regions(space.n_ops, plan.scopes) for s in starts)


def unstitched_params(study: optuna.Study, space: SearchSpace) -> dict[str, Any] | None:
    """The best exact trial's parameters with stitching off, when that is a different,
    untried plan; else None."""
    top = top_records(study, 1)
    if not top:
        return None
    best = study.trials[top[0].number]
    if STITCH_OPTION not in best.params or not stitches(space.decode(best.params), space):
        return None
    params = {**best.params, STITCH_OPTION: False}
    plan = space.decode(params)
    if any(t.user_attrs.get(TrialAttr.PLAN) == plan.to_json() for t in study.trials):
        return None
    return params


def refine_best(study: optuna.Study, space: SearchSpace, objective: Callable[[optuna.Trial], float],
                callbacks: list[Callable[[optuna.Study, optuna.trial.FrozenTrial], None]] | None = None) -> None:
    """Run the best plan unstitched once (see the module docstring); nothing when not needed."""
    params = unstitched_params(study, space)
    if params is None:
        return
    log.info("compiling the best plan's regions whole, once")
    study.enqueue_trial(params, user_attrs={TrialAttr.ANCHOR: UNSTITCHED})
    study.optimize(objective, n_trials=1, catch=(TrialFailed,), callbacks=callbacks or [])
