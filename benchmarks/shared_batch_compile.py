"""One compile shared by every served shape (a dynamic batch dimension) against one compile
per shape, as a serving model is captured: compile seconds, bitwise agreement, speed.

Why (issue 26, "compiles shared across shapes"): a region that has the same structure at
every shape could compile once with a symbolic batch size. This measures what that costs
on the whole model under ``torch.compile`` (Inductor defaults, fp32): the static compile
of each shape against one ``dynamic=True`` compile called at every shape.
Usage: python benchmarks/shared_batch_compile.py MODEL     (a model file with input_shapes(), or the
       name of one in studies/: decoder_serving, decode_attention)
One thread; µs are the median of 7 rounds of 200 calls after 20 warm-up calls; × is eager
over the compiled time. Nothing is asserted; results in docs/measured.md.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from sktune.benchlib.script import run, study_file
from sktune.errors import ModelFileError
from sktune.load import build, draw_inputs, load_model_file, shape_weights, verify_shape_names
from sktune.measure.heap import steady_heap
from sktune.verify import compare_outputs

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=study_file, help="model file with input_shapes(), or the name of one in studies/")
    path = parser.parse_args().model
    source = load_model_file(path)
    if source.input_shapes is None:
        raise ModelFileError(f"{path} defines no input_shapes(): this compares compiles across served shapes")
    torch.set_num_threads(1)
    print(f"heap: {steady_heap()}")  # the tuner's regime: eager's speed must not depend on history
    torch._dynamo.config.recompile_limit = 64  # one static compile per shape of one model
    torch._dynamo.config.automatic_dynamic_shapes = False  # static means static
    model = build(source)
    shapes = list(shape_weights(source)) + list(verify_shape_names(source))
    dynamic = torch.compile(model, dynamic=True)
    print(f"{path}: {len(shapes)} shapes ({', '.join(shapes)}); 1 thread")
    dynamic_s = static_s = 0.0
    with torch.no_grad():
        for shape in shapes:
            args = draw_inputs(source, 0, shape)
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
                  f"static == dynamic bitwise: {not compare_outputs(static_out, dynamic_out)}; "
                  f"eager {eager_us:.0f} µs, static ×{static_x:.2f}, dynamic ×{dynamic_x:.2f} "
                  f"({(dynamic_x / static_x - 1) * 100:+.0f} %)")
    print(f"  compile seconds: static {static_s:.1f} over {len(shapes)} shapes, dynamic {dynamic_s:.1f}")


if __name__ == "__main__":
    run(main)
