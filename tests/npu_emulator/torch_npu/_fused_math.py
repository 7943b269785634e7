"""CPU reference semantics of the emulated fused ops other than attention.

Deterministic torch formulas, written from the op descriptions in docs/npu_api.md and
the torch-npu 2.14.0 wheel's op documentation. Half-precision inputs are computed in
float32 and cast back. Whatever the emulator does not model raises NotImplementedError
naming the argument; nothing here is a claim about a real NPU's rounding.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

#: torch-npu's integer dtype enum (the ``int? output_dtype`` / ``dst_type`` arguments):
#: an ``int`` schema argument receives a ``torch.dtype`` as its ScalarType number.
DTYPE_ENUM = {1: torch.int8, 3: torch.int32, 5: torch.float16, 6: torch.float32, 15: torch.bfloat16}


def unsupported(**args: Any) -> None:
    """Raise NotImplementedError naming the first argument that is set (not None)."""
    for name, value in args.items():
        if value is not None:
            raise NotImplementedError(f"the emulated op does not support {name}={value!r}")


def dtype_of(code: int | None, default: torch.dtype, allowed: Sequence[torch.dtype], arg: str) -> torch.dtype:
    """The dtype a ScalarType number names (``None``: ``default``), one of ``allowed``."""
    if code is None:
        return default
    dtype = DTYPE_ENUM.get(int(code))
    if dtype not in allowed:
        raise NotImplementedError(f"the emulated op does not support {arg}={code!r}")
    return dtype


def rstd_shape(x: torch.Tensor, gamma: torch.Tensor) -> list[int]:
    """rms_norm's rstd: x's leading dims, 1 for every dim gamma covers (the wheel's meta)."""
    lead = x.dim() - gamma.dim()
    return [int(d) for d in x.shape[:lead]] + [1] * gamma.dim()


def rms_norm(x: torch.Tensor, gamma: torch.Tensor, epsilon: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, rstd): y = x * rsqrt(mean(x²) + eps) * gamma over gamma's dims; rstd float32."""
    dims = tuple(range(x.dim() - gamma.dim(), x.dim()))
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(dims, keepdim=True) + epsilon)
    return (xf * rstd * gamma.float()).to(x.dtype), rstd


def add_rms_norm(x1: torch.Tensor, x2: torch.Tensor, gamma: torch.Tensor,
                 epsilon: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, rstd, x): x = x1 + x2 (the residual sum, returned), y and rstd its rms_norm."""
    x = x1 + x2
    y, rstd = rms_norm(x, gamma, epsilon)
    return y, rstd, x


def rotary_mul(x: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor, rotary_mode: str = "half",
               rotate: torch.Tensor | None = None) -> torch.Tensor:
    """r1 * x + r2 * rotate_half(x) ('half'), or of the interleaved pairs ('interleave')."""
    if x.dim() != 4:
        raise RuntimeError(f"npu_rotary_mul: input must be 4-D, got {x.dim()}-D")
    xf = x.float()
    if rotate is not None:
        turned = xf @ rotate.float()
    elif rotary_mode == "half":
        a, b = xf.chunk(2, dim=-1)
        turned = torch.cat((-b, a), dim=-1)
    elif rotary_mode == "interleave":
        turned = torch.stack((-xf[..., 1::2], xf[..., ::2]), dim=-1).flatten(-2)
    else:
        raise NotImplementedError(f"the emulated op does not support rotary_mode={rotary_mode!r}")
    return (r1.float() * xf + r2.float() * turned).to(x.dtype)


def swiglu(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """silu(a) * b, where a, b are x's halves along ``dim``."""
    if x.shape[dim] % 2:
        raise RuntimeError(f"npu_swiglu: dim {dim} has odd size {x.shape[dim]}")
    a, b = x.float().chunk(2, dim=dim)
    return (F.silu(a) * b).to(x.dtype)


def swiglu_shape(x: torch.Tensor, dim: int) -> list[int]:
    shape = [int(d) for d in x.shape]
    shape[dim] = shape[dim] // 2
    return shape


def moe_gating_top_k_softmax(x: torch.Tensor, finished: torch.Tensor | None = None,
                             k: int = 1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, expert_idx, row_idx): the top-k of softmax(x) over experts, their experts (int32),
    and row_idx[r, j] = j * rows + r (int32). A finished row's experts read ``num_experts``."""
    if x.dim() not in (2, 3):
        raise RuntimeError(f"npu_moe_gating_top_k_softmax: x must be 2-D or 3-D, got {x.dim()}-D")
    experts = int(x.shape[-1])
    y, idx = torch.softmax(x.float(), dim=-1).topk(k, dim=-1)
    idx = idx.to(torch.int32)
    if finished is not None:
        idx = torch.where(finished.unsqueeze(-1), torch.full_like(idx, experts), idx)
    rows = x.numel() // experts
    row_idx = (torch.arange(k).unsqueeze(0) * rows + torch.arange(rows).unsqueeze(1)).to(torch.int32)
    return y.to(x.dtype), idx, row_idx.reshape(*x.shape[:-1], k)


def dynamic_quant(x: torch.Tensor, *, smooth_scales: torch.Tensor | None = None,
                  group_index: torch.Tensor | None = None, dst_type: int | None = None,
                  quant_mode: str = "pertoken", dst_type_max: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 y, float32 scale): symmetric quantisation, scale = amax|x| / 127 per token
    (x's last dim; scale has x's leading shape) or per tensor (shape [1])."""
    unsupported(group_index=group_index)
    dtype_of(dst_type, torch.int8, (torch.int8,), "dst_type")
    if dst_type_max != 0.0:
        raise NotImplementedError(f"the emulated op does not support dst_type_max={dst_type_max!r}")
    if quant_mode not in ("pertoken", "pertensor"):
        raise NotImplementedError(f"the emulated op does not support quant_mode={quant_mode!r}")
    xf = x.float() if smooth_scales is None else x.float() * smooth_scales.float()
    if quant_mode == "pertoken":
        scale = xf.abs().amax(dim=-1) / 127.0
        denom = torch.where(scale > 0, scale, torch.ones_like(scale)).unsqueeze(-1)
    else:
        scale = (xf.abs().amax() / 127.0).reshape(1)
        denom = torch.where(scale > 0, scale, torch.ones_like(scale))
    y = torch.round(xf / denom).clamp(-128, 127).to(torch.int8)
    return y, scale


def dynamic_quant_scale_shape(x: torch.Tensor, quant_mode: str) -> list[int]:
    return [1] if quant_mode == "pertensor" else [int(d) for d in x.shape[:-1]]


_QMM_OUT = (torch.int8, torch.float16, torch.bfloat16, torch.int32)


def quant_matmul(x1: torch.Tensor, x2: torch.Tensor, scale: torch.Tensor, *, offset: torch.Tensor | None = None,
                 pertoken_scale: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                 output_dtype: int | None = None, x1_dtype: int | None = None, x2_dtype: int | None = None,
                 pertoken_scale_dtype: int | None = None, scale_dtype: int | None = None,
                 group_sizes: list[int] | None = None, y_scale: torch.Tensor | None = None) -> torch.Tensor:
    """int8 x1 @ int8 x2 accumulated exactly in int32, then (+ int32 bias) * scale
    (* pertoken_scale per row) (+ float bias), cast to output_dtype (None: int8, rounded,
    + offset). int32 output: the accumulator (+ bias), no dequantisation."""
    unsupported(x1_dtype=x1_dtype, x2_dtype=x2_dtype, pertoken_scale_dtype=pertoken_scale_dtype,
                scale_dtype=scale_dtype, group_sizes=group_sizes, y_scale=y_scale)
    if x1.dtype != torch.int8 or x2.dtype != torch.int8:
        raise NotImplementedError(f"the emulated op supports int8 x1/x2 only, got {x1.dtype}/{x2.dtype}")
    if scale.dtype == torch.int64:
        raise NotImplementedError("the emulated op does not support an int64 scale (npu_trans_quant_param)")
    out = dtype_of(output_dtype, torch.int8, _QMM_OUT, "output_dtype")
    acc = torch.matmul(x1.to(torch.int32), x2.to(torch.int32))
    if bias is not None and bias.dtype == torch.int32:
        acc = acc + bias
    if out == torch.int32:
        return acc
    y = acc.to(torch.float32) * scale.float()
    if pertoken_scale is not None:
        y = y * pertoken_scale.float().unsqueeze(-1)
    if bias is not None and bias.dtype != torch.int32:
        y = y + bias.float()
    if out == torch.int8:
        y = y if offset is None else y + offset.float()
        return torch.round(y).clamp(-128, 127).to(torch.int8)
    return y.to(out)


def quant_matmul_shape(x1: torch.Tensor, x2: torch.Tensor) -> list[int]:
    batch = torch.broadcast_shapes(x1.shape[:-2], x2.shape[:-2])
    return [*batch, int(x1.shape[-2]), int(x2.shape[-1])]
