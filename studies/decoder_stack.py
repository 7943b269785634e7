"""A Llama-style stack of 8 identical decoder layers (fp32), ~1,000+ ops.

Input is float activations (batch 1, seq 32, hidden 128), not token ids. The
forward is: a small prefix (embedding scale by sqrt(hidden), an input RMSNorm,
and the rotary cos/sin tables computed once from ``inv_freq``) -> ``layers``, an
``nn.ModuleList`` of ``N_LAYERS`` identical ``DecoderLayer`` s -> a final RMSNorm.

Each layer is deliberately op-rich (127 captured ops), written with plain
torch ops and named submodules so FX module paths read like
``layers.3.attn.q_proj``:

* "sandwich" norms (Gemma-2 style): RMSNorm before *and* after the attention
  and the MLP; every RMSNorm is written out as to/pow/mean/add/rsqrt/mul/to/mul
  with its weight stored as an offset from one (``1 + w``);
* attention with grouped-query heads (4 query heads, 2 KV heads; ``repeat_kv``
  as getitem/expand/reshape), per-head q/k/v RMSNorm (qk-norm plus a
  v-norm, as in Gemma-3n), rotary
  embedding via ``rotate_half`` (chunk/neg/cat), a learned per-head
  temperature, explicit matmul -> scale -> tanh logit soft-capping -> causal
  ``masked_fill`` -> softmax written out (amax/sub/exp/sum/div) -> matmul, and
  a sigmoid output gate before ``o_proj``;
* a SwiGLU MLP written out (``gate * sigmoid(gate) * up``);
* residual adds with per-layer learned residual scales (mul).

Why it is interesting for fusion: it is the decoder block repeated, so the
search space is ~8x that of ``decoder_block.py`` but highly regular -- the
same fusion decision recurs once per layer. It exercises how a tuner scales
with graph size (capture, candidate enumeration, per-trial compile time) and
whether it can share or transfer decisions between identical layers.
``build_stack(n_layers)`` builds deeper variants (e.g. 16 layers, ~2,000 ops)
from the same definition for benchmarks.

Self-contained on purpose: sktune loads model files by path, so this file does
not import its sibling ``decoder_block.py``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

DTYPE = torch.float32

N_LAYERS = 8
BATCH = 1
SEQ = 32
HIDDEN = 128
N_HEADS = 4
N_KV_HEADS = 2
HEAD_DIM = HIDDEN // N_HEADS
INTER = 256
EPS = 1e-6
ROPE_THETA = 10000.0
SOFTCAP = 30.0


class RMSNorm(nn.Module):
    """RMSNorm over the last dim; weight stored as an offset from one."""

    def __init__(self, dim: int, eps: float = EPS) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(0.1 * torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Llama convention: compute the statistic in fp32, cast back.
        in_dtype = x.dtype
        xf = x.to(torch.float32)
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (1.0 + self.weight) * xf.to(in_dtype)


class RotaryEmbedding(nn.Module):
    """cos/sin tables for positions 0..seq-1, computed in the forward (HF style)."""

    def __init__(self, head_dim: int, theta: float = ROPE_THETA) -> None:
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        seq = x.shape[1]
        pos = torch.arange(seq, device=x.device, dtype=torch.float32)
        freqs = torch.outer(pos, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos + rotate_half(x) * sin


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    b, h_kv, s, d = x.shape
    x = x[:, :, None, :, :].expand(b, h_kv, n_rep, s, d)
    return x.reshape(b, h_kv * n_rep, s, d)


class Attention(nn.Module):
    def __init__(self, hidden: int, n_heads: int, n_kv_heads: int, max_seq: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.head_dim = hidden // n_heads
        self.q_proj = nn.Linear(hidden, n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, n_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, n_kv_heads * self.head_dim, bias=False)
        self.gate_proj = nn.Linear(hidden, hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)
        self.q_norm = RMSNorm(self.head_dim)
        self.k_norm = RMSNorm(self.head_dim)
        self.v_norm = RMSNorm(self.head_dim)
        self.head_temp = nn.Parameter(1.0 + 0.05 * torch.randn(1, n_heads, 1, 1))
        mask = torch.triu(torch.ones(max_seq, max_seq, dtype=torch.bool), diagonal=1)
        self.register_buffer("causal_mask", mask, persistent=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q = self.q_proj(x).view(b, s, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q = self.q_norm(q)
        k = self.k_norm(k)
        v = self.v_norm(v)
        q = apply_rotary(q, cos, sin)
        k = apply_rotary(k, cos, sin)
        n_rep = self.n_heads // self.n_kv_heads
        k = repeat_kv(k, n_rep)
        v = repeat_kv(v, n_rep)

        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        scores = scores * self.head_temp
        scores = torch.tanh(scores / SOFTCAP) * SOFTCAP  # logit soft-capping
        scores = scores.masked_fill(self.causal_mask[:s, :s], float("-inf"))
        scores = scores.to(torch.float32)
        scores = scores - scores.amax(dim=-1, keepdim=True)
        e = torch.exp(scores)
        probs = (e / e.sum(dim=-1, keepdim=True)).to(q.dtype)
        out = torch.matmul(probs, v)
        out = out.transpose(1, 2).reshape(b, s, h)
        out = out * torch.sigmoid(self.gate_proj(x))  # output gate
        return self.o_proj(out)


class MLP(nn.Module):
    def __init__(self, hidden: int, inter: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = self.gate_proj(x)
        return self.down_proj(gate * torch.sigmoid(gate) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, hidden: int, n_heads: int, n_kv_heads: int, inter: int, max_seq: int) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(hidden)
        self.attn = Attention(hidden, n_heads, n_kv_heads, max_seq)
        self.post_attn_norm = RMSNorm(hidden)
        self.mlp_norm = RMSNorm(hidden)
        self.mlp = MLP(hidden, inter)
        self.post_mlp_norm = RMSNorm(hidden)
        self.attn_scale = nn.Parameter(1.0 + 0.05 * torch.randn(hidden))
        self.mlp_scale = nn.Parameter(1.0 + 0.05 * torch.randn(hidden))

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        h = x + self.attn_scale * self.post_attn_norm(self.attn(self.attn_norm(x), cos, sin))
        return h + self.mlp_scale * self.post_mlp_norm(self.mlp(self.mlp_norm(h)))


class DecoderStack(nn.Module):
    def __init__(
        self,
        n_layers: int = N_LAYERS,
        hidden: int = HIDDEN,
        n_heads: int = N_HEADS,
        n_kv_heads: int = N_KV_HEADS,
        inter: int = INTER,
        max_seq: int = SEQ,
    ) -> None:
        super().__init__()
        self.embed_scale = math.sqrt(hidden)
        self.input_norm = RMSNorm(hidden)
        self.rotary = RotaryEmbedding(hidden // n_heads)
        self.layers = nn.ModuleList(
            DecoderLayer(hidden, n_heads, n_kv_heads, inter, max_seq) for _ in range(n_layers)
        )
        self.final_norm = RMSNorm(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.input_norm(x * self.embed_scale)
        cos, sin = self.rotary(h)
        for layer in self.layers:
            h = layer(h, cos, sin)
        return self.final_norm(h)


def build_stack(n_layers: int) -> torch.nn.Module:
    """The stack with ``n_layers`` layers, seeded the same way as ``build_model``."""
    torch.manual_seed(0)
    return DecoderStack(n_layers=n_layers).to(DTYPE).eval()


def build_model() -> torch.nn.Module:
    return build_stack(N_LAYERS)


def example_inputs(seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(BATCH, SEQ, HIDDEN, generator=g)
    return (x.to(DTYPE),)
