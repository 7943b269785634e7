"""One Llama-style transformer decoder block (fp32).

Pre-norm block: RMSNorm -> causal self-attention with rotary position
embedding -> residual -> RMSNorm -> SwiGLU MLP -> residual. Everything is
written with plain torch ops (RMSNorm via pow/mean/rsqrt, rotary via
``rotate_half`` built from chunk/cat, attention as explicit
matmul + causal mask + softmax rather than SDPA) and organised as named
submodules (``attn_norm``, ``attn.{q,k,v,o}_proj``, ``mlp_norm``,
``mlp.{gate,up,down}_proj``) so FX node module paths are meaningful.

Why it is interesting for fusion: at batch 1, seq 32, hidden 128 the block is
a mix of small GEMMs and many cheap ops around them -- norm prologues feeding
the projections, the rotary chain (slice, neg, cat, mul, add: a tuple-
producing ``chunk``), the scale/mask/softmax sandwich between the two
attention matmuls, the silu(gate) * up epilogue, and residual adds. Each is a
separate fusion decision with different profitability.

``build_model_with_dtype`` is reused by ``decoder_block_bf16.py``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

DTYPE = torch.float32

BATCH = 1
SEQ = 32
HIDDEN = 128
N_HEADS = 4
HEAD_DIM = HIDDEN // N_HEADS
INTER = 256
EPS = 1e-6
ROPE_THETA = 10000.0


class RMSNorm(nn.Module):
    def __init__(self, hidden: int, eps: float = EPS) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Llama convention: compute the statistic in fp32, cast back.
        in_dtype = x.dtype
        xf = x.to(torch.float32)
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(in_dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class RotaryEmbedding(nn.Module):
    def __init__(self, head_dim: int, max_seq: int, theta: float = ROPE_THETA) -> None:
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
        t = torch.arange(max_seq, dtype=torch.float64)
        freqs = torch.outer(t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos().to(torch.float32), persistent=False)
        self.register_buffer("sin", emb.sin().to(torch.float32), persistent=False)

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        seq = q.shape[-2]
        cos = self.cos[:seq]
        sin = self.sin[:seq]
        q_out = q * cos + rotate_half(q) * sin
        k_out = k * cos + rotate_half(k) * sin
        return q_out, k_out


class Attention(nn.Module):
    def __init__(self, hidden: int, n_heads: int, max_seq: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = hidden // n_heads
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, hidden, bias=False)
        self.v_proj = nn.Linear(hidden, hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)
        self.rotary = RotaryEmbedding(self.head_dim, max_seq)
        mask = torch.triu(torch.ones(max_seq, max_seq, dtype=torch.bool), diagonal=1)
        self.register_buffer("causal_mask", mask, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q = self.q_proj(x).view(b, s, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.n_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.n_heads, self.head_dim).transpose(1, 2)
        q, k = self.rotary(q, k)
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        scores = scores.masked_fill(self.causal_mask[:s, :s], float("-inf"))
        probs = torch.softmax(scores.to(torch.float32), dim=-1).to(q.dtype)
        out = torch.matmul(probs, v)
        out = out.transpose(1, 2).reshape(b, s, h)
        return self.o_proj(out)


class MLP(nn.Module):
    def __init__(self, hidden: int, inter: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(torch.nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderBlock(nn.Module):
    def __init__(
        self,
        hidden: int = HIDDEN,
        n_heads: int = N_HEADS,
        inter: int = INTER,
        max_seq: int = SEQ,
    ) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(hidden)
        self.attn = Attention(hidden, n_heads, max_seq)
        self.mlp_norm = RMSNorm(hidden)
        self.mlp = MLP(hidden, inter)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.attn(self.attn_norm(x))
        return h + self.mlp(self.mlp_norm(h))


def build_model_with_dtype(dtype: torch.dtype) -> torch.nn.Module:
    torch.manual_seed(0)
    model = DecoderBlock()
    # Casts parameters and floating buffers (rotary cos/sin); the bool causal
    # mask is left alone by Module.to(dtype).
    return model.to(dtype).eval()


def build_model() -> torch.nn.Module:
    return build_model_with_dtype(DTYPE)


def example_inputs_with_dtype(dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(BATCH, SEQ, HIDDEN, generator=g)
    return (x.to(dtype),)


def example_inputs(seed: int = 0) -> tuple[torch.Tensor, ...]:
    return example_inputs_with_dtype(DTYPE, seed)
