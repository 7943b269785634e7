"""Whole-model plans, exact and not, against the unfused graph at every served shape (issue 26).

    python benchmarks/exact_plans.py studies/decode_attention.py
    python benchmarks/exact_plans.py studies/decode_attention.py --plan fuse-all --plan exact-fused

Each plan is compiled by sktune's own inductor backend, compared bit for bit with the
unfused graph on ``--seeds`` input sets, and timed against it interleaved (A B A B, one
thread, median µs per call of ``--batches`` batches; ratio = unfused / plan, so above 1 is
faster). The plans:

- ``fuse-all``: one region, default options (the yardstick; not exact in fp32).
- ``exact-fused``: one region with every exact form: ``eager_order``, no pattern matcher,
  and fallbacks for the op types the forms leave inexact (``--fallback``, default
  matmul: attention stays inside the region).
- ``all-fallbacks``: one region, every op type with a fallback kept as ATen.
- ``cut-attention``: what exact plans had to do before the matmul fallback: the exact
  options, regions cut around every ``--cut`` op (default matmul), fallbacks for the rest.

Figures are printed; nothing is asserted.
"""

from __future__ import annotations

import os
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import torch
import typer

app = typer.Typer(add_completion=False, no_args_is_help=True)

PLANS = ("fuse-all", "exact-fused", "all-fallbacks", "cut-attention")


def cut_around(targets: Sequence[str], boundaries: Sequence[int], cut: set[str]) -> list[tuple[int, int]]:
    """Maximal runs of ops that hold no ``cut`` op, each edge at a legal boundary."""
    legal = set(boundaries) | {-1, len(targets) - 1}
    spans, start = [], 0
    for i, t in enumerate(targets):
        if t in cut:
            first, last = start, i - 1
            while first <= last and first - 1 not in legal:
                first += 1
            while last >= first and last not in legal:
                last -= 1
            if first <= last:
                spans.append((first, last))
            start = i + 1
    if start < len(targets):
        spans.append((start, len(targets) - 1))
    return spans


def plan_options(name: str, exact: dict[str, Any], fallbacks: list[str], every: list[str]) -> dict[str, Any]:
    if name == "fuse-all":
        return {}
    if name == "all-fallbacks":
        return {"fallback_ops": every}
    return {**exact, "fallback_ops": fallbacks}


@app.command()
def main(model: Path,
         plan: Annotated[list[str], typer.Option(help=f"Only these plans (repeatable): {', '.join(PLANS)}.")] = [],  # noqa: B006
         fallback: Annotated[list[str], typer.Option(help="Fallbacks of exact-fused (repeatable).")] = ["matmul"],  # noqa: B006
         cut: Annotated[list[str], typer.Option(help="Op types cut-attention cuts around.")] = ["matmul"],  # noqa: B006
         shape: Annotated[list[str], typer.Option(help="Only these served shapes (repeatable).")] = [],  # noqa: B006
         seeds: int = 3, batches: int = 30) -> None:
    """Print per shape and plan: bitwise or not (max ULP), µs per call, unfused µs, ratio."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="sktune-exact-plans-"))
    from sktune.measure.heap import steady_heap
    from sktune.backends import get_backend
    from sktune.graph.capture import capture
    from sktune.load import build, draw_inputs, load_model_file, shape_weights
    from sktune.measure.timer import calibrate_calls_per_batch, interleaved_batches
    from sktune.plan import Plan, Scope
    from sktune.verify import compare_outputs, flatten_outputs

    unknown = sorted(set(plan) - set(PLANS))
    if unknown:
        raise typer.BadParameter(f"unknown plan(s) {unknown}; known: {list(PLANS)}", param_hint="--plan")
    source = load_model_file(model)
    shapes = list(shape_weights(source, tuple(shape) or None, "--shape")) or [None]  # a shape it lacks is refused
    torch.set_num_threads(1)
    print(f"heap: {steady_heap()}")  # the tuner's regime: eager's speed must not depend on history
    torch.set_grad_enabled(False)
    backend = get_backend("inductor", for_trials=True)
    print(f"torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}, {model.name}, "
          f"{seeds} seeds, 1 thread, {batches} interleaved batches")
    print(f"{'shape':<6} {'plan':<14} {'regions':>7} {'bitwise':<28} {'µs':>8} {'unfused':>8} {'ratio':>6}")
    for sh in shapes:
        net = build(source)
        graph = capture(net, draw_inputs(source, 0, sh))
        targets = [o.target for o in graph.ops]
        caps = backend.capabilities(graph)
        every = list(caps.fallback_candidates)
        unfused = backend.reference(graph)
        for name in plan or PLANS:
            spans = ([(0, len(targets) - 1)] if name != "cut-attention"
                     else cut_around(targets, graph.boundaries, set(cut)))
            fallbacks = sorted(set(fallback) if name == "exact-fused"
                               else set(every) - set(cut) - {"sum", "mean", "softmax", "log_softmax"})
            options = plan_options(name, caps.exact_options, fallbacks, every)
            scopes = [Scope(f, last, f"r{k}") for k, (f, last) in enumerate(spans)]
            compiled = backend.compile(graph, Plan.make(scopes, options))
            verdict = "yes"
            for seed in range(seeds):
                args = graph.args_for(draw_inputs(source, seed, sh))
                diff = compare_outputs(flatten_outputs(unfused(*args)), flatten_outputs(compiled(*args)))
                if diff:
                    verdict = f"no: seed {seed}, {max(d.max_ulp for d in diff)} ULP"
                    break
            args = graph.args_for(draw_inputs(source, 0, sh))
            calls = calibrate_calls_per_batch(lambda: unfused(*args), 0.01)
            base, cand = interleaved_batches(lambda: unfused(*args), lambda: compiled(*args),
                                             calls_per_batch=calls, n_batches=batches)
            us, base_us = statistics.median(cand) * 1e6, statistics.median(base) * 1e6
            print(f"{sh or '-':<6} {name:<14} {len(spans):>7} {verdict:<28} {us:>8.1f} {base_us:>8.1f} "
                  f"{base_us / us:>6.2f}", flush=True)


if __name__ == "__main__":
    from sktune.benchlib.script import run

    run(app)
