"""Exact forms that still fuse: sum, mean and softmax over the last dim computed in eager's order.

Why fused reductions differ from eager on CPU (docs/measured.md "Exact forms"):
- sum / mean: ATen sums a contiguous last dim with a cascade (SumKernel's
  ``vectorized_inner_sum`` → ``row_sum`` → ``multi_row_sum``): 8-lane vectors (its sum
  kernel has no AVX512 build), four interleaved partial sums, a multi-level cascade, the
  scalar tail first, then the lanes one by one. Inductor keeps one 16-lane accumulator
  and reduces it as a tree. Same numbers, other order, other rounding.
- softmax: ATen's ``_vec_softmax_lastdim`` multiplies by the reciprocal of the sum;
  Inductor's decomposition divides by the sum (1 ULP apart).

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
from collections.abc import Callable, Iterator
from typing import Any

import torch

from sktune.backends.inductor_tables import tables_restored

aten = torch.ops.aten

LANES = 8  # Vectorized<float> width of the build ATen's sum kernel runs (AVX2)
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


def _softmax(x: torch.Tensor, dim: int, half_to_float: bool) -> Any:
    if x.dtype != torch.float32 or half_to_float or dim % x.dim() != x.dim() - 1:
        return NotImplemented
    d = dim % x.dim()
    # prims.*: the exp and the sum inside softmax stay Inductor's own (ATen's softmax
    # kernel adds up its vector the way Inductor does), whatever the sum rewrite does.
    e = torch.ops.prims.exp(x - torch.amax(x, d, keepdim=True))
    return e * torch.reciprocal(torch.ops.prims.sum(e, [d]).unsqueeze(d))


def _log_softmax(x: torch.Tensor, dim: int, half_to_float: bool) -> Any:
    if x.dtype != torch.float32 or half_to_float or dim % x.dim() != x.dim() - 1 or not x.is_contiguous():
        return NotImplemented
    d = dim % x.dim()
    # Inductor's own decomposition, written with prims.sum: ATen's log_softmax kernel adds
    # up its vector the way Inductor does (fused log_softmax is bitwise), but its default
    # decomposition calls aten.sum, which the sum rewrite above would reach (1 ULP off,
    # benchmarks/exact_forms.py).
    shifted = x - torch.amax(x, d, keepdim=True)
    total = torch.ops.prims.sum(torch.ops.prims.exp(shifted), [d]).unsqueeze(d)
    return shifted - torch.ops.prims.log(total)


# Op type (as in the op list) → the ATen overload rewritten, and its eager-order form.
EAGER_ORDER: dict[str, tuple[Any, Callable[..., Any]]] = {
    "sum": (aten.sum.dim_IntList, _sum),
    "mean": (aten.mean.dim, _mean),
    "softmax": (aten._softmax.default, _softmax),
    "log_softmax": (aten._log_softmax.default, _log_softmax),  # shields its sum from the rewrite
}


@contextlib.contextmanager
def eager_order_installed(op_types: tuple[str, ...]) -> Iterator[None]:
    """Compile ``op_types`` (keys of ``EAGER_ORDER``) in eager's order for one compile.

    An instance the rewrite does not cover (another dim, a strided input, too long) runs
    as ATen's own kernel inside the region (a fallback lowering), never as Inductor's
    inexact code: each instance is exact, fused where it can be. The decomposition and
    lowering tables are restored after.
    """
    from torch._inductor import lowering

    with tables_restored() as tables:
        for op_type in op_types:
            overload, form = EAGER_ORDER[op_type]
            for table in tables:
                table[overload] = form
            lowering.make_fallback(overload, override_decomp=True, warn=False)
        yield
