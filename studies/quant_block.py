"""W8A8 quantised SwiGLU MLP block, modelled on an Ascend int8 example.

fp32 activations (tokens, hidden) are dynamically quantised per token to int8
(scale = row amax / 127, round, clamp, cast), multiplied by an int8 fused
gate/up weight with int32 accumulation, dequantised with
(per-token scale x per-channel weight scale), passed through SwiGLU
(silu(gate) * up), quantised per token again, multiplied by the int8 down
weight, dequantised, and added back onto the input as a residual. This is the
shape of ``npu_dynamic_quant`` -> ``npu_quant_matmul`` -> ``npu_swiglu`` ->
``npu_dynamic_quant`` -> ``npu_quant_matmul`` on Ascend, written with plain
torch ops.

The int8 GEMMs are emulated as an fp32 matmul of the int8 values. This is
exact: every product is an integer of magnitude <= 127 * 127 and every
partial sum stays below 127 * 127 * K <= 4.2e6 < 2**24 for K <= 256, so each
partial sum is exactly representable and the result is the true int32
accumulator whatever the reduction order (hence bit-reproducible across
kernels and thread counts). ``torch._int_mm`` (int8 x int8 -> int32) also
works on CPU at these shapes (eager, Dynamo and Inductor all agree bitwise
with the emulation), but its CPU kernel is a slow reference loop (~1-2 ms per
call here versus tens of microseconds for the fp32 GEMM) that would swamp
everything a fuser can win; set ``USE_INT_MM = True`` to use it anyway.

Why it is interesting for fusion: between the two GEMMs sits a long chain of
cheap ops -- abs/amax row reduction, divide, round, clamp, dtype casts,
int32 -> fp32 dequant with two broadcast scales, chunk (tuple-producing),
silu, mul -- whose natural fusions cross dtype boundaries (fp32 / int8 /
int32) and mix row reductions with pointwise work; the dequant is a GEMM
epilogue and the quantisation a GEMM prologue.
"""

from __future__ import annotations

import torch
from torch import nn

TOKENS = 16
HIDDEN = 128
INTER = 256
QMAX = 127.0
AMAX_EPS = 1e-6
USE_INT_MM = False


def dynamic_quant(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-token (per-row) int8 quantisation; returns (int8, fp32 scale [rows, 1])."""
    amax = x.abs().amax(dim=-1, keepdim=True).clamp_min(AMAX_EPS)
    scale = amax / QMAX
    q = torch.clamp(torch.round(x / scale), -QMAX, QMAX).to(torch.int8)
    return q, scale


def quantize_weight(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-output-channel symmetric int8 quantisation of a (K, N) weight."""
    amax = w.abs().amax(dim=0).clamp_min(AMAX_EPS)
    scale = amax / QMAX
    q = torch.clamp(torch.round(w / scale), -QMAX, QMAX).to(torch.int8)
    return q, scale.to(torch.float32)


def quant_matmul(
    x_q: torch.Tensor, x_scale: torch.Tensor, w_q: torch.Tensor, w_scale: torch.Tensor
) -> torch.Tensor:
    """int8 (M, K) @ int8 (K, N) -> int32, dequantised to fp32 with token and channel scales."""
    if USE_INT_MM:
        acc = torch._int_mm(x_q, w_q).to(torch.float32)
    else:
        # Exact for K <= 256 (see module docstring).
        acc = torch.matmul(x_q.to(torch.float32), w_q.to(torch.float32))
    return acc * x_scale * w_scale


class QuantSwiGLUBlock(nn.Module):
    def __init__(self, hidden: int = HIDDEN, inter: int = INTER) -> None:
        super().__init__()
        self.inter = inter
        gate_up = torch.randn(hidden, 2 * inter) / hidden**0.5
        down = torch.randn(inter, hidden) / inter**0.5
        gate_up_q, gate_up_scale = quantize_weight(gate_up)
        down_q, down_scale = quantize_weight(down)
        # Weights stored (K, N) as int8 buffers, scales per output channel.
        self.register_buffer("gate_up_weight", gate_up_q)
        self.register_buffer("gate_up_scale", gate_up_scale)
        self.register_buffer("down_weight", down_q)
        self.register_buffer("down_scale", down_scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_q, x_scale = dynamic_quant(x)
        gate_up = quant_matmul(x_q, x_scale, self.gate_up_weight, self.gate_up_scale)
        gate, up = gate_up.chunk(2, dim=-1)
        h = torch.nn.functional.silu(gate) * up
        h_q, h_scale = dynamic_quant(h)
        out = quant_matmul(h_q, h_scale, self.down_weight, self.down_scale)
        return x + out


def build_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return QuantSwiGLUBlock().eval()


def example_inputs(seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(TOKENS, HIDDEN, generator=g)
    return (x,)
