"""What a trial's result says beside its timing, written to the study: the static-kernel
compile seconds (summed over the shapes it ran at) and, once per study, the warning that
CANN's effective options could not be compared (backends/npu_meta.py).
"""

from __future__ import annotations

import logging

import optuna

from sktune.backends.npu_meta import RECOGNISED_FORMS
from sktune.pipe.protocol import TrialResult
from sktune.tuning.records import StudyAttr
from sktune.tuning.trial_writer import add_static_compile

log = logging.getLogger(__name__)


def note_result(trial: optuna.Trial, result: TrialResult) -> None:
    """Add ``result``'s static compile to the trial's, and warn once per study about an
    absent or unrecognised effective-options dump (it never fails the trial)."""
    if result.static_compile is not None:
        add_static_compile(trial, result.static_compile)
    status = result.observed.get("effective_options")
    if status in (None, "checked") or StudyAttr.EFFECTIVE_OPTIONS_UNCHECKED in trial.study.user_attrs:
        return
    message = (f"the options CANN really used were not compared (first seen in trial {trial.number}: dump "
               f"{status}); sktune compares only {RECOGNISED_FORMS}. An out-of-range option would be clamped "
               "unnoticed, but sktune rejects those before compiling.")
    log.warning(message)
    trial.study.set_user_attr(StudyAttr.EFFECTIVE_OPTIONS_UNCHECKED, message)
