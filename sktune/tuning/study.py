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
from sktune.tuning.storage import fail_orphaned_trials, journal_path, make_storage, mask_url

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
    backend = make_storage(storage)
    try:
        study = optuna.create_study(
            study_name=name, storage=backend, direction="minimize", sampler=sampler, load_if_exists=True
        )
    except Exception as exc:
        message = mask_url(f"{type(exc).__name__}: {exc}".splitlines()[0])
        raise SktuneError(f"cannot open study {name!r} in {mask_url(storage)}: {message}") from None
    fail_orphaned_trials(study)
    return study


def load_existing_study(name: str, storage: str) -> optuna.Study:
    """A study that must already exist (export, report): never creates a storage or a study.

    A missing SQLite file, an unusable storage or an unknown study name is one clear
    ``SktuneError``; credentials in the URL are masked in every message.
    """
    masked = mask_url(storage)
    file = journal_path(storage)
    if file is None:
        file = storage[len("sqlite:///"):].split("?", 1)[0] if storage.startswith("sqlite:///") else ""
    if file not in ("", ":memory:") and not Path(file).is_file():
        raise SktuneError(f"no study storage at {masked}: {file} does not exist (see --storage)")
    backend = make_storage(storage)
    try:
        names = optuna.get_all_study_names(backend)
    except Exception as exc:
        message = mask_url(f"{type(exc).__name__}: {exc}".splitlines()[0])
        raise SktuneError(f"cannot open storage {masked}: {message}") from None
    if name not in names:
        known = ", ".join(repr(n) for n in sorted(names)) or "none"
        raise SktuneError(f"no study {name!r} in {masked} (studies there: {known})")
    return optuna.load_study(study_name=name, storage=backend)


def fingerprint(description: dict[str, Any]) -> dict[str, Any]:
    """What a study tunes: model file, graph, inputs, backend and versions."""
    import hashlib
    import json

    from sktune import __version__

    graph = json.dumps([[op["target"] for op in description["ops"]], description["boundaries"]])
    env = description["environment"]
    return {
        "model_sha256": description["model_sha256"],
        "graph_sha256": hashlib.sha256(graph.encode()).hexdigest(),
        "input_shapes": description["input_shapes"],
        "backend": env.get("backend"),
        "torch": env.get("torch"),
        "torch_npu": env.get("torch_npu"),
        "sktune": __version__,
    }


def prepare(study: optuna.Study, description: dict[str, Any], space: SearchSpace, model_path: Path,
            settings: dict[str, Any], allow_changed: bool = False) -> bool:
    """Record what the study tunes and enqueue the anchors; ``False`` when resuming.

    On resume the search space and ``settings`` (threads, input sets) must match: trials
    timed or verified differently do not compare. A changed fingerprint (model file,
    versions...) is refused unless ``allow_changed``.
    """
    existing = study.user_attrs.get("space")
    if existing is not None:
        name = study.study_name
        if existing != space.signature():
            raise SktuneError(
                f"study {name!r} was created for a different graph or search space "
                "(the model or the backend changed); use a new --study name"
            )
        for key, value in settings.items():
            if study.user_attrs.get(key) != value:
                raise SktuneError(
                    f"study {name!r} was run with --{key.replace('_', '-')} {study.user_attrs.get(key)}, "
                    f"not {value}; resume with the same value or use a new --study name"
                )
        old, new = study.user_attrs.get("fingerprint", {}), fingerprint(description)
        changed = [f"{k}: {old.get(k)!r} → {new[k]!r}" for k in new if old.get(k) != new[k]]
        if changed and not allow_changed:
            raise SktuneError(
                f"study {name!r} was tuning something else; changed: " + "; ".join(changed)
                + ". Use a new --study name, or --allow-changed to resume anyway"
            )
        return False
    study.set_user_attr("fingerprint", fingerprint(description))
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
