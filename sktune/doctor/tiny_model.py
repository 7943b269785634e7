"""The doctor's model: a few ops that give two scopes' worth of kernels on any Ascend.

A matmul, an RMS-norm-like chain (pow, mean, add, rsqrt, mul), an elementwise SiLU-like
pair and a gather-class ``index_select``: the op classes sktune's guesses are about
(README, "First run on a real Ascend host": a gather reads scalars from global memory,
so its scope is compiled with the safe dcci flush). Built in code, so doctor needs no
model file.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from sktune.graph.opgraph import OpGraph
from sktune.plan import Scope

HIDDEN, ROWS, VOCAB = 64, 8, 32


class TinyModel(nn.Module):
    """x @ w, RMS-norm, h * sigmoid(h), + table[ids]; fixed weights (seeded)."""

    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.w = nn.Parameter(torch.randn(HIDDEN, HIDDEN, generator=gen) / 8)
        self.g = nn.Parameter(torch.rand(HIDDEN, generator=gen) + 0.5)
        self.table = nn.Parameter(torch.randn(VOCAB, HIDDEN, generator=gen))

    def forward(self, x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        h = x @ self.w
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * self.g
        h = h * torch.sigmoid(h)
        return h + torch.index_select(self.table, 0, ids)


def example_inputs(device: str) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(ROWS, HIDDEN, generator=gen)
    ids = torch.randint(0, VOCAB, (ROWS,), generator=gen)
    return x.to(device), ids.to(device)


@dataclass(frozen=True)
class TinyGraph:
    """The captured model, its flat arguments and the two scope placements doctor compiles."""

    graph: OpGraph
    args: tuple[torch.Tensor, ...]
    placement: tuple[Scope, ...]  # norm chain | elementwise + gather
    other_placement: tuple[Scope, ...]  # everything before the gather | the gather and the add


def capture_tiny(device: str) -> TinyGraph:
    from sktune.graph.capture import capture

    model = TinyModel().to(device)
    inputs = example_inputs(device)
    with torch.no_grad():
        graph = capture(model, inputs)
    targets = [op.target for op in graph.ops]
    last = len(targets) - 1
    # Cut by op type, not index: another torch may capture the chain with other node names.
    tail = _first(targets, "sigmoid", last // 2)
    gather = _first(targets, "index_select", last)
    # The names the search gives scopes (sk<k>, space/search_space.py): the SuperKernel row
    # names CANN builds from them are the ones a study will parse.
    placement = (Scope(0, tail - 1, "sk0"), Scope(tail, last, "sk1"))
    other = (Scope(0, gather - 1, "sk0"), Scope(gather, last, "sk1"))
    for scopes in (placement, other):
        for scope in scopes[:-1]:
            if scope.last_op not in graph.boundaries:
                raise RuntimeError(f"the tiny model's cut after op {scope.last_op} is not legal here; ops: {targets}")
    return TinyGraph(graph, tuple(graph.args_for(inputs)), placement, other)


def _first(targets: list[str], target: str, fallback: int) -> int:
    index = targets.index(target) if target in targets else fallback
    return min(max(index, 1), len(targets) - 1)


__all__ = ["TinyGraph", "TinyModel", "capture_tiny", "example_inputs"]
