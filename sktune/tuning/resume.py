"""Create a study or resume it: the same graph, space and settings, or a clear refusal.

A new study records what it tunes (the fingerprint) and queues its first starting point; a
resumed one must match it, and its trials orphaned by a killed run are failed first. The
starting points are queued one at a time (``StartingQueue``), so that a trial queued during
the search (the culprit's repair, ``dcci_seed.py``) runs next instead of behind all of them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import optuna

from sktune.errors import SktuneError
from sktune.space.search_space import SearchSpace
from sktune.tuning.budget import ClearlyWorsePruner
from sktune.tuning.records import StudyAttr, TrialAttr
from sktune.tuning.sampler import attach_space, hopeless_filter, make_sampler
from sktune.tuning.space_setup import starting_points
from sktune.tuning.storage import fail_orphaned_trials, make_storage, mask_url, may_be_alive, worker_tag
from sktune.tuning.supervisor import WORKER_START_TIMEOUT_S
from sktune.pipe.workload import Workload

log = logging.getLogger(__name__)

FIXED = "fixed_params"  # Optuna's system attribute of an enqueued trial
Named = tuple[str, dict[str, Any]]  # (anchor name, parameters)
CPU_KEYS = ("cpu_capability", "vec_isa")  # host_cpu.vector_facts, in a CPU backend's environment


class StartingQueue:
    """The starting points (warm-start plans, anchors, seeds), queued one at a time, in order.

    Optuna runs the WAITING trials oldest first. With every starting point queued at once, a
    trial queued during the search (``dcci_seed.py``) waited behind all of them, past a quick
    budget. So at most one waits: after each trial (an Optuna callback: ``loop.search``), when
    none waits, the next starting point not yet in the study is queued. What is left is read
    from the study (a plan already queued, run or sampled there counts as done, as
    ``enqueue_trial(skip_if_exists=True)`` would say), not kept here: a resumed run and many
    workers on one storage continue the same list. Two workers topping up at the same moment
    may queue one plan twice; the second waits while the first runs, then takes its
    outcome without a compile (``reuse.py``). A worker that finds the queue empty while
    another tops it up asks the sampler for that trial.
    """

    def __init__(self, points: Sequence[Named]) -> None:
        self.points = tuple(points)

    def pending(self, study: optuna.Study) -> list[Named]:
        """The starting points whose parameters no trial of the study has (queued, run or sampled)."""
        present = [t.system_attrs.get(FIXED, t.params) for t in study.get_trials(deepcopy=False)]
        return [(name, params) for name, params in self.points if params not in present]

    def top_up(self, study: optuna.Study) -> str | None:
        """Queue the next pending starting point unless a trial is waiting; its name, or None."""
        if study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
            return None
        left = self.pending(study)
        if not left:
            return None
        name, params = left[0]
        study.enqueue_trial(params, user_attrs={TrialAttr.ANCHOR: name})
        return name

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        self.top_up(study)


def open_study(name: str, storage: str, seed: int | None) -> tuple[optuna.Study, bool]:
    """Create the study or load it to resume, and whether this call created it; a bad
    storage URL is a user error. The creator says so in the study (``StudyAttr.CREATOR``):
    workers started with it wait for it to prepare the study (``wait_for_creator``)."""
    sampler, pruner = make_sampler(seed), ClearlyWorsePruner()
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
        message = mask_url(f"{type(exc).__name__}: {exc}".splitlines()[0])
        raise SktuneError(f"cannot open study {name!r} in {mask_url(storage)}: {message}") from None
    if created:
        study.set_user_attr(StudyAttr.CREATOR, {**worker_tag(), "at": time.time()})
    fail_orphaned_trials(study, backend)
    return study, created


PREPARE_POLL_S = 1.0  # how often a worker waiting for the study's creator looks at the study
# The creator's worker has WORKER_START_TIMEOUT_S to start, or the creator fails and deletes
# the study (``dropped_unless_prepared``); preparing takes seconds more. A creator silent for
# longer was killed where this host cannot see it (another host), or its pid was reused.
CREATOR_SLACK_S = 120.0
CREATOR_PATIENCE_S = WORKER_START_TIMEOUT_S + CREATOR_SLACK_S


def pause(seconds: float) -> None:
    time.sleep(seconds)


def measures_space_inputs(study: optuna.Study, created: bool) -> bool:
    """Whether this run's worker measures the op profile and probe answers: only where it
    will record them.

    A prepared study holds them (a resumed run searches the space they gave), and a worker
    started with the study's creator waits for the creator's (``wait_for_creator``). Each
    used to measure its own and drop them: work done twice, beside the creator's own
    probe compiles on the same cores (docs/measured.md, "Compile cost"). Measured: a
    study created here, or one whose creator is not worth waiting for; and a multi-shape
    study from before the per-shape answers were stored (its yardsticks need them).
    """
    attrs = _user_attrs(study)
    if StudyAttr.SPACE in attrs:
        return StudyAttr.SHAPES in attrs and StudyAttr.EXACTNESS_BY_SHAPE not in attrs
    return created or not _awaited(attrs)


def wait_for_creator(study: optuna.Study) -> bool:
    """Wait until the study is prepared (``prepare`` wrote its space); whether it is.

    Workers started together each measured their own op profile and probe answers, and
    profiles differ by noise. Each one used to record its own as the study's, attribute by
    attribute, so the stored profile could be one worker's and the space another's, and
    the workers searched spaces that differed. Now only the creator records them; a
    worker that loaded the study waits for them and takes them (``reuse_space_inputs``).
    It does not wait for a creator that is gone from this host, or that created the study
    longer ago than any start-up takes (``CREATOR_PATIENCE_S``): then it prepares the
    study itself, as the creator would have.
    """
    while StudyAttr.SPACE not in (attrs := _user_attrs(study)):
        if not _awaited(attrs):
            return False
        pause(PREPARE_POLL_S)
    return True


def awaited_creator(study: optuna.Study) -> str | None:
    """The run that this one waits for, in words (``wait_for_creator``); None: no wait."""
    attrs = _user_attrs(study)
    if StudyAttr.SPACE in attrs or not _awaited(attrs):
        return None
    creator = attrs[StudyAttr.CREATOR]
    return f"the study's creator, pid {creator['pid']} on {creator['host']}"


def _awaited(attrs: dict[str, Any]) -> bool:
    """Whether the study's creator may still prepare it."""
    creator = attrs.get(StudyAttr.CREATOR)
    return bool(creator) and time.time() - creator["at"] <= CREATOR_PATIENCE_S and may_be_alive(creator)


def _user_attrs(study: optuna.Study) -> dict[str, Any]:
    try:
        return study.user_attrs
    except KeyError:  # the storages' answer for a study that is gone
        raise SktuneError(f"study {study.study_name!r} was deleted while this run waited for the run that "
                          "created it, which failed before it began (its output says why)") from None


@contextlib.contextmanager
def dropped_unless_prepared(study: optuna.Study, created: bool, storage: str) -> Iterator[None]:
    """Delete the study this run created if the run fails (or is stopped) before preparing it.

    Such a study holds nothing (no space, no trial), yet it was listed among the storage's
    studies and ``sktune report`` wrote an empty report of it: a model file whose
    ``build_model`` raised, say, left one behind. A worker that was waiting for it
    (``wait_for_creator``) says so and stops.
    """
    try:
        yield
    except BaseException:
        if created:
            _delete_if_empty(study, storage)
        raise


def _delete_if_empty(study: optuna.Study, storage: str) -> None:
    try:
        if StudyAttr.SPACE not in study.user_attrs and not study.get_trials(deepcopy=False):
            optuna.delete_study(study_name=study.study_name, storage=make_storage(storage))
    except Exception as exc:  # e.g. the storage went down: the run's own error is the one to show
        log.warning("could not delete the empty study %r: %s", study.study_name, mask_url(str(exc)))


def fingerprint(workload: Workload) -> dict[str, Any]:
    """What a study tunes: model file, graph, inputs, backend and versions."""
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
    }


def prepare(study: optuna.Study, workload: Workload, space: SearchSpace, model_path: Path,
            settings: dict[str, Any], allow_changed: bool = False,
            first: Sequence[Named] = ()) -> StartingQueue:
    """Record what the study tunes (a new study) and queue the first pending starting point;
    the queue, for the search to top up after each trial (``StartingQueue``).

    ``first`` (warm-start plans, named) come before the anchors and seeds, so they run first.

    On resume the search space and ``settings`` (threads, input sets) must match: trials
    timed or verified differently do not compare. A changed fingerprint (model file,
    versions...) is refused unless ``allow_changed``.
    """
    # The sampler's local search walks this space, skipping what the objective would skip.
    attach_space(study, space, hopeless_filter(space, workload.targets, workload.exact()))
    queue = StartingQueue([*first, *starting_points(space, workload)])
    existing = study.user_attrs.get(StudyAttr.SPACE)
    if existing is not None:
        _check_resumable(study, existing, workload, space, settings, allow_changed)
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
    queue.top_up(study)
    # Last: workers starting together treat the study as prepared once "space" is there, so
    # everything they check against must already be written (seen: "--input-sets None").
    study.set_user_attr(StudyAttr.SPACE, space.signature())
    return queue


def _check_resumable(study: optuna.Study, existing: dict[str, Any], workload: Workload,
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
    old, new = study.user_attrs.get(StudyAttr.FINGERPRINT, {}), fingerprint(workload)
    # A study from before sktune recorded the CPU says nothing about it: not a change.
    compared = [k for k in new if k in old or k not in CPU_KEYS]
    changed = [f"{k}: {old.get(k)!r} → {new[k]!r}" for k in compared if old.get(k) != new[k]]
    if changed and not allow_changed:
        raise SktuneError(
            f"study {name!r} was created for another model or machine; changed: " + "; ".join(changed)
            + ". Use a new --study name, or --allow-changed to resume anyway"
        )
