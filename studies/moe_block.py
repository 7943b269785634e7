"""Two MoE decoder-style layers: RMSNorm, a top-2 router over 4 SwiGLU experts, a
gather that picks each token's expert outputs (the dispatch/combine), a weighted sum,
and a residual. Small (16 tokens, width 64) so that a whole study runs in minutes.

Why it is interesting for SuperKernel: the router's ``topk`` is the kind of op that
runs on Ascend's AI CPU and ends a SuperKernel unless ``task_breaker_bypass`` lets the
fusion pass it; the ``gather`` reads its indices as scalars from global memory, the
kind of op a data-cache (dcci) setting can silently corrupt; and the layers repeat, so
"one scope per layer" and "one scope per MoE" are the placements users write by hand.

The experts are computed densely (every token through every expert, then the top 2
picked with ``gather``): no data-dependent shapes, so the forward captures as one graph.
"""

from __future__ import annotations

import torch
from torch import nn

TOKENS, DIM, HIDDEN, EXPERTS, TOP_K, LAYERS = 16, 64, 128, 4, 2, 2


class RMSNorm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class Expert(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gate = nn.Linear(DIM, HIDDEN, bias=False)
        self.up = nn.Linear(DIM, HIDDEN, bias=False)
        self.down = nn.Linear(HIDDEN, DIM, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.nn.functional.silu(self.gate(x)) * self.up(x))


class MoE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.router = nn.Linear(DIM, EXPERTS, bias=False)
        self.experts = nn.ModuleList(Expert() for _ in range(EXPERTS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(self.router(x), dim=-1)
        weights, chosen = torch.topk(probs, TOP_K, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        outs = torch.stack([expert(x) for expert in self.experts], dim=1)  # (tokens, experts, dim)
        picked = torch.gather(outs, 1, chosen.unsqueeze(-1).expand(-1, -1, DIM))
        return (picked * weights.unsqueeze(-1)).sum(1)


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = RMSNorm(DIM)
        self.moe = MoE()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.moe(self.norm(x))


class MoEStack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.final_norm = RMSNorm(DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.final_norm(x)


def build_model() -> nn.Module:
    torch.manual_seed(0)
    return MoEStack()


def example_inputs(seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(TOKENS, DIM, generator=g),)
