"""Bitwise comparison of kernel outputs, with diagnostics.

A fused kernel is only accepted if it reproduces the reference *bit for bit*:
``torch.equal`` / ``allclose`` would hide NaN-payload changes and ``-0.0``
versus ``0.0``, both of which can change downstream results.  When outputs do
differ, the ULP distance tells a reordered reduction (a few ULP) apart from a
real bug (millions of ULP, or a sign flip).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "Mismatch",
    "bitwise_equal",
    "compare_outputs",
    "flatten_outputs",
    "ulp_distance",
]

_INT64_MAX = torch.iinfo(torch.int64).max

# Floats are reinterpreted as the signed integer type of the same width.
_SAME_WIDTH_INT = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


@dataclass(frozen=True)
class Mismatch:
    """One way in which a candidate output differs from the reference.

    ``reason`` is ``"values"`` (same shape and dtype, different bits),
    ``"shape"``, ``"dtype"`` or ``"count"`` (different number of outputs).
    For ``"values"``, ``count`` is the number of elements whose bits differ,
    ``first_index`` the first of them in row-major order and ``max_ulp`` the
    largest ULP distance (0 when only ``-0.0``/``0.0`` differ).  For the
    structural reasons ``count``/``first_index``/``max_ulp`` are ``0``/``()``/``0``,
    except ``"count"``, where ``output_index`` is the first output that only
    one side has and ``count`` is how many outputs are missing on one side.
    ``detail`` is a human-readable description for reports.
    """

    output_index: int
    count: int
    first_index: tuple[int, ...]
    max_ulp: int
    reason: str
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "output_index": self.output_index,
            "count": self.count,
            "first_index": list(self.first_index),
            "max_ulp": self.max_ulp,
            "reason": self.reason,
            "detail": self.detail,
        }


def flatten_outputs(out: Any) -> list[torch.Tensor]:
    """A tensor, or an arbitrarily nested tuple/list/dict of tensors, as a flat list (a dict's
    values in its order: a Hugging Face ``ModelOutput`` is a dict).

    Anything else raises ``TypeError`` so that a kernel returning e.g. ``None``
    or a Python float is reported instead of silently compared as "nothing".
    """
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list, dict)):
        flat: list[torch.Tensor] = []
        for item in (out.values() if isinstance(out, dict) else out):
            flat.extend(flatten_outputs(item))
        return flat
    raise TypeError(f"cannot compare output of type {type(out).__module__}.{type(out).__qualname__}; expected a tensor or a (nested) tuple/list/dict of tensors")


def _host(t: torch.Tensor) -> torch.Tensor:
    """Detached contiguous CPU copy, so that strides and device never matter."""
    return t.detach().cpu().contiguous()


def _float_parts(t: torch.Tensor) -> torch.Tensor:
    """Complex tensors as their (..., 2) real view; other tensors unchanged."""
    return torch.view_as_real(t) if t.is_complex() else t


def _raw_bits(t: torch.Tensor) -> torch.Tensor:
    """Integer view of the tensor's bits (floats → same-width signed ints)."""
    t = _float_parts(_host(t))
    if t.is_floating_point():
        return t.view(_SAME_WIDTH_INT[t.element_size()])
    if t.dtype == torch.bool:
        return t.view(torch.uint8)
    return t


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True iff shapes, dtypes and every bit of every element agree.

    NaN payloads and the sign of zero count; layout and device do not.
    """
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(_raw_bits(a), _raw_bits(b))


def _ordered(bits: torch.Tensor) -> torch.Tensor:
    """Map float bits (as signed ints) to int64 whose order matches float order.

    Non-negative floats keep their bit pattern; a negative float with magnitude
    bits ``m`` (stored as ``INT_MIN + m``) becomes ``-m``.  Both zeros map to 0,
    so adjacent floats differ by exactly 1 and NaNs sort beyond the infinities.
    """
    int_min = torch.iinfo(bits.dtype).min
    wide = bits.to(torch.int64)
    return torch.where(wide < 0, int_min - wide, wide)


def _saturating_abs_diff(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``|x - y|`` for int64 tensors, clamped to INT64_MAX instead of wrapping."""
    hi = torch.maximum(x, y)
    lo = torch.minimum(x, y)
    # Only opposite signs can overflow: hi - lo > MAX  <=>  hi > MAX + lo.
    overflow = (lo < 0) & (hi >= 0) & (hi > _INT64_MAX + lo)
    return torch.where(overflow, torch.full_like(hi, _INT64_MAX), hi - lo)


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-element distance, int64, same shape as the inputs.

    For floating dtypes this is the number of representable values between the
    two (ordered-integer trick on the raw bits; ``-0.0`` and ``0.0`` are 0
    apart, the smallest negative and positive subnormals 2 apart).  Complex
    elements take the larger of the real and imaginary distances.  Integer and
    bool dtypes give plain ``|a - b|``.  Results saturate at INT64_MAX.
    """
    if a.dtype != b.dtype or a.shape != b.shape:
        raise ValueError(f"ulp_distance needs equal dtypes and shapes, got {a.dtype}{tuple(a.shape)} and {b.dtype}{tuple(b.shape)}")
    if a.is_complex():
        parts = ulp_distance(_float_parts(_host(a)), _float_parts(_host(b)))
        return parts.amax(dim=-1)
    if a.is_floating_point():
        return _saturating_abs_diff(_ordered(_raw_bits(a)), _ordered(_raw_bits(b)))
    # uint64 would wrap on the way to int64; it is too rare in kernels to special-case.
    return _saturating_abs_diff(_host(a).to(torch.int64), _host(b).to(torch.int64))


def _unravel(flat_index: int, shape: torch.Size) -> tuple[int, ...]:
    index: list[int] = []
    for size in reversed(shape):
        flat_index, rem = divmod(flat_index, size)
        index.append(rem)
    return tuple(reversed(index))


def _compare_one(i: int, ref: torch.Tensor, cand: torch.Tensor) -> Mismatch | None:
    if ref.dtype != cand.dtype:
        return Mismatch(i, 0, (), 0, "dtype", f"reference {ref.dtype}, candidate {cand.dtype}")
    if ref.shape != cand.shape:
        return Mismatch(i, 0, (), 0, "shape", f"reference {tuple(ref.shape)}, candidate {tuple(cand.shape)}")
    ref_bits, cand_bits = _raw_bits(ref), _raw_bits(cand)
    if torch.equal(ref_bits, cand_bits):
        return None
    differs = ref_bits != cand_bits
    if ref.is_complex():
        differs = differs.any(dim=-1)
    count = int(differs.sum())
    first_flat = int(differs.reshape(-1).to(torch.uint8).argmax())
    max_ulp = int(ulp_distance(ref, cand).max())
    return Mismatch(i, count, _unravel(first_flat, ref.shape), max_ulp, "values", f"{count} of {ref.numel()} elements differ")


def compare_outputs(reference: Sequence[torch.Tensor], candidate: Sequence[torch.Tensor]) -> list[Mismatch]:
    """All mismatches between two output lists; an empty list means bitwise equal.

    Both sides are passed through :func:`flatten_outputs`, so raw kernel
    results (a tensor or nested tuples) are accepted too.  A different number
    of outputs is reported as a single ``"count"`` mismatch, since pairing
    outputs positionally would then be meaningless.
    """
    ref = flatten_outputs(reference)
    cand = flatten_outputs(candidate)
    if len(ref) != len(cand):
        return [
            Mismatch(
                output_index=min(len(ref), len(cand)),
                count=abs(len(ref) - len(cand)),
                first_index=(),
                max_ulp=0,
                reason="count",
                detail=f"reference has {len(ref)} outputs, candidate has {len(cand)}",
            )
        ]
    return [m for i, (r, c) in enumerate(zip(ref, cand)) if (m := _compare_one(i, r, c)) is not None]
