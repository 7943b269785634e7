"""A row sum whose exact form and a cut pay together (fp32).

Each stage is a gate of cheap exact pointwise ops (as in ``shared_gate``) centred by its
row sum: ``(g - g.sum(-1) / n) * w``. Fused, the sum is not bitwise (Inductor adds up in
another order than ATen) and needs one of two exact forms: the sum as a fallback (ATen's
own kernel inside the region) or the ``eager_order`` option (the sum written out in
ATen's order, still fused). The cut between the first gate and its sum is worth little
with one form and much with the other.

Measured with ``benchmarks/search_efficiency.py measure ... --option eager_order
--max-configs 100`` (52 plans, 41 bitwise; 4x256x256, 1 thread, ratio to the unfused
graph of the same run; a loaded 2-core machine, so expect ~10 % noise; regions compiled
for their shapes): the cut after the first sum's input with the sum as a fallback
(0-26, 27-51) 0.129, the cut one op earlier 0.169; no cut, sum as a fallback (the
fuse-all+fallbacks anchor, the best starting point) 0.319; both forms on, op 26 left
eager between two regions (0-25, 27-51) 0.199. So the best plan is one cut away from the
anchor with the fallback.

The search benchmark uses it as a space whose best is not a starting point
(benchmarks/search_efficiency.py).
"""

from __future__ import annotations

import torch
from torch import nn

SIZE = 256
BATCH = 4


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


class Centre(nn.Module):
    """The gate minus its row mean (a sum, then a division: the sum is the only inexact op)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.05 * torch.randn(size))

    def forward(self, g: torch.Tensor) -> torch.Tensor:
        return (g - g.sum(-1, keepdim=True) / g.shape[-1]) * self.weight


class ExactSumCut(nn.Module):
    """Two gate-and-centre stages (3 and 2 gate rounds: not repeated units)."""

    def __init__(self, size: int = SIZE) -> None:
        super().__init__()
        self.gate1, self.centre1 = Gate(size, 3), Centre(size)
        self.gate2, self.centre2 = Gate(size, 2), Centre(size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.centre2(self.gate2(self.centre1(self.gate1(x))))


def build_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return ExactSumCut().eval()


def example_inputs(seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(BATCH, SIZE, SIZE, generator=g),)
