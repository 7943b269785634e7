"""What a trial's result says beside its timing, written to the study: the static-kernel
compile seconds (summed over the shapes it ran at) and, once per study, the warning that
the compiler's effective options could not be compared (npu: backends/npu_meta.py). The
backend's result says what it found (``observed["effective_options"]``) and which dump forms
it compares (``observed["effective_options_forms"]``).
"""

from __future__ import annotations

import logging

import optuna

from sktune.pipe.protocol import TrialResult
from sktune.tuning.attrs import StudyAttr
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
    forms = result.observed.get("effective_options_forms", "the dump forms its backend recognises")
    message = (f"the options the compiler really used were not compared (first seen in trial {trial.number}: dump "
               f"{status}); sktune compares only {forms}. An out-of-range option would be clamped "
               "unnoticed, but sktune rejects those before compiling.")
    log.warning(message)
    trial.study.set_user_attr(StudyAttr.EFFECTIVE_OPTIONS_UNCHECKED, message)
