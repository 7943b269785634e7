"""The npu backend's wiring on CPU, through the narrow double (tests/backends/npu_double.py).

This checks which markers go where and which options reach npugraph_ex; it says nothing
about speed on an NPU."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import npu_double  # noqa: E402

from sktune.backends.npu import NpuBackend  # noqa: E402
from sktune.backends.npu_options import NpuOptionError, NpuVersionError  # noqa: E402
from sktune.errors import PlanError, SktuneError  # noqa: E402
from sktune.graph.capture import capture  # noqa: E402
from sktune.load import build, draw_inputs, load_model_file  # noqa: E402
from sktune.space.plan import Plan, Scope  # noqa: E402

MODELS = Path(__file__).parent.parent / "models"
SAFE = {"early_start": 1, "auto_op_parallel": 0, "aggressive_opt_strategies.task_breaker_bypass": 0,
        "aggressive_opt_strategies.value_breaker_bypass": 0, "dcci_strategy": "safe"}


@pytest.fixture(scope="module")
def chain():
    source = load_model_file(MODELS / "chain10.py")
    inputs = draw_inputs(source, 0)
    with torch.no_grad():
        graph = capture(build(source), inputs)
    assert len(graph.ops) == 10
    return graph, graph.args_for(inputs)


@pytest.fixture
def stand_in():
    return npu_double.install()


@pytest.fixture
def backend():
    npu_double.register_marker_ops()
    return NpuBackend(torch_npu_version_="2.14.0")


def op_name(graph, i: int) -> str:
    return graph.ops[i].name


def markers(backend, graph, scopes):
    return npu_double.markers_in(backend.marked_graph(graph, Plan.make(scopes, SAFE)))


def test_seed_case_1_partial_overlap(chain, backend) -> None:
    graph, _ = chain  # sk1 = op1..op4, sk2 = op3..op7 (0-based 0..3 and 2..6)
    got = markers(backend, graph, [Scope(0, 3, "sk1"), Scope(2, 6, "sk2")])
    assert got == [("begin", "sk1", op_name(graph, 0)), ("begin", "sk2", op_name(graph, 2)),
                   ("end", "sk1", op_name(graph, 3)), ("end", "sk2", op_name(graph, 6))]


def test_seed_case_2_nested_and_same_spot(chain, backend) -> None:
    graph, _ = chain
    got = markers(backend, graph, [Scope(0, 7, "sk1"), Scope(2, 4, "sk2")])
    assert got == [("begin", "sk1", op_name(graph, 0)), ("begin", "sk2", op_name(graph, 2)),
                   ("end", "sk2", op_name(graph, 4)), ("end", "sk1", op_name(graph, 7))]
    same_spot = markers(backend, graph, [Scope(0, 5, "a"), Scope(0, 2, "b"), Scope(3, 5, "c")])
    assert [(k, n) for k, n, _ in same_spot] == [("begin", "a"), ("begin", "b"), ("end", "b"),
                                                 ("begin", "c"), ("end", "c"), ("end", "a")]


def test_seed_cases_3_and_4_none_scopes(chain, backend) -> None:
    graph, _ = chain
    got = markers(backend, graph, [Scope(0, 7, "sk1"), Scope(2, 4, None)])
    assert ("begin", None, op_name(graph, 2)) in got and ("end", None, op_name(graph, 4)) in got
    marked = backend.marked_graph(graph, Plan.make([Scope(2, 4, None)], SAFE))
    none_nodes = [n for n in marked.graph.nodes if "super_kernel_scope" in str(n.target)]
    assert [n.args for n in none_nodes] == [(), ()]  # super_kernel_scope_begin() with no name


def test_repeated_names(chain, backend) -> None:
    graph, _ = chain
    got = markers(backend, graph, [Scope(0, 1, "layer"), Scope(4, 5, "layer")])
    assert [(k, n) for k, n, _ in got] == [("begin", "layer"), ("end", "layer")] * 2
    with pytest.raises(PlanError, match="overlap"):
        markers(backend, graph, [Scope(0, 4, "layer"), Scope(3, 6, "layer")])


def test_options_reach_npugraph_ex_exactly_and_markers_run(chain, backend, stand_in) -> None:
    graph, args = chain
    params = {**SAFE, "aggressive_opt_strategies.value_breaker_bypass": 1, "dcci_strategy": "disable:MatMulV2"}
    compiled = backend.compile(graph, Plan.make([Scope(0, 4, "a"), Scope(5, 9, "b")], params))
    (record,) = stand_in.compiles
    assert record.options == {
        "super_kernel_optimize": True,
        "static_kernel_compile": True,
        "super_kernel_optimize_options": {
            "early_start": 1, "auto_op_parallel": 0,
            "aggressive_opt_strategies": {"task_breaker_bypass": 0, "value_breaker_bypass": 1},
            "dcci_disable_on_kernel": [".*MatMulV2.*"],
        },
    }
    npu_double.CALLS.clear()
    (out,) = compiled(*args)
    assert npu_double.CALLS == [("begin", "a"), ("end", "a"), ("begin", "b"), ("end", "b")]
    (expected,) = graph.gm(*args)
    assert torch.equal(out, expected)


def test_reference_is_same_capture_without_superkernel(chain, backend, stand_in) -> None:
    graph, _ = chain
    backend.reference(graph)
    (record,) = stand_in.compiles
    assert record.options == {"super_kernel_optimize": False, "static_kernel_compile": True}
    assert npu_double.markers_in(record.gm) == []


def test_debug_options_and_diagnostic_plan(chain, backend, stand_in) -> None:
    graph, _ = chain
    plan = backend.diagnostic_plan(Plan.make([Scope(0, 9, "all")], SAFE))
    backend.compile(graph, plan)
    assert stand_in.compiles[-1].options["super_kernel_debug_options"] == {"debug_op_exec_trace": 1}


@pytest.mark.parametrize(
    ("scopes", "options", "error", "message"),
    [
        ([Scope(0, 9, "a")], {**SAFE, "early_start": 5}, NpuOptionError, "early_start"),
        ([Scope(0, 9, "a")], {**SAFE, "dcci_strategy": "bogus"}, NpuOptionError, "dcci strategy"),
        ([Scope(0, 9, "a")], {**SAFE, "erly_start": 1}, NpuOptionError, "early_start"),
        ([Scope(0, 9, "")], SAFE, SktuneError, "empty"),
        ([Scope(0, 9, "x" * 300)], SAFE, SktuneError, "255"),
        ([Scope(0, 10, "a")], SAFE, PlanError, "graph has 10 ops"),
    ],
)
def test_rejected_before_compiling(chain, backend, stand_in, scopes, options, error, message) -> None:
    graph, _ = chain
    with pytest.raises(error, match=message):
        backend.compile(graph, Plan.make(scopes, options))
    assert stand_in.compiles == [], "nothing may reach npugraph_ex"


def test_too_many_distinct_scopes(chain, backend, stand_in) -> None:
    graph, _ = chain
    from sktune.backends.npu_options import validate_scope_names

    with pytest.raises(SktuneError, match="distinct"):
        validate_scope_names([f"s{i}" for i in range(65)])


def test_version_gating() -> None:
    with pytest.raises(NpuVersionError, match="no SuperKernel"):
        NpuBackend(torch_npu_version_="2.9.0")
    assert NpuBackend(torch_npu_version_="2.11.0").key_set.missing == ()


def test_without_torch_npu_one_clear_message() -> None:
    from sktune.backends import get_backend

    with pytest.raises(SktuneError, match="needs torch-npu"):
        get_backend("npu")


def test_planned_vs_actual_fusion() -> None:
    from sktune.tuning.runner import planned_vs_actual

    plan = Plan.make([Scope(0, 3, "layer_0"), Scope(4, 7, "layer_1"), Scope(8, 9, None)])
    rows = [{"scope": "layer_0", "name": "sk_layer_0_start_RmsNorm_end_MatMulV2_0"}, {"scope": None}]
    assert planned_vs_actual(plan, rows) == {"planned": ["layer_0", "layer_1"], "fused": ["layer_0"],
                                             "not_fused": ["layer_1"], "unexpected": []}
