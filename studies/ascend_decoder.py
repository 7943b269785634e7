"""A two-layer decoder for one decode step, written the way Ascend serving code is: torch_npu's
fused ops instead of their eager formulas. Needs ``torch_npu`` (on this project's machines the
emulated one: ``PYTHONPATH=tests/npu_emulator``; every number it produces is emulated).

Per layer: ``npu_add_rms_norm`` (the residual add fused into the norm, vLLM-Ascend style; the
first layer uses ``npu_rms_norm``), one qkv linear, ``npu_rotary_mul`` on q and k (BSND, the
new token's position), the new key/value appended to the layer's KV cache (an input, as a
serving engine passes it), ``npu_incre_flash_attention`` (BSH, grouped key/value heads,
``actual_seq_lengths``), the output linear, and a ``npu_swiglu`` MLP. Small (batch 2, width
64, 16 cached tokens) so that a whole quick study runs in seconds.

Why it is interesting for SuperKernel: every layer is a chain of vector kernels (norm,
rotary, swiglu) around cube matmuls and one MIX attention kernel, the mix SuperKernel was
made for; the layers repeat, so "one scope per layer" is the placement users write by hand.
"""

from __future__ import annotations

import math

import torch
import torch_npu
from torch import nn

BATCH, HIDDEN, N_HEADS, N_KV_HEADS, INTER, LAYERS, CONTEXT = 2, 64, 4, 2, 128, 2, 16
HEAD_DIM = HIDDEN // N_HEADS
KV_DIM = N_KV_HEADS * HEAD_DIM
EPS = 1e-6


class Attention(nn.Module):
    """One new token per sequence attending over its cached keys/values plus its own."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(HIDDEN, HIDDEN + 2 * KV_DIM, bias=False)
        self.o_proj = nn.Linear(HIDDEN, HIDDEN, bias=False)
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float64) / HEAD_DIM))
        angle = torch.cat((CONTEXT * inv_freq, CONTEXT * inv_freq)).view(1, 1, 1, HEAD_DIM)  # 1S1D
        self.register_buffer("cos", angle.cos().float(), persistent=False)
        self.register_buffer("sin", angle.sin().float(), persistent=False)

    def forward(self, x: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        q, k, v = self.qkv(x).split([HIDDEN, KV_DIM, KV_DIM], dim=-1)
        q = torch_npu.npu_rotary_mul(q.reshape(b, 1, N_HEADS, HEAD_DIM), self.cos, self.sin)
        k = torch_npu.npu_rotary_mul(k.reshape(b, 1, N_KV_HEADS, HEAD_DIM), self.cos, self.sin)
        keys = torch.cat((k_cache, k.reshape(b, 1, KV_DIM)), dim=1)
        values = torch.cat((v_cache, v), dim=1)
        out = torch_npu.npu_incre_flash_attention(
            q.reshape(b, 1, HIDDEN), keys, values, num_heads=N_HEADS, num_key_value_heads=N_KV_HEADS,
            scale_value=1.0 / math.sqrt(HEAD_DIM), input_layout="BSH", actual_seq_lengths=[CONTEXT + 1] * b)
        return self.o_proj(out)


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate_up = nn.Linear(HIDDEN, 2 * INTER, bias=False)
        self.down = nn.Linear(INTER, HIDDEN, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch_npu.npu_swiglu(self.gate_up(x), dim=-1))


class DecoderLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn_norm = nn.Parameter(torch.linspace(0.5, 1.5, HIDDEN))
        self.mlp_norm = nn.Parameter(torch.linspace(1.5, 0.5, HIDDEN))
        self.attn = Attention()
        self.mlp = MLP()

    def forward(self, residual: torch.Tensor, delta: torch.Tensor | None, k_cache: torch.Tensor,
                v_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(residual, this layer's output still to be added): the add happens in the next norm."""
        if delta is None:
            normed, _ = torch_npu.npu_rms_norm(residual, self.attn_norm, EPS)
        else:
            normed, _, residual = torch_npu.npu_add_rms_norm(residual, delta, self.attn_norm, EPS)
        attn = self.attn(normed, k_cache, v_cache)
        normed, _, residual = torch_npu.npu_add_rms_norm(residual, attn, self.mlp_norm, EPS)
        return residual, self.mlp(normed)


class Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer() for _ in range(LAYERS))
        self.norm = nn.Parameter(torch.ones(HIDDEN))

    def forward(self, x: torch.Tensor, k_caches: torch.Tensor, v_caches: torch.Tensor) -> torch.Tensor:
        residual, delta = x, None
        for i, layer in enumerate(self.layers):
            residual, delta = layer(residual, delta, k_caches[i], v_caches[i])
        return torch_npu.npu_add_rms_norm(residual, delta, self.norm, EPS)[0]


def build_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return Decoder().eval()


def example_inputs(seed: int = 0) -> tuple[torch.Tensor, ...]:
    """The new tokens' hidden states and each layer's KV cache (BSH: batch, cached tokens, kv width)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(BATCH, 1, HIDDEN, generator=g)
    k_caches = torch.randn(LAYERS, BATCH, CONTEXT, KV_DIM, generator=g)
    v_caches = torch.randn(LAYERS, BATCH, CONTEXT, KV_DIM, generator=g)
    return x, k_caches, v_caches
