"""Inductor's process-global tables, edited for one compile and restored after, and the
fallbacks that edit them.

Fallbacks and eager-order forms both work by editing Inductor's decomposition tables
and its lowerings (passing ``compile_fx`` a decomposition table of our own would put
unpicklable ops into its cache key and turn the FX-graph cache off). Both must leave the
next compile exactly as they found it: the backend contract (``backends/_base.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch

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
    """Yield the decomposition tables to edit; restore them, the lowering tables and the
    wrapper's custom calls (``eager_calls``) after."""
    from torch._inductor import decomposition, lowering

    # select_decomp_table() hands out a cached copy (fast_random_decomps): edit both.
    tables = [decomposition.decompositions, decomposition.fast_random_decomps()]
    saved_tables = [dict(t) for t in tables]
    # make_fallback touches three process-global tables; restore all of them.
    saved_lowerings = dict(lowering.lowerings)
    saved_fallbacks = set(lowering.fallbacks)
    saved_realized = set(lowering.needs_realized_inputs)
    registry = _wrapper_codegen()
    saved_codegen = dict(registry)
    try:
        yield tables
    finally:
        registry.clear()
        registry.update(saved_codegen)
        for table, saved in zip(tables, saved_tables):
            table.clear()
            table.update(saved)
        lowering.lowerings.clear()
        lowering.lowerings.update(saved_lowerings)
        lowering.fallbacks.clear()
        lowering.fallbacks.update(saved_fallbacks)
        lowering.needs_realized_inputs.clear()
        lowering.needs_realized_inputs.update(saved_realized)


@contextlib.contextmanager
def fallbacks_installed(op_types: tuple[str, ...]) -> Iterator[None]:
    """Make ``op_types`` Inductor fallbacks for one compile; restore the global tables after.

    The ops leave Inductor's global decomposition table for the compile (passing
    ``compile_fx`` a table of our own would put unpicklable ops into its cache key and
    turn the FX-graph cache off), and get fallback lowerings, which the region's wrapper
    calls as eager does (``eager_calls``).
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
                eager_calls(getattr(packet, overload) for overload in packet.overloads())
        yield


# A region sktune compiles is keyed by its inputs' sizes and strides (region_cache) and is
# called only with such inputs; every output is checked bitwise against eager. Inductor's
# asserts check that again on every call: assert_size_stride per input and per fallback
# output, assert_alignment per fallback output (~0.4 µs each; docs/measured.md, "Cost of a
# fallback inside a region").
NO_ASSERTS: dict[str, Any] = {"size_asserts": False, "alignment_asserts": False}

# Inductor's Python wrapper calls a fallback as ``torch.ops.aten.X.overload(...)``: an
# OpOverload, whose boxed call costs 1-2 µs more than eager's ``torch.X`` (the same ATen
# kernel through the Python argument parser and an unboxed call).
_BINDINGS = ((torch._C._VariableFunctions, "torch._C._VariableFunctions"), (torch._C._nn, "torch._C._nn"))


def eager_binding(overload: Any) -> str | None:
    """The Python binding eager calls for ``overload`` (``torch._C._VariableFunctions.mean``
    for ``aten.mean.dim``), or None. Only functional overloads on a tensor: the binding
    picks its overload from the arguments, and the wrapper passes this overload's."""
    schema = overload._schema
    if schema.is_mutable or not schema.arguments or str(schema.arguments[0].type) != "Tensor":
        return None
    name = schema.name.split("::")[-1]
    return next((f"{path}.{name}" for module, path in _BINDINGS if hasattr(module, name)), None)


def _wrapper_codegen() -> dict[str, Any]:
    """Inductor's table of custom wrapper calls by fallback name ({} on a torch without it)."""
    try:
        from torch._inductor.codegen.custom_extern_kernel_codegen import CUSTOM_EXTERN_KERNEL_CODEGEN
    except ImportError:
        return {}
    return CUSTOM_EXTERN_KERNEL_CODEGEN


def _call_binding(binding: str) -> Any:
    def codegen(node: Any, writeline: Any) -> None:
        from torch._inductor.codegen.wrapper import ExternKernelAllocLine
        from torch._inductor.virtualized import V

        if V.graph.cpp_wrapper:  # the C++ wrapper calls the op's C shim: Inductor's own line
            writeline(ExternKernelAllocLine(V.graph.wrapper_code, node))
            return
        args = [*node.codegen_args(), *node.codegen_kwargs()]
        writeline(f"{node.get_name()} = {binding}({', '.join(args)})")

    return codegen


def eager_calls(overloads: Iterable[Any]) -> None:
    """Inside ``tables_restored``: the Python wrapper calls these fallback overloads through
    eager's binding instead of the OpOverload."""
    try:
        from torch._inductor.codegen.custom_extern_kernel_codegen import CustomCodegen
    except ImportError:  # an older torch: its own calls stay
        return
    registry = _wrapper_codegen()
    for overload in overloads:
        binding = eager_binding(overload)
        if binding is not None:
            registry["torch.ops." + str(overload)] = CustomCodegen(python=_call_binding(binding))


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
