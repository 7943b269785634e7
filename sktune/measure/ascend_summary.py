"""Summarize one Ascend profile (``ProfileSummary``): per-step device span, busy time and
the gap (idle device time between the step's kernels, which SuperKernel attacks) beside
step_trace_time.csv's ``Free``, time by accelerator core, the heaviest
kernels, and which SuperKernels were actually built (rows of type ``SuperKernel``). Times are
integer nanoseconds while computing and reported in µs; marker kernels
(``sk_scope_kernel_*``, ``sk_placeholder_kernel``) are left out of every figure and only counted.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import pandas as pd

from sktune.measure.ascend_files import ProfileError, ProfileFiles
from sktune.measure.ascend_parsers import (
    parse_superkernel_name,
    read_fusion_fail_reasons,
    read_kernel_details,
    read_step_trace,
)


@dataclass(frozen=True)
class StepStats:
    """One step in µs. ``gap_us`` = span − busy: the device idle between the step's kernels.
    ``free_us``: step_trace_time.csv's ``Free`` for the step (None without that file). torch-npu
    counts in a step every idle interval that starts before the host ends the step, so it takes
    in the idle up to the next step's first kernel (docs/npu_api.md, "Profiler"): host time
    between steps, not a gap that fusion removes."""

    step: int
    span_us: float
    busy_us: float
    gap_us: float
    kernels: int
    free_us: float | None = None


@dataclass(frozen=True)
class KernelTotal:
    name: str
    type: str
    total_us: float
    count: int


@dataclass(frozen=True)
class SuperKernelTotal:
    """A SuperKernel row mapped back to its scope; parse fields are None if the name is not ours."""

    name: str
    scope: str | None
    first_op: str | None
    last_op: str | None
    index: int | None
    total_us: float
    count: int


@dataclass(frozen=True)
class ProfileSummary:
    source: str
    note: str | None
    steps: tuple[StepStats, ...]
    by_core: dict[str, float]
    top_kernels: tuple[KernelTotal, ...]
    superkernels: tuple[SuperKernelTotal, ...]
    markers_filtered: int
    duplicates_dropped: int
    untimed_rows: int
    fusion_fail_reasons: tuple[dict[str, str | None], ...] = field(default=())
    step_ids: bool = True  # False: no Step Id column (a run without profiler steps), all one step 0
    unstepped_rows: int = 0  # rows whose Step Id is blank: outside every step, in no step's figures
    cut_rows: int = 0  # rows with fewer fields than their file's header (a file cut short): left out
    emulated: bool = False  # the emulated Ascend wrote it: its figures are its model's, never an NPU's

    def to_json(self) -> dict[str, Any]:
        """Plain JSON types: lists of dicts for the record tuples."""
        data = asdict(self)
        return {k: [dict(v) for v in data[k]] if isinstance(data[k], tuple) else data[k] for k in data}


def union_ns(intervals: list[tuple[int, int]]) -> int:
    """The length covered by ``intervals`` (start, end), overlaps counted once: a step's busy time."""
    total, end = 0, None
    for start, stop in sorted(intervals):
        if end is None or start > end:
            total, end = total + stop - start, stop
        elif stop > end:
            total, end = total + stop - end, stop
    return total


def step_intervals(rows: pd.DataFrame) -> dict[int, list[tuple[int, int]]]:
    """Each step's device intervals (start, end) in ns, from the kernel_details rows that have
    a step, a start and a duration (which rows count, markers or not, is the caller's choice)."""
    timed = rows[rows["step"].notna() & rows["start_ns"].notna() & rows["duration_us"].notna()]
    return {int(step): [(int(s), int(s) + round(d * 1000)) for s, d in zip(t["start_ns"], t["duration_us"])]
            for step, t in timed.groupby("step")}


def free_by_step(trace: pd.DataFrame) -> dict[int, float]:
    """Each step's ``Free`` (µs) from step_trace_time.csv, averaged over its devices' rows."""
    free = trace.dropna(subset=["free_us"]).groupby("step")["free_us"].mean()
    return {int(k): round(float(v), 3) for k, v in free.items()}


def _unmatched_free(unmatched: list[int], with_free: list[int]) -> str:
    """Why a step shows no Free: step_trace_time.csv has none for it (another run's file?)."""
    def listed(steps: list[int]) -> str:
        return ", ".join(map(str, steps[:8])) + (" …" if len(steps) > 8 else "")

    if not with_free:
        return "step_trace_time.csv gives no Free for any step"
    return (f"step_trace_time.csv has no Free for step(s) {listed(unmatched)} of kernel_details.csv (it has steps "
            f"{listed(with_free)}): are both files of one run?")


def summarize(files: ProfileFiles, top: int = 15, kernels: pd.DataFrame | None = None) -> ProfileSummary:
    """Per step: span (first kernel start to last kernel end), busy (union of kernel
    intervals), gap (span − busy), step_trace_time.csv's ``Free`` where present (``StepStats``)
    and kernel count; plus time by core, top kernels and SuperKernels. Markers and
    duplicate rows (exact, or one task under two names) are excluded everywhere and counted.
    Without a Step Id column the whole profile is step 0; rows with a blank Step Id count in
    no step. A row cut short (fewer fields than its header: the file's copy stopped midway)
    is left out and counted.
    ``kernels``: ``files.kernel_details`` as ``read_kernel_details`` read it, where the caller has it."""
    df = read_kernel_details(files.kernel_details) if kernels is None else kernels
    step_ids = bool(df.attrs.get("step_ids"))
    duplicates = int(df["is_duplicate"].sum())
    df = df[~df["is_duplicate"]]
    markers = int(df["is_marker"].sum())
    work = df[~df["is_marker"]]
    timed = work[work["start_ns"].notna() & work["duration_us"].notna()]
    notes = [files.note] if files.note else []
    trace = None
    if files.step_trace is not None:
        try:  # optional: it only adds Free beside the gap; the kernels' figures stand without it
            trace = read_step_trace(files.step_trace)
        except ProfileError as exc:
            notes.append(f"step_trace_time.csv left out, so no Free: {exc}")
    free = free_by_step(trace) if trace is not None else {}
    intervals = step_intervals(work)
    if trace is not None and (unmatched := sorted(set(intervals) - set(free))):
        notes.append(_unmatched_free(unmatched, sorted(free)))
    steps = []
    for step, rows in work.groupby("step", sort=True):
        spans = intervals.get(int(step), [])
        span = (max(e for _, e in spans) - min(s for s, _ in spans)) if spans else 0
        busy = union_ns(spans)
        steps.append(StepStats(int(step), span / 1000, busy / 1000, round((span - busy) / 1000, 3), len(rows),
                               free.get(step)))
    by_core = work.groupby("core")["duration_us"].sum().round(3).sort_values(ascending=False)
    kernels = (work.groupby(["name", "type"])["duration_us"].agg(["sum", "size"]).reset_index()
               .sort_values(["sum", "name"], ascending=[False, True]).head(top))
    fail = [r for log in files.fusion_fail_logs for r in read_fusion_fail_reasons(log)]
    return ProfileSummary(
        source=str(files.kernel_details), note="\n".join(notes) or None,
        steps=tuple(steps), by_core={str(k): float(v) for k, v in by_core.items()},
        top_kernels=tuple(KernelTotal(str(r.name), str(r.type), round(float(r.sum), 3), int(r.size))
                          for r in kernels.itertuples()),
        superkernels=_superkernels(work[work["is_superkernel"]]), markers_filtered=markers,
        duplicates_dropped=duplicates, untimed_rows=len(work) - len(timed), fusion_fail_reasons=tuple(fail),
        step_ids=step_ids, unstepped_rows=int(work["step"].isna().sum()),
        cut_rows=df.attrs["cut_rows"] + (trace.attrs["cut_rows"] if trace is not None else 0),
        emulated=files.emulated)


def kernels_per_step(kernels: pd.DataFrame, top: int = 15) -> list[dict[str, Any]]:
    """The most expensive kernels by their time per profiler step: for each kernel (name and
    type) the median over the steps of its summed duration in a step, and its launches per
    step, as the Inductor profile gives them (``measure/profile.py``). ``summarize``'s
    ``top_kernels`` are totals over the whole profile: five steps read five times too large
    beside a step's time. Markers, duplicate rows and rows outside every step are left out.
    ``kernels``: a kernel_details.csv as ``read_kernel_details`` read it."""
    df = kernels[~kernels["is_duplicate"] & ~kernels["is_marker"] & kernels["step"].notna()]
    steps = sorted(df["step"].unique())
    if not steps:
        return []
    grid = (df.groupby(["name", "type", "step"])["duration_us"].agg(["sum", "size"])
            .unstack("step", fill_value=0).reindex(columns=steps, level=1, fill_value=0))
    out = [{"name": str(name), "type": str(kind), "total_us": round(float(row["sum"].median()), 3),
            "count": round(float(row["size"].median()))} for (name, kind), row in grid.iterrows()]
    return sorted(out, key=lambda k: (-k["total_us"], k["name"]))[:top]


def step_spans(summary: dict[str, Any], expected: int) -> list[float]:
    """Device span (µs) of each profiler step of a ``ProfileSummary.to_json()``, in step order.

    Kernels can be told apart by step only through ``Step Id``; without it
    step_trace_time.csv has no steps either (torch-npu fills both from the same step
    ranges), so there is nothing to fall back on and the fix is in how the run was profiled."""
    if not summary.get("step_ids", True):
        raise ProfileError(
            f"{summary['source']} has no Step Id column: the run was profiled without profiler steps, so its "
            "kernels cannot be assigned to steps. Profile with schedule=torch_npu.profiler.schedule(...), "
            "ProfilerActivity.CPU among the activities and one prof.step() after each step")
    spans = [s["span_us"] for s in sorted(summary["steps"], key=lambda s: s["step"])]
    if len(spans) != expected:
        raise ProfileError(f"the NPU profile {summary['source']} has {len(spans)} steps, expected {expected}")
    return spans


def _superkernels(rows: pd.DataFrame) -> tuple[SuperKernelTotal, ...]:
    def first_start(item: tuple[Any, pd.DataFrame]) -> tuple[int, str]:
        starts = item[1]["start_ns"].dropna()
        return (int(starts.min()) if len(starts) else 2**63, str(item[0]))

    out = []
    for name, group in sorted(rows.groupby("name"), key=first_start):
        parsed = parse_superkernel_name(str(name))
        fields = (parsed.scope, parsed.first_op, parsed.last_op, parsed.index) if parsed else (None,) * 4
        out.append(SuperKernelTotal(str(name), *fields, round(float(group["duration_us"].sum()), 3), len(group)))
    return tuple(out)


def kernel_type_sequence(kernels: pd.DataFrame) -> tuple[str, ...]:
    """The op types of the first step's kernels in launch order, markers and duplicates left
    out: in an unfused run each kernel is one op's (the npu backend maps ops to types with it).
    ``kernels``: a kernel_details.csv as ``read_kernel_details`` read it."""
    df = kernels
    work = df[~df["is_duplicate"] & ~df["is_marker"] & df["step"].notna() & df["start_ns"].notna()]
    if work.empty:
        return ()
    first = work[work["step"] == work["step"].min()].sort_values("start_ns", kind="stable")
    return tuple(str(t) for t in first["type"])
