"""From the worker's workload to the search: the search space and the starting points
enqueued first, built from the backend's capabilities and the exactness probe's answers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import optuna

from sktune.space.ascend_anchors import superkernel_anchors
from sktune.space.exactness import Exactness
from sktune.space.layout import MAX_CUTS
from sktune.plan import Plan
from sktune.space.search_space import UNFUSED, SearchSpace, build_space, unique_by_plan
from sktune.space.seeds import profile_seeds
from sktune.tuning.attrs import StudyAttr
from sktune.pipe.workload import Workload

def space_from_workload(workload: Workload, stamp: bool = True, max_cuts: int = MAX_CUTS,
                        options: Sequence[str] | None = None) -> SearchSpace:
    """The search space; with probe answers, the probe's inexact op types replace the
    backend's static list of unsafe ones (the cuts go around what really breaks).

    ``max_cuts`` (flat layouts) and ``options`` (names to keep; None: all) narrow it, as the
    search benchmark does to measure every plan.
    """
    capabilities = workload.capabilities.narrowed(None if options is None else set(options))
    profile = workload.op_profile
    return build_space(
        workload.targets, workload.modules, list(workload.boundaries),
        capabilities, unsafe=workload.exact().inexact if workload.exactness else None,
        max_cuts=max_cuts, span_us=None if profile is None else list(profile.span_us), stamp=stamp,
        kernelless=workload.kernelless,
    )


def starting_points(space: SearchSpace, workload: Workload,
                    exactness: Exactness | None = None) -> list[tuple[str, dict[str, Any]]]:
    """Anchors, then profile-guided seeds, each plan once, built from ``exactness`` (None: the
    probe's answers merged over the shapes; one shape's answers: that shape's yardsticks)."""
    exactness = workload.exact() if exactness is None else exactness
    seen: set[Plan] = set()
    if workload.capabilities.anchor_set == "superkernel":
        named = superkernel_anchors(space, workload.modules)
    else:
        named = space.anchors()
    anchors = unique_by_plan(space, named, seen)
    profile = workload.op_profile
    seeds = profile_seeds(space, workload.targets, [] if profile is None else list(profile.span_us),
                          [] if profile is None else list(profile.gap_us), exactness)
    return likely_best_first(space, workload, anchors + unique_by_plan(space, seeds, seen), exactness)


def likely_best_first(space: SearchSpace, workload: Workload, points: list[tuple[str, dict[str, Any]]],
                      exactness: Exactness | None = None) -> list[tuple[str, dict[str, Any]]]:
    """The starting points that can be the best exact plan, in their order; then the
    unfused plan; the anchors the exactness probe already calls inexact last.

    Issue 24: where the best plan is a starting point, the search must reach it in 3
    trials. An inexact anchor (fuse-all, kept as the yardstick of the gain) is never the
    best exact plan, yet it ran second: on decoder_block the best seed came fifth. The
    unfused plan is never the best fused one either; the finalists' round re-measures it
    as a trial, so a search that ends before it ran runs it then (loop.run_unfused_if_missing).
    """
    exactness = workload.exact() if exactness is None else exactness

    def rank(point: tuple[str, dict[str, Any]]) -> int:
        name, params = point
        if name == UNFUSED:  # after those that can win: the finalists' round makes sure it runs
            return 1
        try:
            plan = space.decode(params)
        except (KeyError, ValueError):  # a partial parameter set: the objective completes it
            return 0
        return 2 if exactness.hopeless(plan, workload.targets, space.exact_options, space.fallback_option) else 0

    return sorted(points, key=rank)  # stable: each group keeps its order


def reuse_space_inputs(study: optuna.Study, workload: Workload) -> Workload:
    """``workload`` with the profile and probe answers the study was created with, if any.

    They shape the space (own first/last patterns, cuts around inexact ops): a resumed run,
    and a worker started with the study's creator, search the space they gave. Their own
    measurements would shift it by noise, so their workers take none where the study holds
    them (``creator.measures_space_inputs``).
    """
    attrs = study.user_attrs
    return workload.with_space_inputs(
        attrs[StudyAttr.OP_PROFILE] if StudyAttr.OP_PROFILE in attrs else workload.op_profile_json(),
        attrs[StudyAttr.EXACTNESS] if StudyAttr.EXACTNESS in attrs else workload.exactness,
        attrs.get(StudyAttr.EXACTNESS_BY_SHAPE))  # absent (one shape, or an older study): the worker's own
