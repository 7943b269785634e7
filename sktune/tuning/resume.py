"""Create a study or resume it: the same graph, space and settings, or a clear refusal.

A new study records what it tunes (the fingerprint) and enqueues the starting points; a
resumed one must match it, and its trials orphaned by a killed run are failed first.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna

from sktune.errors import SktuneError
from sktune.space.search_space import SearchSpace
from sktune.tuning.budget import ClearlyWorsePruner
from sktune.tuning.records import StudyAttr, TrialAttr
from sktune.tuning.sampler import attach_space, hopeless_filter, make_sampler
from sktune.tuning.space_setup import SPACE_INPUTS, exactness_from_description, starting_points, targets_of
from sktune.tuning.storage import fail_orphaned_trials, make_storage, mask_url


def open_study(name: str, storage: str, seed: int | None) -> optuna.Study:
    """Create the study or load it to resume; a bad storage URL is a user error."""
    sampler = make_sampler(seed)
    backend = make_storage(storage)
    try:
        study = optuna.create_study(
            study_name=name, storage=backend, direction="minimize", sampler=sampler, load_if_exists=True,
            pruner=ClearlyWorsePruner(),
        )
    except Exception as exc:
        message = mask_url(f"{type(exc).__name__}: {exc}".splitlines()[0])
        raise SktuneError(f"cannot open study {name!r} in {mask_url(storage)}: {message}") from None
    fail_orphaned_trials(study, backend)
    return study


def fingerprint(description: dict[str, Any]) -> dict[str, Any]:
    """What a study tunes: model file, graph, inputs, backend and versions."""
    from sktune import __version__

    graph = json.dumps([[op["target"] for op in description["ops"]], description["boundaries"]])
    env = description["environment"]
    shapes = {"shapes": description["shapes"]} if description.get("shapes") else {}  # one-shape studies as before
    return {
        **shapes,
        "model_sha256": description["model_sha256"],
        "graph_sha256": hashlib.sha256(graph.encode()).hexdigest(),
        "input_shapes": description["input_shapes"],
        "backend": env.get("backend"),
        "torch": env.get("torch"),
        "torch_npu": env.get("torch_npu"),
        "sktune": __version__,
    }


def prepare(study: optuna.Study, description: dict[str, Any], space: SearchSpace, model_path: Path,
            settings: dict[str, Any], allow_changed: bool = False,
            first: Sequence[tuple[str, dict[str, Any]]] = ()) -> bool:
    """Record what the study tunes and enqueue the anchors; ``False`` when resuming.

    ``first`` (warm-start plans, named) are enqueued before the anchors, so they run first.

    On resume the search space and ``settings`` (threads, input sets) must match: trials
    timed or verified differently do not compare. A changed fingerprint (model file,
    versions...) is refused unless ``allow_changed``.
    """
    # The sampler's local search walks this space, skipping what the objective would skip.
    attach_space(study, space, hopeless_filter(space, targets_of(description),
                                               exactness_from_description(description)))
    existing = study.user_attrs.get(StudyAttr.SPACE)
    if existing is not None:
        _check_resumable(study, existing, description, space, settings, allow_changed)
        for name, params in first:
            study.enqueue_trial(params, user_attrs={TrialAttr.ANCHOR: name}, skip_if_exists=True)
        return False
    study.set_user_attr(StudyAttr.FINGERPRINT, fingerprint(description))
    for key, value in settings.items():
        study.set_user_attr(key, value)
    study.set_user_attr(StudyAttr.BACKEND, description["environment"]["backend"])
    study.set_user_attr(StudyAttr.MODEL, str(model_path))
    study.set_user_attr(StudyAttr.OPS, description["ops"])
    for key in SPACE_INPUTS:
        study.set_user_attr(key, description.get(key) or {})
    study.set_user_attr(StudyAttr.BOUNDARIES, description["boundaries"])
    study.set_user_attr(StudyAttr.ENVIRONMENT, description["environment"])
    study.set_user_attr(StudyAttr.STARTUP_S, description.get("startup_s"))
    study.set_user_attr(StudyAttr.MODEL_SHA256, description["model_sha256"])
    study.set_user_attr(StudyAttr.INPUT_SHAPES, description["input_shapes"])
    if description.get("shapes"):
        study.set_user_attr(StudyAttr.SHAPES, description["shapes"])
    for anchor, params in [*first, *starting_points(space, description)]:
        study.enqueue_trial(params, user_attrs={TrialAttr.ANCHOR: anchor}, skip_if_exists=True)
    # Last: workers starting together treat the study as prepared once "space" is there, so
    # everything they check against must already be written (seen: "--input-sets None").
    study.set_user_attr(StudyAttr.SPACE, space.signature())
    return True


def _check_resumable(study: optuna.Study, existing: dict[str, Any], description: dict[str, Any],
                     space: SearchSpace, settings: dict[str, Any], allow_changed: bool) -> None:
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
    old, new = study.user_attrs.get(StudyAttr.FINGERPRINT, {}), fingerprint(description)
    changed = [f"{k}: {old.get(k)!r} → {new[k]!r}" for k in new if old.get(k) != new[k]]
    if changed and not allow_changed:
        raise SktuneError(
            f"study {name!r} was tuning something else; changed: " + "; ".join(changed)
            + ". Use a new --study name, or --allow-changed to resume anyway"
        )
