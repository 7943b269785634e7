"""Regions cut out of the captured graph as calls: the cut graph, each call running its
region's lifted graph, computes exactly what the captured graph computes
(graph/cut_regions.py)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import torch

from sktune.graph.capture import capture
from sktune.graph.cut_regions import cut_regions, lift
from sktune.graph.grouping import regions
from sktune.graph.opgraph import op_nodes
from sktune.load import build, draw_inputs, load_model_file
from sktune.plan import Scope
from sktune.verify import compare_outputs, flatten_outputs

MODELS = Path(__file__).parent.parent / "models"


class _Call:
    """A region call target whose function is set after the cut, as the backend does."""

    def __init__(self, name: str) -> None:
        self.__name__ = name
        self.fn: Any = None

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)


@pytest.mark.parametrize("model", ["stack_deeper.py", "probe_mix.py"])
def test_cut_graph_with_eager_regions_is_the_captured_graph(model: str) -> None:
    torch.set_grad_enabled(False)
    source = load_model_file(MODELS / model)
    graph = capture(build(source), draw_inputs(source, 0))
    n_ops, legal = len(graph.ops), sorted(graph.boundaries)
    expected = flatten_outputs(graph.gm(*graph.flat_args))
    rng = random.Random(0)
    for _ in range(5):
        cuts = sorted(rng.sample(legal, min(len(legal), rng.randint(1, 6))))
        starts = [0] + [c + 1 for c in cuts]
        ends = cuts + [n_ops - 1]
        scopes = [Scope(f, l, f"r{f}") for f, l in zip(starts, ends) if rng.random() < 0.7]
        spans = regions(n_ops, scopes)
        cut, placed = cut_regions(graph.gm, spans, lambda k: _Call(f"region_{k}"))
        for region in placed:
            region.call.target.fn = lift(graph.gm, region)
        assert len([n for n in cut.graph.nodes if isinstance(n.target, _Call)]) == len(spans)
        assert compare_outputs(expected, flatten_outputs(cut(*graph.flat_args))) == []
    assert len(op_nodes(graph.gm)) == n_ops  # the captured graph itself is untouched
