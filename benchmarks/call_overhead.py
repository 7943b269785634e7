"""What a call through ``torch.compile`` adds to a model's step, which the trials do not time.

    python benchmarks/call_overhead.py MODEL.py [--plan export.json] [--batches 40] [--calls 100]

The trials time the captured graph with its compiled regions, called directly, against
the same graph unfused (tuning/objective.py). A user calls the model through
``sktune.apply`` (``torch.compile``): Dynamo checks its guards on every call. This prints,
interleaved at one thread, medians of ``--batches`` batches of ``--calls`` calls: the eager
model, the captured graph called directly, ``torch.compile`` with a backend that returns
the captured graph unchanged (Dynamo's cost alone) and, with ``--plan`` (the output of
``sktune export --format json``), ``sktune.apply(model, plan)``; each as µs per call and
as a speedup over eager. Outputs are checked bitwise against eager first.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
from pathlib import Path

import torch

import sktune
from sktune.benchlib.interleave import interleaved_seconds
from sktune.benchlib.script import existing_file, run, study_file
from sktune.errors import SktuneError
from sktune.load import build, draw_inputs, load_model_file
from sktune.measure.heap import steady_heap


def per_call_us(ways: dict[str, Callable[[], object]], batches: int, calls: int) -> dict[str, float]:
    """Median µs per call of each way, batches interleaved so that drift hits all alike."""
    return {name: statistics.median(s) * 1e6 for name, s in interleaved_seconds(ways, batches, calls).items()}


def _read_plan(path: Path) -> dict:
    """``sktune export --format json``'s file, read as JSON (sktune.apply checks the rest)."""
    try:
        plan = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SktuneError(f"--plan {path}: not an export's JSON ({exc})") from None
    if not isinstance(plan, dict):
        raise SktuneError(f"--plan {path}: not an export's JSON (a {type(plan).__name__}, not an object)")
    return plan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=study_file)
    parser.add_argument("--plan", type=existing_file, help="sktune export --format json output, for sktune.apply")
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    plan = None if args.plan is None else _read_plan(args.plan)  # before minutes of capture and warm-up
    print(f"heap: {steady_heap()}")  # the trials' regime: eager's speed must not depend on history
    torch.set_num_threads(1)
    source = load_model_file(args.model)
    model, inputs = build(source), draw_inputs(source, 0)
    captured: list[tuple[torch.fx.GraphModule, list[torch.Tensor]]] = []

    def unchanged(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., object]:
        captured.append((gm, example_inputs))
        return gm.forward

    dynamo_only = torch.compile(model, backend=unchanged, fullgraph=True, dynamic=False)
    with torch.no_grad():
        reference = model(*inputs)
        dynamo_only(*inputs)  # captures the graph; its arguments are the inputs and the parameters
        gm, graph_args = captured[0]
        ways: dict[str, Callable[[], object]] = {
            "eager": lambda: model(*inputs),
            "captured graph, called directly": lambda: gm(*graph_args),  # as the trials call it
            "torch.compile, graph unchanged": lambda: dynamo_only(*inputs),
        }
        if args.plan:
            applied = sktune.apply(build(source), plan, backend="inductor")
            ways["sktune.apply(plan)"] = lambda: applied(*inputs)
        for name, call in ways.items():
            out = call()
            for _ in range(5):  # warm: first calls compile and allocate
                call()
            got = out if isinstance(out, (tuple, list)) else (out,)
            want = reference if isinstance(reference, (tuple, list)) else (reference,)
            assert all(torch.equal(a, b) for a, b in zip(got, want)), f"{name}: outputs differ from eager"
        us = per_call_us(ways, args.batches, args.calls)
    eager = us["eager"]
    print(f"{args.model.name}: torch {torch.__version__}, 1 thread, medians of {args.batches} x {args.calls} calls")
    for name, value in us.items():
        print(f"  {name:34s} {value:9.1f} µs   {eager / value:5.2f}x eager")


if __name__ == "__main__":
    run(main)
