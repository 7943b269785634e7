"""Warm start: the best exact plans of earlier studies, mapped onto this graph, tried first.

A plan is the search parameters that decode to it, so mapping a plan means checking that
the parameters mean the same here:
- the same model file and search space: the same op indices;
- a changed model whose search space is unchanged (same ops, same cuts): the same indices;
- a changed model with the same repeated unit (op types and module paths inside one
  layer): the unit's pattern, which the stamped parameters describe, re-stamped over
  this graph's units;
- anything else is refused, with the reason.
A plan keeps the option values its trial set outside the sampled domain (a refined best's
C++ wrapper: tuning/refine.py); without them it would be another, slower plan. Two warm
plans that are one plan here run once. Every warm plan is then verified and timed like any
other trial: nothing is assumed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import optuna

from sktune.errors import PlanError, SktuneError
from sktune.graph.structure import find_repeats, unit_key
from sktune.space.search_space import FUSE_ALL, NO_SCOPES, UNFUSED, SearchSpace
from sktune.tuning.attrs import StudyAttr, TrialAttr
from sktune.tuning.records import FUSE_EVERYTHING, top_records
from sktune.tuning.space_setup import starting_points
from sktune.tuning.storage import existing_study_names, journal_path, make_storage, mask_url, sqlite_file
from sktune.pipe.workload import Workload

PLANS_PER_STUDY = 3  # the best distinct exact plans taken from each earlier study


def plan_key(params: dict[str, Any], overrides: dict[str, Any]) -> str:
    """A plan's identity here: its parameters and option overrides."""
    return json.dumps([params, overrides], sort_keys=True, default=str)


@dataclass(frozen=True)
class WarmPlan:
    """One earlier best plan, as this study's parameters, and how it was mapped."""

    study: str
    trial: int
    params: dict[str, Any]
    mapping: str
    overrides: dict[str, Any] = field(default_factory=dict)  # options set outside the sampled domain
    same_as: str | None = None  # the anchor of an earlier warm plan that is the same plan here: not queued

    @property
    def anchor(self) -> str:
        return f"warm:{self.study}#{self.trial}"

    @property
    def key(self) -> str:
        return plan_key(self.params, self.overrides)

    def to_json(self) -> dict[str, Any]:
        """The study's note (``StudyAttr.WARM_START``); the summary finds where the plan ran by it."""
        return {"study": self.study, "trial": self.trial, "mapping": self.mapping, "anchor": self.anchor,
                "params": self.params, **({"overrides": self.overrides} if self.overrides else {}),
                **({"same_as": self.same_as} if self.same_as else {})}


def unit_signature(ops: Sequence[dict[str, Any]]) -> tuple[tuple[str, str], ...] | None:
    """Op types and module paths below the layer of one repeated unit of a stored op list
    (``StudyAttr.OPS``); None without repeats."""
    found = _repeated_unit([o["target"] for o in ops], [o["module"] for o in ops])
    return None if found is None else found[0]


def _repeated_unit(targets: Sequence[str],
                   modules: Sequence[str]) -> tuple[tuple[tuple[str, str], ...], int] | None:
    """The repeated unit's signature and how many units the graph has; None without repeats."""
    repeats = find_repeats(list(targets), list(modules))
    if repeats is None:
        return None
    first, last = repeats.units[0]
    item = unit_key(modules[first])[1]  # type: ignore[index]  # the layer's path, e.g. "layers.0"
    inside = [m[len(item):] for m in modules[first:last + 1]]  # ".attn.q_proj"
    return tuple(zip(targets[first:last + 1], inside)), len(repeats.units)


def mapping_for(old: optuna.Study, workload: Workload, space: SearchSpace) -> str:
    """How plans of ``old`` carry over to this graph; SktuneError with the reason when they cannot."""
    name = old.study_name
    old_backend, backend = old.user_attrs.get(StudyAttr.BACKEND), workload.environment["backend"]
    if old_backend != backend:
        raise SktuneError(f"--warm-start: study {name!r} tuned backend {old_backend}, not {backend}")
    same_space = old.user_attrs.get(StudyAttr.SPACE) == space.signature()
    if same_space and old.user_attrs.get(StudyAttr.MODEL_SHA256) == workload.model_sha256:
        return "same model: the same op indices"
    if same_space:
        return "changed model, same ops and cuts: the same op indices"
    old_unit, found = unit_signature(old.user_attrs.get(StudyAttr.OPS) or []), _repeated_unit(workload.targets,
                                                                                             workload.modules)
    unit, n_units = found if found is not None else (None, 0)
    if (old_unit is None or unit is None) and _op_keys(old.user_attrs.get(StudyAttr.OPS) or []) == _op_keys(
            workload.ops_json()):
        # Same graph, other candidate cuts: a plan's parameters name blocks between cuts by
        # position, so the same names would mean other op ranges here.
        raise SktuneError(f"--warm-start: study {name!r} tuned the same ops in another search space (other "
                          "candidate cuts or options): its plans' parameters would mean other op ranges here. The "
                          "exactness probe draws the cuts at the shapes tuned: warm-start from a study tuned at the "
                          "same shapes")
    if old_unit is None or unit is None:
        raise SktuneError(
            f"--warm-start: study {name!r} tuned another graph ({len(old.user_attrs.get(StudyAttr.OPS) or [])} "
            f"ops, this one has {len(workload.ops)}) and "
            f"{'neither graph has' if old_unit is None and unit is None else 'only one graph has'} repeated "
            "layers whose pattern could be re-stamped; its plans' op indices would mean other ops here")
    if old_unit != unit:
        at = next((k for k, (a, b) in enumerate(zip(old_unit, unit)) if a != b), min(len(old_unit), len(unit)))

        def named(layer: tuple[tuple[str, str], ...]) -> str:
            return f"{layer[at][0]} ({layer[at][1].lstrip('.') or 'the layer itself'})" if at < len(layer) else "none"
        raise SktuneError(
            f"--warm-start: the repeated layer changed since study {name!r} ({len(old_unit)} ops per layer "
            f"then, {len(unit)} now; first difference at op {at} of the layer: {named(old_unit)} then, "
            f"{named(unit)} now), so its pattern does not fit")
    return f"changed model, same repeated layer ({len(unit)} ops): its pattern re-stamped over {n_units} layers"


def _op_keys(ops: Sequence[dict[str, Any]]) -> list[tuple[Any, Any]]:
    return [(op.get("target"), op.get("module")) for op in ops]


def check_warm_start_names(names: Sequence[str], storage: str, this_study: str) -> None:
    """Each ``--warm-start`` study exists, and none is this one (refused: SktuneError).
    ``sktune run`` checks this first, before a worker starts (it took seconds to minutes)."""
    file = journal_path(storage) or sqlite_file(storage)
    if file and not Path(file).is_file() and any(name != this_study for name in names):
        raise SktuneError(f"--warm-start: no study named {', '.join(map(repr, names))}: the storage file {file} does "
                          "not exist (--warm-storage names where the earlier studies are; default: --storage)")
    known = [n for n in existing_study_names(storage) if n != this_study]  # creates no storage
    for name in names:
        if name == this_study:
            raise SktuneError(f"--warm-start {name}: that is this study; resuming it needs no warm start")
        if name not in known:
            raise SktuneError(f"--warm-start: no study named {name!r} in {mask_url(storage)} "
                              f"(studies there: {', '.join(known) or 'none'}; --warm-storage names another)")


def warm_plans(names: Sequence[str], storage: str, workload: Workload, space: SearchSpace,
               this_study: str) -> list[WarmPlan]:
    """The best exact plans of each named study, mapped onto this graph (refused: SktuneError).
    A plan that is the same plan here as one before it (two studies' bests, or a refined
    best that only an override told apart) is marked ``same_as`` that one, and not queued."""
    check_warm_start_names(names, storage, this_study)
    backend = make_storage(storage)
    domains = space.domains()
    out: list[WarmPlan] = []
    first_of: dict[str, str] = {}  # plan key -> the anchor of the first warm plan with it
    for name in names:
        old = optuna.load_study(study_name=name, storage=backend)
        mapping = mapping_for(old, workload, space)
        best = top_records(old, PLANS_PER_STUDY)
        if not best:
            raise SktuneError(f"--warm-start: study {name!r} has no bitwise-exact trial to start from")
        for record in best:
            trial = old.trials[record.number]
            misfit = [k for k, v in trial.params.items() if k not in domains or v not in domains[k]]
            if misfit:
                raise SktuneError(f"--warm-start: trial {record.number} of study {name!r} has parameters this "
                                  f"search space does not have ({', '.join(misfit[:5])}); {mapping}")
            overrides = carried_overrides(space, trial.user_attrs.get(TrialAttr.OPTION_OVERRIDES) or {},
                                          name, record.number)
            plan = WarmPlan(name, record.number, completed(space, trial.params), mapping, overrides)
            if plan.key in first_of:
                plan = replace(plan, same_as=first_of[plan.key])
            first_of.setdefault(plan.key, plan.anchor)
            out.append(plan)
    return yield_to_anchors(out, space, workload)


def yield_to_anchors(warm: list[WarmPlan], space: SearchSpace, workload: Workload) -> list[WarmPlan]:
    """A warm plan that is this space's unfused or fuse-everything anchor runs as that anchor
    (``same_as`` its name): the yardsticks, the finalists' round and the refinement's cost
    cap look those up by name, and a warm plan in their place left them without one."""
    named = {name: (params, space.fuse_all_overrides if name == FUSE_ALL else {})
             for name, params in starting_points(space, workload) if name in (UNFUSED, *FUSE_EVERYTHING)}
    by_key = {plan_key(params, overrides): name for name, (params, overrides) in named.items()}
    return [replace(w, same_as=by_key[w.key]) if not w.same_as and w.key in by_key else w for w in warm]


def carried_overrides(space: SearchSpace, overrides: dict[str, Any], study: str, trial: int) -> dict[str, Any]:
    """An earlier trial's option overrides, when this backend has each option and value
    (refused: SktuneError, as for its parameters)."""
    try:
        space.capabilities.check_options(overrides)
    except PlanError as exc:
        raise SktuneError(f"--warm-start: trial {trial} of study {study!r} sets options this search space "
                          f"cannot: {exc}") from None
    return dict(overrides)


def completed(space: SearchSpace, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with what this space asks and the earlier one did not: the plan stays the
    earlier plan (a first/last unit follows the shared pattern, a new option keeps its
    default, a new fallback is off) instead of a sampled variation of it."""
    defaults = {o.name: o.default for o in space.options}
    out = dict(params)
    for key in space.domains():
        if key in out:
            continue
        if key.endswith(".own") or key == NO_SCOPES or key.startswith("fallback:"):
            out[key] = False
        elif key in defaults:
            out[key] = defaults[key]
    try:
        space.decode(out)  # every block and cut decided: the plan is whole
    except (KeyError, ValueError) as exc:
        raise SktuneError(f"--warm-start: an earlier plan does not decide {exc} of this search space") from None
    return out
