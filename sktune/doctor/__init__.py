"""``sktune doctor``: the first-run checklist on an Ascend host, as a command.

Each check runs a tiny model through one guess sktune (and its emulated Ascend) makes
about torch-npu and CANN, and reports ``confirmed``, ``differs: ...`` or
``could not check: ...`` (README, "On your first Ascend host, run sktune doctor").
"""

from sktune.doctor.records import CheckResult, DoctorReport, is_valid_status
from sktune.doctor.runner import CHECK_NAMES, CHECKS, Check, run_checks, run_doctor

__all__ = ["CHECKS", "CHECK_NAMES", "Check", "CheckResult", "DoctorReport", "is_valid_status", "run_checks",
           "run_doctor"]
