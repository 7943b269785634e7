"""``sktune report --study NAME``: one self-contained HTML report of a study."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sktune.cli._errors import user_errors
from sktune.cli._paths import check_output
from sktune.tuning.settings import DEFAULT_STORAGE


def default_output(study: str) -> Path:
    """``reports/NAME.html``, with characters unsafe in a file name replaced (``settings.file_name``)."""
    from sktune.tuning.settings import file_name

    return Path("reports") / f"{file_name(study)}.html"


def report_command(
    study: Annotated[str, typer.Option(help="Name of the study to report on.")],
    storage: Annotated[str, typer.Option(help="Optuna storage URL that holds the study.")] = DEFAULT_STORAGE,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="HTML file to write (default: reports/STUDY.html).")] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
) -> None:
    """Summary, fusion map, where time goes, search history, trials and failures, in one
    HTML file that opens with no network."""
    with user_errors(debug):
        from sktune.errors import SktuneError
        from sktune.report.html import write_report
        from sktune.tuning.storage import load_existing_study

        if output is not None:  # a named file is checked as export's -o is; only the default folder is made
            check_output(output, "-o")
        loaded = load_existing_study(study, storage)
        path = output or default_output(study)
        try:
            write_report(loaded, path)
        except OSError as exc:
            raise SktuneError(f"cannot write the report to {path}: {exc.strerror or exc}") from exc
    typer.echo(f"report written to {path}")
