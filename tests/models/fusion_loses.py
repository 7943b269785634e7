"""Three tiny elementwise ops, each alone between two matrix products (extern calls that
no region fuses): each Inductor region holds one op and costs more per call than the eager
op (design.md, "Measuring": ~4 µs per region, ~3.5 µs per eager op), so fusion does not pay."""

import torch


class FusionLoses(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.linspace(-0.5, 0.5, 64).reshape(8, 8))

    def forward(self, x):
        h = torch.relu(x) @ self.w
        h = torch.tanh(h) @ self.w
        return torch.abs(h)


def build_model():
    return FusionLoses()


def example_inputs(seed: int = 0):
    return (torch.randn(4, 8, generator=torch.Generator().manual_seed(seed)),)
