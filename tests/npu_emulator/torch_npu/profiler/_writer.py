"""Write a recorded trace as the Ascend profiler's parsed output, in the real files' formats.

``kernel_details.csv`` columns are torch-npu 2.14.0's (docs/npu_api.md, "Profiler"):
``Step Id`` only when the run had profiler steps, then at Level0 the base columns
``Device_id, Name, Type, Accelerator Core, Start Time(us), Duration(us), Wait Time(us), Block
Num`` and the optional ``Mix Block Num`` and shape/dtype/format columns in that fixed order.
Level1/2 keep every column of CANN's op_summary, renamed: the emulator writes the columns
of the real sample file (tests/fixtures/npu_profiles/real) with Device_id first and no AI
Core metric columns (it models no metrics). Values as the real files have them: start times
quoted with a trailing tab, shapes triple-quoted, ``N/A`` where the real file has it. Every
time is emulated.
"""

from __future__ import annotations

import os
import socket
from datetime import datetime, timedelta
from pathlib import Path

from torch_npu._device import Row, Trace

LEVEL0_COLUMNS = ("Device_id", "Name", "Type", "Accelerator Core", "Start Time(us)", "Duration(us)",
                  "Wait Time(us)", "Block Num", "Mix Block Num", "Input Shapes", "Input Data Types",
                  "Input Formats", "Output Shapes", "Output Data Types", "Output Formats")
LEVEL1_COLUMNS = ("Device_id", "Model ID", "Task ID", "Stream ID", "Name", "Type", "OP State", "Accelerator Core",
                  "Start Time(us)", "Duration(us)", "Wait Time(us)", "Block Num", "Mix Block Num", "HF32 Eligible",
                  "Input Shapes", "Input Data Types", "Input Formats", "Output Shapes", "Output Data Types",
                  "Output Formats", "Context ID")
STEP_HEADER = ("Device_id,Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage,"
               "Bubble,Communication(Not Overlapped and Exclude Receive),Preparing")
DEVICE_ID = 0
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


def kernel_columns(level: str, steps: bool) -> tuple[str, ...]:
    """The header of kernel_details.csv at ``level`` (Level0 and Level_none: the Level0 columns)."""
    columns = LEVEL1_COLUMNS if level in ("Level1", "Level2") else LEVEL0_COLUMNS
    return ("Step Id", *columns) if steps else columns


def kernel_line(row: Row, columns: tuple[str, ...]) -> str:
    t = row.task
    values = {
        "Step Id": str(row.step), "Device_id": str(DEVICE_ID), "Model ID": str(MODEL_ID),
        "Task ID": str(row.task_id), "Stream ID": str(STREAM_ID), "Name": t.name, "Type": t.op_type, "OP State": t.op_state,
        "Accelerator Core": t.core, "Start Time(us)": _start(row.start_ns), "Duration(us)": _us(t.duration_ns),
        "Wait Time(us)": _us(row.wait_ns), "Block Num": str(t.block_dim), "Mix Block Num": str(t.mix_block_dim),
        "HF32 Eligible": "NO", "Input Shapes": _shapes(t.in_shapes), "Input Data Types": _na(t.in_dtypes),
        "Input Formats": _formats(t.in_dtypes), "Output Shapes": _shapes(t.out_shapes),
        "Output Data Types": _na(t.out_dtypes), "Output Formats": _formats(t.out_dtypes), "Context ID": "N/A",
    }
    return ",".join(values[c] for c in columns)


def step_lines(rows: list[Row], steps: bool) -> list[str]:
    """One row per step, as torch-npu 2.14.0 counts it (``prof_view/_trace_step_time_parser.py``
    ``count_time``, and the step range of ``prof_parse/_fwk_cann_relation_parser.py``
    ``get_step_range``: from the step's first kernel to the later of its last kernel's end and
    the host's end of the step): each device idle interval between consecutive tasks counts
    in the step it starts in, so ``Free`` holds the idle up to the next step's first kernel
    (the host's time between steps) and ``Stage`` runs to that kernel. Computing = busy time.
    Without profiler steps one row with an empty Step."""
    ordered = sorted(rows, key=lambda r: r.start_ns)
    idle_after = {id(a): b.start_ns - (a.start_ns + a.task.duration_ns) for a, b in zip(ordered, ordered[1:])}
    out = []
    for step in sorted({r.step for r in rows}) if steps else [None]:
        mine = [r for r in ordered if r.step == step] if steps else ordered
        busy = sum(r.task.duration_ns for r in mine)  # tasks never overlap on one stream
        free = sum(idle_after.get(id(r), 0) for r in mine)
        label = "" if step is None else str(step)
        out.append(",".join([str(DEVICE_ID), label, _us(busy), "0", "0", "0", _us(free), _us(busy + free), "0",
                             "0", "0"]))
    return out


def _unique_dir(root: Path, worker: str) -> Path:
    stamp = datetime.now()
    while True:
        path = root / f"{worker}_{os.getpid()}_{stamp.strftime('%Y%m%d%H%M%S%f')[:-3]}_ascend_pt"
        if not path.exists():
            return path
        stamp += timedelta(milliseconds=1)


def write_profile(dir_name: str | os.PathLike[str], worker_name: str | None, trace: Trace,
                  level: str = "Level0", steps: bool = True) -> Path:
    """``{dir}/{worker}_{pid}_{timestamp}_ascend_pt/ASCEND_PROFILER_OUTPUT/`` with both CSVs.
    ``steps``: whether the run had profiler steps (a schedule and CPU activity)."""
    run = _unique_dir(Path(dir_name), worker_name or socket.gethostname())
    out = run / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    columns = kernel_columns(level, steps)
    lines = [",".join(columns), *(kernel_line(r, columns) for r in trace.rows)]
    (out / "kernel_details.csv").write_text("\n".join(lines) + "\n")
    (out / "step_trace_time.csv").write_text("\n".join([STEP_HEADER, *step_lines(trace.rows, steps)]) + "\n")
    # Not in a real profile: the emulator's mark, so that `sktune profile` labels these figures
    # emulated (sktune.measure.ascend_files.EMULATED_MARKER reads it).
    (run / "sktune_emulated.json").write_text('{"emulated": true, "by": "sktune\'s emulated Ascend"}\n')
    return run
