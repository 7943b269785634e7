"""Checks of the backend's own profiling (torch_npu.profiler at Level0): the files are
where sktune looks, kernel_details.csv has torch-npu 2.14.0's Level0 columns, and each
planned scope shows up as a SuperKernel row in the real name form (docs/npu_api.md,
"Profiling", "Testing without an NPU")."""

from __future__ import annotations

from typing import Any

from sktune.doctor.records import CheckResult, confirmed, differs
from sktune.doctor.session import PROFILE_BATCHES, DoctorSession
from sktune.measure.ascend_parsers import LEVEL0_BASE, LEVEL0_OPTIONAL, STEP_ID


def check_profile_files(session: DoctorSession) -> CheckResult:
    from sktune.measure.ascend_files import ProfileError

    name = "profile_files"
    try:
        seen = session.profile()
    except ProfileError as exc:  # the backend could not read what the profiler wrote
        return differs(name, str(exc))
    expected = 2 * PROFILE_BATCHES
    if seen.steps != expected:
        return differs(name, f"{seen.steps} profiler steps read, expected {expected}", str(seen.profile_dir))
    trace = "and step_trace_time.csv" if seen.step_trace else "(no step_trace_time.csv)"
    return confirmed(name, f"kernel_details.csv {trace} parsed, {seen.steps} steps: {seen.profile_dir}")


def check_profile_columns(session: DoctorSession) -> CheckResult:
    return judge_profile_columns(session.profile().header)


def judge_profile_columns(header: tuple[str, ...]) -> CheckResult:
    """The header seen against the expected Level0 header (with Step Id: the backend profiles in steps)."""
    name = "profile_columns"
    expected = (STEP_ID, *LEVEL0_BASE)
    head, rest = header[: len(expected)], header[len(expected):]
    optional_in_order = [c for c in LEVEL0_OPTIONAL if c in rest]
    if head == expected and list(rest) == optional_in_order:
        return confirmed(name, f"Level0 header: {', '.join(header)}")
    shown = ", ".join(header)
    return differs(name, f"header seen: {shown}",
                   f"expected: {', '.join(expected)}, then optionally {', '.join(LEVEL0_OPTIONAL)}")


def check_superkernel_rows(session: DoctorSession) -> CheckResult:
    planned = [s.name for s in session.tiny.placement if s.name]
    return judge_superkernel_rows(planned, list(session.profile().superkernels))


def judge_superkernel_rows(planned: list[str], rows: list[dict[str, Any]]) -> CheckResult:
    """Each planned scope has a SuperKernel row whose name reads in the index-first form."""
    from sktune.measure.sk_names import fused_scopes, parse_superkernel_name

    name = "superkernel_rows"
    names = [str(r.get("name", "")) for r in rows]
    if not names:
        return differs(name, "no SuperKernel rows in kernel_details.csv: nothing was fused")
    fused, automatic = fused_scopes(rows, planned)
    missing = [s for s in planned if s not in fused]
    index_first = [n for n in names if _index_first(n, planned, parse_superkernel_name)]
    shown = "; ".join(names[:4])
    if missing:
        return differs(name, f"planned scopes without a SuperKernel row: {', '.join(missing)}", f"rows: {shown}")
    if len(index_first) != len(names):
        odd = [n for n in names if n not in index_first]
        return differs(name, f"rows not in the form sk_<n>_<scope>_start_<fn>_end_<fn>: {'; '.join(odd[:3])}")
    extra = f", automatic: {len(automatic)}" if automatic else ""
    return confirmed(name, f"every planned scope ({', '.join(planned)}) has a SuperKernel row{extra}: {shown}")


def _index_first(row_name: str, planned: list[str], parse: Any) -> bool:
    """The name reads as ``sk_<n>_<scope>_start_...``: its index follows ``sk_``."""
    parsed = parse(row_name, planned)
    return parsed is not None and row_name.startswith(f"sk_{parsed.index}_{parsed.scope}_start_")
