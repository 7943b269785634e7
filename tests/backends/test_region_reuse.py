"""Identical regions compile once: within a plan (a repeated layer) and across trials."""

from pathlib import Path

import pytest
import torch
from torch import fx

from sktune.backends.inductor import InductorBackend
from sktune.backends.region_cache import region_key
from sktune.graph.capture import capture
from sktune.graph.structure import find_repeats
from sktune.load import build, draw_inputs, load_model_file
from sktune.plan import Plan, Scope
from sktune.verify import compare_outputs, flatten_outputs

MODELS = Path(__file__).parent.parent / "models"


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    import os

    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path_factory.mktemp("inductor-cache"))
    torch.set_grad_enabled(False)
    source = load_model_file(MODELS / "stack_deeper.py")
    inputs = draw_inputs(source, 0)
    graph = capture(build(source), inputs)
    units = find_repeats([o.target for o in graph.ops], [o.module for o in graph.ops]).units
    return graph, [graph.args_for(draw_inputs(source, seed)) for seed in range(2)], units


def _per_unit(units, options=None) -> Plan:
    return Plan.make([Scope(first, last, f"layer{i}") for i, (first, last) in enumerate(units)], options or {})


def test_identical_layers_compile_once_and_stay_bitwise(stack) -> None:
    graph, args_sets, units = stack
    assert len(units) == 3
    backend = InductorBackend(for_trials=True)
    plan = _per_unit(units, {"fallback_ops": ["layer_norm"]})
    compiled = backend.compile(graph, plan)
    assert backend.compile_counts() == {"regions_compiled": 1, "regions_reused": 2}
    for args in args_sets:  # each layer reads its own weights although they share one compiled region
        assert compare_outputs(flatten_outputs(graph.gm(*args)), flatten_outputs(compiled(*args))) == []
    # The next trial with the same regions compiles nothing; other options compile again.
    backend.compile(graph, plan)
    assert backend.compile_counts() == {"regions_compiled": 0, "regions_reused": 3}
    backend.compile(graph, _per_unit(units, {"fallback_ops": ["layer_norm"], "max_fusion_size": 16}))
    assert backend.compile_counts() == {"regions_compiled": 1, "regions_reused": 2}


def test_region_key_sees_structure_inputs_and_configuration() -> None:
    def graph_of(fn, *args):
        return fx.symbolic_trace(fn), list(args)

    a = graph_of(lambda x, w: torch.relu(x * w), torch.ones(4, 8), torch.ones(8))
    renamed = graph_of(lambda y, v: torch.relu(y * v), torch.zeros(4, 8), torch.zeros(8))
    other_op = graph_of(lambda x, w: torch.sigmoid(x * w), torch.ones(4, 8), torch.ones(8))
    other_shape = graph_of(lambda x, w: torch.relu(x * w), torch.ones(4, 16), torch.ones(16))
    transposed = graph_of(lambda x, w: torch.relu(x * w), torch.ones(8, 4).t(), torch.ones(8))
    key = region_key(*a, "cfg")
    assert key == region_key(*renamed, "cfg")  # names and values do not matter
    assert key != region_key(*other_op, "cfg")
    assert key != region_key(*other_shape, "cfg")
    assert key != region_key(*transposed, "cfg")  # strides do
    assert key != region_key(*a, "other cfg")

    class Holder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(8))

        def forward(self, x):
            return x * self.w

    assert region_key(fx.symbolic_trace(Holder()), [torch.ones(4, 8)], "cfg") is None  # reads state


def test_stitched_cuts_only_inside_regions_and_where_legal() -> None:
    from sktune.graph.structure import stitched

    starts = (10, 20, 30)
    assert stitched([(0, 35)], starts, set(range(40))) == [(0, 9), (10, 19), (20, 29), (30, 35)]
    assert stitched([(12, 25), (30, 31)], starts, set(range(40))) == [(12, 19), (20, 25), (30, 31)]
    assert stitched([(0, 35)], starts, set(range(40)) - {19}) == [(0, 9), (10, 29), (30, 35)]  # 19|20 illegal


def test_a_region_over_all_layers_compiles_one_layer_when_stitched(stack) -> None:
    graph, args_sets, units = stack
    backend = InductorBackend(for_trials=True)
    assert "stitch_units" in {o.name for o in backend.option_space(graph)}
    whole = Plan.make([Scope(0, len(graph.ops) - 1, "all")], {"fallback_ops": ["layer_norm"], "stitch_units": True})
    compiled = backend.compile(graph, whole)
    counts = backend.compile_counts()
    assert counts["regions_reused"] == len(units) - 1
    for args in args_sets:
        assert compare_outputs(flatten_outputs(graph.gm(*args)), flatten_outputs(compiled(*args))) == []
    unstitched = Plan.make(whole.scopes, {"fallback_ops": ["layer_norm"], "stitch_units": False})
    backend.compile(graph, unstitched)
    assert backend.compile_counts() == {"regions_compiled": 1, "regions_reused": 0}


def test_the_fuse_all_yardstick_is_not_stitched_and_costly_values_are_never_sampled(stack) -> None:
    from sktune.space.search_space import build_space

    graph, _, _ = stack
    caps = InductorBackend().capabilities(graph)
    space = build_space([o.target for o in graph.ops], [o.module for o in graph.ops], graph.boundaries, caps)
    assert space.fuse_all_overrides == {"stitch_units": False}  # the objective applies it to "fuse-all"
    domains = space.domains()
    assert domains["stitch_units"] == [True] and domains["cpp_wrapper"] == [False]
    anchors = {name: space.decode(params) for name, params in space.anchors()}
    assert anchors["fuse-all+fallbacks"].option_dict["stitch_units"] is True  # cheap to compile
    whole = space.with_options(anchors["fuse-all"], space.fuse_all_overrides)
    assert whole.option_dict["stitch_units"] is False and whole.scopes == anchors["fuse-all"].scopes
    # The compile helper compiles the yardstick during start-up from the backend's own idea
    # of it: it must be this very region (same key), or the trial would compile it again.
    backend = InductorBackend()
    prefetched = backend._region_jobs(graph, backend.fuse_all_plan(graph))[1]
    searched = backend._region_jobs(graph, whole)[1]
    assert [j.key for j in prefetched] == [j.key for j in searched] and len(searched) == 1
