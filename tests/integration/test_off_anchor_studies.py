"""The studies whose best plan is no starting point (``benchmarks/search_efficiency.py``
measures them): a plan from each one's real space compiles with Inductor and keeps eager's bits.

One plan per study, every block fused and every candidate cut on (the cuts the benchmark's
best plans use), with the exact options and fallbacks: a few seconds of compiles in all.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sktune.backends import get_backend
from sktune.graph.capture import capture
from sktune.load import build, draw_inputs, load_model_file
from sktune.space.search_space import build_space
from sktune.verify import compare_outputs, flatten_outputs

pytestmark = pytest.mark.exactness  # CI runs these again as an AVX2 and a vector-less CPU (.ci/run)

STUDIES = Path(__file__).resolve().parents[2] / "studies"
OFF_ANCHOR = ["shared_gate", "split_stages", "exact_sum_cut", "transpose_mix"]


@pytest.mark.parametrize("name", OFF_ANCHOR)
def test_a_plan_with_every_cut_compiles_bitwise(name: str) -> None:
    torch.set_num_threads(1)
    torch._dynamo.reset()
    source = load_model_file(STUDIES / f"{name}.py")
    x = draw_inputs(source, 1)
    with torch.no_grad():
        graph = capture(build(source), draw_inputs(source, 0))
    backend = get_backend("inductor")
    capabilities = backend.capabilities(graph)
    ops = graph.ops
    space = build_space([o.target for o in ops], [o.module for o in ops], graph.boundaries, capabilities,
                        stamp=False, max_cuts=8)
    assert space.cuts, f"{name}: no candidate cut"
    plan = space.decode(space.params_for([True] * len(space.blocks), split_all=True,
                                         fallbacks=space.fallbacks, **space.exact_options))
    assert len(plan.scopes) == len(space.blocks)
    with torch.no_grad():
        expected = flatten_outputs(graph.gm(*graph.args_for(x)))
        got = flatten_outputs(backend.compile(graph, plan)(*graph.args_for(x)))
    assert compare_outputs(expected, got) == [], f"{name}: {plan.dumps()}"
