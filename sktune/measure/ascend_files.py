"""Find the files of one Ascend profile: given a ``*_ascend_pt`` directory, its
``ASCEND_PROFILER_OUTPUT/``, a ``kernel_details.csv`` or a directory of several runs (the
newest is taken), locate ``kernel_details.csv``, ``step_trace_time.csv``,
``op_statistic.csv`` and the SuperKernel fusion-fail logs (``ProfileFiles``).
"""

from __future__ import annotations

import re
import dataclasses
from dataclasses import dataclass
from pathlib import Path

from sktune.errors import SktuneError

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"


class ProfileError(SktuneError):
    """No usable Ascend profile at the given path, or a file not in the documented format."""


#: The emulated Ascend's mark in a profile directory it wrote (tests/npu_emulator's profiler):
#: a real torch_npu.profiler writes no such file, so its figures are never labelled emulated.
EMULATED_MARKER = "sktune_emulated.json"


@dataclass(frozen=True)
class ProfileFiles:
    """The files of one profile. ``note`` says how they were chosen when it was a choice."""

    kernel_details: Path
    step_trace: Path | None = None
    op_statistic: Path | None = None
    fusion_fail_logs: tuple[Path, ...] = ()
    profile_dir: Path | None = None
    note: str | None = None
    emulated: bool = False  # written by the emulated Ascend (EMULATED_MARKER), not by an NPU


def find_profile_files(path: str | Path) -> ProfileFiles:
    """Accept a ``*_ascend_pt`` dir, its ``ASCEND_PROFILER_OUTPUT/``, a kernel_details CSV, or
    a directory of several ``*_ascend_pt`` dirs (the newest is taken; ``note`` says so)."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ProfileError(f"profile path not found: {p}")
    if p.is_file():
        if p.suffix.lower() != ".csv":  # e.g. trace_view.json: read as a CSV it failed on its header
            raise ProfileError(f"{p} is not a CSV: sktune profile reads torch_npu.profiler's kernel_details.csv "
                               f"(in {OUTPUT_DIR}/ of a *_ascend_pt directory)")
        if p.name.startswith("op_summary"):  # msprof's own export: other column names
            raise ProfileError(f"{p} is msprof's op summary, not torch_npu.profiler's kernel_details.csv; profile "
                               "with torch_npu.profiler (README \"Running on Ascend\") and pass its *_ascend_pt "
                               "directory")
        siblings = p.parent if p.name == "kernel_details.csv" else None
        return _files(p, siblings, p.parent.parent if siblings and p.parent.name == OUTPUT_DIR else None)
    if (p / "kernel_details.csv").is_file():
        return _files(p / "kernel_details.csv", p, p.parent if p.name == OUTPUT_DIR else None)
    if (p / OUTPUT_DIR / "kernel_details.csv").is_file():
        return _files(p / OUTPUT_DIR / "kernel_details.csv", p / OUTPUT_DIR, p)
    output = p if p.name == OUTPUT_DIR else p / OUTPUT_DIR
    if (output / "kernel_details.csv").is_dir():
        raise ProfileError(f"{output / 'kernel_details.csv'} is a directory, not torch_npu.profiler's CSV")
    if output.is_dir() and any(output.iterdir()):  # parsed (step_trace_time.csv, …), without kernel details
        held = ", ".join(sorted(f.name for f in output.iterdir())[:4])
        raise ProfileError(f"no kernel_details.csv in {output} (it holds {held}): the profile's analysis wrote no "
                           "kernel details; profile at Level0 or above with torch_npu.profiler, and let its "
                           f"analysis finish (or run torch_npu.profiler.profiler.analyse on {p})")
    if (p / OUTPUT_DIR).is_dir() or p.name.endswith("_ascend_pt"):
        raise ProfileError(
            f"no {OUTPUT_DIR}/kernel_details.csv in {p}: the profile was not parsed; run "
            f"torch_npu.profiler.profiler.analyse('{p}') on a machine with torch_npu")
    runs = [d for d in p.iterdir() if d.is_dir() and d.name.endswith("_ascend_pt")]
    nested = [d for d in p.iterdir() if d.is_dir() and any(e.name.endswith("_ascend_pt") for e in d.iterdir()
                                                            if e.is_dir())] if not runs else []
    if nested:  # e.g. sktune's own .sktune/npu-profiles/<pid>-<tag>/*_ascend_pt
        raise ProfileError(f"no Ascend profile directly in {p}: its subfolders hold *_ascend_pt directories "
                           f"(e.g. {nested[0]}); pass one of those")
    if not runs:
        named = sorted(f.name for f in p.glob("kernel_details*.csv"))  # renamed copies: name one of them
        raise ProfileError(f"no Ascend profile in {p}: expected kernel_details.csv, {OUTPUT_DIR}/ "
                           "or *_ascend_pt directories"
                           + (f" (it holds {', '.join(named[:3])}: pass that file)" if named else ""))
    stamps = [_name_timestamp(d) for d in runs]
    by_name = all(s is not None for s in stamps)
    newest = max(runs, key=(lambda d: (_name_timestamp(d), d.name)) if by_name else (lambda d: d.stat().st_mtime))
    found = find_profile_files(newest)
    note = None
    if len(runs) > 1:
        how = "timestamp in its name" if by_name else "modification time"
        note = f"{len(runs)} *_ascend_pt directories in {p}; using the newest by {how}: {newest.name}"
    return dataclasses.replace(found, note=note)


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
                        tuple(sorted(set(logs))), profile_dir,
                        emulated=profile_dir is not None and (profile_dir / EMULATED_MARKER).is_file())
