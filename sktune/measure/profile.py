"""Where a step's time goes, from torch.profiler: busy time (some op or kernel running)
and the gap (everything else: Python, dispatch, launch) that fusion removes.

Inductor records its generated kernels, and the extern calls its C++ wrapper makes (the
C shims: ``aoti_torch_cpu_mm_out`` ...), only when built with ``cpp.enable_kernel_profile``
(the backends' ``profile_kernels``: profiling builds only, never timed ones). A build
without it runs its regions' work unrecorded; that time is reported as not recorded
(``unrecorded_us``, ``partial``), never as gap.

The CPU profiler inflates times by 20-40 %: use it to explain, time with the clock.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch.profiler import record_function

from sktune.measure.raw_events import RawEvent, by_enclosing, outermost, raw_events, recording

STEP = "sktune_step"
REGION_CALL = "## Call CompiledFxGraph"  # one call of an Inductor-compiled region (compile_fx's own range)
# Ranges only a build with cpp.enable_kernel_profile records: its kernels (named graph_<id>_...)
# and its C++ wrapper's extern calls (the C shims).
_PROFILED_BUILD = re.compile(r"graph_\d+_|aoti_torch_")
UNRECORDED_REASON = ("the compiled regions recorded no kernel: built without Inductor's cpp.enable_kernel_profile "
                     "(or on a platform where it records nothing), their kernels and extern calls ran unrecorded; "
                     "the region calls' time not covered by recorded ops is counted as not recorded, not as gap")


@dataclass(frozen=True)
class StepProfile:
    """Per-step medians (µs): of the step, its split, and each of the most expensive kernels."""

    step_us: float
    busy_us: float
    gap_us: float
    steps: int
    top_kernels: list[dict[str, Any]] = field(default_factory=list)
    # Time inside compiled-region calls whose kernels were not recorded: neither busy nor gap.
    unrecorded_us: float = 0.0
    partial: bool = False
    partial_reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _is_compute(name: str) -> bool:
    # ATen and oneDNN ops (eager ops; a Python wrapper's extern kernels; fallbacks), Inductor's
    # generated kernels, and a C++ wrapper's extern calls (C shims).
    return name.startswith(("aten::", "mkldnn::", "aoti_torch_", "triton_")) or "cpp_fused" in name


def _union_us(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def profile_steps(fn: Callable[[], object], steps: int = 20, warmup: int = 5, top: int = 15) -> StepProfile:
    """Profile ``steps`` calls of ``fn`` and split each step into busy time, gap and (when the
    compiled regions did not record their kernels) time not recorded."""
    for _ in range(warmup):
        fn()
    with recording() as prof:
        for _ in range(steps):
            with record_function(STEP):
                fn()
    return step_profile(raw_events(prof), top)


def step_profile(events: list[RawEvent], top: int = 15) -> StepProfile:
    """The split of each ``STEP`` range among ``events`` (start order), medians per step."""
    steps_at = [e for e in events if e.name == STEP]
    compute = outermost(events, _is_compute)  # nested calls are inside their caller's time
    inside: list[list[tuple[float, float]]] = [[] for _ in steps_at]
    for k, e in by_enclosing(steps_at, compute):
        inside[k].append((e.start_us, min(e.end_us, steps_at[k].end_us)))
    silent: list[list[tuple[float, float]]] = [[] for _ in steps_at]
    if not any(_PROFILED_BUILD.match(e.name) for e in events):
        # No region recorded a kernel: a region call's time beyond its recorded ops is unknown.
        # (A plan whose regions are all ATen fallbacks or views records none either; its few
        # µs of wrapper per call are then called not recorded: unknown, never gap.)
        calls = outermost(events, lambda name: name.startswith(REGION_CALL))
        for k, e in by_enclosing(steps_at, calls):
            silent[k].append((e.start_us, min(e.end_us, steps_at[k].end_us)))
    per_step = [s.duration_us for s in steps_at]
    busy = [_union_us(spans) for spans in inside]
    unrecorded = [_union_us(spans + regions) - b for spans, regions, b in zip(inside, silent, busy)]
    # Each kernel's time per step, then its median over the steps, as for the step itself: one
    # step slowed by the machine (a preempted thread, an OpenMP barrier waiting on one) must
    # not make a kernel outweigh the median step's busy time.
    per_kernel: dict[str, list[float]] = defaultdict(lambda: [0.0] * len(steps_at))
    counts: dict[str, int] = defaultdict(int)
    for k, e in by_enclosing(steps_at, compute):
        per_kernel[e.name][k] += e.duration_us
        counts[e.name] += 1
    totals = {name: _median(times) for name, times in per_kernel.items()}
    ranked = sorted(totals, key=totals.__getitem__, reverse=True)[:top]
    kernels = [{"name": n, "total_us": totals[n], "count": counts[n] // max(len(steps_at), 1)} for n in ranked]
    step_us, busy_us, unrecorded_us = (_median(v) for v in (per_step, busy, unrecorded))
    partial = any(u > 0 for u in unrecorded)
    return StepProfile(step_us, busy_us, max(step_us - busy_us - unrecorded_us, 0.0), len(steps_at), kernels,
                       unrecorded_us, partial, UNRECORDED_REASON if partial else None)


def _median(values: list[float]) -> float:
    return float(torch.tensor(values, dtype=torch.float64).median()) if values else 0.0
