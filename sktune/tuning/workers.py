"""Which process runs which trial, and the trials a killed run left RUNNING.

Trials record their host and pid (``worker_tag``): a RUNNING trial whose process is gone
from this host is failed at once on resume, where a journal storage has no heartbeat, and
an RDB storage's heartbeat would wait for its grace period.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from datetime import datetime
from typing import Any

import optuna
from optuna.storages import BaseStorage
from optuna.trial import TrialState

from sktune.tuning.attrs import TrialAttr
from sktune.tuning.trial_writer import mark_interrupted

log = logging.getLogger(__name__)

GRACE_PERIOD_S = 30  # a RUNNING trial silent this long belongs to a dead process


def worker_tag() -> dict[str, Any]:
    """This process, and when it took the record (``at``: epoch seconds): Optuna's
    ``datetime_start`` is the local time of the host that wrote it, naive, so a trial of a
    host in another time zone looked hours old, or hours from starting (``records.started_at``)."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "at": time.time()}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_this_process(tag: dict[str, Any]) -> bool:
    """Whether a ``worker_tag`` names this process (its host and pid)."""
    return (tag.get("host"), tag.get("pid")) == (socket.gethostname(), os.getpid())


def may_be_alive(tag: dict[str, Any]) -> bool:
    """Whether the process a ``worker_tag`` names may still run: False only for a process of
    this host that is gone (another host's processes cannot be looked at from here)."""
    return tag.get("host") != socket.gethostname() or _alive(int(tag.get("pid", 0)))


def fail_orphaned_trials(study: optuna.Study, storage: BaseStorage, untagged: bool = True) -> list[int]:
    """Mark FAIL the RUNNING trials whose process on this host no longer exists, and those
    that never got a worker tag although older than the grace period: a worker tags its trial
    within milliseconds of taking it (``sampler.record_worker_at_ask``), so an untagged one is
    a run stopped between the two (``storage``: the one the study was opened on).
    ``untagged=False``: only the former, while other workers may be between the two now (and
    the age of an untagged trial is read off another host's clock)."""
    failed: list[int] = []
    study_id = storage.get_study_id_from_name(study.study_name)
    now = datetime.now()
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        tag = trial.user_attrs.get(TrialAttr.WORKER)
        if not tag:
            if not untagged:
                continue
            started = trial.datetime_start
            if started is None or (now - started).total_seconds() < GRACE_PERIOD_S:
                continue
        elif may_be_alive(tag) or tag.get("pid") == os.getpid():
            continue
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, trial.number)
        mark_interrupted(storage, trial_id)
        storage.set_trial_state_values(trial_id, TrialState.FAIL)
        failed.append(trial.number)
    if failed:
        log.warning("trials %s were left RUNNING by a killed run; marked failed", failed)
    return failed


def other_local_workers(study: optuna.Study) -> list[int]:
    """Pids of other live sktune processes on this host running trials of ``study``."""
    host, me = socket.gethostname(), os.getpid()
    pids = set()
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        tag = trial.user_attrs.get(TrialAttr.WORKER) or {}
        if tag.get("host") == host and tag.get("pid") != me and _alive(int(tag.get("pid", 0))):
            pids.add(int(tag["pid"]))
    return sorted(pids)
