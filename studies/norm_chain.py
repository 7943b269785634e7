"""Overhead-bound elementwise / normalisation chain (fp32).

Models the "glue" that sits between the big matmuls of a small network: a
long run of cheap pointwise ops (add, mul, sigmoid, silu, clamp, rsqrt, pow,
tanh), three RMSNorm-style reductions written out by hand
(``x * rsqrt(mean(x**2) + eps) * w``) and two small Linear layers, on a tiny
(8, 256) activation.

Why it is interesting for fusion: at this size every op launches in a few
microseconds and does almost no arithmetic, so eager time is dominated by
per-op dispatch overhead (~50 ops). A fuser can collapse each pointwise run
plus its neighbouring row reduction into a handful of kernels; the two Linear
layers are natural fusion barriers (or epilogue/prologue candidates), which
splits the chain into a few distinct fusion regions with different choices.
"""

from __future__ import annotations

import torch
from torch import nn

HIDDEN = 256
BATCH = 8
EPS = 1e-6


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


class NormChain(nn.Module):
    def __init__(self, hidden: int = HIDDEN) -> None:
        super().__init__()
        self.norm1_weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.norm2_weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.norm3_weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.bias1 = nn.Parameter(0.02 * torch.randn(hidden))
        self.bias2 = nn.Parameter(0.02 * torch.randn(hidden))
        self.scale = nn.Parameter(1.0 + 0.05 * torch.randn(hidden))
        self.proj_in = nn.Linear(hidden, hidden)
        self.proj_out = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # Stage 1: residual add + bias + RMSNorm.
        h = x + residual
        h = h + self.bias1
        res1 = h
        h = _rms_norm(h, self.norm1_weight)

        # Stage 2: gated pointwise block (sigmoid gate, silu, clamp).
        g = torch.sigmoid(h * 1.5 - 0.25)
        h = h * g
        h = torch.nn.functional.silu(h) + 0.1 * h
        h = torch.clamp(h, -4.0, 4.0)
        h = h * self.scale + self.bias2

        # Small Linear: a fusion barrier in the middle of the chain.
        h = self.proj_in(h)

        # Stage 3: tanh-approximated GELU written out by hand (pow-heavy).
        c = 0.7978845608028654  # sqrt(2 / pi)
        inner = c * (h + 0.044715 * h.pow(3))
        h = 0.5 * h * (1.0 + torch.tanh(inner))

        # Stage 4: second residual + RMSNorm, then a softer clamp.
        h = h + res1
        res2 = h
        h = _rms_norm(h, self.norm2_weight)
        h = torch.clamp(h * 0.9 + 0.05, min=-3.0, max=3.0)
        h = h * torch.sigmoid(h)

        h = self.proj_out(h)

        # Stage 5: final residual, squared-ReLU-ish mixing, last RMSNorm.
        h = h + res2
        h = h + 0.5 * torch.relu(h).pow(2) * 0.1
        h = h - h.mean(-1, keepdim=True)
        out = _rms_norm(h, self.norm3_weight)
        return out, res2


def build_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return NormChain().eval()


def example_inputs(seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(BATCH, HIDDEN, generator=g)
    residual = 0.5 * torch.randn(BATCH, HIDDEN, generator=g)
    return x, residual
