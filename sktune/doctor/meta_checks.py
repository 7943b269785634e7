"""Checks of CANN's SuperKernel metadata after a first forward: where ``sk_meta/`` is,
whether an effective-options dump is there and in what form, and the fail-reason log
(README, "The options CANN really used"; ``sktune/backends/npu_meta.py``)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sktune.backends.npu_meta import (FAIL_REASONS, RECOGNISED_FORMS, SK_META, compare_options, difference_cause, meta_files,
                                      read_effective_options)
from sktune.doctor.records import CheckResult, confirmed, could_not, differs
from sktune.doctor.session import CompiledRun, DoctorSession

FUSED_NODES = "sk_fused_nodes.log"
META_NAMES = (FAIL_REASONS, FUSED_NODES)
SEARCHED = f"{SK_META}/ and {SK_META}/<pid>/model_<id>/"  # the layouts the backend reads (meta_files)


def layout(path: Path, work_path: Path) -> str:
    """The directory of ``path`` under the work path, the pid and ids replaced by their names:
    ``sk_meta/``, ``sk_meta/<pid>/model_<id>/`` or whatever CANN wrote."""
    parts = path.parent.relative_to(work_path).parts
    shape = ["<pid>" if p == str(os.getpid()) else re.sub(r"\d+", "<id>", p) for p in parts]
    return "/".join(shape) + "/"


def _everywhere(work_path: Path) -> list[Path]:
    """Every sk_meta file anywhere below the work path, in any layout."""
    return sorted(p for n in META_NAMES for p in work_path.rglob(n) if p.is_file())


@dataclass(frozen=True)
class SecondCompile:
    """A second compile's own work path, and what the first compile's work path held after it."""

    label: str
    work_path: Path
    own: tuple[Path, ...]  # sk_meta files anywhere under its own work path
    first_dirs: int  # directories holding sk_meta files under the first compile's work path


def check_sk_meta_location(session: DoctorSession) -> CheckResult:
    name = "sk_meta_location"
    run = session.main_run()
    if run.meta_dir is None:
        return could_not(name, "the backend recorded no CANN work path for the compile")
    # The backend reads each compile's sk_meta from that compile's own work path: a second
    # compile (same options, so a cache hit on a host: seconds) tells whether CANN follows it.
    second: SecondCompile | str
    try:
        other = session.run("other_placement", session.tiny.other_placement, session.main_options)
    except Exception as exc:
        other, second = None, f"the second compile failed: {type(exc).__name__}: {exc}"
    anywhere = _everywhere(run.meta_dir)  # read after the second compile: it may have written there
    if other is not None:
        second = ("the backend recorded no CANN work path for the second compile" if other.meta_dir is None else
                  SecondCompile(other.label, other.meta_dir, tuple(_everywhere(other.meta_dir)),
                                len({p.parent for p in anywhere})))
    found = [p for n in META_NAMES for p in meta_files(run.meta_dir, n)]
    elsewhere = sorted(Path.cwd().glob(f"{SK_META}/**/{FAIL_REASONS}")) + sorted(
        Path.cwd().glob(f"{SK_META}/{FAIL_REASONS}"))
    return judge_sk_meta_location(run.meta_dir, found, elsewhere, anywhere, second)


def judge_sk_meta_location(work_path: Path, found: list[Path], elsewhere: list[Path], anywhere: list[Path],
                           second: SecondCompile | str) -> CheckResult:
    """``found``: files where the backend looks; ``anywhere``: below the work path in any layout;
    ``second``: what a second compile left, or why it could not be seen."""
    name = "sk_meta_location"
    if not found and anywhere:
        return differs(name, f"{anywhere[0].name} found in {layout(anywhere[0], work_path)} under the work path "
                             f"({anywhere[0].parent}), a layout the backend does not read (it reads {SEARCHED})")
    if not found:
        other = f"; an sk_meta/ was written in the working directory instead ({elsewhere[0]})" if elsewhere else ""
        return differs(name, f"no {FAIL_REASONS} or {FUSED_NODES} under the work path {work_path}/{SK_META}/"
                             f"{other}", "ASCEND_WORK_PATH and ASCEND_OP_COMPILE_SAVE_KERNEL_META=1 were set")
    forms = sorted({layout(p, work_path) for p in found})
    files = sorted({p.name for p in found})
    seen = f"{', '.join(files)} in {', '.join(forms)} under the work path {found[-1].parent}"
    if isinstance(second, str):
        return could_not(name, f"whether each compile writes under its own work path: {second}", seen)
    if not second.own:
        where = (f"; the first compile's work path now holds {second.first_dirs} sk_meta directories: CANN keeps "
                 "the first work path for the process" if second.first_dirs > 1 else "")
        return differs(name, f"the second compile ({second.label}) wrote no sk_meta under its own work path "
                             f"{second.work_path}{where}", f"the backend reads each trial's own; first: {seen}")
    return confirmed(name, f"{seen}; a second compile's ({second.label}) under its own work path "
                           f"({second.own[0].parent})")


def check_effective_options(session: DoctorSession) -> CheckResult:
    run = session.main_run()
    if run.meta_dir is None:
        return could_not("effective_options_dump", "the backend recorded no CANN work path for the compile")
    found = read_effective_options(run.meta_dir)
    return judge_effective_options(found.status, found.path, found.why, _requested(session, run), found.used)


def dump_differences(session: DoctorSession, run: CompiledRun) -> str | None:
    """How CANN's options dump of ``run`` differs from what was requested (keys missing from
    it, other values), or None when it matches or there is no readable dump."""
    if run.meta_dir is None:
        return None
    found = read_effective_options(run.meta_dir)
    if found.used is None:
        return None
    missing, differ, _ = compare_options(_requested(session, run), found.used)
    said = [text for text, _ in differ] + ([f"not in the dump: {', '.join(missing)}"] if missing else [])
    return "; ".join(said) or None


def _requested(session: DoctorSession, run: CompiledRun) -> dict[str, Any]:
    """The SuperKernel option map the backend sent for ``run``'s compile."""
    from sktune.backends.npu_option_schema import OPTIMIZE

    return session.backend.compile_options(run.plan).get(OPTIMIZE) or {}


def judge_effective_options(status: str, path: Path | None, why: str, requested: dict[str, Any],
                            used: dict[str, Any] | None) -> CheckResult:
    """``status`` of the dump (checked / absent / unrecognised) at ``path``; ``requested``: the
    option map sent; ``used``: the dump's map when it was read."""
    name = "effective_options_dump"
    where = f"{path.resolve()}" if path else ""
    if status != "checked" or used is None:
        consequence = "studies will warn once and say effective_options_checked: false"
        return differs(name, f"{status}: {why}", f"recognised: {RECOGNISED_FORMS}; {consequence}")
    missing, differ, compared = compare_options(requested, used)
    if differ:
        cause = difference_cause(differ)
        shown = "; ".join(text for text, _ in differ)
        return differs(name, f"the dump shows other options than requested ({cause}?): {shown}", where)
    if missing:
        return differs(name, f"requested keys not in the dump: {', '.join(missing)} ({compared} compared)", where)
    if not compared:
        return could_not(name, "the dump compared nothing: no SuperKernel option was requested on this compile",
                         where)
    return confirmed(name, f"sk_options.json: every option requested ({compared} compared) is one CANN used: {where}")


def check_fail_reason_log(session: DoctorSession) -> CheckResult:
    from sktune.measure.ascend_parsers import read_fusion_fail_reasons

    run = session.main_run()
    if run.meta_dir is None:
        return could_not("fail_reason_log", "the backend recorded no CANN work path for the compile")
    logs = meta_files(run.meta_dir, FAIL_REASONS)
    lines = [r for log in logs for r in read_fusion_fail_reasons(log)]
    return judge_fail_reason_log(logs, [(r["reason"], str(r["raw"])) for r in lines])


def judge_fail_reason_log(logs: list[Path], lines: list[tuple[str | None, str]]) -> CheckResult:
    """Present, every line's reason readable and one sktune knows; others shown as written."""
    from sktune.measure.ascend_parsers import is_known_fail_reason

    name = "fail_reason_log"
    if not logs:
        return differs(name, f"no {FAIL_REASONS} in the work path's {SK_META}/")
    where = logs[-1]
    unread = [raw for reason, raw in lines if reason is None]
    if unread:
        return differs(name, f"{len(unread)} of {len(lines)} lines have no reason sktune can read, e.g.: "
                             f"{unread[0]}", str(where))
    unknown = [raw for reason, raw in lines if reason is not None and not is_known_fail_reason(reason)]
    if unknown:
        return differs(name, f"reasons sktune does not know (as written): {' | '.join(unknown[:3])}",
                       f"{len(lines)} lines, {where}")
    reasons = sorted({reason for reason, _ in lines if reason})
    said = (f"reasons: {', '.join(reasons)}" if reasons else
            "empty: every planned kernel fused, so the line format was not exercised")
    return confirmed(name, f"{FAIL_REASONS} present ({len(lines)} lines, {said}): {where}")
