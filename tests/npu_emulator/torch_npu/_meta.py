"""Files the emulated CANN writes: with ``ASCEND_OP_COMPILE_SAVE_KERNEL_META=1`` (as CANN
does: docs/npu_api.md, "Profiler"), ``sk_meta/<pid>/model_<id>/`` (options used, fail
reasons, fused nodes) under ``ASCEND_WORK_PATH`` or the working directory, where CANN's
public SuperKernel tooling reads them; and, before a hang with ``debug_op_exec_trace=1``,
a per-core plog trace. Without the switch (``sktune.apply``, a user's own compile) no
``sk_meta/`` appears.

``sk_options.json`` is the emulator's own form of an effective-options dump: no torch-npu
wheel names one, and whether CANN writes one at all is unconfirmed (README, "First run on
a real Ascend host")."""

from __future__ import annotations

import itertools
import json
import os
import time
from datetime import datetime
from pathlib import Path

from torch_npu._grouping import Plan, SuperKernel
from torch_npu._kernels import WAIT
from torch_npu._options import SkOptions

TRACE_CORES = 4
_MODEL_IDS = itertools.count(1)  # CANN numbers the models (graphs) of a process


def kernel_meta_on() -> bool:
    """CANN's kernel-meta switch, read now (sktune's trials set it with their work path)."""
    return os.environ.get("ASCEND_OP_COMPILE_SAVE_KERNEL_META") == "1"


def meta_dir() -> Path:
    """``<ASCEND_WORK_PATH or cwd>/sk_meta``, read now."""
    return Path(os.environ.get("ASCEND_WORK_PATH") or os.getcwd()) / "sk_meta"


def write_sk_meta(plan: Plan, opts: SkOptions) -> Path:
    """Write the three sk_meta files of one compile's first forward, in a model directory of its own."""
    out = meta_dir() / str(os.getpid()) / f"model_{next(_MODEL_IDS)}"
    out.mkdir(parents=True, exist_ok=True)
    effective = {"super_kernel_optimize_options": opts.optimize}
    (out / "sk_options.json").write_text(json.dumps(effective, indent=2, sort_keys=True) + "\n")
    (out / "sk_fusion_fail_reasons.log").write_text("".join(f"{line}\n" for line in plan.fail_lines))
    fused = [f"{sk.name}: scope:{sk.scope}, nodes:[" + ", ".join(f"{k.index}:{k.op_type}" for k in sk.kernels) + "]"
             for sk in plan.superkernels]
    (out / "sk_fused_nodes.log").write_text("".join(f"{line}\n" for line in fused))
    return out


def write_hang_trace(sk: SuperKernel) -> Path:
    """Per-core progress of a SuperKernel that never finishes (``debug_op_exec_trace``)."""
    root = os.environ.get("ASCEND_PROCESS_LOG_PATH") or str(Path.home() / "ascend" / "log")
    out = Path(root) / "debug" / "plog"
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%d%H%M%S%f")[:-3]
    path = out / f"plog-{os.getpid()}_{stamp}.log"
    stuck = next(k for k in sk.kernels if k.kind == WAIT)
    done = [k for k in sk.kernels if k.index < stuck.index]
    lines = [f"[INFO] SuperKernel {sk.name} (scope {sk.scope}) entered on {TRACE_CORES} cores (emulated)"]
    for core in range(TRACE_CORES):
        last = f"{done[-1].index}:{done[-1].op_type}" if done else "none"
        lines.append(f"[ERROR] SuperKernel {sk.name} core {core}: finished ops up to {last}; stuck in op "
                     f"{stuck.index}:{stuck.op_type} ({stuck.name}) since start")
    path.write_text("\n".join(lines) + "\n")
    return path


def hang_forever() -> None:
    """What a deadlocked SuperKernel does to the host thread waiting on it."""
    while True:
        time.sleep(10**6)
