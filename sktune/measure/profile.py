"""Where a step's time goes, from torch.profiler: busy time (some op or kernel running)
and the gap (everything else: Python, dispatch, launch) that fusion removes.

The CPU profiler inflates times by 20-40 %: use it to explain, time with the clock.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from sktune.measure.raw_events import by_enclosing, outermost, raw_events

STEP = "sktune_step"


@dataclass(frozen=True)
class StepProfile:
    """Per-step medians (µs) and the most expensive kernels over the profiled steps."""

    step_us: float
    busy_us: float
    gap_us: float
    steps: int
    top_kernels: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _is_compute(name: str) -> bool:
    # ATen ops (eager ops, extern kernels inside regions) and Inductor's generated kernels.
    return name.startswith("aten::") or "cpp_fused" in name or name.startswith("triton_")


def _union_us(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def profile_steps(fn: Callable[[], object], steps: int = 20, warmup: int = 5, top: int = 15) -> StepProfile:
    """Profile ``steps`` calls of ``fn`` and split each step into busy time and gap."""
    for _ in range(warmup):
        fn()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            with record_function(STEP):
                fn()
    events = raw_events(prof)
    steps_at = [e for e in events if e.name == STEP]
    compute = outermost(events, _is_compute)  # nested calls are inside their caller's time
    inside: list[list[tuple[float, float]]] = [[] for _ in steps_at]
    for k, e in by_enclosing(steps_at, compute):
        inside[k].append((e.start_us, min(e.end_us, steps_at[k].end_us)))
    per_step = [s.duration_us for s in steps_at]
    busy = [_union_us(spans) for spans in inside]
    totals: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for e in compute:
        totals[e.name] += e.duration_us
        counts[e.name] += 1
    ranked = sorted(totals, key=totals.__getitem__, reverse=True)[:top]
    kernels = [{"name": n, "total_us": totals[n] / max(len(steps_at), 1), "count": counts[n] // max(len(steps_at), 1)}
               for n in ranked]
    step_us = float(torch.tensor(per_step).median()) if per_step else 0.0
    busy_us = float(torch.tensor(busy).median()) if busy else 0.0
    return StepProfile(step_us, busy_us, max(step_us - busy_us, 0.0), len(steps_at), kernels)
