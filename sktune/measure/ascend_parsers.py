"""Parse the files ``torch_npu.profiler`` writes under
``{dir}/{worker}_{pid}_{timestamp}_ascend_pt/ASCEND_PROFILER_OUTPUT/`` (``kernel_details.csv``,
``step_trace_time.csv``) and the fusion-fail log; SuperKernel names are read in ``sk_names``
(re-exported here). Real files are messy and every reader here expects it: start times
quoted with a trailing tab, ``N/A`` fields, HCCL rows without task ids, ``Block Dim`` (older)
or ``Block Num``, with or without ``Step Id``, exact duplicate rows. Start times are read
as exact integer nanoseconds (a float64 holds an epoch-µs start only to ~0.25 µs).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable
from decimal import Decimal, InvalidOperation
from pathlib import Path

import pandas as pd

from sktune.measure.ascend_files import ProfileError
from sktune.measure.sk_names import SuperKernelName, parse_superkernel_name

__all__ = ["KNOWN_FAIL_REASONS", "LEVEL0_BASE", "LEVEL0_OPTIONAL", "STEP_ID", "SuperKernelName",
           "is_known_fail_reason", "parse_superkernel_name", "read_fusion_fail_reasons", "read_kernel_details",
           "read_step_trace"]

#: kernel_details.csv at Level0, torch-npu 2.14.0 (``_csv_headers.py``, ``_kernel_view_parser.py``;
#: docs/npu_api.md, "Profiler"): ``Step Id`` when the run had profiler steps, the base columns,
#: then the optional ones in this order where present. The reader takes any order and older names.
STEP_ID = "Step Id"
LEVEL0_BASE = ("Device_id", "Name", "Type", "Accelerator Core", "Start Time(us)", "Duration(us)",
               "Wait Time(us)", "Block Num")
LEVEL0_OPTIONAL = ("Mix Block Num", "Input Shapes", "Input Data Types", "Input Formats", "Output Shapes",
                   "Output Data Types", "Output Formats")

_MISSING = {"", "N/A", "NA", "NAN", "NONE", "NULL", "-"}
_MARKER = re.compile(r"^(sk_scope_kernel_.*|sk_placeholder_kernel)$")
#: fail reasons and scope statuses named in docs/npu_api.md ("Profiler"); others are kept verbatim
KNOWN_FAIL_REASONS = frozenset({
    "DEFAULT_NODE", "TASK_GROUP_NOT_EMPTY", "OP_UNSUPPORT", "NOT_IN_SCOPE", "IN_UNFUSIBLE_SCOPE", "ISOLATED_EVENT",
    "EXIST_DEADLOCK", "EXTERNAL_DEPEND", "KERNEL_ATTR_GET_FAILED", "EXCEED_SCOPE_MAX", "EXCEED_CORE_MAX",
    "DYNAMIC_TASK_UNSUPPORT", "SIMT_OP_UNSUPPORT", "DEADLOCK_DETECTED", "SYNCALL_OP_DROP",
    "RESOURCE_INSUFFICIENT", "NO_TARGET_NODE", "UNRECOVERABLE_FAIL",
})
_VALUE_REASON = r"[A-Z_]*VALUE_?(?:WAIT|WRITE)[A-Z_]*"  # ValueWait/ValueWrite: exact names unconfirmed
_REASON = re.compile(r"\b(" + "|".join(sorted(KNOWN_FAIL_REASONS)) + "|" + _VALUE_REASON + r")\b")
_KEYED_REASON = re.compile(r"\breason\s*[:=]\s*([A-Z][A-Z0-9_]*)")
_UPPER_SNAKE = re.compile(r"(?<![\w.])([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)(?![\w.])")
_NOT_REASONS = frozenset({"AI_CORE", "AI_CPU", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV", "AIV_ONLY", "AIC_ONLY"})
_KERNEL_COLUMNS = {  # normalized header -> our column
    "stepid": "step", "device_id": "device_id", "taskid": "task_id", "streamid": "stream_id",
    "name": "name", "type": "type", "acceleratorcore": "core", "starttime(us)": "start",
    "duration(us)": "duration_us", "waittime(us)": "wait_us", "blocknum": "block_num",
    "blockdim": "block_num", "mixblocknum": "mix_block_num", "mixblockdim": "mix_block_num",
}
_HUMAN = {"name": "Name", "type": "Type", "core": "Accelerator Core", "start": "Start Time(us)",
          "duration_us": "Duration(us)", "free_us": "Free"}
_STEP_TRACE_COLUMNS = {
    "device_id": "device_id", "step": "step", "computing": "computing_us",
    "communication(notoverlapped)": "communication_not_overlapped_us", "overlapped": "overlapped_us",
    "communication": "communication_us", "free": "free_us", "stage": "stage_us", "bubble": "bubble_us",
    "communication(notoverlappedandexcludereceive)": "communication_not_overlapped_exclude_receive_us",
    "preparing": "preparing_us",
}


# ---------------------------------------------------------------- reading the CSVs
def _read_raw(source: str | Path, what: str, columns: dict[str, str], required: Iterable[str]) -> pd.DataFrame:
    path = Path(source)
    cut_in_quotes = 0
    try:
        try:
            raw = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8-sig")
            lines: Iterable[str] | None = None
        except pd.errors.ParserError as exc:
            if "EOF inside string" not in str(exc):
                raise
            # Cut short inside a quoted field (start times and shapes are quoted): its last
            # record is the partial one, left out and counted like a record cut between fields.
            lines = path.read_text(encoding="utf-8-sig").splitlines(keepends=True)[:-1]
            raw = pd.read_csv(io.StringIO("".join(lines)), dtype=str, keep_default_na=False)
            cut_in_quotes = 1
    except OSError as exc:
        raise ProfileError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except pd.errors.EmptyDataError as exc:
        raise ProfileError(f"{path} is not a readable CSV: it is empty") from exc
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:  # e.g. a record longer than its header
        raise ProfileError(f"{path} is not a readable CSV: {exc}") from exc
    header = [str(c) for c in raw.columns]
    raw = raw.rename(columns=lambda c: columns.get(re.sub(r"\s+", "", str(c)).lower(), f"_{c}"))
    raw = raw.loc[:, ~raw.columns.duplicated()]
    missing = [c for c in required if c not in raw.columns]
    if missing:
        wanted = ", ".join(_HUMAN.get(c, c) for c in missing)
        found = ", ".join(header)
        raise ProfileError(f"{path} is not a {what}: it has no {wanted} column(s) "
                           f"(header: {found[:120]}{'…' if len(found) > 120 else ''})")
    if lines is None:
        with path.open(encoding="utf-8-sig", newline="") as f:
            cut = _short_rows(f, len(header), len(raw))
    else:
        cut = _short_rows(lines, len(header), len(raw))
    raw = raw[~cut].apply(lambda col: col.str.strip().str.strip('"').str.strip())
    raw.attrs["cut_rows"] = int(cut.sum()) + cut_in_quotes
    return raw


def _short_rows(lines: Iterable[str], fields: int, rows: int) -> pd.Series:
    """Rows with fewer fields than the header: a file cut short (a copy stopped midway) ends in
    one, and its figures would be wrong (a duration cut to its first digits). pandas fills the
    missing fields with "" here, so the records are counted again; where they cannot be paired
    with pandas' rows one to one, none is taken for cut."""
    # pandas skips blank and whitespace-only lines: so do the counts, or no row pairs up.
    lengths = [len(record) for record in csv.reader(lines) if any(field.strip() for field in record)][1:]
    short = [n < fields for n in lengths] if len(lengths) == rows else [False] * rows
    return pd.Series(short, dtype=bool)


def _missing(col: pd.Series) -> pd.Series:
    return col.str.upper().isin(_MISSING)


_INT64 = 2 ** 63


def _number(raw: pd.DataFrame, column: str, *, negative: bool = True) -> pd.Series:
    """The column as floats; a missing, unreadable or infinite value (``inf``, ``1e400``) is
    NaN, as is a negative one where ``negative`` is False (a duration): such a row counts as
    untimed, never as a figure that would overflow or subtract from a sum."""
    if column not in raw.columns:
        return pd.Series(float("nan"), index=raw.index, dtype="float64")
    values = pd.to_numeric(raw[column].mask(_missing(raw[column])), errors="coerce").astype("float64")
    valid = values.abs() < float(_INT64) if negative else (values >= 0) & (values < float(_INT64))
    return values.where(valid)


def _integer(raw: pd.DataFrame, column: str) -> pd.Series:
    return _number(raw, column).round().astype("Int64")


def _us_to_ns(text: str) -> int | None:
    """Exact µs string → integer ns (``"1736413971558972.912"`` → 1736413971558972912); None for
    what is no finite number of an int64's range (``N/A``, ``inf``, ``1e400``)."""
    try:
        value = Decimal(text) * 1000
    except InvalidOperation:
        return None
    if not value.is_finite() or abs(value) >= _INT64:
        return None
    return int(value.to_integral_value())


def read_kernel_details(source: str | Path) -> pd.DataFrame:
    """``kernel_details.csv`` → one row per kernel with columns ``step`` (0 when there is no
    ``Step Id`` column, ``attrs["step_ids"]`` False; <NA> where a Step Id is blank), ``name``,
    ``type``, ``core``, ``start_us``, ``start_ns`` (exact), ``duration_us``, ``wait_us``,
    ``block_num`` (``Block Num`` or ``Block Dim``), ``mix_block_num``, ``device_id``, ``task_id``,
    ``stream_id`` (nullable; Level0 has no Task ID or Stream ID), and flags ``is_marker``,
    ``is_superkernel``, ``is_duplicate`` (an exact repeat of an earlier row, or the same task
    again under another name). ``N/A`` numbers become NaN/<NA>."""
    raw = _read_raw(source, "kernel_details.csv", _KERNEL_COLUMNS, ("name", "type", "core", "start", "duration_us"))
    df = pd.DataFrame(index=raw.index)
    # No Step Id: a run without profiler steps, one step 0. A blank Step Id: a kernel outside every step.
    df["step"] = _integer(raw, "step") if "step" in raw else 0
    df.attrs["step_ids"] = "step" in raw
    for text in ("name", "type", "core"):
        df[text] = raw[text].mask(raw[text] == "", "N/A")
    starts = raw["start"].mask(_missing(raw["start"]))
    df["start_ns"] = pd.array([_us_to_ns(s) if isinstance(s, str) else None for s in starts], dtype="Int64")
    df["start_us"] = df["start_ns"].astype("float64") / 1000.0
    df["duration_us"] = _number(raw, "duration_us", negative=False)
    df["wait_us"] = _number(raw, "wait_us")
    for ints in ("block_num", "mix_block_num", "device_id", "task_id", "stream_id"):
        df[ints] = _integer(raw, ints)
    df["is_marker"] = df["name"].str.match(_MARKER)
    df["is_superkernel"] = df["type"] == "SuperKernel"
    df["is_duplicate"] = raw.duplicated(keep="first") | _same_task_again(df)
    df.attrs["cut_rows"] = raw.attrs["cut_rows"]
    return df


def _same_task_again(df: pd.DataFrame) -> pd.Series:
    """Rows of a task already listed: the same device, stream, task and start, under another
    name (seen on a real file: FlashAttentionScore's task also as ``…_varlen``); counted once,
    its time would count twice. Level0 has no Task ID or Stream ID: exact repeats only."""
    keyed = df["task_id"].notna() & df["stream_id"].notna() & df["start_ns"].notna()
    key = df.loc[keyed, ["stream_id", "task_id", "start_ns"]]
    key = key.assign(device=df.loc[keyed, "device_id"].fillna(-1))  # one device per file: no Device_id column
    return key.duplicated(keep="first").reindex(df.index, fill_value=False)


def read_step_trace(source: str | Path) -> pd.DataFrame:
    """``step_trace_time.csv`` → ``step`` (0 when absent or N/A), ``device_id`` and every
    documented time column in µs (``free_us`` is the device idle time inside the step)."""
    raw = _read_raw(source, "step_trace_time.csv", _STEP_TRACE_COLUMNS, ("free_us",))
    df = pd.DataFrame(index=raw.index)
    df["step"] = _integer(raw, "step").fillna(0).astype("int64") if "step" in raw else 0
    df["device_id"] = _integer(raw, "device_id")
    for column in _STEP_TRACE_COLUMNS.values():
        if column.endswith("_us"):
            df[column] = _number(raw, column)
    df.attrs["cut_rows"] = raw.attrs["cut_rows"]
    return df


# ---------------------------------------------------------------- the fusion-fail log
def is_known_fail_reason(reason: str) -> bool:
    """A reason docs/npu_api.md names (ValueWait/ValueWrite ones by pattern)."""
    return reason in KNOWN_FAIL_REASONS or re.fullmatch(_VALUE_REASON, reason) is not None


def read_fusion_fail_reasons(path: str | Path) -> list[dict[str, str | None]]:
    """Each non-empty line of ``sk_meta/sk_fusion_fail_reasons.log`` → ``{op, reason, raw}``.

    The exact format is unconfirmed (no NPU here), so lines are read leniently. The reason
    is the ``UPPER_CASE`` token after ``reason:``/``reason=``, else
    a known reason anywhere on the line (``KNOWN_FAIL_REASONS``, ``*VALUE_WAIT*``/``*VALUE_WRITE*``),
    else the last ``UPPER_SNAKE`` word outside ``{...}``/``[...]`` that is no core type. A reason
    sktune does not know is kept verbatim, never dropped or mapped to a known one. The op is
    the value of ``funcName:``/``op:``/``op=``/``name:`` when present, else the word before
    the reason. CANN's open-source writer emits ``Node [nodeId:.., ...] -
    KernelInfos{funcName:X, ...}: reason: R[, reasonDetail: ...]``. Lines without a reason
    (headers, scope listings) are kept with ``reason`` None.
    """
    p = Path(path)
    try:
        text = p.read_text(errors="replace")
    except OSError as exc:
        raise ProfileError(f"cannot read fusion fail log {p}: {exc}") from exc
    return [_fail_line(line.strip()) for line in text.splitlines() if line.strip()]


def _reason_match(line: str) -> re.Match[str] | None:
    found = _KEYED_REASON.search(line) or _REASON.search(line)
    if found:
        return found
    bare = re.sub(r"\{[^{}]*\}|\[[^\[\]]*\]", lambda m: " " * len(m.group()), line)  # keep offsets
    words = [w for w in _UPPER_SNAKE.finditer(bare) if w.group(1) not in _NOT_REASONS]
    return words[-1] if words else None


def _fail_line(line: str) -> dict[str, str | None]:
    found = _reason_match(line)
    reason = found.group(1) if found else None
    keyed = re.search(r"\b(?:funcName|op_?name|op_?type|op|name)\s*[:=]\s*([^\s,;}\]]+)", line, re.I)
    op = keyed.group(1) if keyed else None
    if op is None and found is not None:
        words = re.findall(r"[\w./-]+", line[: found.start()])
        skip = {"reason", "node", "op", "status", "scope", "scopeid"}
        words = [w for w in words if w.lower() not in skip and not w.isdigit()]
        op = words[-1] if words else None
    return {"op": op, "reason": reason, "raw": line}
