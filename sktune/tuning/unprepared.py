"""A study stopped or failed before its creator prepared it: handed over or deleted.

A run creates its study before its worker starts, and prepares it (``resume.prepare``)
once the worker has described the model. Between the two, a study holds nothing; a run
that fails or is stopped there leaves no empty study behind, unless another worker that
loaded it can take it over (``creator.take_over``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import optuna

from sktune.tuning.attrs import StudyAttr, is_prepared
from sktune.tuning.storage import make_storage, mask_url
from sktune.tuning.workers import is_this_process, may_be_alive

log = logging.getLogger(__name__)


@contextlib.contextmanager
def dropped_unless_prepared(study: optuna.Study, created: bool, storage: str) -> Iterator[None]:
    """Delete the study this run created if the run fails (or is stopped) before preparing it.

    Such a study holds nothing (no space, no trial), yet it was listed among the storage's
    studies and ``sktune report`` wrote an empty report of it: a model file whose
    ``build_model`` raised, say, left one behind. A worker that was waiting for it
    (``wait_for_creator``) says so and stops: it would meet the same failure.

    A creator stopped (Ctrl-C, SIGTERM) while another worker had loaded the study hands it
    over instead: its record is emptied, and the waiting worker takes over at its next look
    (``take_over``). Deleting it ended that worker too, for a stop that was no failure.
    """
    try:
        yield
    except KeyboardInterrupt:  # Ctrl-C, and SIGTERM (cli/run_cmd.py's Terminated)
        # Its creator (this run, or one it took over from), or a waiter left with no creator (a
        # stop that reached every worker of a process group): hand over, else leave nothing.
        if created or _creator_is_this_run_or_none(study):
            _hand_over_or_delete(study, storage)
        raise
    except BaseException:
        if created:
            _delete_if_empty(study, storage)
        raise


def _hand_over_or_delete(study: optuna.Study, storage: str) -> None:
    try:
        attrs = study.user_attrs
        if is_prepared(attrs):
            return
        waiter = attrs.get(StudyAttr.WAITER)
        if waiter and may_be_alive(waiter) and not is_this_process(waiter):
            study.set_user_attr(StudyAttr.CREATOR, {})  # gone: a waiter takes over (``_awaited``)
            log.info("stopped before preparing the study: left to the worker waiting for it (pid %s on %s)",
                     waiter.get("pid"), waiter.get("host"))
            return
    except Exception as exc:  # e.g. the storage went down: deleting fails the same way
        log.warning("could not hand the study over: %s", mask_url(str(exc)))
        return
    _delete_if_empty(study, storage)


def stop_note(name: str, storage: str) -> str:
    """What a stopped run left, for its last line: its study's trials saved; nothing, the study
    not yet prepared and deleted; or the study handed to a worker that loaded it."""
    saved = f"completed trials are saved in study {name!r}; run the same command again to resume"
    try:
        study = optuna.load_study(study_name=name, storage=make_storage(storage))
        if not is_prepared(study.user_attrs):
            return "stopped before the study was prepared; another worker prepares it now (this run saved nothing)"
        if not study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
            return f"no trial completed yet; study {name!r} is prepared: run the same command again to tune it"
    except KeyError:  # no such study: it was deleted (``dropped_unless_prepared``)
        return "stopped before the study was prepared, so nothing was saved"
    except Exception:  # e.g. the database went down: do not claim the work is lost
        return saved
    return saved


def _creator_is_this_run_or_none(study: optuna.Study) -> bool:
    """An unprepared study that this run took over, or whose creator handed it to no one yet."""
    try:
        attrs = study.user_attrs
    except KeyError:  # deleted already
        return False
    creator = attrs.get(StudyAttr.CREATOR)
    return not is_prepared(attrs) and (creator == {} or (bool(creator) and is_this_process(creator)))


def _delete_if_empty(study: optuna.Study, storage: str) -> None:
    try:
        if not is_prepared(study.user_attrs) and not study.get_trials(deepcopy=False):
            optuna.delete_study(study_name=study.study_name, storage=make_storage(storage))
    except Exception as exc:  # e.g. the storage went down: the run's own error is the one to show
        log.warning("could not delete the empty study %r: %s", study.study_name, mask_url(str(exc)))
