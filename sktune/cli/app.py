"""The ``sktune`` command line: one module per command, heavy imports inside commands."""

from __future__ import annotations

import logging
import sys

import typer

from sktune.cli._errors import print_error
from sktune.cli.doctor_cmd import doctor_command
from sktune.cli.export_cmd import export_command
from sktune.cli.inspect_cmd import inspect_command
from sktune.cli.profile_cmd import profile_command
from sktune.cli.report_cmd import report_command
from sktune.cli.run_cmd import run_command
from sktune.errors import torch_extension_failed

app = typer.Typer(
    name="sktune",
    help="Profiling-driven autotuner for kernel fusion (SuperKernel scopes and options).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.command("run")(run_command)
app.command("inspect")(inspect_command)
app.command("profile")(profile_command)
app.command("report")(report_command)
app.command("export")(export_command)
app.command("doctor")(doctor_command)


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        app()
    except RuntimeError as exc:
        # torch-npu installed and CANN not sourced: every ``import torch`` fails, in any command.
        if (message := torch_extension_failed(exc)) is None or "--debug" in sys.argv:
            raise
        print_error(message)
        raise SystemExit(1) from None
