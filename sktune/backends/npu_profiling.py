"""Profiling npu runs with ``torch_npu.profiler`` at Level0 (docs/npu_api.md, "Profiler"):
each function one profiler step after a warm-up, the Ascend output parsed
(``measure/ascend_summary.py``). Both the baseline observation and every timed candidate
go through here."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sktune.backends.npu_first_run import made

if TYPE_CHECKING:
    import pandas as pd

    from sktune.backends.npu import NpuBackend

PROFILE_WARMUP_STEPS = 2


@dataclass(frozen=True)
class ProfiledRun:
    """One profiled run, its kernel_details.csv read once: ``summary`` is
    ``ProfileSummary.to_json()`` plus ``profile_dir``; ``kernels`` the file as
    ``read_kernel_details`` read it, for further figures; ``step_spans`` with ``with_steps``."""

    summary: dict[str, Any]
    kernels: "pd.DataFrame"
    step_spans: list[float] | None


def profile_runs(backend: "NpuBackend", fns: list[Callable[[], object]], with_steps: bool = False,
                 top: int = 15, keep: bool = True) -> ProfiledRun:
    """Run ``fns`` one per profiler step (after warm-up) and parse the Ascend output: the
    summary, and with ``with_steps`` each step's span too. ``keep=False``: the profile's
    directory is removed once parsed (its figures are all that is read of it), and the
    summary names none."""
    import torch_npu

    from sktune.measure.ascend_files import find_profile_files
    from sktune.measure.ascend_parsers import read_kernel_details
    from sktune.measure.ascend_summary import step_spans, summarize

    prof_mod = torch_npu.profiler
    # Kept: one fresh directory per measurement, never an earlier one's files.
    out = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=made(backend.profile_root)))
    with prof_mod.profile(
        activities=[prof_mod.ProfilerActivity.CPU, prof_mod.ProfilerActivity.NPU],
        # keyword arguments: the order differs from torch.profiler.schedule
        schedule=prof_mod.schedule(wait=0, warmup=PROFILE_WARMUP_STEPS, active=len(fns), repeat=1,
                                   skip_first=0),
        on_trace_ready=prof_mod.tensorboard_trace_handler(str(out)),
        # AI Core metrics named off: torch-npu's default (PipeUtilization) at Level0 prints a
        # warning on every profiled run and is reset to none (docs/npu_api.md, "Profiler").
        experimental_config=prof_mod._ExperimentalConfig(
            profiler_level=prof_mod.ProfilerLevel.Level0, aic_metrics=prof_mod.AiCMetrics.AiCoreNone,
            data_simplification=True),
    ) as prof:
        for fn in fns[:PROFILE_WARMUP_STEPS] + fns:
            fn()
            backend.synchronize()
            prof.step()
    # The profiler swallows its own errors: find_profile_files raises if nothing was written.
    files = find_profile_files(out)
    kernels = read_kernel_details(files.kernel_details)
    summary = summarize(files, top=top, kernels=kernels).to_json()
    spans = step_spans(summary, len(fns)) if with_steps else None  # a ProfileError names the fix
    if keep:
        summary["profile_dir"] = str(out)
    else:
        shutil.rmtree(out, ignore_errors=True)
    return ProfiledRun(summary, kernels, spans)


__all__ = ["PROFILE_WARMUP_STEPS", "ProfiledRun", "profile_runs"]
