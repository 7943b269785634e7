"""Ops the exactness probe answers differently, on an odd width (37: vector tails):
mean and softmax (inexact fused, exact with eager_order), tanh (inexact either way),
sigmoid, chunk (a tuple op with getitems), a Linear and plain arithmetic. Each of them\nreaches an output unabsorbed, so a probe answer differs from "exact" wherever the op does."""

import torch


class ProbeMix(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(37, 74)

    def forward(self, x):
        ms = x.pow(2).mean(-1, keepdim=True)
        h = x * torch.rsqrt(ms + 1e-6)
        a, b = self.proj(h).chunk(2, dim=-1)
        y = torch.tanh(a) * torch.sigmoid(b)
        return ms, y, torch.softmax(y, dim=-1)  # each op's rounding reaches an output


def build_model():
    torch.manual_seed(0)
    return ProbeMix()


def example_inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(8, 37, generator=g),)
