"""``sktune inspect MODEL.py``: the captured op list and its legal cut points."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from sktune.cli._errors import user_errors


def inspect_command(
    model: Annotated[Path, typer.Argument(help="Python file defining build_model() and example_inputs(seed).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object: ops and boundaries.")] = False,
    debug: Annotated[bool, typer.Option(help="Show tracebacks.")] = False,
) -> None:
    """Capture the forward once and list its ops, module paths, source lines and legal cuts."""
    with user_errors(debug):
        import torch

        from sktune.graph.capture import capture
        from sktune.load import build, draw_inputs, load_model_file

        source = load_model_file(model)
        with torch.no_grad():
            graph = capture(build(source), draw_inputs(source, 0))
        from sktune.graph.structure import find_repeats

        description = graph.describe()
        repeats = find_repeats([o.target for o in graph.ops], [o.module for o in graph.ops])
        description["repeated_units"] = (
            {"container": repeats.container, "units": [list(u) for u in repeats.units]} if repeats else None
        )
    if as_json:
        typer.echo(json.dumps(description))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("#", "op", "type", "module", "source", "cut after", title=f"{model}: {len(graph.ops)} ops")
    legal = set(graph.boundaries)
    for op in graph.ops:
        table.add_row(str(op.index), op.name, op.target, op.module, Path(op.source).name if op.source else "",
                      "yes" if op.index in legal else "")
    console = Console()
    console.print(table)
    if repeats:
        console.print(f"repeated units: {len(repeats.units)} × {repeats.length} ops under {repeats.container!r} "
                      f"(ops {repeats.units[0][0]}..{repeats.units[-1][1]}): one cut pattern is tuned and stamped")
