"""The inductor backend on real compiles (CPU). First compile in a process takes ~10 s."""

from pathlib import Path

import pytest
import torch

from sktune.backends.inductor import InductorBackend
from sktune.backends.inductor_tables import fallbacks_installed
from sktune.graph.capture import capture
from sktune.graph.grouping import regions
from sktune.load import build, draw_inputs, load_model_file
from sktune.plan import Plan, Scope
from sktune.verify import compare_outputs, flatten_outputs

pytestmark = pytest.mark.exactness  # CI runs these again as an AVX2 and a vector-less CPU (.ci/run)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    import os

    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path_factory.mktemp("inductor-cache"))
    torch.set_grad_enabled(False)
    source = load_model_file(Path(__file__).parent.parent / "models" / "tiny_norm.py")
    inputs = draw_inputs(source, 0)
    graph = capture(build(source), inputs)
    args = graph.args_for(inputs)
    return graph, args, flatten_outputs(graph.gm(*args))


def test_fuse_all_runs_and_is_inexact(setup) -> None:
    graph, args, ref = setup
    n = len(graph.ops)
    compiled = InductorBackend().compile(graph, Plan.make([Scope(0, n - 1, "all")]))
    out = flatten_outputs(compiled(*args))
    assert out[0].shape == ref[0].shape
    assert torch.allclose(out[0], ref[0], atol=1e-5)
    assert compare_outputs(ref, out), "fused mean/softmax differ from eager on CPU (docs/measured.md)"


def test_fallbacks_make_one_region_bitwise_and_cache_sees_them(setup) -> None:
    graph, args, ref = setup
    n = len(graph.ops)
    backend = InductorBackend()
    plan = Plan.make([Scope(0, n - 1, "all")], {"fallback_ops": ["mean", "softmax"]})
    assert compare_outputs(ref, flatten_outputs(backend.compile(graph, plan)(*args))) == []
    # Same graph without fallbacks after it: the cache must not hand back the exact kernel.
    inexact = backend.compile(graph, Plan.make([Scope(0, n - 1, "all")]))
    assert compare_outputs(ref, flatten_outputs(inexact(*args)))
    # And with fallbacks again (now cached): still exact.
    assert compare_outputs(ref, flatten_outputs(backend.compile(graph, plan)(*args))) == []


def test_second_compile_of_a_plan_hits_the_compile_caches(setup) -> None:
    """compile_fx outside Dynamo bypasses both caches unless given a shape environment."""
    from torch._dynamo.utils import counters

    graph, args, ref = setup
    plan = Plan.make([Scope(0, len(graph.ops) - 1, "all")], {"fallback_ops": ["mean", "softmax"], "max_fusion_size": 16})
    InductorBackend().compile(graph, plan)
    counters.clear()
    again = InductorBackend().compile(graph, plan)
    assert counters["inductor"]["fxgraph_cache_bypass"] == 0
    assert counters["aot_autograd"]["autograd_cache_hit"] + counters["inductor"]["fxgraph_cache_hit"] >= 1
    assert compare_outputs(ref, flatten_outputs(again(*args))) == []


def test_fallback_tables_restored() -> None:
    from torch._inductor import lowering

    before = dict(lowering.lowerings)
    fallbacks, realized = set(lowering.fallbacks), set(lowering.needs_realized_inputs)
    from torch._inductor.decomposition import select_decomp_table

    decompositions = dict(select_decomp_table())
    with fallbacks_installed(("mean", "softmax")):
        assert lowering.lowerings[torch.ops.aten.mean.dim] is not before.get(torch.ops.aten.mean.dim)
        assert torch.ops.aten._softmax.default not in select_decomp_table()
        assert set(lowering.fallbacks) != fallbacks
    assert lowering.lowerings == before
    assert select_decomp_table() == decompositions
    assert set(lowering.fallbacks) == fallbacks and set(lowering.needs_realized_inputs) == realized


def test_regions_follow_plan_and_eager_ops_stay_inline(setup) -> None:
    graph, args, ref = setup
    n = len(graph.ops)
    targets = [op.target for op in graph.ops]
    sigmoid, linear = targets.index("sigmoid"), targets.index("linear")
    plan = Plan.make([Scope(linear, linear, "a"), Scope(sigmoid, sigmoid + 1, "b")])  # linear; sigmoid*b
    compiled = InductorBackend().compile(graph, plan)
    calls = [node for node in compiled.graph.nodes if node.op == "call_function"
             and type(node.target).__name__ == "_Region"]
    assert len(calls) == len(regions(n, plan.scopes)) == 2
    assert compare_outputs(ref, flatten_outputs(compiled(*args))) == []  # linear, sigmoid, mul: exact


def test_unknown_option_and_fallback_rejected(setup) -> None:
    graph, _, _ = setup
    n = len(graph.ops)
    with pytest.raises(ValueError, match="unknown inductor option"):
        InductorBackend().compile(graph, Plan.make([Scope(0, n - 1, "a")], {"bogus": 1}))
    with pytest.raises(ValueError, match="no fallback known"):
        InductorBackend().compile(graph, Plan.make([Scope(0, n - 1, "a")], {"fallback_ops": ["linear"]}))


def test_unfused_plan_is_the_reference(setup) -> None:
    graph, _, _ = setup
    assert InductorBackend().compile(graph, Plan.make([Scope(0, len(graph.ops) - 1, None)])) is graph.gm


def test_bisect_names_the_inexact_op() -> None:
    from sktune.pipe.protocol import BisectRequest
    from sktune.worker.runner import RunnerConfig, TrialRunner

    runner = TrialRunner(RunnerConfig(str(Path(__file__).parent.parent / "models" / "tiny_norm.py"), input_sets=2))
    n = len(runner.graph.ops)
    found = runner.bisect(BisectRequest(Plan.make([Scope(0, n - 1, "all")]), 8))
    assert found.range is not None
    first, last = found.range
    assert found.runs <= 8 and last - first <= 2
    assert found.op_types and set(found.op_types) & {"mean", "softmax"}
    exact = Plan.make([Scope(0, n - 1, "all")], {"fallback_ops": ["mean", "softmax"]})
    assert runner.bisect(BisectRequest(exact, 4)).range is None
