"""A tiny model served at two widths, whose fused silu/sigmoid chain is bitwise-exact at
one and not at the other (measured on this CPU: Inductor's vectorized sigmoid matches
eager at 64 elements per row, not at 16), for the multi-shape tests."""

import torch

SHAPES = {"wide": 0.7, "narrow": 0.3}
WIDTHS = {"wide": 64, "narrow": 16}


class Gate(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.silu(x) * 1.5 + torch.sigmoid(x)


def build_model():
    return Gate()


def input_shapes():
    return dict(SHAPES)


def example_inputs(seed: int = 0, shape=None):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(1, WIDTHS[shape or "wide"], generator=g),)
