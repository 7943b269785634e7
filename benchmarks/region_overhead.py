"""Per-call cost of a compiled region as sktune calls it, and of a fallback inside one,
against the same ops eager.

Why: a region boundary costs a call, and a fallback inside a region (the op's ATen kernel
called by the region's wrapper) should cost no more than the op eagerly (issue 26).
Per op (mean.dim, bmm, sigmoid, softmax, matmul) it times, interleaved in rounds at one
thread: eager; a one-op region with the op as a fallback, in Inductor's own form
(``torch.ops.aten.X.overload`` and size/alignment asserts), with each half of sktune's
change alone, and as sktune compiles it now (eager's binding, no asserts); and the same
for a 4-op chain with the fallback second.

Usage: python benchmarks/region_overhead.py [--rounds 25] [--cpp-wrapper] [--lines]
(prints figures; nothing is asserted; every form is checked bitwise against eager first)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import torch

from sktune.measure.heap import steady_heap
from sktune.backends import inductor_tables
from sktune.backends.inductor import InductorBackend
from sktune.graph.capture import capture
from sktune.plan import Plan, Scope


class Fn(torch.nn.Module):
    def __init__(self, fn: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return self.fn(*args)


def _gen(*shapes: tuple[int, ...]) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(s, generator=g) for s in shapes)


# name → (fallback op type, inputs, the op alone, a chain with the op second of four)
OPS: dict[str, tuple[str, tuple[torch.Tensor, ...], Callable[..., Any], Callable[..., Any]]] = {
    "mean.dim": ("mean", _gen((1, 32, 128)), lambda x: x.mean(-1, keepdim=True),
                 lambda x: (x * 2.0).mean(-1, keepdim=True).add(1.0).relu()),
    "bmm": ("bmm", _gen((4, 1, 32), (4, 32, 33)), torch.bmm,
            lambda q, k: torch.bmm(q * 0.5, k).add(1.0).relu()),
    "sigmoid": ("sigmoid", _gen((3, 37)), torch.sigmoid, lambda x: torch.sigmoid(x * 2.0).add(1.0).relu()),
    "softmax": ("softmax", _gen((4, 1, 33)), lambda x: torch.softmax(x, -1),
                lambda x: torch.softmax(x * 0.5, -1).add(1.0).relu()),
    "matmul": ("matmul", _gen((1, 4, 1, 32), (1, 4, 32, 33)), torch.matmul,
               lambda q, k: torch.matmul(q * 0.5, k).add(1.0).relu()),
}

ASSERTS_ON = {"size_asserts": True, "alignment_asserts": True}
# form → (config patches over sktune's, whether the wrapper calls eager's binding)
FORMS: dict[str, tuple[dict[str, Any], bool]] = {
    "inductor's": (ASSERTS_ON, False),  # as before issue 26
    "no asserts": ({}, False),
    "eager call": (ASSERTS_ON, True),
    "sktune": ({}, True),  # both: what sktune compiles now
}


class _FormBackend(InductorBackend):
    """sktune's backend with Inductor's asserts and/or its OpOverload calls put back."""

    def __init__(self, patches: dict[str, Any], eager_call: bool) -> None:
        super().__init__()
        self.extra, self.eager_call = patches, eager_call

    def config_patches(self, plan: Plan) -> dict[str, Any]:
        # No caches: two forms with the same config differ only in the wrapper's calls.
        return {**super().config_patches(plan), **self.extra, "force_disable_caches": True}

    @contextlib.contextmanager
    def _calls(self) -> Iterator[None]:
        if self.eager_call:
            yield
        else:
            with mock.patch.object(inductor_tables, "eager_calls", lambda overloads: None):
                yield


def build(fn: Callable[..., Any], inputs: tuple[torch.Tensor, ...], fallback: str | None, form: str,
          cpp_wrapper: bool = False) -> tuple[Any, Any, list[Any]]:
    """(eager graph, compiled plan, flat args): the whole graph one region, ``fallback`` a fallback."""
    graph = capture(Fn(fn), inputs)
    args = graph.args_for(inputs)
    patches, eager_call = FORMS[form]
    options: dict[str, Any] = {"fallback_ops": [fallback] if fallback else []}
    if cpp_wrapper:
        options["cpp_wrapper"] = True
    backend = _FormBackend(patches, eager_call)
    with backend._calls():
        compiled = backend.compile(graph, Plan.make([Scope(0, len(graph.ops) - 1, "r")], options))
    ref, out = graph.gm(*args), compiled(*args)
    ref, out = (ref if isinstance(ref, (tuple, list)) else (ref,)), (out if isinstance(out, (tuple, list)) else (out,))
    if not all(torch.equal(a, b) for a, b in zip(ref, out)):
        raise SystemExit(f"{fallback} ({form}) is not bitwise")
    return graph.gm, compiled, args


def per_call_us(fns: list[Callable[..., Any]], args: list[Any], rounds: int, calls: int = 300) -> list[float]:
    """Median µs per call of each, timed in interleaved rounds (order rotated each round)."""
    for fn in fns:
        for _ in range(50):
            fn(*args)
    samples: list[list[float]] = [[] for _ in fns]
    for r in range(rounds):
        order = list(range(len(fns)))
        order = order[r % len(order):] + order[:r % len(order)]
        for i in order:
            start = time.perf_counter()
            for _ in range(calls):
                fns[i](*args)
            samples[i].append((time.perf_counter() - start) / calls * 1e6)
    return [statistics.median(s) for s in samples]


def wrapper_lines(rounds: int) -> None:
    """The wrapper's lines for a fallback, each alone: the OpOverload call (and its raw
    ``_op``, without OpOverload.__call__) against eager's binding, and the two asserts."""
    from torch._C._dynamo.guards import assert_alignment, assert_size_stride

    aten = torch.ops.aten
    x, (q, k) = _gen((1, 32, 128))[0], _gen((4, 1, 32), (4, 32, 33))
    y = torch.mean(x, [-1], True)
    lines: dict[str, Callable[[], Any]] = {
        "torch.mean (eager's binding)": lambda: torch.mean(x, [-1], True),
        "torch.ops.aten.mean.dim": lambda: aten.mean.dim(x, [-1], True),
        "torch.ops.aten.mean.dim._op": lambda: aten.mean.dim._op(x, [-1], True),
        "torch.bmm (eager's binding)": lambda: torch.bmm(q, k),
        "torch.ops.aten.bmm.default": lambda: aten.bmm.default(q, k),
        "assert_size_stride": lambda: assert_size_stride(y, (1, 32, 1), (32, 1, 1), "op"),
        "assert_alignment": lambda: assert_alignment(y, 16, "op"),
    }
    for name, us in zip(lines, per_call_us(list(lines.values()), [], rounds)):
        print(f"{name:<30} {us:6.2f} µs/call")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--cpp-wrapper", action="store_true", help="also sktune's form with the C++ wrapper (slow compiles)")
    parser.add_argument("--lines", action="store_true", help="only the wrapper's lines for a fallback, each alone")
    opts = parser.parse_args()
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="sktune-region-overhead-"))
    torch.set_num_threads(1)
    print(f"heap: {steady_heap()}")  # the tuner's regime: eager's speed must not depend on history
    torch.set_grad_enabled(False)
    if opts.lines:
        wrapper_lines(opts.rounds)
        return
    forms = list(FORMS) + (["C++ wrapper"] if opts.cpp_wrapper else [])
    print(f"torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}, 1 thread, "
          f"µs per call (median of {opts.rounds} interleaved rounds)")
    print(f"{'op':<9} {'region':<7} {'eager':>7} " + " ".join(f"{f:>12}" for f in forms))
    for name, (fallback, inputs, alone, chain) in OPS.items():
        for label, fn in (("1 op", alone), ("4 ops", chain)):
            built = [build(fn, inputs, fallback, f) for f in FORMS]
            if opts.cpp_wrapper:
                built.append(build(fn, inputs, fallback, "sktune", cpp_wrapper=True))
            eager, _, args = built[0]
            times = per_call_us([eager, *(b[1] for b in built)], args, opts.rounds)
            print(f"{name:<9} {label:<7} {times[0]:7.2f} " + " ".join(f"{t:12.2f}" for t in times[1:]), flush=True)
    x = torch.randn(8, 256)
    _, add_region, add_args = build(lambda x: x + 1.0, (x,), None, "sktune")
    graph = capture(Fn(lambda x: x + 1.0), (x,))
    dynamo = torch.compile(Fn(lambda x: x + 1.0), fullgraph=True)
    dynamo(x)
    times = per_call_us([graph.gm, add_region], add_args, opts.rounds)
    print(f"\none add (8, 256): eager {times[0]:.2f}, one region (sktune) {times[1]:.2f} µs/call; "
          f"torch.compile of the module (Dynamo guards per call) {per_call_us([dynamo], [x], opts.rounds)[0]:.2f}")


if __name__ == "__main__":
    main()
