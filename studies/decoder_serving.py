"""A small two-layer decoder served at three decode batch sizes: one plan for bs 1, 8 and 64.

One decode step per call: each sequence brings one new token and attends over a KV cache
of ``CONTEXT`` earlier tokens (the cache is an input, as a serving engine passes it).
A serving stack captures one graph per batch size, but the fusion plan lives in the
model's code and in one ``torch.compile`` call, so sktune tunes one plan for all three,
weighted by how much traffic each batch size serves (``input_shapes``). A serving stack
captures more batch sizes than that (vLLM: 1, 2, 4, then multiples of 8); the others listed
in ``verify_shapes`` are never timed or tuned at, but the plan named best is verified bitwise
at each of them too.

The blocks (RMSNorm, rotary, SwiGLU MLP) are those of ``decoder_block.py``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from decoder_block import MLP, RMSNorm, rotate_half  # the model file's neighbour (sktune puts it on sys.path)

HIDDEN = 128
N_HEADS = 4
HEAD_DIM = HIDDEN // N_HEADS
INTER = 256
LAYERS = 2
CONTEXT = 32  # tokens already in the KV cache
SHAPES = {"bs1": 0.5, "bs8": 0.3, "bs64": 0.2}  # share of decode steps served at each batch size
VERIFY_ONLY = ["bs2", "bs4", "bs16", "bs32"]  # also captured when serving: verified, not tuned


class DecodeAttention(nn.Module):
    """Attention of one new token over the cached keys/values plus its own."""

    def __init__(self) -> None:
        super().__init__()
        self.q_proj = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.k_proj = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.v_proj = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.o_proj = nn.Linear(HIDDEN, HIDDEN, bias=False)
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float64) / HEAD_DIM))
        angle = torch.cat((CONTEXT * inv_freq, CONTEXT * inv_freq))  # the new token's position
        self.register_buffer("cos", angle.cos().float(), persistent=False)
        self.register_buffer("sin", angle.sin().float(), persistent=False)

    def forward(self, x: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        q = self.q_proj(x).view(b, 1, N_HEADS, HEAD_DIM).transpose(1, 2)
        k = self.k_proj(x).view(b, 1, N_HEADS, HEAD_DIM).transpose(1, 2)
        v = self.v_proj(x).view(b, 1, N_HEADS, HEAD_DIM).transpose(1, 2)
        q = q * self.cos + rotate_half(q) * self.sin
        k = k * self.cos + rotate_half(k) * self.sin
        keys = torch.cat((k_cache, k), dim=2)
        values = torch.cat((v_cache, v), dim=2)
        scores = torch.matmul(q, keys.transpose(-2, -1)) * (1.0 / math.sqrt(HEAD_DIM))
        out = torch.matmul(torch.softmax(scores, dim=-1), values)
        return self.o_proj(out.transpose(1, 2).reshape(b, 1, HIDDEN))


class DecoderLayer(nn.Module):
    def __init__(self, inter: int = INTER) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(HIDDEN)
        self.attn = DecodeAttention()
        self.mlp_norm = RMSNorm(HIDDEN)
        self.mlp = MLP(HIDDEN, inter)

    def forward(self, x: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        h = x + self.attn(self.attn_norm(x), k_cache, v_cache)
        return h + self.mlp(self.mlp_norm(h))


class Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer() for _ in range(LAYERS))
        self.norm = RMSNorm(HIDDEN)

    def forward(self, x: torch.Tensor, k_caches: torch.Tensor, v_caches: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x, k_caches[i], v_caches[i])
        return self.norm(x)


def build_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return Decoder().eval()


def input_shapes() -> dict[str, float]:
    return dict(SHAPES)


def verify_shapes() -> list[str]:
    return list(VERIFY_ONLY)


def example_inputs(seed: int = 0, shape: str | None = None) -> tuple[torch.Tensor, ...]:
    batch = int((shape or next(iter(SHAPES))).removeprefix("bs"))
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 1, HIDDEN, generator=g)
    k_caches = torch.randn(LAYERS, batch, N_HEADS, CONTEXT, HEAD_DIM, generator=g)
    v_caches = torch.randn(LAYERS, batch, N_HEADS, CONTEXT, HEAD_DIM, generator=g)
    return x, k_caches, v_caches
