"""``torch_npu.profiler`` of the emulator (every time in its files is emulated)."""

from torch_npu.profiler.profiler import (
    AiCMetrics,
    ExportType,
    ProfilerAction,
    ProfilerActivity,
    ProfilerLevel,
    _ExperimentalConfig,
    analyse,
    profile,
    schedule,
    tensorboard_trace_handler,
)

__all__ = ["AiCMetrics", "ExportType", "ProfilerAction", "ProfilerActivity", "ProfilerLevel",
           "_ExperimentalConfig", "analyse", "profile", "schedule", "tensorboard_trace_handler"]
