"""Who prepares a study: the worker that created it (its creator). Workers started with it
wait for it (``wait_for_creator``) and take the space inputs it recorded, unless it is gone.

Each worker used to measure its own op profile and probe answers and record them as the
study's, and profiles differ by noise: the stored profile could be one worker's and the
space another's (docs/architecture.md, "Many workers").
"""

from __future__ import annotations

import contextlib
import logging
import threading
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
    """Say in the study that this run created it, so that it prepares it; its heartbeat
    first, at 0 (``creator_heartbeat`` raises it), so that a worker that sees the creator
    sees its heartbeat."""
    study.set_user_attr(StudyAttr.CREATOR_BEAT, 0)
    study.set_user_attr(StudyAttr.CREATOR, {**worker_tag(), "at": time.time()})


RECORD_POLL_S = 0.1
RECORD_WAIT_S = 5.0


def await_creator_record(study: optuna.Study) -> None:
    """For a study that this run loaded: wait a moment for its creator's record, if missing.

    Creating a study and recording its creator are two writes (Optuna sets no attribute
    as it creates). A worker that loads the study between them would see a study without
    a creator, measure its own space inputs and prepare the study beside the creator:
    the spaces that differ that ``wait_for_creator`` exists to prevent. A study that
    never gets a record (made by an older sktune, or by Optuna itself) costs this wait once.
    """
    for _ in range(round(RECORD_WAIT_S / RECORD_POLL_S)):
        if {StudyAttr.CREATOR, StudyAttr.SPACE} & _user_attrs(study).keys():
            return
        pause(RECORD_POLL_S)


PREPARE_POLL_S = 1.0  # how often a worker waiting for the study's creator looks at the study
# The creator's worker has WORKER_START_TIMEOUT_S to start, or the creator fails and deletes
# the study (``dropped_unless_prepared``); preparing takes seconds more. A creator that
# created it longer ago is gone: the bound for a creator without a heartbeat (an older
# sktune), and where the clocks of two hosts disagree by less than the slack.
CREATOR_SLACK_S = 120.0
CREATOR_PATIENCE_S = WORKER_START_TIMEOUT_S + CREATOR_SLACK_S
# A creator killed on another host cannot be looked at from here (pid), and the clocks of
# two hosts need not agree: so its heartbeat is a count, and its waiters time its silence
# on their own clock. Silent for CREATOR_SILENCE_S (6 beats missed): gone.
CREATOR_BEAT_S = 10.0
CREATOR_SILENCE_S = 60.0


@contextlib.contextmanager
def creator_heartbeat(study: optuna.Study, created: bool) -> Iterator[None]:
    """While the creator prepares the study, raise its heartbeat every ``CREATOR_BEAT_S``
    (a thread); nothing for a run that did not create the study.

    It stops once the study is prepared (its space is written), or when the run ends or
    fails. Before it, a creator killed on another host during its start-up kept its
    waiters for up to ``CREATOR_PATIENCE_S`` (12 minutes).
    """
    if not created:
        yield
        return
    stop = threading.Event()

    def beat() -> None:
        count = 0
        while not stop.wait(CREATOR_BEAT_S):
            try:
                if StudyAttr.SPACE in study.user_attrs:
                    return
                count += 1
                study.set_user_attr(StudyAttr.CREATOR_BEAT, count)
            except Exception as exc:  # the study deleted (a failed start-up), the storage down: the run says why
                log.debug("the creator's heartbeat stopped: %s", mask_url(str(exc)))
                return

    thread = threading.Thread(target=beat, name="sktune-creator-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=CREATOR_BEAT_S)


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
    It does not wait for a creator that is gone from this host, whose heartbeat has been
    silent for ``CREATOR_SILENCE_S`` (killed on another host), or that created the study
    longer ago than any start-up takes (``CREATOR_PATIENCE_S``): then it prepares the
    study itself, as the creator would have.
    """
    last_beat, silent_s = None, 0.0
    while StudyAttr.SPACE not in (attrs := _user_attrs(study)):
        beat = attrs.get(StudyAttr.CREATOR_BEAT)  # None: a creator without a heartbeat (older sktune)
        # Polls counted, not clock read: a poll takes at least PREPARE_POLL_S, so a live
        # creator is never thought silent early.
        silent_s = silent_s + PREPARE_POLL_S if beat == last_beat else 0.0
        last_beat = beat
        if not _awaited(attrs) or (beat is not None and silent_s > CREATOR_SILENCE_S):
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
