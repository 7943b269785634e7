"""A tiny model tuned at one width and verified at two more (``verify_shapes()``), whose fused
silu/sigmoid chain is bitwise at the tuned width and not at one verify-only width on a CPU
with vectors, for the verify-only tests.

As in ``two_widths.py``: ATen's sigmoid and silu step two vectors at a time (16 floats with
AVX2, 32 with AVX-512) and compute the rest with the scalar formula; Inductor computes the
rest as a masked vector. 64 and 32 leave no rest on either ISA: exact. 37 leaves 5: inexact
on every ISA with vectors (docs/measured.md, "Exact forms"); without vectors all are exact.
A 5-element tail differs in about 1 draw in 2, so the forward slices off 3 padding columns:
each of the 32 rows then has its own tail (160 elements a draw: measured 30 of 30 draws
inexact at 37, AVX-512).
"""

import torch

WIDTHS = {"wide": 64, "w32": 32, "w37": 37}
ROWS, PAD = 32, 3


class Gate(torch.nn.Module):
    def forward(self, x):
        x = x[:, :-PAD]  # rows not contiguous with each other: ATen loops row by row
        return torch.nn.functional.silu(x) * 1.5 + torch.sigmoid(x)


def build_model():
    return Gate()


def input_shapes():
    return {"wide": 1.0}


def verify_shapes():
    return ["w32", "w37"]


def example_inputs(seed: int = 0, shape=None):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(ROWS, WIDTHS[shape or "wide"] + PAD, generator=g),)
