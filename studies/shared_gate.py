"""A gate read by three loop nests: where cutting one region in two beats fusing it all (fp32).

A chain of cheap pointwise ops (mul, add, rsqrt, abs, div, maximum: exact under
Inductor on CPU however they are fused, which sqrt and a sum of two products are not)
computes a gate ``g`` over a (4, 256, 256) activation. Three kernels read it with different
loop nests: a max over rows, a max over columns, and the pointwise mix of the two. Fused as one region, Inductor inlines the chain into each of the three kernels (it
keeps a pointwise value unmaterialised when it has few inputs and a short body), so the
gate is computed three times. A region boundary right after the chain stores it once and
lets the three kernels read it. So the fastest exact plan cuts inside each stage, between
its gate and its mixer.

The search benchmark uses it as a space whose best is not a starting point
(benchmarks/search_efficiency.py).
"""

from __future__ import annotations

import torch
from torch import nn

SIZE = 256
BATCH = 4


class Gate(nn.Module):
    """``rounds`` rounds of cheap exact pointwise ops: 8 ops each, short enough that Inductor
    inlines the gate into every kernel that reads it."""

    def __init__(self, size: int, rounds: int) -> None:
        super().__init__()
        self.rounds = rounds
        self.scale = nn.Parameter(1.0 + 0.1 * torch.randn(size))
        self.shift = nn.Parameter(0.1 * torch.randn(size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = x * self.scale + self.shift
        for _ in range(self.rounds):
            g = torch.maximum(g * torch.rsqrt(g * g + 1.0), g / (torch.abs(g) + 2.0))
        return g


class Mixer(nn.Module):
    """Three loop nests read the gate: a max over rows, one over columns, and their mix."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.mix = nn.Parameter(1.0 + 0.05 * torch.randn(size))

    def forward(self, g: torch.Tensor) -> torch.Tensor:
        row = g.amax(-1, keepdim=True)
        col = g.amax(-2, keepdim=True)
        return (g - row) * (g - col) * self.mix


class SharedGate(nn.Module):
    """Two gate-and-mix stages (3 and 2 gate rounds: not repeated units)."""

    def __init__(self, size: int = SIZE) -> None:
        super().__init__()
        self.gate1, self.mix1 = Gate(size, 3), Mixer(size)
        self.gate2, self.mix2 = Gate(size, 2), Mixer(size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.mix1(self.gate1(x))
        return self.mix2(self.gate2(h))


def build_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return SharedGate().eval()


def example_inputs(seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(BATCH, SIZE, SIZE, generator=g),)
