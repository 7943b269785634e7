"""Inductor's process-global tables, edited for one compile and restored after, and the
fallbacks that edit them.

Fallbacks and eager-order forms both work by editing Inductor's decomposition tables
and its lowerings (passing ``compile_fx`` a decomposition table of our own would put
unpicklable ops into its cache key and turn the FX-graph cache off). Both must leave the
next compile exactly as they found it: the backend contract (``backends/_base.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import fx
from torch._inductor.custom_graph_pass import CustomGraphPass

aten = torch.ops.aten

# Op types (as named in the op list) → the ATen ops that implement them. Fallbacks keep
# these ATen kernels inside a region, bit-identical to eager, instead of re-generating them.
FALLBACK_ATEN: dict[str, tuple[str, ...]] = {
    "mean": ("mean",),
    "softmax": ("_softmax",),
    "log_softmax": ("_log_softmax",),
    "gelu": ("gelu",),
    "sin": ("sin",),
    "cos": ("cos",),
    "tanh": ("tanh",),
    "exp": ("exp",),
    "erf": ("erf",),
    "sum": ("sum",),
    "var": ("var",),
    "layer_norm": ("native_layer_norm",),
    "sqrt": ("sqrt",),  # ATen: MKL's vsSqrt; Inductor: the vector sqrt instruction (1 ULP apart)
    # ATen computes the last numel % (2 x lanes) elements with the scalar formula (Loops.h,
    # vectorized_loop); Inductor computes them as a masked vector.
    "sigmoid": ("sigmoid",),
    "silu": ("silu",),
    # matmul reaches Inductor as bmm (3+ dims) or mm. On CPU a bmm with one row or one
    # column (a decode step's attention) is lowered to a multiply and Inductor's own sum
    # (kernel/bmm.py, tuned_bmm), an mm with one row and one column likewise
    # (decomposition.py, mm): the fallback keeps ATen's GEMM, as eager runs it.
    "matmul": ("bmm", "mm"),
    "bmm": ("bmm",),
    "mm": ("mm",),
}

# Fallbacks for op types that are exact when fused at most sizes (matmul: all but one-row
# or one-column products; sigmoid, silu: numel a multiple of twice the vector): not unsafe by type; the exactness probe finds the instances
# that need them.
SIZE_DEPENDENT = frozenset({"matmul", "bmm", "mm", "sigmoid", "silu"})


@contextlib.contextmanager
def tables_restored() -> Iterator[list[dict[Any, Any]]]:
    """Yield the decomposition tables to edit; restore them and the lowering tables after."""
    from torch._inductor import decomposition, lowering

    # select_decomp_table() hands out a cached copy (fast_random_decomps): edit both.
    tables = [decomposition.decompositions, decomposition.fast_random_decomps()]
    saved_tables = [dict(t) for t in tables]
    # make_fallback touches three process-global tables; restore all of them.
    saved_lowerings = dict(lowering.lowerings)
    saved_fallbacks = set(lowering.fallbacks)
    saved_realized = set(lowering.needs_realized_inputs)
    try:
        yield tables
    finally:
        for table, saved in zip(tables, saved_tables):
            table.clear()
            table.update(saved)
        lowering.lowerings.clear()
        lowering.lowerings.update(saved_lowerings)
        lowering.fallbacks.clear()
        lowering.fallbacks.update(saved_fallbacks)
        lowering.needs_realized_inputs.clear()
        lowering.needs_realized_inputs.update(saved_realized)


class FallbackKey(CustomGraphPass):
    """A no-op pass whose uuid puts the fallback set and the eager-order rewrites (global
    tables Inductor's FX-graph cache key does not see) into that key."""

    def __init__(self, fallbacks: tuple[str, ...], eager_order: tuple[str, ...] = ()) -> None:
        self.fallbacks, self.eager_order = fallbacks, eager_order

    def __call__(self, graph: fx.Graph) -> None:
        return None

    def uuid(self) -> Any:
        return "sktune-plan-v3|fallbacks:" + ",".join(self.fallbacks) + "|eager-order:" + ",".join(self.eager_order)


@contextlib.contextmanager
def fallbacks_installed(op_types: tuple[str, ...]) -> Iterator[None]:
    """Make ``op_types`` Inductor fallbacks for one compile; restore the global tables after.

    The ops leave Inductor's global decomposition table for the compile (passing
    ``compile_fx`` a table of our own would put unpicklable ops into its cache key and
    turn the FX-graph cache off), and get fallback lowerings.
    """
    from torch._inductor import lowering

    with tables_restored() as tables:
        for op_type in op_types:
            for aten_name in FALLBACK_ATEN[op_type]:
                packet = getattr(aten, aten_name)
                for overload in packet.overloads():
                    for table in tables:
                        table.pop(getattr(packet, overload), None)
                lowering.make_fallback(packet, override_decomp=True, warn=False)
        yield


@contextlib.contextmanager
def cacheable() -> Iterator[None]:
    """A tracing context with a shape environment around ``compile_fx``.

    Outside Dynamo there is none, and Inductor's FX-graph cache and AOTAutograd's cache
    both bypass a compile without one ("No shape env"): every region would compile cold.
    """
    from torch._guards import TracingContext, tracing
    from torch._subclasses import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    with tracing(TracingContext(FakeTensorMode(shape_env=ShapeEnv()))):
        yield


@contextlib.contextmanager
def static_shapes(args: Sequence[Any]) -> Iterator[None]:
    """Inside ``cacheable()``: the region's tensor inputs faked with static sizes, as
    Dynamo fakes them under ``dynamic=False``.

    With a shape environment in the tracing context, AOTAutograd fakes a real input with a
    symbol per size, duck-sized (every dim of 4 one symbol): the region compiled as a
    dynamic-shape graph, its loops over symbols and a reduction over 4 values a loop of
    16-wide masked vector loads. Stage 2 of studies/split_stages.py ran 1.6x eager's time
    instead of 0.5x (docs/measured.md "Regions compiled for their shapes"). A tensor faked
    first, statically, in the same mode is in the mode's memo, which AOTAutograd reads
    before it makes symbols; the memo holds it weakly, so it is kept alive here.
    """
    from torch._guards import TracingContext

    mode = TracingContext.get().fake_mode
    kept = [mode.from_tensor(a, static_shapes=True) for a in args if isinstance(a, torch.Tensor)]
    try:
        yield
    finally:
        del kept
