"""``sktune profile PATH``: size the fusion opportunity from an Ascend profile taken anywhere."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sktune.cli._errors import user_errors

if TYPE_CHECKING:
    from sktune.measure.ascend_summary import ProfileSummary


def profile_command(
    path: Annotated[Path, typer.Argument(
        help="A *_ascend_pt directory, its ASCEND_PROFILER_OUTPUT/, a kernel_details.csv, "
             "or a directory of *_ascend_pt directories (the newest is used).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object: steps, by_core, top_kernels, ...")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
) -> None:
    """Per step: device span, busy time, gap and kernel count; time by core; top kernels;
    SuperKernels mapped to their scopes. Marker kernels are filtered out."""
    with user_errors(debug):
        from sktune.measure.ascend_files import ProfileError, find_profile_files
        from sktune.measure.ascend_summary import summarize

        summary = summarize(find_profile_files(path))
        if not summary.steps and not summary.top_kernels:  # a header alone, a cut file: it read "nothing fused"
            if summary.markers_filtered:
                raise ProfileError(f"{summary.source} has only scope marker kernels ({summary.markers_filtered}, "
                                   "filtered out): no kernel ran between them")
            raise ProfileError(f"{summary.source} has no kernel rows: the profile recorded no kernel (a file cut "
                               "short, or steps that ran nothing on the device)")
    if as_json:
        typer.echo(json.dumps(summary.to_json()))
        return
    _print(summary)


def _us(value: float) -> str:
    return f"{value:,.3f}"


def _print(summary: ProfileSummary) -> None:
    from rich.console import Console
    from rich.table import Table

    from sktune.measure.ascend_parsers import is_known_fail_reason

    console = Console()
    console.print(f"[bold]{summary.source}[/]", highlight=False)
    if summary.emulated:  # every figure below is the emulator's model of a device
        console.print("[bold yellow]EMULATED[/]: written by sktune's emulated Ascend; these times are its model's, "
                      "not an NPU measurement", highlight=False)
    if summary.note:
        console.print(summary.note, highlight=False)

    free = any(s.free_us is not None for s in summary.steps)
    steps = Table(title="Per step (device)")
    for header in ("step", "span µs", "busy µs", "gap µs", "gap %", "kernels", *(["Free µs"] if free else [])):
        steps.add_column(header, overflow="fold")  # a figure wraps at 80 columns, never cut to "…"
    for s in summary.steps:
        share = f"{100 * s.gap_us / s.span_us:.1f}" if s.span_us else "-"
        steps.add_row(str(s.step), _us(s.span_us), _us(s.busy_us), _us(s.gap_us), share, str(s.kernels),
                      *([_us(s.free_us) if s.free_us is not None else "-"] if free else []))
    console.print(steps)
    console.print("span: first kernel start to last kernel end; busy: union of kernel intervals; gap: span − busy, "
                  "the device idle between the step's kernels that fusion removes."
                  + (" Free: step_trace_time.csv's, which counts the idle up to the next step's first kernel "
                     "too (host time between steps)." if free else ""), highlight=False)
    if not summary.step_ids:
        console.print("No Step Id column: the run had no profiler steps, so the whole profile is one step "
                      "(profile with a schedule and one prof.step() per step to see steps).", highlight=False)
    if summary.cut_rows:
        console.print(f"[yellow]Rows cut short (fewer fields than the header: was the file copied whole?), left "
                      f"out: {summary.cut_rows}[/]", highlight=False)
    if summary.unstepped_rows:
        console.print(f"Rows outside every profiler step (blank or unreadable Step Id, in no step): "
                      f"{summary.unstepped_rows}",
                      highlight=False)

    total = sum(summary.by_core.values()) or 1.0
    cores = Table("accelerator core", "total µs", "share %", title="Time by core")
    for core, us in summary.by_core.items():
        cores.add_row(core, _us(us), f"{100 * us / total:.1f}")
    console.print(cores)

    top = Table(title=f"Top {len(summary.top_kernels)} kernels")
    for header in ("name", "type", "total µs", "count", "avg µs"):
        top.add_column(header, overflow="fold")
    for k in summary.top_kernels:
        top.add_row(k.name, k.type, _us(k.total_us), str(k.count), _us(k.total_us / k.count))
    console.print(top)

    if summary.superkernels:
        sk = Table(title="SuperKernels (the fusion that happened)")
        for header in ("scope", "first op", "last op", "#", "total µs", "count", "name"):
            sk.add_column(header, overflow="fold")
        for row in summary.superkernels:
            sk.add_row(row.scope or "?", row.first_op or "?", row.last_op or "?",
                       "" if row.index is None else str(row.index), _us(row.total_us), str(row.count), row.name)
        console.print(sk)
    else:
        console.print("No SuperKernel rows: nothing was fused in this profile.")

    console.print(f"Marker kernels filtered: {summary.markers_filtered}", highlight=False)
    if summary.duplicates_dropped:
        console.print(f"Duplicate rows dropped (exact repeats, or a task listed again under another name): "
                      f"{summary.duplicates_dropped}", highlight=False)
    if summary.untimed_rows:
        console.print(f"Rows without a usable start or duration (blank, unreadable, infinite or negative; counted, "
                      f"not timed): {summary.untimed_rows}", highlight=False)
    reasons = Counter(r["reason"] for r in summary.fusion_fail_reasons if r["reason"])
    if reasons:
        console.print("Fusion fail reasons: " + ", ".join(f"{k} ×{v}" for k, v in reasons.most_common()),
                      highlight=False)
        unknown = sorted(r for r in reasons if not is_known_fail_reason(r))
        if unknown:  # shown as CANN wrote them; docs/npu_api.md lists the ones sktune knows
            console.print("Not in sktune's list of reasons (shown as written): " + ", ".join(unknown),
                          highlight=False)
