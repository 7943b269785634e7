"""A gate read across a transpose: where fusing everything is slower than no fusion (fp32).

A gate of cheap exact pointwise ops (as in ``shared_gate``) feeds a mixer that reads it
twice, as it is and transposed (``g * g.mT``, plus the row max of ``g.mT``); a second stage
follows. Fused as one region, Inductor inlines the first gate into the mixer's loop, so
the gate chain is computed again at the transposed positions, with a strided read of its
input. A region boundary after the first gate stores it once; the mixer then reads a plain
tensor both ways. Unlike ``shared_gate``, fusing the whole model here is slower than not
fusing at all: the search has to climb from the unfused plan, and the best plan puts a cut
inside a run of blocks that every fusing starting point fuses whole.

Measured with ``torch.compile`` on stage 1 and a second gate (4x256x256, 1 thread, all
bitwise, ratio to eager in the same run): fuse-all 1.72, gate | mixer and second gate 0.22,
gate | mixer | second gate 0.26, gate and mixer | second gate 1.75. Stage 2 is
``split_stages``' (a broadcast over a new last dim of 4 and its max: a cut between them
stores the 4x larger tensor). The exhaustive table (``--option aggressive_fusion --option
max_fusion_size``, 204 plans in 33 region layouts, all bitwise; a 2-core Xeon, 1 thread,
docs/measured.md) has its best at 0.167 of the unfused time: the cut after the first gate
and one region from there to the end (0-25, 26-52); that layout's six option sets read
0.167-0.177. Fuse-all reads 1.06, the profile seeds 1.50 and 1.71 (each fuses the gate
with the mixer), so the best starting point is the unfused plan.

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


class TransposeMixer(nn.Module):
    """The gate times its transpose, plus the transpose's row max: two reads, two layouts."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.mix = nn.Parameter(1.0 + 0.05 * torch.randn(size))

    def forward(self, g: torch.Tensor) -> torch.Tensor:
        t = g.transpose(-1, -2)
        return (g * t) * self.mix + t.amax(-1, keepdim=True)


class Spread(nn.Module):
    """Each value times ``SPREAD`` weights along a new last dim (as in ``split_stages``)."""

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


class TransposeMix(nn.Module):
    """Stage 1: gate (3 rounds) and transposed mixer; stage 2: gate (2 rounds), spread, collapse."""

    def __init__(self, size: int = SIZE) -> None:
        super().__init__()
        self.gate1, self.mixer1 = Gate(size, 3), TransposeMixer(size)
        self.gate2, self.spread2, self.collapse2 = Gate(size, 2), Spread(), Collapse(size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.mixer1(self.gate1(x))
        return self.collapse2(self.spread2(self.gate2(h)))


def build_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return TransposeMix().eval()


def example_inputs(seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(BATCH, SIZE, SIZE, generator=g),)
