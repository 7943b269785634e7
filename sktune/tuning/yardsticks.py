"""Per-shape yardsticks: each served shape's own candidates, measured at that shape only.

Issue 26, "honest regret". The search keeps its plans exact at every shape: the probe's
answers are merged over the shapes (``worker/probe.across_shapes``), so a plan that fuses
an op exact at bs1 but not at bs64 is hopeless to it and never measured. The regret
against the best trial exact at a shape (``shapes.best_alone``) then read +0.0 % on
decoder_serving, where a bs1-only study found a plan much faster at bs1.

A yardstick is a starting point built from one shape's probe answers only, in the space
those answers build (cuts around that shape's inexact ops only, as a study of that shape
alone would search), expressed in the study's space (``space/encode.py``; a plan it cannot
express is left out) and run through the one objective at that shape alone
(``TrialAttr.YARDSTICK`` names the shape). It never qualifies as the plan for every
shape: ``records.is_feasible`` is False for it (best, finalists, the sampler's local
search, patience, the pruner), and ``reuse.py`` neither gives nor takes its outcome.
``shapes.shapes_summary`` measures the regret against it.

Which: per shape, at most ``PER_SHAPE`` plans the study has not measured at that shape and
that are no starting point of the search itself: the shape's own version of the starting
point the study measured fastest (the study's evidence of which kind of plan wins here),
then its safe runs (anchor, then seed: the most it can fuse and stay exact there), then
the others in ``likely_best_first``'s order. A shape whose answers are the merged ones
gets none: the study's own trials are its candidates (each anchor runs at every shape).
Then, as a study of that shape alone refines its best (``refine.py``), the shape's fastest
exact yardstick runs once more with each costly option value that can change it (a C++
wrapper; whole regions within the effort's cap): on decode_attention at bs1 whole regions
made the safe-runs plan 0.635 → 0.388 of unfused, a C++ wrapper 0.761.

When: after the search and the refinement, before the finalists. A one-shape ratio read
by TPE (it reads every complete trial's value) would pull the search towards plans it must
reject; run last, a yardstick steers nothing. Each costs one compile and one timing at
one shape (a search trial costs that at every shape), at most ``PER_SHAPE`` + the costly
values per shape, outside ``--trials`` like the refinement's trials; ``phases_s["yardsticks"]``
says what they took. Like the refinement, they wait for the next run while a starting
point the budget did not reach is queued (Optuna's queue is first in, first out).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import TrialState

from sktune.plan import Plan
from sktune.space.encode import params_of
from sktune.space.search_space import SearchSpace
from sktune.pipe.workload import Workload
from sktune.tuning.objective import TrialFailed
from sktune.tuning.attrs import TrialAttr
from sktune.tuning.records import feasible_trials, is_yardstick
from sktune.tuning.refine import REFINED, costly_variants
from sktune.tuning.shapes import best_alone, outcomes_of
from sktune.tuning.space_setup import space_from_workload, starting_points

log = logging.getLogger(__name__)

# The study's best kind of starting point, the safe-runs anchor and seed: a single-shape study's
# best seed was one of them on decoder_serving and decode_attention (bs1, bs8, bs64/bs32).
PER_SHAPE = 3
SAFE_RUNS = ("safe-runs", "probe-safe-runs")  # anchor (search_space.py), seed (seeds.py): safe blocks fused


@dataclass(frozen=True)
class Yardstick:
    """One shape's candidate: run at ``shape`` only."""

    shape: str
    name: str  # the starting point's name @ the shape, as the trial's anchor
    params: dict[str, Any]
    probe_exact_at: tuple[str, ...]  # the shapes whose probe answers do not call the plan hopeless
    overrides: dict[str, Any]  # costly option values set outside the sampled domain (a refinement's)


def probe_exact_at(space: SearchSpace, workload: Workload, plan: Plan) -> tuple[str, ...]:
    """Where the probe expects ``plan`` to be bitwise: the shapes whose answers do not make it hopeless."""
    return tuple(name for name in workload.shapes
                 if workload.exact_at(name).hopeless(plan, workload.targets, space.exact_options,
                                                      space.fallback_option) is None)


def measured_at(study: optuna.Study, shape: str) -> set[Plan]:
    """Plans the study has an outcome for at ``shape`` (a yardstick there would repeat one)."""
    plans: set[Plan] = set()
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if TrialAttr.PLAN in t.user_attrs and shape in outcomes_of(t.user_attrs.get(TrialAttr.SHAPES)):
            plans.add(Plan.from_json(t.user_attrs[TrialAttr.PLAN]))
    return plans


def best_starting_point(study: optuna.Study) -> str | None:
    """The name of the study's fastest exact starting point (anchor or seed, not a refinement;
    a yardstick is never feasible), or None."""
    points = [t for t in feasible_trials(study)
              if t.user_attrs.get(TrialAttr.ANCHOR) and not str(t.user_attrs[TrialAttr.ANCHOR]).startswith(REFINED)]
    return min(points, key=lambda t: t.value).user_attrs[TrialAttr.ANCHOR] if points else None  # type: ignore


def pick(candidates: Sequence[tuple[str, dict[str, Any]]], preferred: str | None) -> list[tuple[str, dict[str, Any]]]:
    """``preferred``, then the first safe-runs anchor, the safe-runs seed, the rest: at most ``PER_SHAPE``."""
    anchor = [c for c in candidates if c[0].startswith(SAFE_RUNS[0] + "+") or c[0] == SAFE_RUNS[0]][:1]
    first = [c for c in candidates if c[0] == preferred] + anchor + [c for c in candidates if c[0] == SAFE_RUNS[1]]
    ordered = first + [c for c in candidates if c not in first]
    return [c for k, c in enumerate(ordered) if c not in ordered[:k]][:PER_SHAPE]


def shape_points(workload: Workload, shape: str) -> tuple[SearchSpace, list[tuple[str, dict[str, Any]]]]:
    """The space one shape's probe answers build, and its starting points there."""
    alone = workload.with_space_inputs(workload.op_profile_json(), workload.exactness_by_shape[shape])
    space = space_from_workload(alone)
    return space, starting_points(space, alone)


def yardsticks(space: SearchSpace, workload: Workload, study: optuna.Study | None = None) -> list[Yardstick]:
    """Each shape's yardsticks (module docstring), heaviest shape first; [] for one shape."""
    if len(workload.shapes) < 2 or not workload.exactness_by_shape:
        return []
    preferred = best_starting_point(study) if study is not None else None
    searched = {space.decode(params) for _, params in starting_points(space, workload)}
    out: list[Yardstick] = []
    for shape in (s for s in workload.shapes if s in workload.exactness_by_shape):
        exactness = workload.exact_at(shape)
        measured = measured_at(study, shape) if study is not None else set()
        own_space, points = shape_points(workload, shape)
        candidates = []
        for name, own_params in points:
            params = params_of(space, own_space.decode(own_params))  # None: this space cannot express it
            plan = None if params is None else space.decode(params)
            if plan is None or plan in searched or plan in measured or \
                    space.over_cap(plan) or exactness.hopeless(plan, workload.targets, space.exact_options,
                                                               space.fallback_option):
                continue
            candidates.append((name, params))
        out += [Yardstick(shape, f"{name}@{shape}", params, probe_exact_at(space, workload, space.decode(params)),
                          {}) for name, params in pick(candidates, preferred)]
    return out


def refinements(study: optuna.Study, space: SearchSpace, whole_region_cap: float | None) -> list[Yardstick]:
    """Per shape, its fastest exact yardstick once more with each costly option value that can
    change it (refine.py's rule for the best plan: a single-shape study refines its best so)."""
    out: list[Yardstick] = []
    if not any(o.costly_choices for o in space.options):
        return out
    tried = {(t.user_attrs[TrialAttr.YARDSTICK], json.dumps(t.user_attrs.get(TrialAttr.PLAN), sort_keys=True))
             for t in study.get_trials(deepcopy=False) if is_yardstick(t)}
    for shape, (number, _) in best_alone(study.get_trials(deepcopy=False), yardsticks=True).items():
        best = study.trials[number]
        for name, value, overrides, variant in costly_variants(study, space, best, whole_region_cap):
            if (shape, json.dumps(variant.to_json(), sort_keys=True)) not in tried:
                out.append(Yardstick(shape, f"{best.user_attrs[TrialAttr.ANCHOR]}+{name}={value}",
                                     dict(best.params), tuple(best.user_attrs.get(TrialAttr.PROBE_EXACT_AT) or ()),
                                     overrides))
    return out


def enqueue(study: optuna.Study, points: Sequence[Yardstick]) -> None:
    for y in points:
        log.info("yardstick for %s: %s", y.shape, y.name)
        study.enqueue_trial(y.params, user_attrs={
            TrialAttr.ANCHOR: y.name, TrialAttr.YARDSTICK: y.shape, TrialAttr.PROBE_EXACT_AT: list(y.probe_exact_at),
            **({TrialAttr.OPTION_OVERRIDES: y.overrides} if y.overrides else {})})


TrialCallback = Callable[[optuna.Study, optuna.trial.FrozenTrial], None]


def run_yardsticks(study: optuna.Study, space: SearchSpace, workload: Workload,
                   objective: Callable[[optuna.Trial], float], callbacks: list[TrialCallback] | None = None,
                   whole_region_cap: float | None = None) -> int:
    """Run each shape's yardsticks, then refine each shape's fastest exact one; how many
    ran (none while a starting point waits: module docstring)."""
    if study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        log.info("yardsticks left for the next run: a starting point is still queued")
        return 0
    ran = 0
    for points in (yardsticks(space, workload, study), None):
        points = refinements(study, space, whole_region_cap) if points is None else points
        enqueue(study, points)
        if points:
            study.optimize(objective, n_trials=len(points), catch=(TrialFailed,), callbacks=callbacks or [])
        ran += len(points)
    return ran
