"""sktune's Inductor regions compiled with symbolic sizes (as before the fix) and with static
sizes (``inductor.static_shapes``), against eager and ``torch.compile`` of the whole model,
all in one run.

Why: regions compiled as dynamic-shape graphs ran stage 2 of studies/split_stages.py at 1.7x
eager (docs/measured.md "Regions compiled for their shapes"). Each plan is a list of
``first:last`` op spans, ``,`` between scopes; the options are a JSON object.
Usage: python benchmarks/region_shapes.py MODEL [OPTIONS_JSON] SPANS...
       e.g. python benchmarks/region_shapes.py studies/split_stages.py 32:53 52:53 0:53
(MODEL: a model file, or the name of one in studies/; one thread, rounds interleaved; each
line's time as a share of eager's, the median of per-round ratios, so below 1 is faster;
bitwise mismatches are marked; nothing is asserted)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
from collections.abc import Callable
from typing import Any

import torch

import sktune.backends.inductor as inductor
from sktune.benchlib.interleave import interleaved_seconds
from sktune.measure.heap import steady_heap
from sktune.backends.inductor import InductorBackend
from sktune.benchlib.script import run, study_file
from sktune.errors import SktuneError
from sktune.graph.capture import capture
from sktune.load import build, draw_inputs, load_model_file
from sktune.plan import Plan, Scope
from sktune.verify import compare_outputs, flatten_outputs

ROUNDS, CALLS = 15, 5


def plan_of(spans: str, options: dict[str, Any]) -> Plan:
    try:
        pairs = [tuple(map(int, s.split(":"))) for s in spans.split(",")]
        return Plan.make([Scope(a, b, f"sk{i}") for i, (a, b) in enumerate(pairs)], options)
    except ValueError:
        raise SktuneError(f"{spans!r}: a plan is FIRST:LAST op spans, ',' between scopes (e.g. 0:5,9:12)") from None


def interleaved_ms(candidates: dict[str, Callable[[], Any]]) -> dict[str, list[float]]:
    return {name: [t * 1e3 for t in times]
            for name, times in interleaved_seconds(candidates, ROUNDS, CALLS).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     usage="%(prog)s MODEL [OPTIONS_JSON] SPANS [SPANS ...]")
    parser.add_argument("model", type=study_file, help="model file, or the name of one in studies/")
    parser.add_argument("plans", nargs="+", metavar="SPANS",
                        help="plans as FIRST:LAST op spans, ',' between scopes; a JSON object of options may come first")
    cli = parser.parse_args()
    rest = list(cli.plans)
    try:
        options = json.loads(rest.pop(0)) if rest[0].startswith("{") else {}
    except json.JSONDecodeError as exc:
        raise SktuneError(f"the options are not a JSON object: {exc}") from None
    if not rest:
        parser.error("name at least one plan (FIRST:LAST spans)")
    plans = {spans: plan_of(spans, options) for spans in rest}  # a typo ends here, before the capture
    torch.set_num_threads(1)
    print(f"heap: {steady_heap()}")  # the tuner's regime: eager's speed must not depend on history
    torch.set_grad_enabled(False)
    source = load_model_file(cli.model)
    model, inputs = build(source), draw_inputs(source, 0)
    graph = capture(model, inputs)
    args = graph.args_for(inputs)
    ref = flatten_outputs(graph.gm(*args))
    whole = torch.compile(model, fullgraph=True, dynamic=False)
    candidates: dict[str, Callable[[], Any]] = {
        "eager (captured graph)": lambda: graph.gm(*args),
        "torch.compile (whole model)": lambda: whole(*inputs),
    }
    static_shapes = inductor.static_shapes
    for label in ("symbolic", "static"):
        inductor.static_shapes = static_shapes if label == "static" else lambda a: contextlib.nullcontext()
        backend = InductorBackend(for_trials=True)
        for spans, plan in plans.items():
            fn = backend.compile(graph, plan)
            mark = " MISMATCH" if compare_outputs(ref, flatten_outputs(fn(*args))) else ""
            candidates[f"{label} {spans}{mark}"] = lambda fn=fn: fn(*args)
    inductor.static_shapes = static_shapes
    times = interleaved_ms(candidates)
    base = times["eager (captured graph)"]
    print(f"{cli.model}: {len(graph.ops)} ops, options {options}, 1 thread, {ROUNDS} rounds x {CALLS} calls")
    for name, ms in times.items():
        ratio = statistics.median(a / b for a, b in zip(ms, base))
        print(f"{name:40s} {statistics.median(ms):8.3f} ms  {ratio:.3f} of eager's time")


if __name__ == "__main__":
    run(main)
