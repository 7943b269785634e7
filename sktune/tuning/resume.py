"""Create a study or resume it: the same graph, space and settings, or a clear refusal.

A new study records what it tunes (the fingerprint) and queues its first starting point; a
resumed one must match it, and its trials orphaned by a killed run are failed first. The
starting points are queued one at a time (``StartingQueue``), so that a trial queued during
the search (the culprit's repair, ``dcci_seed.py``) runs next instead of behind all of them.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import optuna

from sktune.errors import SktuneError
from sktune.space.search_space import FUSE_ALL, SearchSpace
from sktune.tuning.budget import ClearlyWorsePruner
from sktune.tuning.creator import await_creator_record, record_creator, record_waiter
from sktune.tuning.dcci_seed import requeue_stopped_seeds
from sktune.tuning.attrs import StudyAttr, TrialAttr
from sktune.tuning.records import planned_plans
from sktune.tuning.sampler import attach_space, hopeless_filter, make_sampler
from sktune.tuning.space_setup import starting_points
from sktune.tuning.storage import check_journal_whole, check_made_by_sktune, make_storage, mask_url, storage_error
from sktune.tuning.workers import fail_orphaned_trials
from sktune.tuning.unprepared import dropped_unless_prepared
from sktune.tuning.verified import record_verify_shapes
from sktune.pipe.workload import Workload

log = logging.getLogger(__name__)

Named = tuple[str, dict[str, Any]]  # (anchor name, parameters)
CPU_KEYS = ("cpu_capability", "vec_isa")  # host_cpu.vector_facts, in a CPU backend's environment
DIGEST_KEYS = ("code_sha256", "weights_sha256")  # graph/digest.py
# Keys an older study's fingerprint lacks: absent there, they are not a change.
LATER_KEYS = (*CPU_KEYS, *DIGEST_KEYS)
# What a changed digest means, as the refusal says it: the model file's own hash may be unchanged
# (an edited module that it imports, a replaced checkpoint).
CHANGED_AS = {"code_sha256": "the captured graph's ops and constants", "weights_sha256": "the model's weights"}


class StartingQueue:
    """The starting points (warm-start plans, anchors, seeds), queued one at a time, in order.

    Optuna runs the WAITING trials oldest first. With every starting point queued at once, a
    trial queued during the search (``dcci_seed.py``) waited behind all of them, past a quick
    budget. So at most one waits: after each trial (an Optuna callback: ``loop.search``), when
    none waits, the next starting point not yet in the study is queued. What is left is read
    from the study (a plan already queued, run or sampled there counts as done: its
    parameters, as ``enqueue_trial(skip_if_exists=True)`` would say, and its option
    overrides), not kept here: a resumed run and many
    workers on one storage continue the same list. Two workers topping up at the same moment
    may queue one plan twice; the second waits while the first runs, then takes its
    outcome without a compile (``reuse.py``). A worker that finds the queue empty while
    another tops it up asks the sampler for that trial.
    """

    def __init__(self, points: Sequence[Named], overrides: Mapping[str, dict[str, Any]] | None = None) -> None:
        self.points = tuple(points)
        # Option values a point sets outside the sampled domain, by name (fuse-all's; a warm
        # plan that was a refined best: warm_start.py): the point is that plan.
        self.overrides = dict(overrides or {})

    def pending(self, study: optuna.Study) -> list[Named]:
        """The starting points whose plan (parameters and overrides) no trial of the study has
        (queued, run or sampled). A trial whose run was stopped or killed does not count: its
        starting point was lost on resume (a Ctrl-C during the anchor that was the best plan, say)."""
        present = planned_plans(study)
        return [(name, params) for name, params in self.points
                if (params, self.overrides.get(name, {})) not in present]

    def top_up(self, study: optuna.Study) -> str | None:
        """Queue the next pending starting point unless a trial is waiting; its name, or None."""
        if study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
            return None
        left = self.pending(study)
        if not left:
            return None
        name, params = left[0]
        overrides = {TrialAttr.OPTION_OVERRIDES: self.overrides[name]} if name in self.overrides else {}
        study.enqueue_trial(params, user_attrs={TrialAttr.ANCHOR: name, **overrides})
        return name

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        self.top_up(study)


def open_study(name: str, storage: str, seed: int | None) -> tuple[optuna.Study, bool]:
    """Create the study or load it to resume, and whether this call created it; a bad
    storage URL is a user error. The creator says so in the study (``StudyAttr.CREATOR``):
    workers started with it wait for it to prepare the study (``wait_for_creator``)."""
    sampler, pruner = make_sampler(seed), ClearlyWorsePruner()
    check_journal_whole(storage)
    backend = make_storage(storage)
    try:
        try:  # the storage lets one creator through (a unique name), whichever storage it is
            study = optuna.create_study(study_name=name, storage=backend, direction="minimize",
                                        sampler=sampler, pruner=pruner)
            created = True
        except optuna.exceptions.DuplicatedStudyError:
            study = optuna.load_study(study_name=name, storage=backend, sampler=sampler, pruner=pruner)
            created = False
    except Exception as exc:
        raise SktuneError(f"cannot open study {name!r} in {mask_url(storage)}: {storage_error(exc, storage)}") from None
    with dropped_unless_prepared(study, created, storage):  # a stop from here on leaves no empty study
        if created:
            record_creator(study)
        else:
            check_made_by_sktune(study, mask_url(storage))  # before the wait: such a study has trials
            await_creator_record(study)
            record_waiter(study)
        fail_orphaned_trials(study, backend)
    return study, created


def fingerprint(workload: Workload) -> dict[str, Any]:
    """What a study tunes: model file, graph (its code and weights too), inputs, backend and versions."""
    from sktune import __version__

    graph = json.dumps([workload.targets, list(workload.boundaries)])
    env = workload.environment
    shapes = {"shapes": workload.shapes_json()} if workload.shapes else {}  # one-shape studies as before
    return {
        **shapes,
        "model_sha256": workload.model_sha256,
        "graph_sha256": hashlib.sha256(graph.encode()).hexdigest(),
        "input_shapes": workload.input_shapes,
        "backend": env.get("backend"),
        "torch": env.get("torch"),
        "torch_npu": env.get("torch_npu"),
        "sktune": __version__,
        # Exactness follows vector width (docs/measured.md, "Exact forms"): verdicts from
        # another capability do not carry over. None where the backend does not say.
        **{key: env.get(key) for key in CPU_KEYS},
        **{key: workload.digests[key] for key in DIGEST_KEYS if key in workload.digests},
    }


def _shapes_changed(name: str, old: dict[str, Any], new: dict[str, Any]) -> str:
    """Why a study tuned at other shapes is not resumed, even with --allow-changed: its every
    trial was timed, weighted and verified at those shapes, so its figures do not compare."""
    def named(fingerprint: dict[str, Any]) -> str:
        shapes = fingerprint.get("shapes")
        return f"shapes {', '.join(shapes)}" if shapes else "one input shape (no input_shapes())"

    was, now = named(old), named(new)
    same_names = set(old.get("shapes") or ()) == set(new.get("shapes") or ())  # listed heaviest first
    if same_names:
        was += " with other sizes or weights than the model's input_shapes() gives now"
    # The same model file: its input_shapes() still declares the shapes the study was tuned at.
    again = (f"resume with --shapes {','.join(old['shapes'])}, or " if old.get("shapes")
             and old.get("model_sha256") == new["model_sha256"] and not same_names else "")
    return (f"study {name!r} was tuned at {was}; this run tunes at {now}. Its trials were timed and verified at "
            f"those shapes, so they do not compare with this run's: {again}use a new --study name "
            "(--allow-changed does not cover the tuned shapes)")


def prepare(study: optuna.Study, workload: Workload, space: SearchSpace, model_path: Path,
            settings: dict[str, Any], allow_changed: bool = False,
            first: Sequence[Named] = (), overrides: Mapping[str, dict[str, Any]] | None = None) -> StartingQueue:
    """Record what the study tunes (a new study) and queue the first pending starting point;
    the queue, for the search to top up after each trial (``StartingQueue``).

    ``first`` (warm-start plans, named) come before the anchors and seeds, so they run first;
    ``overrides`` gives a named point's option values outside the sampled domain.

    On resume the search space and ``settings`` (threads, input sets) must match: trials
    timed or verified differently do not compare. A changed fingerprint (model file,
    versions...) is refused unless ``allow_changed``.
    """
    # The sampler's local search walks this space, skipping what the objective would skip.
    attach_space(study, space, hopeless_filter(space, workload.targets, workload.exact()))
    fuse_all = {FUSE_ALL: space.fuse_all_overrides} if space.fuse_all_overrides else {}
    queue = StartingQueue([*first, *starting_points(space, workload)], {**fuse_all, **(overrides or {})})
    existing = study.user_attrs.get(StudyAttr.SPACE)
    if existing is not None:
        _check_resumable(study, existing, workload, space, settings, allow_changed, model_path)
        _record_verify_shapes(study, workload)
        requeue_stopped_seeds(study)  # before the starting points: a repair runs next (dcci_seed.py)
        queue.top_up(study)
        return queue
    study.set_user_attr(StudyAttr.FINGERPRINT, fingerprint(workload))
    for key, value in settings.items():
        study.set_user_attr(key, value)
    study.set_user_attr(StudyAttr.BACKEND, workload.environment["backend"])
    study.set_user_attr(StudyAttr.MODEL, str(model_path))
    study.set_user_attr(StudyAttr.OPS, workload.ops_json())
    study.set_user_attr(StudyAttr.OP_PROFILE, workload.op_profile_json())  # the space inputs: resume reuses them
    study.set_user_attr(StudyAttr.EXACTNESS, workload.exactness)
    if workload.shapes:  # {} without a probe: stored too, or each resume would measure again
        study.set_user_attr(StudyAttr.EXACTNESS_BY_SHAPE, workload.exactness_by_shape)
    study.set_user_attr(StudyAttr.BOUNDARIES, list(workload.boundaries))
    study.set_user_attr(StudyAttr.ENVIRONMENT, workload.environment)
    study.set_user_attr(StudyAttr.STARTUP_S, workload.startup_s)
    study.set_user_attr(StudyAttr.MODEL_SHA256, workload.model_sha256)
    study.set_user_attr(StudyAttr.INPUT_SHAPES, workload.input_shapes)
    if workload.shapes:
        study.set_user_attr(StudyAttr.SHAPES, workload.shapes_json())
    _record_verify_shapes(study, workload)
    queue.top_up(study)
    # Last: workers starting together treat the study as prepared once "space" is there, so
    # everything they check against must already be written (seen: "--input-sets None").
    study.set_user_attr(StudyAttr.SPACE, space.signature())
    return queue


def _record_verify_shapes(study: optuna.Study, workload: Workload) -> None:
    """The model's verify-only shapes, known from start-up: a run stopped before its finalists'
    round still names them (the summary, the export, the capture-limit warning); the round
    records them again as its worker declares them (tuning/verified.py)."""
    record_verify_shapes(study, workload.verify_shapes)
    if workload.left_out_shapes and study.user_attrs.get(StudyAttr.LEFT_OUT_SHAPES) != list(workload.left_out_shapes):
        study.set_user_attr(StudyAttr.LEFT_OUT_SHAPES, list(workload.left_out_shapes))


def _changed(key: str, old: Any, new: Any) -> str:
    if key in CHANGED_AS:
        return f"{key} ({CHANGED_AS[key]}): {str(old)[:12]}… → {str(new)[:12]}…"
    return f"{key}: {old!r} → {new!r}"


def _check_resumable(study: optuna.Study, existing: dict[str, Any], workload: Workload,
                     space: SearchSpace, settings: dict[str, Any], allow_changed: bool,
                     model_path: Path | None = None) -> None:
    name = study.study_name
    old, new = study.user_attrs.get(StudyAttr.FINGERPRINT, {}), fingerprint(workload)
    if old and old.get("shapes") != new.get("shapes"):  # first: other shapes may also give another space
        raise SktuneError(_shapes_changed(name, old, new))
    if existing != space.signature():
        theirs = study.user_attrs.get(StudyAttr.MODEL)
        other_file = theirs is not None and model_path is not None and Path(theirs) != Path(model_path)
        raise SktuneError(
            f"study {name!r} was created for a different graph or search space "
            + (f"(it was created for {theirs}; a study's default name is the model file's name and the "
               "backend's)" if other_file else "(the model or the backend changed)") + "; use a new --study name"
        )
    for key, value in settings.items():
        if study.user_attrs.get(key) != value:
            raise SktuneError(
                f"study {name!r} was run with --{key.replace('_', '-')} {study.user_attrs.get(key)}, "
                f"not {value}; resume with the same value or use a new --study name"
            )
    # A study from before sktune recorded the CPU or the digests says nothing about them: not a change.
    changed_keys = [k for k in new if (k in old or k not in LATER_KEYS) and old.get(k) != new[k]]
    changed = [_changed(k, old.get(k), new[k]) for k in changed_keys]
    if changed and not allow_changed:
        raise SktuneError(
            f"study {name!r} was created for another model or machine; changed: " + "; ".join(changed)
            + (". If build_model draws its weights at random, seed it (torch.manual_seed) or load them"
               if "weights_sha256" in changed_keys else "")
            # An edit outside the graph (a comment, a helper it never calls): the same ops and weights.
            + (". The captured graph and weights are the same (code_sha256, weights_sha256 unchanged): the "
               "edit changed nothing that runs"
               if changed_keys == ["model_sha256"] and all(k in old for k in DIGEST_KEYS) else "")
            + ". Use a new --study name, or --allow-changed to resume anyway"
        )
    if changed:
        # Said and kept: the trials before the change were measured, and verified bitwise, on the
        # model or machine as it was; the export names the change beside the study's model.
        log.warning("resuming study %r across a change (--allow-changed): %s. Its earlier trials were measured "
                    "and verified bitwise before it; the finalists' round re-times and verifies again the best "
                    "among them, and a plan not bitwise now is passed over",
                    name, "; ".join(changed))
        now = {"at": datetime.now().isoformat(timespec="seconds"), "model": str(model_path),
               "model_sha256": workload.model_sha256, "changed": changed}
        if now["changed"] not in [c["changed"] for c in study.user_attrs.get(StudyAttr.RESUMED_ACROSS) or []]:
            study.set_user_attr(StudyAttr.RESUMED_ACROSS, [*(study.user_attrs.get(StudyAttr.RESUMED_ACROSS) or []), now])
