"""Two stages where a cut pays in one and not in the other (fp32).

Stage 1 is ``shared_gate``'s: a gate of cheap exact pointwise ops read by three loop nests
(a max over rows, one over columns, their mix). Fused whole, Inductor inlines the gate
into all three kernels and computes it three times; a cut between gate and mixer stores
it once. Stage 2 is a gate, a broadcast that spreads each value over a new last dim of 4
(``g[..., None] * v``) and a max over that dim.

Measured with ``torch.compile`` on the whole model (4x256x256, 1 thread, all bitwise):
stage 1 fused 1.05 ms, cut 0.47 ms; stage 2 fused 0.29 ms (the 4x larger tensor never
reaches memory), cut between broadcast and max 4.0 ms, eager 3.7 ms; whole model 1.32 ms.
sktune's own regions now behave the same (they were compiled with symbolic sizes before:
docs/measured.md, "Regions compiled for their shapes"). The exhaustive table
(``--option aggressive_fusion --option max_fusion_size``, 204 plans, all bitwise, a loaded
2-core machine) has its best at 0.074 of the unfused time: the cut inside stage 1 and one
region from there to the end (0-25, 26-53) with ``max_fusion_size`` 64; the same cut with 16
is 0.108, and fuse-all, the best starting point, 0.187.
The search benchmark uses it as a space whose best is not a starting point
(benchmarks/search_efficiency.py).
"""

from __future__ import annotations

import torch
from torch import nn

SIZE = 256
BATCH = 4
SPREAD = 4


class Gate(nn.Module):
    """``rounds`` rounds of cheap exact pointwise ops (as in ``shared_gate``)."""

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


class Spread(nn.Module):
    """Each value times ``SPREAD`` weights along a new last dim: a tensor 4x its input."""

    def __init__(self) -> None:
        super().__init__()
        self.weights = nn.Parameter(1.0 + 0.1 * torch.randn(SPREAD))

    def forward(self, g: torch.Tensor) -> torch.Tensor:
        return g[..., None] * self.weights


class Collapse(nn.Module):
    """The max over the spread dim, scaled: fused with ``Spread``, one pass in registers."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(1.0 + 0.05 * torch.randn(size))

    def forward(self, e: torch.Tensor) -> torch.Tensor:
        return e.amax(-1) * self.scale


class SplitStages(nn.Module):
    """Stage 1: gate (3 rounds) and mixer; stage 2: gate (2 rounds), spread and collapse."""

    def __init__(self, size: int = SIZE) -> None:
        super().__init__()
        self.gate1, self.mix1 = Gate(size, 3), Mixer(size)
        self.gate2, self.spread2, self.collapse2 = Gate(size, 2), Spread(), Collapse(size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.mix1(self.gate1(x))
        return self.collapse2(self.spread2(self.gate2(h)))


def build_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return SplitStages().eval()


def example_inputs(seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(BATCH, SIZE, SIZE, generator=g),)
