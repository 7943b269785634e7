"""Checks of the host around the device: versions and where a hang's trace would go."""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch

from sktune.doctor.records import CheckResult, confirmed, could_not, differs, info
from sktune.doctor.session import DoctorSession
from sktune.plan import Plan

#: Where CANN's toolkit may live, in the order looked at (its set_env.sh exports the first two).
TOOLKIT_ENV = ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")
DEFAULT_TOOLKIT = Path("/usr/local/Ascend/ascend-toolkit/latest")
# torch-npu 2.14.0's own CANN lookup (utils/collect_env.get_cann_version) reads the
# ``version=`` line of the first ``ascend_*_install.info`` under ASCEND_HOME_PATH.
_INSTALL_INFO = re.compile(r"ascend_.*_install\.info")
_VERSION_LINE = re.compile(r"^\s*version\s*=\s*(\S.*?)\s*$", re.IGNORECASE | re.MULTILINE)
_SEARCH_DEPTH = 3  # the .info files sit in <toolkit>/<arch>-linux/ or one level below


def check_versions(session: DoctorSession) -> CheckResult:
    """torch-npu has the full SuperKernel key set and pins the torch that is installed."""
    backend = session.backend
    npu = backend.torch_npu_version
    return judge_versions(torch.__version__, npu, backend.key_set.name, backend.emulated)


def judge_versions(torch_version: str, npu_version: str, key_set: str, emulated: bool) -> CheckResult:
    name = "versions"
    seen = f"torch {torch_version}, torch-npu {npu_version}{' (emulated)' if emulated else ''}, key set {key_set}"
    # Each torch-npu release pins its torch (docs/npu_api.md, "Install and import"); the
    # emulator stands in for any torch-npu on the torch that is installed: nothing to check.
    unpinned = None if emulated or _release(torch_version) == _release(npu_version) else (
        f"torch {torch_version} is not the torch torch-npu {npu_version} pins ({_release(npu_version)}.*)")
    if key_set != "full":  # the pin is checked on old releases too: both findings in one row
        old = f"torch-npu {npu_version} has the old SuperKernel key set: only scopes are searched"
        return differs(name, old + (f"; {unpinned}" if unpinned else ""), seen)
    if emulated:
        return could_not(name, "emulated: the emulator stands in for any torch-npu, so the torch it pins is "
                         "not checked", seen)
    if unpinned:
        return differs(name, unpinned, seen)
    return confirmed(name, seen)


def check_device(session: DoctorSession) -> CheckResult:
    """The device answers before any check relies on it: torch.npu says it is there, and the
    tiny model and its unfused reference run on it. Not a row: the device rows say its cause."""
    name = "device"
    device = session.backend.device
    npu = getattr(torch, "npu", None)
    if npu is None or not npu.is_available():
        return could_not(name, f"torch.npu.is_available() is False (tensors go to {device!r})")
    try:
        session.reference_call()()  # builds the tiny model on the device and runs its reference once
    except Exception as exc:
        return could_not(name, f"the tiny model does not run on {device!r}: {type(exc).__name__}: {exc}")
    return confirmed(name, f"the tiny model's unfused reference ran on {device!r}")


def check_cann_version(session: DoctorSession) -> CheckResult:
    """Shown, not judged: docs/npu_api.md names no CANN release to compare with."""
    if session.backend.emulated:  # no toolkit to read: saying "confirmed" would claim a CANN that is not there
        return could_not("cann_version", "emulated: no CANN toolkit is read (the Ascend is the test emulator)")
    return judge_cann_version(cann_version_files())


def cann_version_files() -> list[tuple[Path, str | None]]:
    """(file, version) for each toolkit version file found, in the order looked at."""
    roots = [Path(os.environ[k]) for k in TOOLKIT_ENV if os.environ.get(k)] + [DEFAULT_TOOLKIT]
    found: list[tuple[Path, str | None]] = []
    for root in dict.fromkeys(roots):
        for path in _install_infos(root):
            match = _VERSION_LINE.search(path.read_text(errors="replace"))
            found.append((path, match.group(1) if match else None))
    return found


def judge_cann_version(found: list[tuple[Path, str | None]]) -> CheckResult:
    name = "cann_version"
    if not found:
        where = ", ".join([*(f"${k}" for k in TOOLKIT_ENV), str(DEFAULT_TOOLKIT)])
        return could_not(name, f"no ascend_*_install.info under {where} (source CANN's set_env.sh first)")
    versions = [(p, v) for p, v in found if v]
    if not versions:
        return differs(name, f"{found[0][0]} has no version= line")
    path, version = versions[0]
    return info(name, f"CANN {version} (from {path}); not compared: sktune's notes name no CANN release")


def _install_infos(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    out, level = [], [root.resolve()]
    for _ in range(_SEARCH_DEPTH):
        out += sorted(p for d in level for p in d.glob("*") if p.is_file() and _INSTALL_INFO.fullmatch(p.name))
        if out:
            return out
        level = [p for d in level for p in sorted(d.glob("*")) if p.is_dir()][:200]
    return out


def check_hang_trace_path(session: DoctorSession) -> CheckResult:
    """debug_op_exec_trace=1 is accepted on a plan that cannot hang, and the per-core trace
    of a real hang would land in the device log directory (README, "When a trial goes wrong").
    The device is never made to hang."""
    name = "hang_trace_path"
    backend = session.backend
    diagnostic = backend.diagnostic_plan(Plan.make(session.tiny.placement, session.main_options))
    if diagnostic is None:
        return could_not(name, f"torch-npu {backend.torch_npu_version} has no debug_op_exec_trace (old key set)")
    try:
        run = session.run("debug_op_exec_trace", diagnostic.scopes, diagnostic.option_dict)
    except Exception as exc:  # refused by npugraph_ex or CANN: that is the finding
        return differs(name, f"debug_op_exec_trace=1 refused: {type(exc).__name__}: {exc}")
    return judge_trace_dir(trace_dir(), bool(run.mismatches))


def trace_dir() -> Path:
    """Where CANN's per-core trace goes: $ASCEND_PROCESS_LOG_PATH, else ~/ascend/log; plog below it."""
    root = os.environ.get("ASCEND_PROCESS_LOG_PATH") or str(Path.home() / "ascend" / "log")
    return Path(root) / "debug" / "plog"


def judge_trace_dir(path: Path, mismatched: bool) -> CheckResult:
    """What is checked is the option; the location is sktune's reading of CANN, never observed
    (doctor never hangs the device), so the row names it as where a trace is looked for."""
    name = "hang_trace_path"
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    where = (f"sktune looks for a hang's per-core trace in {path} (where it reads CANN to write it; no trace was "
             "seen: doctor never hangs the device)")
    if existing is None or not os.access(existing, os.W_OK):
        return differs(name, f"{existing or path} is not writable: {where}")
    if mismatched:
        return differs(name, "debug_op_exec_trace=1 changed the outputs (not bitwise equal to the reference)", where)
    state = "exists" if existing == path else f"not there yet; {existing} is writable"
    return confirmed(name, f"debug_op_exec_trace=1 accepted (compile + first forward ran, outputs bitwise "
                           f"equal); {where} ({state})")


def _release(version: str) -> str:
    match = re.match(r"\d+\.\d+\.\d+", version)
    return match.group(0) if match else version
