"""Per op: is Inductor's fused version bitwise-equal to eager on this CPU, which of sktune's
exact forms makes it so, and what each form costs (issue 13's per-op table).

    python benchmarks/exact_forms.py
    python benchmarks/exact_forms.py --shape 1,32,128 --shape 3,37 --op softmax --op silu
    python benchmarks/exact_forms.py --odd --op sigmoid   # also at odd last dims (issue 26)
    python benchmarks/exact_forms.py --var-welford        # var in ATen's order: bitwise, but no faster

Each op runs alone in a one-op model (the op timed is the model's last; ``matmul_row``
slices its query row first), captured and compiled by sktune's own inductor
backend (one region), in three forms:
``fused`` (Inductor as it is), ``exact options`` (the options sktune tries when a fused op
differs: ``eager_order`` and no pattern matcher) and ``fallback`` (the op's ATen kernel
kept inside the region; only for the op types sktune can fall back on). Each form is
compared bit for bit with eager on every seed and shape; its time (µs per call, median of
interleaved batches against eager, one thread) is taken at the first shape. Why each op
differs is in docs/measured.md ("Exact forms"). Figures are printed; nothing is asserted.
"""

from __future__ import annotations

import os
import statistics
import tempfile
from collections.abc import Callable
from typing import Annotated

import torch
import typer

app = typer.Typer(add_completion=False, no_args_is_help=False)

F = torch.nn.functional
# name → (the op, whether it needs positive inputs)
OPS: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], bool]] = {
    "sum": (lambda x: x.sum(-1), False),
    "mean": (lambda x: x.mean(-1), False),
    "softmax": (lambda x: torch.softmax(x, -1), False),
    "log_softmax": (lambda x: torch.log_softmax(x, -1), False),
    "var": (lambda x: x.var(-1), False),
    "layer_norm": (lambda x: F.layer_norm(x, (x.shape[-1],)), False),
    "exp": (torch.exp, False),
    "sin": (torch.sin, False),
    "cos": (torch.cos, False),
    "tanh": (torch.tanh, False),
    "erf": (torch.erf, False),
    "sigmoid": (torch.sigmoid, False),
    "silu": (F.silu, False),
    "gelu": (F.gelu, False),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), False),
    "rsqrt": (torch.rsqrt, True),
    "pow_2": (lambda x: x.pow(2), False),
    "pow_0.5": (lambda x: x.pow(0.5), True),
    "pow_3": (lambda x: x.pow(3), False),
    "pow_-0.5": (lambda x: x.pow(-0.5), True),
    "pow_1.5": (lambda x: x.pow(1.5), True),
    "sqrt": (torch.sqrt, True),
    # A decode step's attention scores: one query row against every row (bmm with M = 1 at
    # 3+ dims, mm at 2); and the same product with every row as a query.
    "matmul_row": (lambda x: torch.matmul(x[..., :1, :], x.transpose(-2, -1)), False),
    "matmul": (lambda x: torch.matmul(x, x.transpose(-2, -1)), False),
}


# Beside the powers of two: odd last dims (ATen's scalar tail, rows shorter than a
# vector) and a decode-step width.
ODD_SHAPES = [(4, 15), (4, 17), (4, 33), (4, 100), (4, 127), (8, 1, 256), (4, 1, 33, 32)]


class _OneOp(torch.nn.Module):
    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


def _inputs(shape: tuple[int, ...], seed: int, positive: bool) -> tuple[torch.Tensor]:
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
    return (x.abs() + 0.5 if positive else x,)


def _forms(op_type: str, exact_options: dict[str, object], fallbacks: set[str]) -> dict[str, dict[str, object]]:
    forms: dict[str, dict[str, object]] = {"fused": {}, "exact options": dict(exact_options)}
    if op_type in fallbacks:
        forms["fallback"] = {"fallback_ops": [op_type]}
    return forms


def welford_var(x: torch.Tensor, correction: float = 1.0) -> torch.Tensor:
    """``x.var(-1, keepdim=True)`` in ATen's order: its CPU var over one dim is
    ``binary_kernel_reduce`` with ``WelfordOps<float, double, ...>`` (ReduceOpsKernel.cpp,
    SharedReduceOps.h), a serial Welford in double per output, cast to float at the end."""
    zero = torch.zeros_like(x[..., :1], dtype=torch.float64)
    mean, m2 = zero, zero
    for i in range(x.shape[-1]):
        xi = x[..., i:i + 1].to(torch.float64)
        delta = xi - mean
        new_mean = mean + delta / float(i + 1)
        m2 = m2 + delta * (xi - new_mean)
        mean = new_mean
    divisor = x.shape[-1] - correction if x.shape[-1] > correction else 0.0
    return (m2 / divisor).to(torch.float32)


def _var_welford(shapes: list[tuple[int, ...]], seeds: int) -> None:
    """The Welford form compiled as one region, against eager's var and Inductor's own."""
    import functools
    import time

    from torch._inductor.compile_fx import compile_fx
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.utils.benchmark import Timer

    from sktune.verify import compare_outputs, flatten_outputs

    def var(x: torch.Tensor) -> torch.Tensor:
        return x.var(-1, keepdim=True)

    print(f"torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}, {seeds} seeds, 1 thread "
          "(the first compile s includes the process's first compile)")
    print(f"{'shape':<14} {'form':<16} {'compile s':>9} {'bitwise':<9} {'µs':>7}")
    for sizes in shapes:
        x = _inputs(sizes, 0, False)[0]
        for form, fn in (("eager var", None), ("inductor var", var), ("welford form", welford_var)):
            start = time.perf_counter()
            run = var if fn is None else compile_fx(make_fx(functools.partial(fn))(x), [x])
            compile_s = time.perf_counter() - start if fn is not None else 0.0
            worst = 0
            for seed in range(seeds):
                xs = _inputs(sizes, seed, False)[0]
                diff = compare_outputs(flatten_outputs(var(xs)), flatten_outputs(run(xs)))
                worst = max([worst, *(d.max_ulp for d in diff)])
            us = Timer("run(x)", globals={"run": run, "x": x}).blocked_autorange(min_run_time=0.5).median * 1e6
            print(f"{str(sizes):<14} {form:<16} {compile_s:>9.1f} {'yes' if worst == 0 else f'{worst} ULP':<9} {us:>7.2f}",
                  flush=True)


@app.command()
def main(shape: Annotated[list[str], typer.Option(help="Input shape, comma-separated (repeatable); the first is timed.")] = ["1,32,128", "3,37", "2,7,19"],  # noqa: B006
         op: Annotated[list[str], typer.Option(help="Only these ops (repeatable); default: all.")] = [],  # noqa: B006
         odd: Annotated[bool, typer.Option(help="Add last dims 15, 17, 33, 100, 127 (rows of 4), (8,1,256) and (4,1,33,32).")] = False,
         var_welford: Annotated[bool, typer.Option(help="Only var: ATen's Welford order compiled, against eager and Inductor.")] = False,
         seeds: int = 3, n_batches: int = 20) -> None:
    """Print, per op and form: bitwise on every seed and shape (max ULP otherwise), µs per call."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="sktune-exact-forms-"))
    from sktune.measure.heap import steady_heap
    from sktune.backends import get_backend
    from sktune.backends.inductor import FALLBACK_ATEN
    from sktune.graph.capture import capture
    from sktune.measure.timer import calibrate_calls_per_batch, interleaved_batches
    from sktune.plan import Plan, Scope
    from sktune.verify import compare_outputs, flatten_outputs

    torch.set_num_threads(1)
    print(f"heap: {steady_heap()}")  # the tuner's regime: eager's speed must not depend on history
    torch.set_grad_enabled(False)
    unknown = sorted(set(op) - set(OPS))
    if unknown:
        raise typer.BadParameter(f"unknown op(s) {unknown}; known: {sorted(OPS)}", param_hint="--op")
    try:
        shapes = [tuple(int(d) for d in s.split(",")) for s in shape]
    except ValueError:
        raise typer.BadParameter(f"{shape}: each shape is sizes separated by commas, e.g. 3,37", param_hint="--shape")
    if odd:
        shapes += [s for s in ODD_SHAPES if s not in shapes]
    if var_welford:
        _var_welford(shapes, seeds)
        return
    backend = get_backend("inductor", for_trials=True)
    print(f"torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}, shapes {shapes} "
          f"(µs at {shapes[0]}), {seeds} seeds, 1 thread")
    print(f"{'op':<12} {'op type':<12} {'form':<14} {'bitwise':<28} {'µs':>7} {'eager µs':>9}")
    for name in op or OPS:
        fn, positive = OPS[name]
        verdicts: dict[str, list[str]] = {}
        times: dict[str, tuple[float, float]] = {}
        op_type = ""
        for k, sizes in enumerate(shapes):
            model = _OneOp(fn)
            graph = capture(model, _inputs(sizes, 0, positive))
            op_type = graph.ops[-1].target
            eager = backend.reference(graph)
            exact = backend.capabilities(graph).exact_options
            for form, options in _forms(op_type, exact, set(FALLBACK_ATEN)).items():
                plan = Plan.make([Scope(0, len(graph.ops) - 1, "op")], options)
                compiled = backend.compile(graph, plan)
                for seed in range(seeds):
                    args = graph.args_for(_inputs(sizes, seed, positive))
                    diff = compare_outputs(flatten_outputs(eager(*args)), flatten_outputs(compiled(*args)))
                    if diff:
                        verdicts.setdefault(form, []).append(f"{sizes}: {max(d.max_ulp for d in diff)} ULP")
                        break
                verdicts.setdefault(form, [])
                if k == 0:
                    args = graph.args_for(_inputs(sizes, 0, positive))
                    calls = calibrate_calls_per_batch(lambda: eager(*args), 0.005)
                    base, cand = interleaved_batches(lambda: eager(*args), lambda: compiled(*args),
                                                     calls_per_batch=calls, n_batches=n_batches)
                    times[form] = (statistics.median(cand) * 1e6, statistics.median(base) * 1e6)
        for form, failures in verdicts.items():
            bitwise = "yes" if not failures else "no: " + failures[0]
            us, eager_us = times.get(form, (float("nan"), float("nan")))
            print(f"{name:<12} {op_type:<12} {form:<14} {bitwise:<28} {us:>7.1f} {eager_us:>9.1f}", flush=True)


if __name__ == "__main__":
    from sktune.benchlib.script import run

    run(app)
