"""The Optuna study: storage, resume, anchors, and reading results back."""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from sktune.errors import SktuneError
from sktune.space.plan import Plan
from sktune.space.exactness import Exactness
from sktune.space.layout import MAX_CUTS
from sktune.space.search_space import FALLBACK_OPTION, OptionDomain, SearchSpace, build_space, unique_by_plan
from sktune.space.ascend_anchors import superkernel_anchors
from sktune.space.seeds import profile_seeds
from sktune.tuning.budget import ANCHOR_ATTR, ClearlyWorsePruner
from sktune.tuning.storage import fail_orphaned_trials, journal_path, make_storage, mask_url

log = logging.getLogger(__name__)

DEFAULT_STORAGE = "sqlite:///sktune.db"


def exactness_from_description(description: dict[str, Any]) -> Exactness:
    return Exactness.from_probe(description.get("exactness") or {})


def space_from_description(description: dict[str, Any], stamp: bool = True, max_cuts: int = MAX_CUTS,
                           options: Sequence[str] | None = None) -> SearchSpace:
    """The search space; with probe answers, the probe's inexact op types replace the
    backend's static list of unsafe ones (the cuts go around what really breaks).

    ``max_cuts`` (flat layouts) and ``options`` (names to keep; None: all) narrow it, as the
    search benchmark does to measure every plan.
    """
    ops = description["ops"]
    exactness = exactness_from_description(description)
    unsafe = exactness.inexact if description.get("exactness") else frozenset(description["unsafe_op_types"])
    profile = description.get("op_profile") or {}
    capabilities = description.get("capabilities") or {}
    return build_space(
        [o["target"] for o in ops], [o["module"] for o in ops], description["boundaries"],
        unsafe, description["fallback_candidates"],
        [OptionDomain(o["name"], tuple(o["choices"]), o["default"], o.get("exact_choice"))
         for o in description["options"] if options is None or o["name"] in options],
        max_cuts=max_cuts, span_us=profile.get("span_us"), stamp=stamp,
        barriers=frozenset(description.get("unfusable_op_types") or ()),
        fallback_option=capabilities.get("fallback_option", FALLBACK_OPTION),
        unmarked_choice=bool(capabilities.get("unmarked_plans")),
        kernelless=description.get("kernelless") or (),
    )


def starting_points(space: SearchSpace, description: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Anchors, then profile-guided seeds, each plan once."""
    seen: set[Plan] = set()
    if (description.get("capabilities") or {}).get("anchor_set") == "superkernel":
        named = superkernel_anchors(space, [o["module"] for o in description["ops"]])
    else:
        named = space.anchors()
    anchors = unique_by_plan(space, named, seen)
    profile = description.get("op_profile") or {}
    seeds = profile_seeds(space, [o["target"] for o in description["ops"]], profile.get("span_us") or [],
                          profile.get("gap_us") or [], exactness_from_description(description))
    return anchors + unique_by_plan(space, seeds, seen)


def make_sampler(seed: int | None) -> optuna.samplers.BaseSampler:
    """sktune's sampler (also replayed by the search benchmark)."""
    # Multivariate TPE: block and cut decisions interact (a cut matters only between fused blocks).
    with warnings.catch_warnings():  # ``group`` is experimental; its warning would tear the progress bar
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=10, multivariate=True, group=True)


SPACE_INPUTS = ("op_profile", "exactness")  # measured at start; a resumed study reuses the first run's


def reuse_space_inputs(study: optuna.Study, description: dict[str, Any]) -> dict[str, Any]:
    """``description`` with the profile and probe answers the study was created with, if any.

    They shape the space (own first/last patterns, cuts around inexact ops); measuring
    them again on resume could shift the space under the trials already run.
    """
    stored = {k: study.user_attrs[k] for k in SPACE_INPUTS if k in study.user_attrs}
    return {**description, **stored}


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
    for key, value in settings.items():
        study.set_user_attr(key, value)
    study.set_user_attr("backend", description["environment"]["backend"])
    study.set_user_attr("model", str(model_path))
    study.set_user_attr("ops", description["ops"])
    for key in SPACE_INPUTS:
        study.set_user_attr(key, description.get(key) or {})
    study.set_user_attr("boundaries", description["boundaries"])
    study.set_user_attr("environment", description["environment"])
    study.set_user_attr("startup_s", description.get("startup_s"))
    study.set_user_attr("model_sha256", description["model_sha256"])
    study.set_user_attr("input_shapes", description["input_shapes"])
    for anchor, params in starting_points(space, description):
        study.enqueue_trial(params, user_attrs={ANCHOR_ATTR: anchor}, skip_if_exists=True)
    # Last: workers starting together treat the study as prepared once "space" is there, so
    # everything they check against must already be written (seen: "--input-sets None").
    study.set_user_attr("space", space.signature())
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
            plan=t.user_attrs.get("plan"), anchor=t.user_attrs.get(ANCHOR_ATTR), failure=t.user_attrs.get("failure") or t.user_attrs.get("skipped") or t.user_attrs.get("pruned"),
        ))
    return out


def top_records(study: optuna.Study, k: int) -> list[TrialRecord]:
    """The ``k`` feasible (bitwise-exact) complete trials with the smallest time ratios, one per plan."""
    feasible = sorted((r for r in records(study) if r.feasible and r.ratio is not None and math.isfinite(r.ratio)),
                      key=lambda r: r.ratio)
    out: list[TrialRecord] = []
    for r in feasible:
        if len(out) < k and all(r.plan != o.plan for o in out):
            out.append(r)
    return out


def best_record(study: optuna.Study) -> TrialRecord | None:
    """The best exact trial: the re-measured winner among the finalists when there was a
    re-measurement, else the feasible complete trial with the smallest time ratio."""
    confirmed = study.user_attrs.get("confirm_best")
    finalists = {f["trial"] for f in study.user_attrs.get("finalists") or []}
    # Valid while no later trial (a resumed run) has entered the top that was re-measured.
    if confirmed is not None and {r.number for r in top_records(study, len(finalists))} <= finalists:
        for r in records(study):
            if r.number == confirmed["trial"] and r.feasible:
                return r
    top = top_records(study, 1)
    return top[0] if top else None


FUSE_EVERYTHING = ("fuse-all", "full-model")  # the fuse-everything anchor of each anchor set


def anchor_record(study: optuna.Study, anchor: str) -> TrialRecord | None:
    """The complete trial of a named anchor; ``fuse-all`` also finds npu's ``full-model``."""
    names = FUSE_EVERYTHING if anchor in FUSE_EVERYTHING else (anchor,)
    return next((r for r in records(study) if r.anchor in names and r.state == "COMPLETE"), None)


def best_plan(study: optuna.Study) -> Plan | None:
    best = best_record(study)
    return Plan.from_json(best.plan) if best and best.plan else None
