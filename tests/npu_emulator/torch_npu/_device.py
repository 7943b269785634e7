"""The emulated device timeline: tasks, launch gaps, and the trace the profiler records.

Times are integer nanoseconds on a virtual clock that starts at a fixed epoch base per
recording, so profiles are deterministic. Gaps: 5.0 µs between consecutive tasks,
50 µs of host time before the first task of a new profiler step. All emulated.
"""

from __future__ import annotations

from dataclasses import dataclass, field

LAUNCH_GAP_NS = 5_000
STEP_GAP_NS = 50_000
CLOCK_BASE_NS = 1_736_413_971_000_000_000  # 1736413971000000.000 µs
MARKER_NS = 800


@dataclass(frozen=True)
class Task:
    """One row of kernel_details.csv before it is placed on the clock."""

    name: str
    op_type: str
    core: str
    duration_ns: int
    block_dim: int = 0
    mix_block_dim: int = 0
    op_state: str = "dynamic"
    in_shapes: str | None = None  # None: written as N/A
    in_dtypes: str | None = None
    out_shapes: str | None = None
    out_dtypes: str | None = None


@dataclass(frozen=True)
class Row:
    """A task placed on the clock."""

    step: int
    task_id: int
    start_ns: int
    wait_ns: int
    task: Task


def marker_tasks(kind: str) -> list[Task]:
    """The tiny kernels a scope marker launches when it runs outside a fused SuperKernel."""
    names = ["sk_scope_kernel_begin", "sk_placeholder_kernel"] if kind == "begin" else ["sk_scope_kernel_end"]
    return [Task(n, "SuperKernelScope", "AI_VECTOR_CORE", MARKER_NS, 1, 0, "static") for n in names]


@dataclass
class Trace:
    """One recording cycle of a profiler: rows on a virtual clock, by step."""

    rows: list[Row] = field(default_factory=list)
    step: int = 0
    _end_ns: int | None = None
    _new_step: bool = False
    _task_id: int = 0

    def begin_step(self, step: int) -> None:
        """Tasks launched from now on belong to ``step`` (after a host gap)."""
        self._new_step = bool(self.rows)
        self.step = step

    def launch(self, tasks: list[Task]) -> None:
        for task in tasks:
            if self._end_ns is None:
                gap, start = 0, CLOCK_BASE_NS
            else:
                gap = STEP_GAP_NS if self._new_step else LAUNCH_GAP_NS
                start = self._end_ns + gap
            self._new_step = False
            self._task_id += 1
            self.rows.append(Row(self.step, self._task_id, start, gap, task))
            self._end_ns = start + task.duration_ns

    def steps(self) -> list[int]:
        return sorted({r.step for r in self.rows})


_ACTIVE: Trace | None = None


def set_active(trace: Trace | None) -> None:
    """The trace that launched tasks go to (None: not recording)."""
    global _ACTIVE
    _ACTIVE = trace


def launch(tasks: list[Task]) -> None:
    """Put tasks on the device; recorded only while a profiler step is active."""
    if _ACTIVE is not None:
        _ACTIVE.launch(tasks)
