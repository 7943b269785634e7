"""Checks of CANN's SuperKernel metadata after a first forward: where ``sk_meta/`` is,
whether an effective-options dump is there and in what form, and the fail-reason log
(README, "The options CANN really used"; ``sktune/backends/npu_meta.py``)."""

from __future__ import annotations

from pathlib import Path

from sktune.backends.npu_meta import FAIL_REASONS, RECOGNISED_FORMS, SK_META, meta_files, read_effective_options
from sktune.doctor.records import CheckResult, confirmed, could_not, differs
from sktune.doctor.session import DoctorSession

FUSED_NODES = "sk_fused_nodes.log"


def _form(path: Path, work_path: Path) -> str:
    """``sk_meta/`` or ``sk_meta/<pid>/model_<id>/``: where under the work path a file was."""
    parts = path.parent.relative_to(work_path / SK_META).parts
    return f"{SK_META}/" if not parts else f"{SK_META}/<pid>/model_<id>/ ({'/'.join(parts)})"


def check_sk_meta_location(session: DoctorSession) -> CheckResult:
    run = session.main_run()
    if run.meta_dir is None:
        return could_not("sk_meta_location", "the backend recorded no CANN work path for the compile")
    found = [p for n in (FAIL_REASONS, FUSED_NODES) for p in meta_files(run.meta_dir, n)]
    elsewhere = sorted(Path.cwd().glob(f"{SK_META}/**/{FAIL_REASONS}")) + sorted(
        Path.cwd().glob(f"{SK_META}/{FAIL_REASONS}"))
    return judge_sk_meta_location(run.meta_dir, found, elsewhere)


def judge_sk_meta_location(work_path: Path, found: list[Path], elsewhere: list[Path]) -> CheckResult:
    name = "sk_meta_location"
    if not found:
        other = f"; an sk_meta/ was written in the working directory instead ({elsewhere[0]})" if elsewhere else ""
        return differs(name, f"no {FAIL_REASONS} or {FUSED_NODES} under the work path {work_path}/{SK_META}/"
                             f"{other}", "ASCEND_WORK_PATH and ASCEND_OP_COMPILE_SAVE_KERNEL_META=1 were set")
    forms = sorted({_form(p, work_path) for p in found})
    files = sorted({p.name for p in found})
    return confirmed(name, f"{', '.join(files)} in {', '.join(forms)} under the work path {work_path}")


def check_effective_options(session: DoctorSession) -> CheckResult:
    run = session.main_run()
    if run.meta_dir is None:
        return could_not("effective_options_dump", "the backend recorded no CANN work path for the compile")
    found = read_effective_options(run.meta_dir)
    where = "" if found.path is None else _form(found.path, run.meta_dir)
    return judge_effective_options(found.status, where, found.why, run.effective)


def judge_effective_options(status: str, form: str, why: str, backend_said: str) -> CheckResult:
    """``status`` of the dump (checked / absent / unrecognised); ``backend_said`` is what the
    backend's own comparison recorded for the run (its error text when the options differed)."""
    name = "effective_options_dump"
    if status == "checked" and backend_said == "checked":
        return confirmed(name, f"sk_options.json in {form}: the options CANN used match those requested")
    if status == "checked":
        return differs(name, f"the dump in {form} shows other options than requested: {backend_said}")
    consequence = "studies will warn once and say effective_options_checked: false"
    return differs(name, f"{status}: {why}", f"recognised: {RECOGNISED_FORMS}; {consequence}")


def check_fail_reason_log(session: DoctorSession) -> CheckResult:
    from sktune.measure.ascend_parsers import read_fusion_fail_reasons

    run = session.main_run()
    if run.meta_dir is None:
        return could_not("fail_reason_log", "the backend recorded no CANN work path for the compile")
    logs = meta_files(run.meta_dir, FAIL_REASONS)
    lines = [r for log in logs for r in read_fusion_fail_reasons(log)]
    return judge_fail_reason_log(logs, [(r["reason"], str(r["raw"])) for r in lines])


def judge_fail_reason_log(logs: list[Path], lines: list[tuple[str | None, str]]) -> CheckResult:
    """Present, and every reason one sktune knows; an unknown one is shown as written."""
    from sktune.measure.ascend_parsers import is_known_fail_reason

    name = "fail_reason_log"
    if not logs:
        return differs(name, f"no {FAIL_REASONS} in the work path's {SK_META}/")
    unknown = [raw for reason, raw in lines if reason is not None and not is_known_fail_reason(reason)]
    reasons = sorted({reason for reason, _ in lines if reason})
    where = logs[-1]
    if unknown:
        return differs(name, f"reasons sktune does not know (as written): {' | '.join(unknown[:3])}",
                       f"{len(lines)} lines, {where}")
    said = f"reasons: {', '.join(reasons)}" if reasons else "empty: every planned kernel fused"
    return confirmed(name, f"{FAIL_REASONS} present ({len(lines)} lines, {said}): {where}")
