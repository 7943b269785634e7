"""From the worker's description of a graph to the search: capabilities, the exactness
probe's answers, the search space, and the starting points enqueued first."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import optuna

from sktune.capabilities import Capabilities
from sktune.space.ascend_anchors import superkernel_anchors
from sktune.space.exactness import Exactness
from sktune.space.layout import MAX_CUTS
from sktune.space.plan import Plan
from sktune.space.search_space import SearchSpace, build_space, unique_by_plan
from sktune.space.seeds import profile_seeds
from sktune.tuning.records import StudyAttr

SPACE_INPUTS = (StudyAttr.OP_PROFILE, StudyAttr.EXACTNESS)  # measured at start; a resumed study reuses the first run's


def capabilities_from_description(description: dict[str, Any]) -> Capabilities:
    return Capabilities.from_json(description["capabilities"])


def exactness_from_description(description: dict[str, Any]) -> Exactness:
    return Exactness.from_probe(description.get("exactness") or {})


def targets_of(description: dict[str, Any]) -> list[str]:
    return [o["target"] for o in description["ops"]]


def space_from_description(description: dict[str, Any], stamp: bool = True, max_cuts: int = MAX_CUTS,
                           options: Sequence[str] | None = None) -> SearchSpace:
    """The search space; with probe answers, the probe's inexact op types replace the
    backend's static list of unsafe ones (the cuts go around what really breaks).

    ``max_cuts`` (flat layouts) and ``options`` (names to keep; None: all) narrow it, as the
    search benchmark does to measure every plan.
    """
    capabilities = capabilities_from_description(description).narrowed(None if options is None else set(options))
    exactness = exactness_from_description(description)
    profile = description.get("op_profile") or {}
    return build_space(
        targets_of(description), [o["module"] for o in description["ops"]], description["boundaries"],
        capabilities, unsafe=exactness.inexact if description.get("exactness") else None,
        max_cuts=max_cuts, span_us=profile.get("span_us"), stamp=stamp,
        kernelless=description.get("kernelless") or (),
    )


def starting_points(space: SearchSpace, description: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Anchors, then profile-guided seeds, each plan once."""
    seen: set[Plan] = set()
    if capabilities_from_description(description).anchor_set == "superkernel":
        named = superkernel_anchors(space, [o["module"] for o in description["ops"]])
    else:
        named = space.anchors()
    anchors = unique_by_plan(space, named, seen)
    profile = description.get("op_profile") or {}
    seeds = profile_seeds(space, targets_of(description), profile.get("span_us") or [],
                          profile.get("gap_us") or [], exactness_from_description(description))
    return anchors + unique_by_plan(space, seeds, seen)


def reuse_space_inputs(study: optuna.Study, description: dict[str, Any]) -> dict[str, Any]:
    """``description`` with the profile and probe answers the study was created with, if any.

    They shape the space (own first/last patterns, cuts around inexact ops); measuring
    them again on resume could shift the space under the trials already run.
    """
    stored = {k: study.user_attrs[k] for k in SPACE_INPUTS if k in study.user_attrs}
    return {**description, **stored}
