"""Domain errors end at the CLI edge as one clear message and exit code 1."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import typer
from rich.console import Console
from rich.markup import escape

err_console = Console(stderr=True)

#: The longest time limit an option takes (a day): a float past it (inf, 1e10) overflows a
#: thread join's or a selector's timeout, a traceback after minutes of work.
MAX_TIMEOUT_S = 86400.0


def print_error(message: str) -> None:
    """``error: <message>`` on stderr, the message never read as rich markup (paths, [brackets])."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)


@contextlib.contextmanager
def user_errors(debug: bool) -> Iterator[None]:
    """Print SktuneError as ``error: ...`` (exit 1); ``--debug`` shows the traceback."""
    from sktune.errors import SktuneError

    try:
        yield
    except SktuneError as exc:
        if debug:
            raise
        print_error(str(exc))
        raise typer.Exit(1) from None
