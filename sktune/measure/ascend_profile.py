"""Read what an Ascend NPU profile says happened: per-step device time, busy time and the
gap (idle device time that SuperKernel attacks), time by accelerator core, the heaviest
kernels, and which SuperKernels were actually built (rows of type ``SuperKernel``).

Inputs are the files ``torch_npu.profiler`` writes under
``{dir}/{worker}_{pid}_{timestamp}_ascend_pt/ASCEND_PROFILER_OUTPUT/``. Real files are
messy and every reader here expects it: start times quoted with a trailing tab, ``N/A``
fields, HCCL rows without task ids, ``Block Dim`` (older) or ``Block Num``, with or
without ``Step Id``, exact duplicate rows. Times are kept as integer nanoseconds while
computing (a float64 holds an epoch-µs start only to ~0.25 µs) and reported in µs.
Marker kernels (``sk_scope_kernel_*``, ``sk_placeholder_kernel``) are left out of every
figure and only counted.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from sktune.errors import SktuneError

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
_MISSING = {"", "N/A", "NA", "NAN", "NONE", "NULL", "-"}
_MARKER = re.compile(r"^(sk_scope_kernel_.*|sk_placeholder_kernel)$")
_REASON = re.compile(  # reasons named in the docs and in CANN's open-source SuperKernel
    r"\b(DEFAULT_NODE|TASK_GROUP_NOT_EMPTY|OP_UNSUPPORT|NOT_IN_SCOPE|IN_UNFUSIBLE_SCOPE|EXIST_DEADLOCK|"
    r"EXCEED_SCOPE_MAX|EXCEED_CORE_MAX|DYNAMIC_TASK_UNSUPPORT|SIMT_OP_UNSUPPORT|[A-Z_]*VALUE_(?:WAIT|WRITE)[A-Z_]*)\b")
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


class ProfileError(SktuneError):
    """No usable Ascend profile at the given path, or a file not in the documented format."""


@dataclass(frozen=True)
class ProfileFiles:
    """The files of one profile. ``note`` says how they were chosen when it was a choice."""

    kernel_details: Path
    step_trace: Path | None = None
    op_statistic: Path | None = None
    fusion_fail_logs: tuple[Path, ...] = ()
    profile_dir: Path | None = None
    note: str | None = None


@dataclass(frozen=True)
class SuperKernelName:
    """``sk_<scope>_start_<FirstOp>_end_<LastOp>_<index>``, parsed from the right."""

    scope: str
    first_op: str
    last_op: str
    index: int


@dataclass(frozen=True)
class StepStats:
    """One step in µs. ``gap_source``: ``step_trace`` (its ``Free``) or ``kernels`` (span - busy)."""

    step: int
    span_us: float
    busy_us: float
    gap_us: float
    kernels: int
    gap_source: str


@dataclass(frozen=True)
class KernelTotal:
    name: str
    type: str
    total_us: float
    count: int


@dataclass(frozen=True)
class SuperKernelTotal:
    """A SuperKernel row mapped back to its scope; parse fields are None if the name is not ours."""

    name: str
    scope: str | None
    first_op: str | None
    last_op: str | None
    index: int | None
    total_us: float
    count: int


@dataclass(frozen=True)
class ProfileSummary:
    source: str
    note: str | None
    gap_source: str  # step_trace | kernels | mixed | none
    steps: tuple[StepStats, ...]
    by_core: dict[str, float]
    top_kernels: tuple[KernelTotal, ...]
    superkernels: tuple[SuperKernelTotal, ...]
    markers_filtered: int
    duplicates_dropped: int
    untimed_rows: int
    fusion_fail_reasons: tuple[dict[str, str | None], ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        """Plain JSON types: lists of dicts for the record tuples."""
        data = asdict(self)
        return {k: [dict(v) for v in data[k]] if isinstance(data[k], tuple) else data[k] for k in data}


# ---------------------------------------------------------------- finding the files
def find_profile_files(path: str | Path) -> ProfileFiles:
    """Accept a ``*_ascend_pt`` dir, its ``ASCEND_PROFILER_OUTPUT/``, a kernel_details CSV, or
    a directory of several ``*_ascend_pt`` dirs (the newest is taken; ``note`` says so)."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ProfileError(f"profile path not found: {p}")
    if p.is_file():
        siblings = p.parent if p.name == "kernel_details.csv" else None
        return _files(p, siblings, p.parent.parent if siblings and p.parent.name == OUTPUT_DIR else None)
    if (p / "kernel_details.csv").is_file():
        return _files(p / "kernel_details.csv", p, p.parent if p.name == OUTPUT_DIR else None)
    if (p / OUTPUT_DIR / "kernel_details.csv").is_file():
        return _files(p / OUTPUT_DIR / "kernel_details.csv", p / OUTPUT_DIR, p)
    if (p / OUTPUT_DIR).is_dir() or p.name.endswith("_ascend_pt"):
        raise ProfileError(
            f"no {OUTPUT_DIR}/kernel_details.csv in {p}: the profile was not parsed; run "
            f"torch_npu.profiler.profiler.analyse('{p}') on a machine with torch_npu")
    runs = [d for d in p.iterdir() if d.is_dir() and d.name.endswith("_ascend_pt")]
    if not runs:
        raise ProfileError(f"no Ascend profile in {p}: expected kernel_details.csv, {OUTPUT_DIR}/ "
                           "or *_ascend_pt directories")
    stamps = [_name_timestamp(d) for d in runs]
    by_name = all(s is not None for s in stamps)
    newest = max(runs, key=(lambda d: (_name_timestamp(d), d.name)) if by_name else (lambda d: d.stat().st_mtime))
    found = find_profile_files(newest)
    note = None
    if len(runs) > 1:
        how = "timestamp in its name" if by_name else "modification time"
        note = f"{len(runs)} *_ascend_pt directories in {p}; using the newest by {how}: {newest.name}"
    return ProfileFiles(found.kernel_details, found.step_trace, found.op_statistic, found.fusion_fail_logs,
                        found.profile_dir, note)


def _name_timestamp(run_dir: Path) -> int | None:
    match = re.search(r"_(\d+)_ascend_pt$", run_dir.name)
    return int(match.group(1)) if match else None


def _files(kernel_details: Path, out_dir: Path | None, profile_dir: Path | None) -> ProfileFiles:
    def sibling(name: str) -> Path | None:
        return out_dir / name if out_dir is not None and (out_dir / name).is_file() else None

    logs: list[Path] = []
    for base in {d for d in (out_dir, profile_dir, profile_dir.parent if profile_dir else None) if d}:
        if (base / "sk_meta").is_dir():
            logs.extend(sorted((base / "sk_meta").rglob("sk_fusion_fail_reasons.log")))
    return ProfileFiles(kernel_details, sibling("step_trace_time.csv"), sibling("op_statistic.csv"),
                        tuple(sorted(set(logs))), profile_dir)


# ---------------------------------------------------------------- reading the CSVs
def _read_raw(csv: str | Path, what: str, columns: dict[str, str], required: Iterable[str]) -> pd.DataFrame:
    path = Path(csv)
    try:
        raw = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8-sig")
    except OSError as exc:
        raise ProfileError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
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
    return raw.apply(lambda col: col.str.strip().str.strip('"').str.strip())


def _missing(col: pd.Series) -> pd.Series:
    return col.str.upper().isin(_MISSING)


def _number(raw: pd.DataFrame, column: str) -> pd.Series:
    if column not in raw.columns:
        return pd.Series(float("nan"), index=raw.index, dtype="float64")
    return pd.to_numeric(raw[column].mask(_missing(raw[column])), errors="coerce").astype("float64")


def _integer(raw: pd.DataFrame, column: str) -> pd.Series:
    return _number(raw, column).round().astype("Int64")


def _us_to_ns(text: str) -> int | None:
    """Exact µs string → integer ns (``"1736413971558972.912"`` → 1736413971558972912)."""
    try:
        value = Decimal(text) * 1000
    except InvalidOperation:
        return None
    return int(value.to_integral_value()) if value.is_finite() else None


def read_kernel_details(csv: str | Path) -> pd.DataFrame:
    """``kernel_details.csv`` → one row per kernel with columns ``step`` (0 when there is no
    ``Step Id``), ``name``, ``type``, ``core``, ``start_us``, ``start_ns`` (exact), ``duration_us``,
    ``wait_us``, ``block_num`` (``Block Num`` or ``Block Dim``), ``mix_block_num``, ``device_id``,
    ``task_id``, ``stream_id`` (nullable), and flags ``is_marker``, ``is_superkernel``,
    ``is_duplicate`` (an exact repeat of an earlier row). ``N/A`` numbers become NaN/<NA>."""
    raw = _read_raw(csv, "kernel_details.csv", _KERNEL_COLUMNS, ("name", "type", "core", "start", "duration_us"))
    df = pd.DataFrame(index=raw.index)
    df["step"] = _integer(raw, "step").fillna(0).astype("int64") if "step" in raw else 0
    for text in ("name", "type", "core"):
        df[text] = raw[text].mask(raw[text] == "", "N/A")
    starts = raw["start"].mask(_missing(raw["start"]))
    df["start_ns"] = pd.array([_us_to_ns(s) if isinstance(s, str) else None for s in starts], dtype="Int64")
    df["start_us"] = df["start_ns"].astype("float64") / 1000.0
    df["duration_us"] = _number(raw, "duration_us")
    df["wait_us"] = _number(raw, "wait_us")
    for ints in ("block_num", "mix_block_num", "device_id", "task_id", "stream_id"):
        df[ints] = _integer(raw, ints)
    df["is_marker"] = df["name"].str.match(_MARKER)
    df["is_superkernel"] = df["type"] == "SuperKernel"
    df["is_duplicate"] = raw.duplicated(keep="first")
    return df


def read_step_trace(csv: str | Path) -> pd.DataFrame:
    """``step_trace_time.csv`` → ``step`` (0 when absent or N/A), ``device_id`` and every
    documented time column in µs (``free_us`` is the device idle time inside the step)."""
    raw = _read_raw(csv, "step_trace_time.csv", _STEP_TRACE_COLUMNS, ("free_us",))
    df = pd.DataFrame(index=raw.index)
    df["step"] = _integer(raw, "step").fillna(0).astype("int64") if "step" in raw else 0
    df["device_id"] = _integer(raw, "device_id")
    for column in _STEP_TRACE_COLUMNS.values():
        if column.endswith("_us"):
            df[column] = _number(raw, column)
    return df


# ---------------------------------------------------------------- SuperKernel names, fail log
def parse_superkernel_name(name: str) -> SuperKernelName | None:
    """``sk_layer_0_start_RmsNorm_end_MatMulV2_0`` → scope ``layer_0``, RmsNorm..MatMulV2, 0.
    Parsed from the right, so the scope may contain underscores (op names may not contain
    ``_start_``/``_end_``). Markers and other names give None. This is the form in
    docs/npu_api.md; CANN's open-source SuperKernel also shows ``sk_<n>_<scope>_start_<func>_end_<func>``
    (index first, function names), which is not parsed: such rows still appear, with scope None."""
    name = name.strip()
    head, _, index = name.rpartition("_")
    if not name.startswith("sk_") or not index.isdigit():
        return None
    rest, sep, last = head[3:].rpartition("_end_")
    scope, sep2, first = rest.rpartition("_start_")
    if not (sep and sep2 and scope and first and last):
        return None
    return SuperKernelName(scope, first, last, int(index))


def read_fusion_fail_reasons(path: str | Path) -> list[dict[str, str | None]]:
    """Each non-empty line of ``sk_meta/sk_fusion_fail_reasons.log`` → ``{op, reason, raw}``.

    The exact format is unconfirmed (no NPU here). Lines are read leniently: the reason is
    the ``UPPER_CASE`` token after ``reason:``/``reason=``, else a known reason anywhere on
    the line (``DEFAULT_NODE``, ``TASK_GROUP_NOT_EMPTY``, ``OP_UNSUPPORT``, ``NOT_IN_SCOPE``,
    ``IN_UNFUSIBLE_SCOPE``, ``EXIST_DEADLOCK``, ``EXCEED_SCOPE_MAX``, ``EXCEED_CORE_MAX``,
    ``DYNAMIC_TASK_UNSUPPORT``, ``SIMT_OP_UNSUPPORT``, ``*VALUE_WAIT*``/``*VALUE_WRITE*``); the op is the value
    of ``funcName:``/``op:``/``op=``/``name:`` when present, else the word before the reason.
    CANN's open-source writer emits ``Node [nodeId:.., ...] - KernelInfos{funcName:X, ...}:
    reason: R[, reasonDetail: ...]``. Lines without a reason (headers, scope listings) are
    kept with ``reason`` None.
    """
    p = Path(path)
    try:
        text = p.read_text(errors="replace")
    except OSError as exc:
        raise ProfileError(f"cannot read fusion fail log {p}: {exc}") from exc
    return [_fail_line(line.strip()) for line in text.splitlines() if line.strip()]


def _fail_line(line: str) -> dict[str, str | None]:
    found = re.search(r"reason\s*[:=]\s*([A-Z][A-Z0-9_]*)", line) or _REASON.search(line)
    reason = found.group(1) if found else None
    keyed = re.search(r"\b(?:funcName|op_?name|op_?type|op|name)\s*[:=]\s*([^\s,;}\]]+)", line, re.I)
    op = keyed.group(1) if keyed else None
    if op is None and found is not None:
        words = re.findall(r"[\w./-]+", line[: found.start()])
        words = [w for w in words if w.lower() not in {"reason", "node", "op"} and not w.isdigit()]
        op = words[-1] if words else None
    return {"op": op, "reason": reason, "raw": line}


# ---------------------------------------------------------------- the summary
def _union_ns(intervals: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for start, stop in sorted(intervals):
        if end is None or start > end:
            total, end = total + stop - start, stop
        elif stop > end:
            total, end = total + stop - end, stop
    return total


def summarize(files: ProfileFiles, top: int = 15) -> ProfileSummary:
    """Per step: span (first kernel start to last kernel end), busy (union of kernel
    intervals), gap (``Free`` from step_trace_time.csv for that step when present, else span
    − busy) and kernel count; plus time by core, top kernels and SuperKernels. Markers and
    exact duplicate rows are excluded everywhere and counted."""
    df = read_kernel_details(files.kernel_details)
    duplicates = int(df["is_duplicate"].sum())
    df = df[~df["is_duplicate"]]
    markers = int(df["is_marker"].sum())
    work = df[~df["is_marker"]]
    timed = work[work["start_ns"].notna() & work["duration_us"].notna()]
    free = _free_by_step(files.step_trace)
    timed_by_step = {step: rows for step, rows in timed.groupby("step")}
    steps = []
    for step, rows in work.groupby("step", sort=True):
        t = timed_by_step.get(step, timed.iloc[:0])
        spans = [(int(s), int(s) + round(d * 1000)) for s, d in zip(t["start_ns"], t["duration_us"])]
        span = (max(e for _, e in spans) - min(s for s, _ in spans)) if spans else 0
        busy = _union_ns(spans)
        source = "step_trace" if step in free else "kernels"
        gap = free[step] if step in free else (span - busy) / 1000
        steps.append(StepStats(int(step), span / 1000, busy / 1000, round(gap, 3), len(rows), source))
    sources = {s.gap_source for s in steps}
    by_core = work.groupby("core")["duration_us"].sum().round(3).sort_values(ascending=False)
    kernels = (work.groupby(["name", "type"])["duration_us"].agg(["sum", "size"]).reset_index()
               .sort_values(["sum", "name"], ascending=[False, True]).head(top))
    fail = [r for log in files.fusion_fail_logs for r in read_fusion_fail_reasons(log)]
    return ProfileSummary(
        source=str(files.kernel_details), note=files.note,
        gap_source=sources.pop() if len(sources) == 1 else ("mixed" if sources else "none"),
        steps=tuple(steps), by_core={str(k): float(v) for k, v in by_core.items()},
        top_kernels=tuple(KernelTotal(str(r.name), str(r.type), round(float(r.sum), 3), int(r.size))
                          for r in kernels.itertuples()),
        superkernels=_superkernels(work[work["is_superkernel"]]), markers_filtered=markers,
        duplicates_dropped=duplicates, untimed_rows=len(work) - len(timed), fusion_fail_reasons=tuple(fail))


def _free_by_step(step_trace: Path | None) -> dict[int, float]:
    if step_trace is None:
        return {}
    trace = read_step_trace(step_trace).dropna(subset=["free_us"])
    return {int(k): round(float(v), 3) for k, v in trace.groupby("step")["free_us"].mean().items()}


def _superkernels(rows: pd.DataFrame) -> tuple[SuperKernelTotal, ...]:
    def first_start(item: tuple[Any, pd.DataFrame]) -> tuple[int, str]:
        starts = item[1]["start_ns"].dropna()
        return (int(starts.min()) if len(starts) else 2**63, str(item[0]))

    out = []
    for name, group in sorted(rows.groupby("name"), key=first_start):
        parsed = parse_superkernel_name(str(name))
        fields = (parsed.scope, parsed.first_op, parsed.last_op, parsed.index) if parsed else (None,) * 4
        out.append(SuperKernelTotal(str(name), *fields, round(float(group["duration_us"].sum()), 3), len(group)))
    return tuple(out)
