"""The edge of every benchmark script: a user's mistake (a missing file, a model that breaks
the contract, a plan that does not fit its graph) ends as one line and exit code 1, as at
``sktune``'s own commands (cli/_errors.py), never as a traceback."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from sktune.errors import SktuneError

STUDIES = Path(__file__).resolve().parents[2] / "studies"


def run(main: Callable[[], object]) -> None:
    """Call a script's entry point (a typer app or a plain ``main``)."""
    try:
        main()
    except SktuneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


def existing_file(text: str) -> Path:
    """An argument that names a file to read other than the model (argparse's ``type``): a
    missing one is refused before any work, not after minutes of capture and warm-up."""
    path = Path(text)
    if not path.is_file():
        raise SktuneError(f"{text}: no such file")
    return path


def study_file(text: str) -> Path:
    """A model file given by path, or a study of ``studies/`` given by name
    (``split_stages`` is ``studies/split_stages.py``), checked as ``sktune run`` checks it."""
    from sktune.load import check_model_path  # imports torch: not before a script sets its cache folder

    path = Path(text)
    if not path.is_file() and path.suffix != ".py" and "/" not in text:
        path = STUDIES / f"{text}.py"
    check_model_path(path)
    return path
