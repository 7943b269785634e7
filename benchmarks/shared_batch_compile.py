"""One compile shared by every served shape (a dynamic batch dimension) against one compile
per shape, as a serving model is captured: compile seconds, bitwise agreement, speed.

Why (issue 26, "compiles shared across shapes"): a region that has the same structure at
every shape could compile once with a symbolic batch size. This measures what that costs
on the whole model under ``torch.compile`` (Inductor defaults, fp32): the static compile
of each shape against one ``dynamic=True`` compile called at every shape.
Usage: python benchmarks/shared_batch_compile.py STUDY     (decoder_serving, decode_attention)
One thread; µs are the median of 7 rounds of 200 calls after 20 warm-up calls; × is eager
over the compiled time. Nothing is asserted; results in docs/measured.md.
"""

from __future__ import annotations

import importlib
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from sktune.measure.heap import steady_heap

ROUNDS, CALLS, WARMUP = 7, 200, 20


def per_call_s(fn: Callable[..., Any], args: tuple[torch.Tensor, ...]) -> float:
    for _ in range(WARMUP):
        fn(*args)
    rounds = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        for _ in range(CALLS):
            fn(*args)
        rounds.append((time.perf_counter() - started) / CALLS)
    return statistics.median(rounds)


def main(study: str) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "studies"))
    module = importlib.import_module(study)
    torch.set_num_threads(1)
    print(f"heap: {steady_heap()}")  # the tuner's regime: eager's speed must not depend on history
    torch._dynamo.config.recompile_limit = 64  # one static compile per shape of one model
    torch._dynamo.config.automatic_dynamic_shapes = False  # static means static
    model = module.build_model()
    shapes = list(module.input_shapes()) + list(getattr(module, "verify_shapes", list)())
    dynamic = torch.compile(model, dynamic=True)
    print(f"{study}: {len(shapes)} shapes ({', '.join(shapes)}); 1 thread")
    dynamic_s = static_s = 0.0
    with torch.no_grad():
        for shape in shapes:
            args = module.example_inputs(0, shape)
            started = time.perf_counter()
            static = torch.compile(model, dynamic=False)
            static_out = static(*args)
            compiled_s = time.perf_counter() - started
            started = time.perf_counter()
            dynamic_out = dynamic(*args)  # compiles where its guards fail (a size 1 is specialized)
            first_call_s = time.perf_counter() - started
            static_s, dynamic_s = static_s + compiled_s, dynamic_s + first_call_s
            eager_us = per_call_s(model, args) * 1e6
            static_x = eager_us / (per_call_s(static, args) * 1e6)
            dynamic_x = eager_us / (per_call_s(dynamic, args) * 1e6)
            print(f"  {shape}: static compile {compiled_s:.1f} s, dynamic first call {first_call_s:.1f} s; "
                  f"static == dynamic bitwise: {torch.equal(static_out, dynamic_out)}; "
                  f"eager {eager_us:.0f} µs, static ×{static_x:.2f}, dynamic ×{dynamic_x:.2f} "
                  f"({(dynamic_x / static_x - 1) * 100:+.0f} %)")
    print(f"  compile seconds: static {static_s:.1f} over {len(shapes)} shapes, dynamic {dynamic_s:.1f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "decoder_serving")
