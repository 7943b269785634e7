"""Write a recorded trace as the Ascend profiler's parsed output, in the real files' formats.

``kernel_details.csv`` follows ``/work/shared/data/npu_profiles/kernel_details_bf16_train.csv``
(Level0: no AI-core metric columns): start times quoted with a trailing tab, shapes
triple-quoted, ``N/A`` where the real file has it.
"""

from __future__ import annotations

import os
import socket
from datetime import datetime, timedelta
from pathlib import Path

from torch_npu._device import Row, Trace

KERNEL_HEADER = ("Step Id,Model ID,Task ID,Stream ID,Name,Type,OP State,Accelerator Core,Start Time(us),"
                 "Duration(us),Wait Time(us),Block Dim,Mix Block Dim,HF32 Eligible,Input Shapes,"
                 "Input Data Types,Input Formats,Output Shapes,Output Data Types,Output Formats,Context ID")
STEP_HEADER = ("Device_id,Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage,"
               "Bubble,Communication(Not Overlapped and Exclude Receive),Preparing")
MODEL_ID = 4294967295
STREAM_ID = 2


def _us(ns: int) -> str:
    """Nanoseconds -> µs with up to 3 decimals, trailing zeros dropped (``185.504``, ``1.5``, ``0``)."""
    return f"{ns // 1000}.{ns % 1000:03d}".rstrip("0").rstrip(".")


def _start(ns: int) -> str:
    return f'"{ns // 1000}.{ns % 1000:03d}\t"'


def _shapes(text: str | None) -> str:
    return "N/A" if text is None else f'"""{text}"""'


def _na(text: str | None) -> str:
    return "N/A" if text is None else text


def _formats(dtypes: str | None) -> str:
    if dtypes is None:
        return "N/A"
    return ";".join("ND" for _ in dtypes.split(";")) if dtypes else ""


def kernel_line(row: Row) -> str:
    t = row.task
    fields = [str(row.step), str(MODEL_ID), str(row.task_id), str(STREAM_ID), t.name, t.op_type, t.op_state,
              t.core, _start(row.start_ns), _us(t.duration_ns), _us(row.wait_ns), str(t.block_dim),
              str(t.mix_block_dim), "NO", _shapes(t.in_shapes), _na(t.in_dtypes), _formats(t.in_dtypes),
              _shapes(t.out_shapes), _na(t.out_dtypes), _formats(t.out_dtypes), "N/A"]
    return ",".join(fields)


def step_lines(rows: list[Row]) -> list[str]:
    """One row per step: Computing = busy time, Free = span - busy."""
    out = []
    for step in sorted({r.step for r in rows}):
        mine = [r for r in rows if r.step == step]
        start = min(r.start_ns for r in mine)
        end = max(r.start_ns + r.task.duration_ns for r in mine)
        busy = sum(r.task.duration_ns for r in mine)  # tasks never overlap on one stream
        out.append(",".join(["0", str(step), _us(busy), "0", "0", "0", _us(end - start - busy), "0", "0", "0", "0"]))
    return out


def _unique_dir(root: Path, worker: str) -> Path:
    stamp = datetime.now()
    while True:
        path = root / f"{worker}_{os.getpid()}_{stamp.strftime('%Y%m%d%H%M%S%f')[:-3]}_ascend_pt"
        if not path.exists():
            return path
        stamp += timedelta(milliseconds=1)


def write_profile(dir_name: str | os.PathLike[str], worker_name: str | None, trace: Trace) -> Path:
    """``{dir}/{worker}_{pid}_{timestamp}_ascend_pt/ASCEND_PROFILER_OUTPUT/`` with both CSVs."""
    run = _unique_dir(Path(dir_name), worker_name or socket.gethostname())
    out = run / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    (out / "kernel_details.csv").write_text("\n".join([KERNEL_HEADER, *map(kernel_line, trace.rows)]) + "\n")
    (out / "step_trace_time.csv").write_text("\n".join([STEP_HEADER, *step_lines(trace.rows)]) + "\n")
    return run
