"""``sktune doctor``: which of sktune's Ascend assumptions hold on this host."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from sktune.cli._errors import MAX_TIMEOUT_S, err_console, print_error, user_errors
from sktune.cli._paths import check_output

if TYPE_CHECKING:
    from sktune.doctor.records import DoctorReport

_STYLE = {"confirmed": "green", "differs": "yellow", "could not check": "red", "info": "cyan"}


def doctor_command(
    backend: Annotated[str | None, typer.Option(
        help="The backend whose assumptions to check (default: the one that has a doctor).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object: device, emulated, checks.")] = False,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Also write the JSON to this file.")] = None,
    timeout: Annotated[float, typer.Option(min=1.0, max=MAX_TIMEOUT_S,
                                           help="Seconds one check may take (a hang ends at it).")] = 900.0,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
) -> None:
    """Run a tiny model through every guess sktune makes about torch-npu and CANN (markers,
    options, sk_meta, profiles, fail reasons, static-kernel cache, hang trace, versions);
    one row per check: confirmed / differs: ... / could not check: ... (info: shown, not compared).
    Exit 0 when it ran."""
    from sktune.backends import REGISTRY, backend_class

    checked = [name for name in REGISTRY if backend_class(name).has_doctor]
    if backend is not None and backend not in checked:
        why = (f"the {backend} backend has no assumptions about a device to check" if backend in REGISTRY
               else f"unknown backend {backend!r}")
        err_console.print(f"error: {why}; sktune doctor checks {', '.join(checked)} (run it on that backend's "
                          "host).", highlight=False)
        raise typer.Exit(1)
    with user_errors(debug), _stdout_to_stderr(as_json):
        from sktune.doctor.runner import run_doctor, timed_out

        if output is not None:  # checked first: the checks can take many minutes on a device
            check_output(output, "-o")
        report, workdir = run_doctor(timeout_s=timeout)
    data = report.to_json()
    failed_write = _write(output, json.dumps(data, indent=2) + "\n") if output is not None else None
    if as_json:
        typer.echo(json.dumps(data, indent=2))
    else:
        _print(report, workdir, None if failed_write else output)
    if failed_write:  # after printing: a failed write must not hide what the checks found
        print_error(failed_write)
        raise typer.Exit(1)
    if timed_out(report):
        # A check's thread may still hold a hung device; torch-npu's teardown at exit could
        # wait on it forever. Everything is written: leave now, with the code of a run that ran.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def counts_line(report: DoctorReport) -> str:
    """Counts by status, the rows that are not confirmed named: ``12 confirmed, 1 differs (x), ...``."""
    parts = []
    for kind in _STYLE:
        names = [r.name for r in report.checks if r.kind == kind]
        if kind == "info" and not names:
            continue
        named = f" ({', '.join(names)})" if names and kind != "confirmed" else ""
        parts.append(f"{len(names)} {kind}{named}")
    return ", ".join(parts)


def _write(path: Path, text: str) -> str | None:
    """Write ``text``; None, or why it could not be written."""
    try:
        path.write_text(text)
    except OSError as exc:
        return f"cannot write -o {path}: {exc}"
    return None


@contextlib.contextmanager
def _stdout_to_stderr(active: bool) -> Iterator[None]:
    """torch-npu and CANN print warnings to stdout (also from C): keep it for the JSON alone."""
    if not active:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _print(report: DoctorReport, workdir: Path, output: Path | None) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    title = f"sktune doctor on {report.device}" + (" (EMULATED Ascend)" if report.emulated else "")
    if console.is_terminal:
        table = Table(title=title)
        for header in ("check", "status", "detail"):
            table.add_column(header, overflow="fold")  # paths are evidence: never cut them short
        for row in report.checks:
            style = _STYLE[row.kind]
            table.add_row(row.name, f"[{style}]{escape(row.status)}[/]", escape(row.detail))
        console.print(table)
    else:  # a file or a pipe, pasted into an issue: one line a check, no table folded at 80 columns
        console.print(title, highlight=False, markup=False)
        for row in report.checks:
            line = f"{row.name}: {row.status}" + (f" | {row.detail}" if row.detail else "")
            console.print(line, highlight=False, markup=False, soft_wrap=True)
    console.print(counts_line(report) + f"; files of this run: {workdir}", highlight=False, soft_wrap=True)
    hint = f"wrote {output}" if output else "attach `sktune doctor --json -o doctor.json` to a report"
    console.print(hint, highlight=False, soft_wrap=True)
