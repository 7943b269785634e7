"""Per-shape yardsticks: each served shape's own candidates, measured at that shape only.

Issue 26, "honest regret". The search keeps its plans exact at every shape: the probe's
answers are merged over the shapes (``worker/probe.across_shapes``), so a plan that fuses
an op exact at bs1 but not at bs64 is hopeless to it and never measured. The regret
against the best trial exact at a shape (``shapes.best_alone``) then read +0.0 % on
decoder_serving, where a bs1-only study found a plan much faster at bs1.

A yardstick is a starting point built from one shape's probe answers only
(``space_setup.starting_points`` with ``Workload.exact_at``), run through the one objective
at that shape alone (``TrialAttr.YARDSTICK`` names the shape). It never qualifies as the
plan for every shape: ``records.is_feasible`` is False for it (best, finalists, the
sampler's local search, patience, the pruner), and ``reuse.py`` neither gives nor takes
its outcome. ``shapes.shapes_summary`` measures the regret against it.

Which: per shape, at most ``PER_SHAPE`` plans the study has not measured at that shape and
that are no starting point of the search itself: the shape's own version of the starting
point the study measured fastest (the study's evidence of which kind of plan wins here),
then its safe-runs seed (the most it can fuse and stay exact there), then the others in
``likely_best_first``'s order. A shape whose answers are the merged ones gets none: the
study's own trials are its candidates. The anchors need none: each runs at every shape.
Each takes the costly option values the best plan was refined with (``refine.py``), so
a yardstick and the plan it judges are compiled alike.

When: after the search and the refinement, before the finalists. A one-shape ratio read
by TPE (it reads every complete trial's value) would pull the search towards plans it must
reject; run last, a yardstick steers nothing. Each costs one compile and one timing at
one shape (a search trial costs that at every shape), outside ``--trials`` like the
refinement's trials; ``phases_s["yardsticks"]`` says what they took. Like the refinement,
they wait for the next run while a starting point the budget did not reach is queued
(Optuna's queue is first in, first out).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import TrialState

from sktune.plan import Plan
from sktune.space.search_space import SearchSpace
from sktune.pipe.workload import Workload
from sktune.tuning.objective import TrialFailed
from sktune.tuning.records import TrialAttr, feasible_trials, top_records
from sktune.tuning.refine import REFINED
from sktune.tuning.shapes import outcomes_of
from sktune.tuning.space_setup import starting_points

log = logging.getLogger(__name__)

PER_SHAPE = 2  # the study's best kind of starting point and the safe-runs seed: two one-shape compiles
SAFE_RUNS = "probe-safe-runs"  # space/seeds.py: every block free of the probe's inexact ops fused


@dataclass(frozen=True)
class Yardstick:
    """One shape's candidate: run at ``shape`` only."""

    shape: str
    name: str  # the starting point's name @ the shape, as the trial's anchor
    params: dict[str, Any]
    probe_exact_at: tuple[str, ...]  # the shapes whose probe answers do not call the plan hopeless
    overrides: dict[str, Any]  # the costly option values the best plan was refined with


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


def best_overrides(study: optuna.Study) -> dict[str, Any]:
    """The option values the best exact plan took outside the sampled domain (refine.py), or {}."""
    best = top_records(study, 1)
    return (study.trials[best[0].number].user_attrs.get(TrialAttr.OPTION_OVERRIDES) or {}) if best else {}


def pick(candidates: Sequence[tuple[str, dict[str, Any]]], preferred: str | None) -> list[tuple[str, dict[str, Any]]]:
    """``preferred``, then the safe-runs seed, then the rest in order: at most ``PER_SHAPE``."""
    first = [c for c in candidates if c[0] == preferred] + [c for c in candidates if c[0].startswith(SAFE_RUNS)]
    ordered = first + [c for c in candidates if c not in first]
    return [c for k, c in enumerate(ordered) if c not in ordered[:k]][:PER_SHAPE]


def yardsticks(space: SearchSpace, workload: Workload, study: optuna.Study | None = None) -> list[Yardstick]:
    """Each shape's yardsticks (module docstring), heaviest shape first; [] for one shape."""
    if len(workload.shapes) < 2 or not workload.exactness_by_shape:
        return []
    preferred = best_starting_point(study) if study is not None else None
    overrides = best_overrides(study) if study is not None else {}
    searched = {space.decode(params) for _, params in starting_points(space, workload)}
    out: list[Yardstick] = []
    for shape in workload.shapes:
        exactness = workload.exact_at(shape)
        measured = measured_at(study, shape) if study is not None else set()
        candidates = []
        for name, params in starting_points(space, workload, exactness):
            plan = space.decode(params)
            if plan in searched or space.with_options(plan, overrides) in measured or space.over_cap(plan) or \
                    exactness.hopeless(plan, workload.targets, space.exact_options, space.fallback_option):
                continue
            candidates.append((name, params))
        out += [Yardstick(shape, f"{name}@{shape}", params, probe_exact_at(space, workload, space.decode(params)),
                          overrides) for name, params in pick(candidates, preferred)]
    return out


TrialCallback = Callable[[optuna.Study, optuna.trial.FrozenTrial], None]


def run_yardsticks(study: optuna.Study, space: SearchSpace, workload: Workload,
                   objective: Callable[[optuna.Trial], float], callbacks: list[TrialCallback] | None = None) -> int:
    """Queue and run each shape's yardsticks with the best plan's costly option values;
    how many ran (none while a starting point waits: module docstring)."""
    if study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        log.info("yardsticks left for the next run: a starting point is still queued")
        return 0
    points = yardsticks(space, workload, study)
    for y in points:
        log.info("yardstick for %s: %s", y.shape, y.name)
        study.enqueue_trial(y.params, user_attrs={
            TrialAttr.ANCHOR: y.name, TrialAttr.YARDSTICK: y.shape, TrialAttr.PROBE_EXACT_AT: list(y.probe_exact_at),
            **({TrialAttr.OPTION_OVERRIDES: y.overrides} if y.overrides else {})})
    if points:
        study.optimize(objective, n_trials=len(points), catch=(TrialFailed,), callbacks=callbacks or [])
    return len(points)
