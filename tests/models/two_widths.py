"""A tiny model served at two widths, whose fused silu/sigmoid chain is bitwise-exact at
one and not at the other on a CPU with vectors, for the multi-shape tests.

ATen's sigmoid and silu step two vectors at a time (16 floats with AVX2, 32 with AVX-512)
and compute what is left with the scalar formula; Inductor computes every element with
vectors (the last ones masked), which match ATen's vectors but not always its scalar
formula. 64 is a multiple of either step, so nothing is left: exact. 15 is shorter than
either step, so ATen computes all of it with the scalar formula: inexact (measured with
AVX2 and AVX-512 on seeds 0-3). Where neither vectorizes, both widths are exact.
tests/integration/test_shapes.py reads which case this CPU is at run time."""

import torch

SHAPES = {"wide": 0.7, "narrow": 0.3}
WIDTHS = {"wide": 64, "narrow": 15}


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
