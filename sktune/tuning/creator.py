"""Who prepares a study: the worker that created it (its creator). Workers started with it
wait for it (``wait_for_creator``) and take the space inputs it recorded, unless it is gone.

Each worker used to measure its own op profile and probe answers and record them as the
study's, and profiles differ by noise: the stored profile could be one worker's and the
space another's (README, "Many workers on one study").
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import optuna

from sktune.errors import SktuneError
from sktune.tuning.attrs import StudyAttr, is_prepared
from sktune.tuning.storage import mask_url
from sktune.tuning.workers import may_be_alive, worker_tag
from sktune.tuning.supervisor import WORKER_START_TIMEOUT_S

log = logging.getLogger(__name__)


def record_creator(study: optuna.Study) -> dict[str, Any]:
    """Say in the study that this run created it, so that it prepares it; the record. Its
    heartbeat first, at 0 (``CreatorHeartbeat`` raises it), so that a worker that sees the
    creator sees its heartbeat."""
    record = worker_tag()
    study.set_user_attr(StudyAttr.CREATOR_BEAT, 0)
    study.set_user_attr(StudyAttr.CREATOR, record)
    return record


def record_waiter(study: optuna.Study) -> None:
    """Say in a study not yet prepared that a worker loaded it and may wait for its creator:
    a creator stopped during its start-up then hands the study over instead of deleting it
    (``unprepared.dropped_unless_prepared``). The last one to load it is enough to know of."""
    if not is_prepared(_user_attrs(study)):
        study.set_user_attr(StudyAttr.WAITER, worker_tag())


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
# the study (``unprepared.dropped_unless_prepared``); preparing takes seconds more. A creator
# without a heartbeat (an older sktune) that created it longer ago is gone.
CREATOR_SLACK_S = 120.0
CREATOR_PATIENCE_S = WORKER_START_TIMEOUT_S + CREATOR_SLACK_S
# A creator killed on another host cannot be looked at from here (pid), and the clocks of
# two hosts need not agree: so its heartbeat is a count, and its waiters time its silence
# on their own clock. Silent for CREATOR_SILENCE_S (6 beats missed): gone.
CREATOR_BEAT_S = 10.0
CREATOR_SILENCE_S = 60.0


class CreatorHeartbeat:
    """While this run prepares the study as its creator, raise its heartbeat every
    ``CREATOR_BEAT_S`` (a thread); ``start`` it there, and leave it (``with``) at the end.

    It stops once the study is prepared (its space is written) or deleted, or when the run
    ends or fails; a storage error misses one beat, not all (a live creator thought dead
    would have its waiters prepare the study beside it). Before it, a creator killed on
    another host during its start-up kept its waiters for up to ``CREATOR_PATIENCE_S``
    (12 minutes).
    """

    def __init__(self, study: optuna.Study) -> None:
        self.study = study
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._beat, name="sktune-creator-heartbeat", daemon=True)
            self._thread.start()

    def _beat(self) -> None:
        count = 0
        while not self._stop.wait(CREATOR_BEAT_S):
            try:
                if is_prepared(self.study.user_attrs):
                    return
                count += 1
                self.study.set_user_attr(StudyAttr.CREATOR_BEAT, count)
            except KeyError:  # the study was deleted (a failed start-up): the run says why
                return
            except Exception as exc:  # e.g. "database is locked": the next beat tries again
                log.debug("the creator's heartbeat missed a beat: %s", mask_url(str(exc)))

    def __enter__(self) -> "CreatorHeartbeat":
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=CREATOR_BEAT_S)


def creator_heartbeat(study: optuna.Study, created: bool) -> CreatorHeartbeat:
    """The heartbeat of this run as the study's creator: beating if it created the study,
    else ready to ``start`` should it take over (``take_over``)."""
    heartbeat = CreatorHeartbeat(study)
    if created:
        heartbeat.start()
    return heartbeat


TAKEOVER_SETTLE_S = 2.0  # how long a worker that took over waits to see whether another one did too


def take_over(study: optuna.Study) -> bool:
    """Record this run as the creator of a study whose creator is gone; whether it now is.

    Every worker waiting for the gone creator notices it within a poll of the others, and
    each would prepare the study over the others' writes. Each records itself; the last
    record stands, and the others wait for that one (``wait_for_creator`` starts its count
    of silence again when the record changes).
    """
    mine = record_creator(study)
    pause(TAKEOVER_SETTLE_S)
    return _user_attrs(study).get(StudyAttr.CREATOR) == mine


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
    if is_prepared(attrs):
        return StudyAttr.SHAPES in attrs and StudyAttr.EXACTNESS_BY_SHAPE not in attrs
    return created or not _awaited(attrs)


def wait_for_creator(study: optuna.Study, on_new_creator: Callable[[str], None] | None = None) -> bool:
    """Wait until the study is prepared (``prepare`` wrote its space); whether it is.
    ``on_new_creator`` hears who it waits for when that changes (another waiter took over).

    Workers started together each measured their own op profile and probe answers, and
    profiles differ by noise. Each one used to record its own as the study's, attribute by
    attribute, so the stored profile could be one worker's and the space another's, and
    the workers searched spaces that differed. Now only the creator records them; a
    worker that loaded the study waits for them and takes them (``reuse_space_inputs``).
    It does not wait for a creator that is gone from this host, or whose heartbeat has
    been silent for ``CREATOR_SILENCE_S`` (killed on another host); nor for one without a
    heartbeat (an older sktune) that created the study longer ago than any start-up takes
    (``CREATOR_PATIENCE_S``). Then it returns False, and the caller takes over
    (``take_over``) or waits again for the worker that did.
    """
    heard, silent_s = None, 0.0
    while not is_prepared(attrs := _user_attrs(study)):
        beat = attrs.get(StudyAttr.CREATOR_BEAT)  # None: a creator without a heartbeat (older sktune)
        # Polls counted, not clock read: a poll takes at least PREPARE_POLL_S, so a live
        # creator is never thought silent early. A new creator (one took over) starts it again.
        now = (attrs.get(StudyAttr.CREATOR), beat)
        silent_s = silent_s + PREPARE_POLL_S if now == heard else 0.0
        if heard is not None and now[0] != heard[0] and now[0] and on_new_creator:
            on_new_creator(_named(now[0]))
        heard = now
        if not _awaited(attrs) or (beat is not None and silent_s > CREATOR_SILENCE_S):
            return False
        pause(PREPARE_POLL_S)
    return True


def awaited_creator(study: optuna.Study) -> str | None:
    """The run that this one waits for, in words (``wait_for_creator``); None: no wait."""
    attrs = _user_attrs(study)
    if is_prepared(attrs) or not _awaited(attrs):
        return None
    return _named(attrs[StudyAttr.CREATOR])


def _named(creator: dict[str, Any]) -> str:
    return f"the study's creator, pid {creator['pid']} on {creator['host']}"


def _awaited(attrs: dict[str, Any]) -> bool:
    """Whether the study's creator may still prepare it. Its clock is compared with this
    host's only where it has no heartbeat (an older sktune)."""
    creator = attrs.get(StudyAttr.CREATOR)
    if not creator or not may_be_alive(creator):
        return False
    return StudyAttr.CREATOR_BEAT in attrs or time.time() - creator["at"] <= CREATOR_PATIENCE_S


def _user_attrs(study: optuna.Study) -> dict[str, Any]:
    try:
        return study.user_attrs
    except KeyError:  # the storages' answer for a study that is gone
        raise SktuneError(f"study {study.study_name!r} was deleted while this run waited for the run that "
                          "created it, which failed before it began (its output says why)") from None
