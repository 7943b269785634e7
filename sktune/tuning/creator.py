"""Who prepares a study: the worker that created it (its creator). Workers started with it
wait for it (``wait_for_creator``) and take the space inputs it recorded, unless it is gone.

Each worker used to measure its own op profile and probe answers and record them as the
study's, and profiles differ by noise: the stored profile could be one worker's and the
space another's (docs/architecture.md, "Many workers").
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any

import optuna

from sktune.errors import SktuneError
from sktune.tuning.records import StudyAttr
from sktune.tuning.storage import make_storage, mask_url, may_be_alive, worker_tag
from sktune.tuning.supervisor import WORKER_START_TIMEOUT_S

log = logging.getLogger(__name__)


def record_creator(study: optuna.Study) -> None:
    """Say in the study that this run created it, so that it prepares it."""
    study.set_user_attr(StudyAttr.CREATOR, {**worker_tag(), "at": time.time()})


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
