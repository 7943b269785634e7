"""The npu backend's wiring on CPU, through the emulated Ascend (tests/npu_emulator).

This checks which markers go where, which options reach npugraph_ex and what the backend
does with what CANN reports back; it says nothing about speed on an NPU."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import fx

from sktune.backends import npu as npu_module
from sktune.backends.npu import NpuBackend
from sktune.backends.npu_meta import check_effective_options, meta_files, read_effective_options
from sktune.backends.npu_option_schema import NpuOptionError, NpuVersionError
from sktune.errors import PlanError, SktuneError
from sktune.graph.capture import capture
from sktune.load import build, draw_inputs, load_model_file
from sktune.plan import Plan, Scope

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


@dataclass
class Recorder:
    """Records what reaches the emulated npugraph_ex (options, marked graph), then compiles."""

    compiles: list[tuple[fx.GraphModule, dict[str, Any]]] = field(default_factory=list)

    def __call__(self, gm: fx.GraphModule, example_inputs: list, options: dict | None = None) -> Any:
        from torch._dynamo import lookup_backend

        self.compiles.append((gm, dict(options or {})))
        return lookup_backend("npugraph_ex")(gm, example_inputs, options=options)


@pytest.fixture
def stand_in(npu_emulator, monkeypatch):
    recorder = Recorder()
    monkeypatch.setattr(npu_module, "_npugraph_ex", lambda: recorder)
    return recorder


@pytest.fixture
def backend(npu_emulator, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # CANN work paths and profiles land here
    return NpuBackend(torch_npu_version_="2.14.0", for_trials=True)


def op_name(graph, i: int) -> str:
    return graph.ops[i].name


def markers_in(gm: fx.GraphModule) -> list[tuple[str, str | None, str]]:
    """(kind, scope name, name of the next/previous op) for every marker node, in order."""
    out = []
    nodes = list(gm.graph.nodes)
    for i, node in enumerate(nodes):
        target = str(node.target)
        if "super_kernel_scope_" in target:
            kind = "begin" if target.endswith("begin") else "end"
            neighbour = nodes[i + 1] if kind == "begin" else nodes[i - 1]
            out.append((kind, node.args[0] if node.args else None, neighbour.name))
    return out


def markers(backend, graph, scopes):
    return markers_in(backend.marked_graph(graph, Plan.make(scopes, SAFE)))


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


def test_options_reach_npugraph_ex_exactly_and_superkernels_form(chain, backend, stand_in) -> None:
    graph, args = chain
    params = {**SAFE, "aggressive_opt_strategies.value_breaker_bypass": 1, "dcci_strategy": "disable:MatMulV2"}
    compiled = backend.compile(graph, Plan.make([Scope(0, 4, "a"), Scope(5, 9, "b")], params))
    ((gm, options),) = stand_in.compiles
    assert options == {
        "super_kernel_optimize": True,
        "static_kernel_compile": True,
        "super_kernel_optimize_options": {
            "early_start": 1, "auto_op_parallel": 0,
            "aggressive_opt_strategies": {"task_breaker_bypass": 0, "value_breaker_bypass": 1},
            "dcci_disable_on_kernel": [".*MatMulV2.*"],
        },
    }
    (out,) = compiled(*args)
    assert [scope for scope, _ in compiled.fn.superkernels] == ["a", "b"]
    (expected,) = graph.gm(*args)
    assert torch.equal(out, expected)
    # The first forward ran under its own CANN work path, where the effective options landed.
    used = json.loads(meta_files(backend.last_meta_dir, "sk_options.json")[-1].read_text())
    assert used["super_kernel_optimize_options"]["early_start"] == 1
    assert backend.last_effective == "checked"


def test_production_compile_is_not_a_trial(chain, stand_in, npu_emulator, tmp_path, monkeypatch) -> None:
    """sktune.apply in production: the static-kernel cache is fine (one option set), and no
    CANN work path of sktune's is created or left in the environment."""
    import os

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ASCEND_WORK_PATH", raising=False)
    graph, args = chain
    compiled = NpuBackend(torch_npu_version_="2.14.0").compile(graph, Plan.make([Scope(0, 9, "all")], SAFE))
    ((_, options),) = stand_in.compiles
    assert "disable_static_kernel_compile_cache" not in options
    compiled(*args)
    assert not (tmp_path / ".sktune").exists() and "ASCEND_WORK_PATH" not in os.environ


def test_each_trial_compile_gets_a_fresh_work_path_restored_after(chain, backend, stand_in, monkeypatch) -> None:
    import os

    monkeypatch.setenv("ASCEND_WORK_PATH", "/somewhere/else")
    graph, args = chain
    dirs = set()
    for _ in range(2):
        backend.compile(graph, Plan.make([Scope(0, 9, "all")], SAFE))(*args)
        dirs.add(backend.last_meta_dir)
    assert len(dirs) == 2 and all(meta_files(d, "sk_options.json") for d in dirs)
    assert os.environ["ASCEND_WORK_PATH"] == "/somewhere/else"


def test_reference_is_same_capture_without_superkernel(chain, backend, stand_in) -> None:
    graph, args = chain
    reference = backend.reference(graph)
    ((gm, options),) = stand_in.compiles
    assert options == {"super_kernel_optimize": False, "static_kernel_compile": True}
    assert markers_in(gm) == []
    assert reference.superkernels == []
    assert torch.equal(reference(*args)[0], graph.gm(*args)[0])


@pytest.mark.parametrize("version, flag", [("2.14.0", False), ("2.13.0", False), ("2.10.0.post4", False),
                                           ("2.12.0", True), ("2.9.0.post6", True), ("2.10.0.post2", False)])
def test_static_cache_switch_follows_the_release(npu_emulator, version: str, flag: bool) -> None:
    """Set only where the key may leave the option map out; never where the key does not
    exist (2.10.0.post2 would raise "Invalid option")."""
    options = NpuBackend(torch_npu_version_=version, for_trials=True).compile_options(
        Plan.make([], {} if version == "2.10.0.post2" else SAFE), fresh_static_kernels=True)
    assert ("disable_static_kernel_compile_cache" in options) is flag


def test_old_key_set_rejects_the_cache_switch(npu_emulator) -> None:
    from sktune.backends.npu_option_check import validate_compile_options
    from sktune.backends.npu_option_schema import check_torch_npu_version

    with pytest.raises(NpuOptionError, match="in torch-npu 2.10.0.post2"):
        validate_compile_options({"disable_static_kernel_compile_cache": True},
                                 key_set=check_torch_npu_version("2.10.0.post2"))


def test_static_compile_seconds_are_the_emulators_and_labelled(chain, backend, stand_in, npu_emulator) -> None:
    graph, args = chain
    npu_emulator._static.clear()
    compiled = backend.compile(graph, Plan.make([Scope(0, 9, "all")], SAFE))
    assert backend.static_compile_seconds() is None  # the static compile runs at the first forward
    compiled(*args)
    stated = compiled.fn.emulated_static_compile
    assert backend.static_compile_seconds() == {"seconds": stated["seconds"], "uncached_s": stated["uncached_s"],
                                                "emulated": True}
    assert stated["seconds"] > 0 and stated["seconds"] == stated["uncached_s"]


def test_timing_through_the_profiler_prints_no_profiler_warning(chain, backend, capsys) -> None:
    """torch-npu warns on every profile at Level0 with its default AI Core metrics: sktune names them off."""
    graph, args = chain
    reference = backend.reference(graph)
    candidate = backend.compile(graph, Plan.make([Scope(0, 9, "all")], SAFE))
    capsys.readouterr()
    base, cand, _ = backend.time_batches(lambda: reference(*args), lambda: candidate(*args), n_batches=2,
                                         batch_target_s=0.0)
    assert len(base) == len(cand) == 2 and "[WARNING]" not in capsys.readouterr().out


def test_static_compile_seconds_on_a_host_are_wall_time(backend, tmp_path) -> None:
    from sktune.backends.npu_first_run import CheckedFirstRun

    first = CheckedFirstRun(lambda *a: a, {}, tmp_path, backend, compile_s=1.5)
    first(1)
    assert backend.last_static["seconds"] >= 1.5 and backend.last_static["emulated"] is False
    assert backend.last_static["uncached_s"] is None and backend.last_effective == "absent"


@pytest.mark.parametrize("where", ["sk_meta", "sk_meta/123/model_4"])
def test_effective_options_dump_forms(tmp_path, where: str) -> None:
    dump = tmp_path / where / "sk_options.json"
    dump.parent.mkdir(parents=True)
    dump.write_text(json.dumps({"super_kernel_optimize_options": {"early_start": 0, "dcci_after_kernel_end": [".*"]}}))
    with pytest.raises(NpuOptionError, match=r"early_start: requested 1, used 0.*int is clamped"):
        check_effective_options({"early_start": 1, "dcci_after_kernel_end": [".*"]}, tmp_path)
    # A pattern list is not clamped: the message does not blame clamping for it.
    with pytest.raises(NpuOptionError, match=r"dcci_after_kernel_end: .*a pattern list CANN rewrote"):
        check_effective_options({"early_start": 0, "dcci_after_kernel_end": [".*Gather.*"]}, tmp_path)
    assert check_effective_options({"early_start": 0, "split_mode": 2}, tmp_path).status == "checked"


@pytest.mark.parametrize("text", ["not json", "[1, 2]", '{"options": {}}', '{"super_kernel_optimize_options": 3}'])
def test_unrecognised_or_absent_dump_never_fails(tmp_path, text: str) -> None:
    assert read_effective_options(tmp_path).status == "absent"
    (tmp_path / "sk_meta").mkdir()
    (tmp_path / "sk_meta" / "sk_options.json").write_text(text)
    assert check_effective_options({"early_start": 1}, tmp_path).status == "unrecognised"


def test_debug_options_and_diagnostic_plan(chain, backend, stand_in) -> None:
    graph, _ = chain
    plan = backend.diagnostic_plan(Plan.make([Scope(0, 9, "all")], SAFE))
    backend.compile(graph, plan)
    assert stand_in.compiles[-1][1]["super_kernel_debug_options"] == {"debug_op_exec_trace": 1}
    legacy = NpuBackend(torch_npu_version_="2.10.0")  # old key set: no debug_op_exec_trace to rerun with
    assert legacy.diagnostic_plan(plan) is None


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
    from sktune.backends.npu_option_check import validate_scope_names

    with pytest.raises(SktuneError, match="distinct"):
        validate_scope_names([f"s{i}" for i in range(65)])


def test_version_gating() -> None:
    with pytest.raises(NpuVersionError, match="no SuperKernel"):
        NpuBackend(torch_npu_version_="2.9.0")
    assert NpuBackend(torch_npu_version_="2.11.0").key_set.missing == ()


def test_without_torch_npu_one_clear_message(monkeypatch) -> None:
    from sktune.backends import get_backend

    monkeypatch.setitem(sys.modules, "torch_npu", None)  # as on a host without torch-npu
    with pytest.raises(SktuneError, match="needs torch-npu"):
        get_backend("npu")


def test_planned_vs_actual_fusion() -> None:
    from sktune.backends.npu_fusion import planned_vs_actual

    plan = Plan.make([Scope(0, 3, "layer_0"), Scope(4, 7, "layer_1"), Scope(8, 9, None)])
    rows = [{"scope": "layer_0", "name": "sk_layer_0_start_RmsNorm_end_MatMulV2_0"}, {"scope": None}]
    assert planned_vs_actual(plan, rows) == {"planned": ["layer_0", "layer_1"], "fused": ["layer_0"],
                                             "not_fused": ["layer_1"], "unexpected": []}
    # the real form (index first): the plan's names settle a split the name alone leaves open
    real = [{"scope": "a_start_x", "name": "sk_0_a_start_x_start_static_kernel_Mul_1f_end_static_kernel_Add_2"},
            {"scope": "layer_1", "name": "sk_1_layer_1_start_static_kernel_Mul_1f_end_clear_ops"}]
    ambiguous = Plan.make([Scope(0, 3, "a"), Scope(4, 7, "layer_1")])
    assert planned_vs_actual(ambiguous, real) == {"planned": ["a", "layer_1"], "fused": ["a", "layer_1"],
                                                  "not_fused": [], "unexpected": []}
    auto = [{"scope": "none", "name": "sk_0_none_start_static_kernel_Mul_1f_end_clear_ops"}]
    assert planned_vs_actual(Plan.make([]), auto)["automatic"] == ["none"]
    only_never = planned_vs_actual(Plan.make([Scope(2, 3, None)]), auto)
    assert only_never["unexpected"] == [] and only_never["automatic"] == ["none"]  # `none`: no named scope


def test_apply_accepts_the_tuned_per_type_dcci_strategies(chain, backend) -> None:
    """``sktune.apply`` has not profiled the baseline, so the per-type dcci strategies that a
    tuning run found (``only:``/``disable:`` an Ascend op type) are checked by their form,
    not against a domain built from no kernel types; the other options still by domain."""
    graph, _ = chain
    assert backend.kernel_types == ()  # nothing observed: the domain holds safe and none only
    for strategy in ("only:GatherV2", "only:GatherV2+IndexAdd", "disable:Mul", "safe", "none"):
        backend.check_plan_options(graph, {**SAFE, "dcci_strategy": strategy})
    for bad in ("only:Gather.V2", "flush-some", "disable:"):
        with pytest.raises(PlanError, match="dcci strategy"):
            backend.check_plan_options(graph, {**SAFE, "dcci_strategy": bad})
    with pytest.raises(PlanError, match="early_start=7"):
        backend.check_plan_options(graph, {**SAFE, "early_start": 7, "dcci_strategy": "only:GatherV2"})
