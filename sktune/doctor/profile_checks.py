"""Checks of the backend's own profiling (torch_npu.profiler at Level0): the files are
where sktune looks, kernel_details.csv has torch-npu 2.14.0's Level0 columns, and each
planned scope shows up as a SuperKernel row in the real name form, and step_trace_time.csv's
``Free`` counts what torch-npu's parser makes it count (docs/npu_api.md, "Profiling", "Testing
without an NPU")."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sktune.doctor.records import CheckResult, confirmed, could_not, differs
from sktune.doctor.session import PROFILE_BATCHES, DoctorSession
from sktune.measure.ascend_parsers import LEVEL0_BASE, LEVEL0_OPTIONAL, STEP_ID

if TYPE_CHECKING:
    import pandas as pd


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
    from sktune.measure.ascend_parsers import read_kernel_details

    planned = [s.name for s in session.tiny.placement if s.name]
    seen = session.profile()
    kernels = read_kernel_details(seen.kernel_details)
    named: list[tuple[str, str]] = []
    if not seen.superkernels:  # none of Type SuperKernel: are they there under another Type?
        rows = kernels[kernels["name"].astype(str).str.startswith("sk_") & ~kernels["is_marker"]]
        named = list(dict.fromkeys(zip(rows["name"].astype(str), rows["type"].astype(str))))
    # time_batches alternates reference and candidate, reference first: its steps must not fuse.
    steps = sorted(int(s) for s in kernels["step"].dropna().unique())
    baseline = kernels[kernels["step"].isin(steps[0::2]) & kernels["is_superkernel"]]
    return judge_superkernel_rows(planned, list(seen.superkernels), named,
                                  sorted(set(baseline["name"].astype(str))))


def judge_superkernel_rows(planned: list[str], rows: list[dict[str, Any]],
                           sk_named: list[tuple[str, str]] | None = None,
                           in_baseline: list[str] | None = None) -> CheckResult:
    """Each planned scope has a SuperKernel row whose name reads in the index-first form, and
    none is in a reference (unfused) step. ``sk_named``: (name, Type) of the rows named
    ``sk_*``, looked at when none has Type SuperKernel."""
    from sktune.measure.sk_names import fused_scopes, parse_superkernel_name

    name = "superkernel_rows"
    names = [str(r.get("name", "")) for r in rows]
    if in_baseline:
        return differs(name, f"SuperKernel rows in the unfused reference's steps: {'; '.join(in_baseline[:3])}",
                       "the reference compiles with super_kernel_optimize=False")
    if not names and sk_named:
        types = sorted({t for _, t in sk_named})
        shown = "; ".join(f"{n} (Type {t})" for n, t in sk_named[:4])
        return differs(name, f"no row of Type SuperKernel, but {len(sk_named)} rows named sk_* carry Type "
                             f"{', '.join(types)}: {shown}", "sktune counts SuperKernels by Type SuperKernel")
    if not names:
        return differs(name, "no SuperKernel rows in kernel_details.csv (no row of Type SuperKernel, none named "
                             "sk_*): nothing was fused")
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


def check_step_trace_free(session: DoctorSession) -> CheckResult:
    from sktune.measure.ascend_parsers import read_kernel_details, read_step_trace

    seen = session.profile()
    if seen.step_trace is None:  # nothing to compare: the profile_files row says what was written
        return could_not("step_trace_free", f"no step_trace_time.csv beside kernel_details.csv in {seen.profile_dir}")
    return judge_step_trace_free(read_kernel_details(seen.kernel_details), read_step_trace(seen.step_trace))


def judge_step_trace_free(kernels: pd.DataFrame, trace: pd.DataFrame) -> CheckResult:
    """Each step's ``Free`` against the device idle read from kernel_details.csv two ways: up to
    the next step's first kernel (torch-npu's step range, as docs/npu_api.md reads its parser)
    or between the step's own kernels only (span − busy). Every device task counts, markers too."""
    from sktune.measure.ascend_summary import free_by_step, step_intervals, union_ns

    name = "step_trace_free"
    spans = step_intervals(kernels[~kernels["is_duplicate"]])
    free = free_by_step(trace)  # over devices, as summarize reads it
    order = sorted(spans)
    rows = []
    for k, step in enumerate(order):
        first, last = min(s for s, _ in spans[step]), max(e for _, e in spans[step])
        between = (last - first - union_ns(spans[step])) / 1000
        after = (min(s for s, _ in spans[order[k + 1]]) - last) / 1000 if k + 1 < len(order) else 0.0
        rows.append((step, free.get(step), between, between + after, 0.01 * (len(spans[step]) + 1)))
    measured = [r for r in rows if r[1] is not None]
    if not measured:
        return differs(name, "step_trace_time.csv has no Free for any step of kernel_details.csv")
    step, value, between, to_next, _ = measured[0]
    figures = (f"step {step}: Free {value:.3f} µs; idle between its kernels {between:.3f}, and with the idle up to "
               f"the next step's first kernel {to_next:.3f}")
    if all(abs(v - n) <= tol for _, v, _, n, tol in measured):
        return confirmed(name, f"Free counts the idle up to the next step's first kernel ({figures})")
    if all(abs(v - b) <= tol for _, v, b, _, tol in measured):
        return differs(name, f"Free is the idle between each step's own kernels only ({figures}): "
                             "docs/npu_api.md's reading of torch-npu's parser does not hold here")
    return differs(name, f"Free matches neither reading ({figures})")
