"""``sktune inspect MODEL.py``: the captured op list and its legal cut points."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from sktune.cli._errors import user_errors


def inspect_command(
    model: Annotated[Path, typer.Argument(help="Python file defining build_model() and example_inputs(seed).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object: ops and boundaries.")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
) -> None:
    """Capture the forward and list its ops, module paths, source lines and legal cuts; a
    model with input_shapes() is captured at each shape, which must run the same ops."""
    with user_errors(debug):
        import torch

        from sktune.graph.capture import capture
        from sktune.graph.structure import find_repeats
        from sktune.load import build, draw_inputs, load_model_file, shape_weights, verify_shape_names
        from sktune.tuning.settings import DEFAULT_INPUT_SETS
        from sktune.worker.startup import check_same_ops, checked_inputs

        source = load_model_file(model)
        built = build(source)
        shapes: list[str | None] = list(shape_weights(source)) or [None]
        verify_only = verify_shape_names(source)
        with torch.no_grad():  # checked as `sktune run` checks them; each shape its own graph
            drawn = checked_inputs(source, built, shapes, verify_only, DEFAULT_INPUT_SETS)
            graphs = {name: capture(built, drawn[name][0]) for name in shapes}
            # A run captures a verify-only shape only when it verifies a plan there, at the end of
            # the search; a graph of other ops there is found here at once.
            graphs.update({name: capture(built, draw_inputs(source, 0, name)) for name in verify_only})
        for name in [*shapes[1:], *verify_only]:  # op indices must mean the same ops at every shape
            check_same_ops(graphs[shapes[0]], graphs[name], shapes[0], name)
        graph = graphs[shapes[0]]
        description = graph.describe()
        repeats = find_repeats([o.target for o in graph.ops], [o.module for o in graph.ops])
        description["repeated_units"] = (
            {"container": repeats.container, "units": [list(u) for u in repeats.units]} if repeats else None
        )
        description["shapes"] = None if shapes == [None] else shapes  # captured at each, the same ops
        description["verify_only_shapes"] = list(verify_only)  # captured too, the same ops
    if as_json:
        typer.echo(json.dumps(description))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("#", "node", "type", "module", "source", "cut after", title=f"{model}: {len(graph.ops)} ops")
    legal = set(graph.boundaries)
    for op in graph.ops:
        table.add_row(str(op.index), op.name, op.target, op.module, Path(op.source).name if op.source else "",
                      "yes" if op.index in legal else "")
    # Piped or written to a file: wide enough that module paths and source lines stay whole.
    console = Console() if sys.stdout.isatty() else Console(width=200)
    console.print(table)
    if len(shapes) > 1:
        console.print(f"shapes: the same {len(graph.ops)} ops at each of {', '.join(map(str, shapes))} "
                      f"(captured at each; sources as at {shapes[0]!r})", highlight=False)
    if verify_only:
        console.print(f"verify-only shapes: the same ops at each of {', '.join(verify_only)} (captured here; a run "
                      "verifies the best plans there bitwise, untimed)", highlight=False)
    if repeats:
        under = repr(repeats.container) if repeats.container else "the model itself (a root Sequential)"
        console.print(f"repeated units: {len(repeats.units)} × {repeats.length} ops under {under} "
                      f"(ops {repeats.units[0][0]}..{repeats.units[-1][1]}): one cut pattern is tuned and stamped")
