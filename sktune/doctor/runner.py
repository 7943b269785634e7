"""Run every doctor check, each isolated and bounded.

Checks run one after another in this process (the device and the emulator's state are
per process), each in a daemon thread joined with a timeout: a compile or first forward
that hangs the device costs one row (``could not check: timed out``), and the checks that
need the device after it are skipped, since a hung device answers nothing more. The hung
thread is left behind; it dies with the process. An exception in a check becomes its row.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from sktune.doctor import cache_checks, compile_checks, env_checks, meta_checks, profile_checks
from sktune.doctor.records import CONFIRMED, COULD_NOT, CheckResult, DoctorReport, could_not, from_exception
from sktune.doctor.session import DoctorSession
from sktune.errors import SOURCE_CANN, SktuneError, TorchNpuMissing, torch_npu_installed

log = logging.getLogger(__name__)

#: Per check, seconds: a host's first static compile of the tiny model takes minutes.
DEFAULT_TIMEOUT_S = 900.0
TIMED_OUT = f"{COULD_NOT}timed out after"  # the start of a row left running
PROBE_TIMED_OUT = "the device check timed out after"  # in each device row once the probe was left running


@dataclass(frozen=True)
class Check:
    name: str
    run: Callable[[DoctorSession], CheckResult]
    device: bool = True  # runs something on the device: skipped once a check has hung it


CHECKS: tuple[Check, ...] = (
    Check("versions", env_checks.check_versions, device=False),
    Check("cann_version", env_checks.check_cann_version, device=False),
    Check("marker_pairing", compile_checks.check_marker_pairing),
    Check("options_accepted", compile_checks.check_options_accepted),
    Check("sk_meta_location", meta_checks.check_sk_meta_location),
    Check("effective_options_dump", meta_checks.check_effective_options),
    Check("fail_reason_log", meta_checks.check_fail_reason_log),
    Check("profile_files", profile_checks.check_profile_files),
    Check("profile_columns", profile_checks.check_profile_columns),
    Check("superkernel_rows", profile_checks.check_superkernel_rows),
    Check("step_trace_free", profile_checks.check_step_trace_free),
    Check("static_cache_option_sets", cache_checks.check_cache_option_sets),
    Check("static_cache_scope_placements", cache_checks.check_cache_scope_placements),
    Check("hang_trace_path", env_checks.check_hang_trace_path),
)
CHECK_NAMES = tuple(c.name for c in CHECKS)
#: Runs before the first device check: an unusable device is one cause, not a row of refusals each.
DEVICE_PROBE = Check("device", env_checks.check_device)


def run_one(check: Check, session: DoctorSession, timeout_s: float) -> CheckResult | None:
    """The check's row, or None when it did not finish within ``timeout_s``."""
    box: list[CheckResult] = []

    def target() -> None:
        try:
            torch.set_grad_enabled(False)  # per thread: compiles trace inference graphs, as a trial's do
            box.append(check.run(session))
        except Exception as exc:  # one check's failure is its own row
            log.debug("doctor check %s raised", check.name, exc_info=True)
            box.append(from_exception(check.name, exc))

    thread = threading.Thread(target=target, name=f"sktune-doctor-{check.name}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        return None
    if not box:
        return could_not(check.name, "the check ended without a result")
    return replace(box[0], name=check.name)


def _timed_out(name: str, timeout_s: float) -> CheckResult:
    return could_not(name, f"timed out after {timeout_s:g} s (a hang? a slower host needs a larger --timeout)")


def run_checks(session: DoctorSession, checks: Sequence[Check] = CHECKS, timeout_s: float = DEFAULT_TIMEOUT_S,
               probe: Check | None = None) -> tuple[CheckResult, ...]:
    """Each check in turn; ``probe`` (a device check) runs before the first device check, and
    when it is not ``confirmed`` every device row says the device is not usable instead."""
    results: list[CheckResult] = []
    hung: str | None = None
    unusable: str | None = None
    for check in checks:
        if probe is not None and check.device:
            seen = run_one(probe, session, timeout_s)
            probe = None
            if seen is None:  # its thread may hold the device: nothing after it is run
                unusable = f"{PROBE_TIMED_OUT} {timeout_s:g} s; a slow host needs a larger --timeout"
            elif seen.kind != CONFIRMED:
                unusable = seen.status.removeprefix(COULD_NOT)
        if unusable is not None and check.device:
            results.append(could_not(check.name, f"the device is not usable ({unusable})"))
            continue
        if hung is not None and check.device:
            results.append(could_not(check.name, f"skipped: {hung} did not finish, the device may be hung"))
            continue
        result = run_one(check, session, timeout_s)
        if result is None:
            hung = check.name
            result = _timed_out(check.name, timeout_s)
        results.append(result)
    return tuple(results)


@contextmanager
def fresh_directory() -> Iterator[Path]:
    """A new working directory for the run (kept: its profiles and sk_meta are evidence),
    so that the on-disk static-kernel cache starts empty and nothing lands in the user's."""
    previous = os.getcwd()
    path = Path(tempfile.mkdtemp(prefix="sktune-doctor-"))
    os.chdir(path)
    try:
        yield path
    finally:
        os.chdir(previous)


def run_doctor(timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[DoctorReport, Path]:
    """Every check on this host's npu backend; raises SktuneError when there is none."""
    from sktune.backends.npu import NpuBackend

    try:
        backend = NpuBackend(for_trials=True)
        backend.keep_profiles = True  # the profile checks read the timing profile's files
    except TorchNpuMissing as exc:  # not run's advice (--backend inductor): doctor has nothing to check here
        fix = (SOURCE_CANN if torch_npu_installed() else
               "run it on the Ascend host where you will tune, with pip install 'sktune[npu]'")
        raise SktuneError(f"sktune doctor checks an Ascend host, and torch-npu cannot be used here ({exc.reason}); "
                          f"{fix}") from None
    with fresh_directory() as workdir:
        session = DoctorSession(backend)
        emulated = backend.emulated
        results = run_checks(session, timeout_s=timeout_s, probe=DEVICE_PROBE)
    if emulated:  # every row says so (README, "The emulated Ascend")
        results = tuple(replace(r, detail=f"(emulated) {r.detail}".rstrip()) for r in results)
    device = "npu-emulator" if emulated else backend.environment()["device"] or "npu"
    return DoctorReport(device, emulated, results, str(workdir)), workdir


def timed_out(report: DoctorReport) -> bool:
    """A check was left running (its thread may hold the device)."""
    return any(r.status.startswith(TIMED_OUT) or PROBE_TIMED_OUT in r.status for r in report.checks)


__all__ = ["CHECKS", "CHECK_NAMES", "DEFAULT_TIMEOUT_S", "DEVICE_PROBE", "Check", "run_checks", "run_doctor", "run_one", "timed_out"]
