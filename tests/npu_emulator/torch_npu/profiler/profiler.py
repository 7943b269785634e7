"""``torch_npu.profiler.profile`` of the emulator: records emulated device tasks during
active (RECORD) steps and hands the trace to ``on_trace_ready`` when a cycle ends."""

from __future__ import annotations

import enum
import os
import time
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


class AiCMetrics:  # torch-npu 2.14.0's values (docs/npu_api.md, "Profiler")
    PipeUtilization = "ACL_AICORE_PIPE_UTILIZATION"
    ArithmeticUtilization = "ACL_AICORE_ARITHMETIC_UTILIZATION"
    Memory = "ACL_AICORE_MEMORY_BANDWIDTH"
    MemoryL0 = "ACL_AICORE_L0B_AND_WIDTH"
    MemoryUB = "ACL_AICORE_MEMORY_UB"
    ResourceConflictRatio = "ACL_AICORE_RESOURCE_CONFLICT_RATIO"
    L2Cache = "ACL_AICORE_L2_CACHE"
    MemoryAccess = "ACL_AICORE_MEMORY_ACCESS"
    AiCoreNone = "ACL_AICORE_NONE"


class ExportType:
    Text = "text"
    Db = "db"


def print_warn_msg(message: str) -> None:
    """torch-npu's profiler warning line, on stdout (its ``print_warn_msg``)."""
    stamp = time.strftime("[%Y-%m-%d %H:%M:%S]", time.localtime())
    print(f"{stamp} [WARNING] [{os.getpid()}] profiler.py: {message}", flush=True)


class _ExperimentalConfig:
    """torch-npu 2.14.0's signature (no other keywords); ``_profiler_level`` picks
    kernel_details.csv's columns (Level0, or Level1/2's longer set). As there, AI Core
    metrics (default PipeUtilization) at Level0 or Level_none are warned about and reset."""

    def __init__(self, profiler_level: str = ProfilerLevel.Level0, aic_metrics: str = AiCMetrics.PipeUtilization,
                 l2_cache: bool = False, msprof_tx: bool = False, mstx: bool = False,
                 data_simplification: bool = True, record_op_args: bool = False, op_attr: bool = False,
                 gc_detect_threshold: float | None = None, export_type: str | list[str] = ExportType.Text,
                 host_sys: list[str] | None = None, mstx_domain_include: list[str] | None = None,
                 mstx_domain_exclude: list[str] | None = None, sys_io: bool = False,
                 sys_interconnection: bool = False) -> None:
        self._profiler_level = profiler_level
        self._aic_metrics = aic_metrics
        self._data_simplification = data_simplification
        self._export_type = export_type
        if profiler_level in (ProfilerLevel.Level0, ProfilerLevel.Level_none) and aic_metrics != AiCMetrics.AiCoreNone:
            print_warn_msg("Please use level1 or level2 if you want to collect aic metrics, reset aic metrics to None!")
            self._aic_metrics = AiCMetrics.AiCoreNone


class ProfilerAction(enum.Enum):
    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


class schedule:  # noqa: N801  (torch_npu's name)
    """torch-npu's argument order (wait, active, warmup, ...); use keywords. As there, a bad
    argument is warned about and reset, never raised, and no warmup is warned about."""

    def __init__(self, wait: int, active: int, warmup: int = 0, repeat: int = 0, skip_first: int = 0,
                 skip_first_wait: int = 0) -> None:
        self.wait, self.active, self.warmup = wait, active, warmup
        self.repeat, self.skip_first, self.skip_first_wait = repeat, skip_first, skip_first_wait
        for name, floor in (("wait", 0), ("warmup", 0), ("active", 1), ("repeat", 0), ("skip_first", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or value < floor:
                print_warn_msg(f"Invalid parameter {name}, reset it to {floor}.")
                setattr(self, name, floor)
        if not isinstance(self.skip_first_wait, int):
            print_warn_msg("Invalid parameter skip_first_wait, reset it to 0.")
            self.skip_first_wait = 0
        if self.warmup == 0:
            print_warn_msg("Profiler won't be using warmup, this can skew profiler results")

    def __call__(self, step: int) -> ProfilerAction:
        if step < 0:
            raise ValueError("Invalid parameter step, which must be not less than 0.")
        if step < self.skip_first:
            return ProfilerAction.NONE
        step -= self.skip_first
        if self.skip_first_wait != 0:
            step += self.wait
        cycle = self.wait + self.warmup + self.active
        if self.repeat > 0 and step / cycle >= self.repeat:
            return ProfilerAction.NONE
        mod = step % cycle
        if mod < self.wait:
            return ProfilerAction.NONE
        if mod < self.wait + self.warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if mod < cycle - 1 else ProfilerAction.RECORD_AND_SAVE


def _always_record(_: int) -> ProfilerAction:
    return ProfilerAction.RECORD


_RECORDING = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)


def tensorboard_trace_handler(dir_name: str | None = None, worker_name: str | None = None,
                              analyse_flag: bool = True, async_mode: bool = False) -> Callable[[profile], None]:
    """Write each finished cycle under ``dir_name`` (parsed right away, like analyse_flag=True);
    without one, as torch-npu: ``$ASCEND_WORK_PATH/profiling_data``, else the working directory."""

    def handler(prof: profile) -> None:
        level = prof.experimental_config._profiler_level
        work = os.getenv("ASCEND_WORK_PATH")
        where = dir_name or (os.path.join(os.path.abspath(work), "profiling_data") if work else os.getcwd())
        prof.output_dirs.append(write_profile(where, worker_name, prof.trace, level, prof.step_ids))

    return handler


def analyse(profiler_path: str | os.PathLike[str], max_process_number: int | None = None,
            export_type: Any = None, **_: Any) -> None:
    """No-op: the emulator writes parsed files already."""


class profile:  # noqa: N801  (torch_npu's name)
    """Context manager; ``step()`` after each iteration."""

    def __init__(self, *, activities: Iterable[ProfilerActivity] | None = None,
                 schedule: Callable[[int], ProfilerAction] | None = None,
                 on_trace_ready: Callable[[profile], None] | None = None, record_shapes: bool = False,
                 profile_memory: bool = False, with_stack: bool = False, with_flops: bool = False,
                 with_modules: bool = False, experimental_config: _ExperimentalConfig | None = None,
                 execution_trace_observer: Any = None, custom_trace_id_callback: Callable[[], str] | None = None,
                 use_cuda: bool | None = None) -> None:  # torch-npu 2.14.0's keywords, and only those
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
