"""Exact forms that still fuse: sum, mean, softmax, log_softmax and pow computed in eager's order.

Why fused reductions differ from eager on CPU (docs/measured.md "Exact forms"):
- sum / mean: ATen sums a contiguous last dim with a cascade (SumKernel's
  ``vectorized_inner_sum`` → ``row_sum`` → ``multi_row_sum``): 8-lane vectors (its sum
  kernel has no AVX512 build), four interleaved partial sums, a multi-level cascade, the
  scalar tail first, then the lanes one by one. Inductor keeps one 16-lane accumulator
  and reduces it as a tree. Same numbers, other order, other rounding.
- softmax: ATen's ``_vec_softmax_lastdim`` multiplies by the reciprocal of the sum;
  Inductor's decomposition divides by the sum (1 ULP apart).
- softmax / log_softmax over fewer elements than a vector holds: ATen's
  ``vec::reduce_all`` / ``map_reduce_all`` (ATen/cpu/vec/functional_base.h) add the lanes
  of the partial vector one after the other (``vec_reduce_all(fun, acc, size)``);
  Inductor adds a masked full vector as a tree. From one whole vector up both use the
  same tree (``vec_reduce_all``), so only the short rows are written out.
- pow: ATen's ``pow_tensor_scalar_kernel`` sends exponent 0.5 to ``sqrt_kernel`` (MKL's
  ``vsSqrt``), Inductor lowers it to a vector ``sqrt`` of its own (1 ULP apart), and any
  other non-integer exponent to Sleef's ``pow``. Exponents 2 and 3 are products on both
  sides; every other exponent runs as ATen's kernel inside the region.

Here each is written out as a decomposition in eager's order, so Inductor generates
fused code with eager's rounding. They depend on how this machine's ATen was built; the
exactness probe checks them per op and per shape before the search counts on them, and
every trial is verified bitwise anyway. Installed for one compile and restored after, as
fallbacks are. Only fp32, contiguous, last-dim reductions of at most ``MAX_LENGTH``
elements are rewritten (a longer one would unroll into thousands of nodes); anything
else keeps Inductor's own lowering.
"""

from __future__ import annotations

import contextlib
import platform
from collections.abc import Callable, Iterator
from typing import Any

import torch

from sktune.backends.inductor_tables import eager_calls, tables_restored

aten = torch.ops.aten



def aten_sum_lanes() -> int:
    """Floats in the ``Vectorized<float>`` that ATen's sum kernel adds on this CPU, read at
    run time. x86: 8 on every build (``REGISTER_DISPATCH`` registers nullptr in an AVX-512
    build, so AVX-512 CPUs run the AVX2 sum; the DEFAULT build has 32-byte arrays);
    aarch64: NEON has 16-byte vectors (4), SVE256 32 bytes (8). docs/measured.md, "Which
    CPU facts the tests rely on"."""
    if platform.machine() in ("aarch64", "arm64"):
        return 8 if torch.backends.cpu.get_cpu_capability() == "SVE256" else 4
    return 8


LANES = aten_sum_lanes()  # ATEN_CPU_CAPABILITY is read once per process, as ATen does
ILP = 4  # interleaved partial sums in ATen's row_sum
LEVELS = 4  # levels of ATen's multi_row_sum cascade
MAX_LENGTH = 512


def _ceil_log2(n: int) -> int:
    return 1 if n <= 2 else (n - 1).bit_length()


def _add(acc: torch.Tensor | None, x: torch.Tensor) -> torch.Tensor:
    """``acc + x`` where ``acc`` None is an accumulator still at zero (0 + x)."""
    return x + 0 if acc is None else acc + x


def _multi_row_sum(load: Callable[[int, int], torch.Tensor], size: int, rows: int) -> list[torch.Tensor | None]:
    """ATen's multi_row_sum: ``rows`` running sums, cascaded over ``LEVELS`` levels."""
    power = max(4, _ceil_log2(size) // LEVELS)
    step, mask = 1 << power, (1 << power) - 1
    acc: list[list[torch.Tensor | None]] = [[None] * rows for _ in range(LEVELS)]
    i = 0
    while i + step <= size:
        for _ in range(step):
            for k in range(rows):
                acc[0][k] = _add(acc[0][k], load(i, k))
            i += 1
        for j in range(1, LEVELS):
            for k in range(rows):
                acc[j][k] = _add(acc[j][k], acc[j - 1][k])  # type: ignore[arg-type]
                acc[j - 1][k] = None
            if i & (mask << (j * power)):
                break
    while i < size:
        for k in range(rows):
            acc[0][k] = _add(acc[0][k], load(i, k))
        i += 1
    for j in range(1, LEVELS):
        for k in range(rows):
            if acc[j][k] is not None:
                acc[0][k] = _add(acc[0][k], acc[j][k])
    return acc[0]


def _row_sum(load: Callable[[int], torch.Tensor], size: int) -> torch.Tensor | None:
    """ATen's row_sum: ``ILP`` interleaved partial sums, the tail into the first."""
    whole = size // ILP
    parts = _multi_row_sum(lambda i, k: load(ILP * i + k), whole, ILP)
    for i in range(whole * ILP, size):
        parts[0] = _add(parts[0], load(i))
    for k in range(1, ILP):
        if parts[k] is not None:
            parts[0] = _add(parts[0], parts[k])  # type: ignore[arg-type]
    return parts[0]


def eager_order_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum over the last dim, keepdim, added up as ATen's CPU kernel does."""
    length = x.shape[-1]
    zero = torch.zeros_like(x[..., :1])
    if length < LANES:  # scalar_inner_sum
        total = _row_sum(lambda i: x[..., i:i + 1], length)
        return zero + (zero if total is None else total)
    vectors = length // LANES  # vectorized_inner_sum: whole vectors, then tail, then lanes
    lanes = _row_sum(lambda i: x[..., LANES * i:LANES * (i + 1)], vectors)
    acc = zero
    for i in range(vectors * LANES, length):
        acc = acc + x[..., i:i + 1]
    for k in range(LANES):
        acc = acc + lanes[..., k:k + 1]  # type: ignore[index]
    return zero + acc  # ATen fills the output with 0 and adds the row's sum


def _rewritable(x: torch.Tensor, dims: Any, dtype: Any) -> bool:
    if dims is None or dtype not in (None, torch.float32) or x.dtype != torch.float32 or x.dim() == 0:
        return False
    if not x.is_contiguous() or [d % x.dim() for d in dims] != [x.dim() - 1]:
        return False
    return 0 < x.shape[-1] <= MAX_LENGTH


def _sum(x: torch.Tensor, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Any:
    if not _rewritable(x, dim, dtype):
        return NotImplemented
    total = eager_order_sum(x)
    return total if keepdim else total.squeeze(-1)


def _mean(x: torch.Tensor, dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Any:
    if not _rewritable(x, dim, dtype):
        return NotImplemented
    mean = eager_order_sum(x) / x.shape[-1]
    return mean if keepdim else mean.squeeze(-1)


def vector_lanes() -> int | None:
    """Floats in one ``Vectorized<float>`` of the kernels ATen runs on this CPU, if Inductor's
    generated code uses vectors as wide (it follows ``ATEN_CPU_CAPABILITY`` too); else None:
    the orders below then do not hold and the op runs as ATen's own kernel."""
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    lanes = {"AVX512": 16, "AVX2": 8}.get(torch.backends.cpu.get_cpu_capability())
    isa = pick_vec_isa()
    return lanes if isa and isa.nelements(torch.float32) == lanes else None


def _softmax_sum(e: torch.Tensor, d: int, lanes: int) -> torch.Tensor:
    """The sum (keepdim) of ATen's softmax kernels (``vec::reduce_all``): a row shorter
    than a vector adds its lanes in order; a longer one uses Inductor's own tree, which
    is ATen's (prims.sum: the sum rewrite must not reach it)."""
    n = e.shape[d]
    if n >= lanes:
        return torch.ops.prims.sum(e, [d]).unsqueeze(d)
    total = e[..., :1]  # d is the last dim
    for i in range(1, n):
        total = total + e[..., i:i + 1]
    return total


def _softmax(x: torch.Tensor, dim: int, half_to_float: bool) -> Any:
    lanes = vector_lanes()
    if x.dtype != torch.float32 or half_to_float or dim % x.dim() != x.dim() - 1 or lanes is None:
        return NotImplemented
    d = dim % x.dim()
    # prims.exp: Inductor's own exp (Sleef, as ATen's vector exp), whatever else is rewritten.
    e = torch.ops.prims.exp(x - torch.amax(x, d, keepdim=True))
    return e * torch.reciprocal(_softmax_sum(e, d, lanes))


def _log_softmax(x: torch.Tensor, dim: int, half_to_float: bool) -> Any:
    lanes = vector_lanes()
    if (x.dtype != torch.float32 or half_to_float or dim % x.dim() != x.dim() - 1 or not x.is_contiguous()
            or lanes is None):
        return NotImplemented
    d = dim % x.dim()
    # Inductor's own decomposition with the sum of ATen's kernel: its default decomposition
    # calls aten.sum, which the sum rewrite above would reach (1 ULP off,
    # benchmarks/exact_forms.py), and short rows add up in order.
    shifted = x - torch.amax(x, d, keepdim=True)
    return shifted - torch.ops.prims.log(_softmax_sum(torch.ops.prims.exp(shifted), d, lanes))


def _pow_lowering(lowerings: dict[Any, Any]) -> Callable[..., Any]:
    """pow(tensor, scalar) in fp32: ATen's ``pow_tensor_scalar_optimized_kernel`` computes
    exponents 2 and 3 as ``x * x`` and ``x * x * x``, as Inductor's own lowering does; any
    other exponent runs as ATen's kernel inside the region. Other dtypes keep Inductor's."""
    from torch._inductor.lowering import fallback_handler

    own = lowerings[aten.pow.Tensor_Scalar]
    fallback = fallback_handler(aten.pow.Tensor_Scalar, add_to_fallback_set=False)

    def lower(x: Any, exponent: Any) -> Any:
        if x.get_dtype() == torch.float32 and (isinstance(exponent, bool) or exponent not in (2, 3)):
            return fallback(x, exponent)
        return own(x, exponent)

    return lower


# Op type (as in the op list) → the ATen overload rewritten, and its eager-order form.
EAGER_ORDER: dict[str, tuple[Any, Callable[..., Any]]] = {
    "sum": (aten.sum.dim_IntList, _sum),
    "mean": (aten.mean.dim, _mean),
    "softmax": (aten._softmax.default, _softmax),
    "log_softmax": (aten._log_softmax.default, _log_softmax),  # shields its sum from the rewrite
}

# Op type → the ATen overload whose lowering is replaced, and a factory of the new lowering
# (given Inductor's lowering table): where a decomposition cannot say "Inductor's own".
EAGER_LOWERING: dict[str, tuple[Any, Callable[[dict[Any, Any]], Callable[..., Any]]]] = {
    "pow": (aten.pow.Tensor_Scalar, _pow_lowering),
}
EAGER_ORDER_TYPES = (*EAGER_ORDER, *EAGER_LOWERING)


@contextlib.contextmanager
def eager_order_installed(op_types: tuple[str, ...]) -> Iterator[None]:
    """Compile ``op_types`` (``EAGER_ORDER_TYPES``) in eager's order for one compile.

    An instance the rewrite does not cover (another dim, a strided input, too long) runs
    as ATen's own kernel inside the region (a fallback lowering), never as Inductor's
    inexact code: each instance is exact, fused where it can be. The decomposition and
    lowering tables are restored after.
    """
    from torch._inductor import lowering

    with tables_restored() as tables:
        for op_type in op_types:
            if op_type in EAGER_LOWERING:
                overload, make = EAGER_LOWERING[op_type]
                lowering.lowerings[overload] = make(lowering.lowerings)
                eager_calls([overload])  # where the new lowering falls back
                continue
            overload, form = EAGER_ORDER[op_type]
            for table in tables:
                table[overload] = form
            lowering.make_fallback(overload, override_decomp=True, warn=False)
            eager_calls([overload])
        yield
