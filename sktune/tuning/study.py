"""The Optuna study: storage, resume, anchors, and reading results back."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from sktune.errors import SktuneError
from sktune.space.plan import Plan
from sktune.space.search_space import OptionDomain, SearchSpace, build_space

log = logging.getLogger(__name__)

DEFAULT_STORAGE = "sqlite:///sktune.db"
ANCHOR_ATTR = "anchor"


def space_from_description(description: dict[str, Any]) -> SearchSpace:
    ops = description["ops"]
    return build_space(
        [o["target"] for o in ops], [o["module"] for o in ops], description["boundaries"],
        frozenset(description["unsafe_op_types"]), description["fallback_candidates"],
        [OptionDomain(o["name"], tuple(o["choices"]), o["default"], o.get("exact_choice"))
         for o in description["options"]],
    )


def open_study(name: str, storage: str, seed: int | None) -> optuna.Study:
    """Create the study or load it to resume; a bad storage URL is a user error."""
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=10)
    try:
        return optuna.create_study(
            study_name=name, storage=storage, direction="minimize", sampler=sampler, load_if_exists=True
        )
    except Exception as exc:
        raise SktuneError(f"cannot open storage {mask_url(storage)}: {type(exc).__name__}: {exc}") from exc


def mask_url(url: str) -> str:
    """``postgresql://user:secret@host/db`` → ``postgresql://user:***@host/db``."""
    import re

    return re.sub(r"(//[^:/@]+:)[^@]*@", r"\1***@", url)


def prepare(study: optuna.Study, description: dict[str, Any], space: SearchSpace, model_path: Path,
            settings: dict[str, Any]) -> bool:
    """Record what the study tunes and enqueue the anchors; ``False`` when resuming.

    ``settings`` (threads, input sets) must match on resume: trials timed or verified
    differently do not compare.
    """
    existing = study.user_attrs.get("space")
    if existing is not None:
        if existing != space.signature():
            raise SktuneError(
                f"study {study.study_name!r} was created for a different graph or search space "
                "(the model or the backend changed); use a new --study name"
            )
        for key, value in settings.items():
            if study.user_attrs.get(key) != value:
                raise SktuneError(
                    f"study {study.study_name!r} was run with --{key.replace('_', '-')} {study.user_attrs.get(key)}, "
                    f"not {value}; resume with the same value or use a new --study name"
                )
        return False
    study.set_user_attr("space", space.signature())
    for key, value in settings.items():
        study.set_user_attr(key, value)
    study.set_user_attr("backend", description["environment"]["backend"])
    study.set_user_attr("model", str(model_path))
    study.set_user_attr("ops", description["ops"])
    study.set_user_attr("boundaries", description["boundaries"])
    study.set_user_attr("environment", description["environment"])
    study.set_user_attr("model_sha256", description["model_sha256"])
    study.set_user_attr("input_shapes", description["input_shapes"])
    for anchor, params in space.anchors():
        study.enqueue_trial(params, user_attrs={ANCHOR_ATTR: anchor}, skip_if_exists=True)
    return True


@dataclass(frozen=True)
class TrialRecord:
    """One finished trial as the summary and the report read it."""

    number: int
    state: str
    feasible: bool
    ratio: float | None
    ratio_ci: tuple[float, float] | None
    baseline_s: float | None
    candidate_s: float | None
    plan: dict[str, Any] | None
    anchor: str | None
    failure: str | None


def records(study: optuna.Study) -> list[TrialRecord]:
    out = []
    for t in study.get_trials(deepcopy=False):
        timing = t.user_attrs.get("timing") or {}
        feasible = t.state == optuna.trial.TrialState.COMPLETE and all(v <= 0 for v in t.constraints.values())
        out.append(TrialRecord(
            number=t.number, state=t.state.name, feasible=feasible,
            ratio=timing.get("ratio"), ratio_ci=tuple(timing["ratio_ci"]) if timing else None,
            baseline_s=timing.get("baseline_s"), candidate_s=timing.get("candidate_s"),
            plan=t.user_attrs.get("plan"), anchor=t.user_attrs.get(ANCHOR_ATTR), failure=t.user_attrs.get("failure"),
        ))
    return out


def best_record(study: optuna.Study) -> TrialRecord | None:
    """The feasible (bitwise-exact) complete trial with the smallest time ratio."""
    feasible = [r for r in records(study) if r.feasible and r.ratio is not None and math.isfinite(r.ratio)]
    return min(feasible, key=lambda r: r.ratio) if feasible else None


def anchor_record(study: optuna.Study, anchor: str) -> TrialRecord | None:
    return next((r for r in records(study) if r.anchor == anchor and r.state == "COMPLETE"), None)


def best_plan(study: optuna.Study) -> Plan | None:
    best = best_record(study)
    return Plan.from_json(best.plan) if best and best.plan else None
