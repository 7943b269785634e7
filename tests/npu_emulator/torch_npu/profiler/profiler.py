"""``torch_npu.profiler.profile`` of the emulator: records emulated device tasks during
active (RECORD) steps and hands the trace to ``on_trace_ready`` when a cycle ends."""

from __future__ import annotations

import enum
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from torch_npu import _device
from torch_npu.profiler._writer import write_profile


class ProfilerActivity(enum.Enum):
    CPU = "CPU"
    NPU = "NPU"


class ProfilerLevel:
    Level_none = "Level_none"
    Level0 = "Level0"
    Level1 = "Level1"
    Level2 = "Level2"


class AiCMetrics:
    AiCoreNone = "AiCoreNone"
    PipeUtilization = "PipeUtilization"
    ArithmeticUtilization = "ArithmeticUtilization"
    Memory = "Memory"
    MemoryL0 = "MemoryL0"
    MemoryUB = "MemoryUB"
    ResourceConflictRatio = "ResourceConflictRatio"
    L2Cache = "L2Cache"


class ExportType:
    Text = "text"
    Db = "db"


class _ExperimentalConfig:
    """Stored; ``profiler_level`` picks kernel_details.csv's columns (Level0, or Level1/2's longer set)."""

    def __init__(self, profiler_level: str = ProfilerLevel.Level0, aic_metrics: str = AiCMetrics.AiCoreNone,
                 data_simplification: bool = True, **kwargs: Any) -> None:
        self.profiler_level = profiler_level
        self.aic_metrics = aic_metrics
        self.data_simplification = data_simplification
        self.extra = dict(kwargs)


class ProfilerAction(enum.Enum):
    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


def schedule(wait: int, active: int, warmup: int = 0, repeat: int = 0,
             skip_first: int = 0) -> Callable[[int], ProfilerAction]:
    """torch_npu's argument order (wait, active, warmup, ...); torch's semantics. Use keywords."""
    if wait < 0 or warmup < 0 or active <= 0 or repeat < 0 or skip_first < 0:
        raise ValueError("invalid profiler schedule arguments")

    def action(step: int) -> ProfilerAction:
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        cycle = wait + warmup + active
        if repeat > 0 and step // cycle >= repeat:
            return ProfilerAction.NONE
        mod = step % cycle
        if mod < wait:
            return ProfilerAction.NONE
        if mod < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if mod < cycle - 1 else ProfilerAction.RECORD_AND_SAVE

    return action


def _always_record(_: int) -> ProfilerAction:
    return ProfilerAction.RECORD


_RECORDING = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)


def tensorboard_trace_handler(dir_name: str | os.PathLike[str], worker_name: str | None = None,
                              analyse_flag: bool = True) -> Callable[[profile], None]:
    """Write each finished cycle under ``dir_name`` (parsed right away, like analyse_flag=True)."""

    def handler(prof: profile) -> None:
        level = prof.experimental_config.profiler_level
        prof.output_dirs.append(write_profile(dir_name, worker_name, prof.trace, level, prof.step_ids))

    return handler


def analyse(profiler_path: str | os.PathLike[str], max_process_number: int | None = None,
            export_type: Any = None, **_: Any) -> None:
    """No-op: the emulator writes parsed files already."""


class profile:  # noqa: N801  (torch_npu's name)
    """Context manager; ``step()`` after each iteration."""

    def __init__(self, activities: Iterable[ProfilerActivity] | None = None,
                 schedule: Callable[[int], ProfilerAction] | None = None,
                 on_trace_ready: Callable[[profile], None] | None = None, record_shapes: bool = False,
                 profile_memory: bool = False, with_stack: bool = False, with_flops: bool = False,
                 with_modules: bool = False, experimental_config: _ExperimentalConfig | None = None,
                 **_: Any) -> None:
        self.activities = list(activities or [ProfilerActivity.CPU, ProfilerActivity.NPU])
        self.schedule = schedule or _always_record
        self.record_steps = schedule is not None  # as torch-npu: ProfilerStep#n marks only with a schedule
        self.on_trace_ready = on_trace_ready
        self.experimental_config = experimental_config or _ExperimentalConfig()
        self.step_num = 0
        self.action = ProfilerAction.NONE
        self.trace = _device.Trace()
        self.output_dirs: list[Path] = []
        self._started = False

    @property
    def step_ids(self) -> bool:
        """Whether kernel_details.csv gets a Step Id: torch-npu finds step ranges only from the
        ProfilerStep marks of the CPU trace."""
        return self.record_steps and ProfilerActivity.CPU in self.activities

    def __enter__(self) -> profile:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self) -> None:
        self._started = True
        self.step_num = 0
        self._enter(self.schedule(0))

    def step(self) -> None:
        if not self._started:
            return
        previous = self.action
        self.step_num += 1
        if previous == ProfilerAction.RECORD_AND_SAVE:
            self._save()
        self._enter(self.schedule(self.step_num))

    def stop(self) -> None:
        if not self._started:
            return
        if self.action in _RECORDING:
            self._save()
        _device.set_active(None)
        self._started = False

    def _enter(self, action: ProfilerAction) -> None:
        self.action = action
        if action in _RECORDING:
            self.trace.begin_step(self.step_num)
            _device.set_active(self.trace)
        else:
            _device.set_active(None)

    def _save(self) -> None:
        _device.set_active(None)
        if self.trace.rows and self.on_trace_ready is not None:
            self.on_trace_ready(self)
        self.trace = _device.Trace()
