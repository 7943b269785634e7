"""sktune's Inductor regions compiled with symbolic sizes (as before the fix) and with static
sizes (``inductor.static_shapes``), against eager and ``torch.compile`` of the whole model,
all in one run.

Why: regions compiled as dynamic-shape graphs ran stage 2 of studies/split_stages.py at 1.7x
eager (docs/measured.md "Regions compiled for their shapes"). Each plan is a list of
``first:last`` op spans, ``,`` between scopes; the options are a JSON object.
Usage: python benchmarks/region_shapes.py STUDY [OPTIONS_JSON] SPANS...
       e.g. python benchmarks/region_shapes.py split_stages 32:53 52:53 0:53
(one thread, rounds interleaved, ratio = median of per-round ratios to eager; bitwise
mismatches are marked; nothing is asserted)
"""

from __future__ import annotations

import contextlib
import importlib
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import sktune.backends.inductor as inductor
from sktune.benchlib.interleave import interleaved_seconds
from sktune.measure.heap import steady_heap
from sktune.backends.inductor import InductorBackend
from sktune.graph.capture import capture
from sktune.plan import Plan, Scope
from sktune.verify import compare_outputs, flatten_outputs

ROUNDS, CALLS = 15, 5


def plan_of(spans: str, options: dict[str, Any]) -> Plan:
    pairs = [tuple(map(int, s.split(":"))) for s in spans.split(",")]
    return Plan.make([Scope(a, b, f"sk{i}") for i, (a, b) in enumerate(pairs)], options)


def interleaved_ms(candidates: dict[str, Callable[[], Any]]) -> dict[str, list[float]]:
    return {name: [t * 1e3 for t in times]
            for name, times in interleaved_seconds(candidates, ROUNDS, CALLS).items()}


def main() -> None:
    torch.set_num_threads(1)
    print(f"heap: {steady_heap()}")  # the tuner's regime: eager's speed must not depend on history
    torch.set_grad_enabled(False)
    sys.path.insert(0, str(Path(__file__).parent.parent / "studies"))
    study, rest = sys.argv[1], sys.argv[2:]
    options = json.loads(rest.pop(0)) if rest and rest[0].startswith("{") else {}
    module = importlib.import_module(study)
    model, inputs = module.build_model(), module.example_inputs()
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
        for spans in rest:
            fn = backend.compile(graph, plan_of(spans, options))
            mark = " MISMATCH" if compare_outputs(ref, flatten_outputs(fn(*args))) else ""
            candidates[f"{label} {spans}{mark}"] = lambda fn=fn: fn(*args)
    inductor.static_shapes = static_shapes
    times = interleaved_ms(candidates)
    base = times["eager (captured graph)"]
    print(f"{study}: {len(graph.ops)} ops, options {options}, 1 thread, {ROUNDS} rounds x {CALLS} calls")
    for name, ms in times.items():
        ratio = statistics.median(a / b for a, b in zip(ms, base))
        print(f"{name:40s} {statistics.median(ms):8.3f} ms  x{ratio:.3f} of eager")


if __name__ == "__main__":
    main()
