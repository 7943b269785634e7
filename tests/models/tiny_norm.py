"""A tiny model for fast tests: RMSNorm (mean: inexact when fused), a Linear, chunk/cat
(a tuple-producing op), softmax (inexact when fused), a residual."""

import torch


class RMSNorm(torch.nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.linspace(0.5, 1.5, dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = RMSNorm(64)
        self.proj = torch.nn.Linear(64, 64)

    def forward(self, x):
        h = self.proj(self.norm(x))
        a, b = h.chunk(2, dim=-1)
        y = torch.cat([torch.sigmoid(a) * b, b + 1.0], dim=-1)
        return torch.softmax(y, dim=-1) + x


def build_model():
    torch.manual_seed(0)
    return Tiny()


def example_inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(8, 64, generator=g),)
