"""The emulated Ascend NPU (tests/npu_emulator) itself: marker ops, pairing, grouping,
options, faults, static-kernel cache and profiler files. Every number is emulated."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
import torch

from sktune.backends.npu_meta import meta_files
from sktune.measure.ascend_files import ProfileError, find_profile_files
from sktune.measure.ascend_parsers import LEVEL0_BASE, LEVEL0_OPTIONAL, STEP_ID, parse_superkernel_name
from sktune.measure.ascend_summary import step_spans, summarize
from sktune.plan import Plan, Scope
from sktune.backends.npu_fusion import planned_vs_actual
from tests.emulated_npu import EMULATOR_PATH, load_emulator

Scopes = list[tuple[int, int, str | None]]  # (first op, last op, name), 1-based like the seed's figures


@pytest.fixture(scope="module")
def npu() -> Any:
    torch_npu = load_emulator()
    torch_npu._backend.register()  # the emulator's backend, even if a stand-in was registered before
    return torch_npu


@pytest.fixture(autouse=True)
def isolated(npu: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASCEND_WORK_PATH", str(tmp_path))
    monkeypatch.setenv("ASCEND_OP_COMPILE_SAVE_KERNEL_META", "1")  # CANN writes sk_meta/ only then
    npu._static.clear()


def meta(work: Path, name: str) -> Path:
    """The newest ``name`` the emulated CANN wrote under sk_meta/<pid>/model_<id>/."""
    found = meta_files(work, name)
    assert found and all(p.parent.name.startswith("model_") for p in found), found
    return found[-1]


def begin(name: str | None) -> None:
    torch.npu.super_kernel_scope_begin(name)  # type: ignore[attr-defined]


def end(name: str | None) -> None:
    torch.npu.super_kernel_scope_end(name)  # type: ignore[attr-defined]


def chain(scopes: Scopes, n: int = 9) -> Callable[[torch.Tensor], torch.Tensor]:
    """op1..opN alternating mul/add, with markers around the given scopes (outer listed first)."""

    def f(x: torch.Tensor) -> torch.Tensor:
        for i in range(1, n + 1):
            for first, _, name in scopes:
                if first == i:
                    begin(name)
            x = x * 1.5 if i % 2 else x + 0.25
            for _, last, name in reversed(scopes):
                if last == i:
                    end(name)
        return x

    return f


def capture(fn: Callable[..., Any], *inputs: torch.Tensor) -> tuple[torch.fx.GraphModule, list[torch.Tensor]]:
    """The Dynamo graph of ``fn`` and its flat arguments (what sktune hands to npugraph_ex)."""
    got: list[Any] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        got.append((gm, list(example_inputs)))
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(fn, backend=backend, fullgraph=True, dynamic=False)(*inputs)
    torch._dynamo.reset()
    return got[0]


def compile_npu(fn: Callable[..., Any], inputs: tuple[torch.Tensor, ...], **options: Any) -> Any:
    """``lookup_backend("npugraph_ex")(gm, flat_args, options=...)``, as sktune calls it."""
    from torch._dynamo import lookup_backend

    gm, args = capture(fn, *inputs)
    compiled = lookup_backend("npugraph_ex")(gm, args, options=options)
    compiled.flat_args = args
    return compiled


def sk(optimize: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"super_kernel_optimize": True, "super_kernel_optimize_options": optimize or {}, **extra}


SAFE = {"dcci_after_kernel_end": [".*"]}
X = (torch.randn(4, 8),)


# ------------------------------------------------------------------ marker ops
def test_marker_ops_have_the_real_schema_and_side_effects(npu: Any) -> None:
    for name in ("super_kernel_scope_begin", "super_kernel_scope_end"):
        op = getattr(torch.ops.npu, name).default
        assert str(op._schema) == f"npu::{name}(str? scope_name=None) -> ()"
        assert op in torch.fx.node._side_effectful_functions
        for key in ("CPU", "PrivateUse1", "BackendSelect"):
            assert torch._C._dispatch_has_kernel_for_dispatch_key(f"npu::{name}", key)
    torch.ops.npu.super_kernel_scope_begin("ok")
    torch.ops.npu.super_kernel_scope_end()
    for bad in ("", "   "):
        with pytest.raises(RuntimeError, match="scope_name should be None or a non-empty string"):
            torch.ops.npu.super_kernel_scope_begin(bad)
    trace = npu._device.Trace()
    npu._device.set_active(trace)  # as during a recorded profiler step
    try:
        begin("eager")
        end("eager")
    finally:
        npu._device.set_active(None)
    assert [r.task.name for r in trace.rows] == ["sk_scope_kernel_begin", "sk_placeholder_kernel",
                                                 "sk_scope_kernel_end"]
    assert torch.npu.is_available() and torch.npu.get_device_name() == "Ascend910B (emulated)"
    assert os.environ["SKTUNE_NPU_DEVICE"] == "cpu"


def test_markers_survive_aot_and_dce(npu: Any) -> None:
    compiled = compile_npu(chain([(1, 3, "a"), (4, 5, None)]), X)
    gm = compiled.aot_graph
    gm.graph.eliminate_dead_code()
    found = [(str(n.target), n.args) for n in gm.graph.nodes if "super_kernel_scope" in str(n.target)]
    assert found == [("npu.super_kernel_scope_begin.default", ("a",)), ("npu.super_kernel_scope_end.default", ("a",)),
                     ("npu.super_kernel_scope_begin.default", ()), ("npu.super_kernel_scope_end.default", ())]


def test_blank_scope_name_raises_at_run_time(npu: Any) -> None:
    from torch._dynamo import lookup_backend

    gm, args = capture(chain([(1, 2, "tmp")]), *X)
    for node in gm.graph.nodes:
        if "super_kernel_scope" in str(node.target):
            node.args = (" ",)  # as a wrapping backend could insert it
    gm.recompile()
    compiled = lookup_backend("npugraph_ex")(gm, args, options=sk(SAFE))  # compiling passes
    with pytest.raises(RuntimeError, match="non-empty string"):
        compiled(*args)


@pytest.mark.parametrize("fn, name", [
    (lambda x: (begin("a"), x * 2)[1], "'a'"),
    (lambda x: (x * 2, end("b"))[0], "'b'"),
    (lambda x: (begin("a"), x * 2, end("b"), end("a"))[1], "'b'"),
])
def test_unpaired_markers_raise_after_aot(npu: Any, fn: Callable[..., Any], name: str) -> None:
    with pytest.raises(RuntimeError, match=name):
        compile_npu(fn, X)


def test_end_closes_first_open_begin_of_its_name(npu: Any) -> None:
    # begin a, begin a, end a, end a: first end closes the FIRST begin -> ranges (op1..op2) and (op2..op3)
    def f(x: torch.Tensor) -> torch.Tensor:
        begin("a"); x = x * 2; begin("a"); x = x + 1; end("a"); x = x * 3; end("a")  # noqa: E702
        return x

    compiled = compile_npu(f, X, **sk(SAFE))
    assert compiled.superkernels == [("a", [0, 1, 2])]


# ------------------------------------------------------------------ grouping (docs/superkernel.md)
@pytest.mark.parametrize("scopes, expected", [
    ([(1, 4, "sk1"), (3, 7, "sk2")], [("sk1", [0, 1]), ("sk2", [2, 3]), ("sk2", [4, 5, 6])]),  # case 1
    ([(1, 8, "sk1"), (3, 5, "sk2")], [("sk1", [0, 1]), ("sk2", [2, 3, 4]), ("sk1", [5, 6, 7])]),  # case 2
    ([(1, 8, "sk1"), (3, 5, None)], [("sk1", [0, 1]), ("sk1", [5, 6, 7])]),  # case 3
    ([(3, 5, None)], [("none", [0, 1]), ("none", [5, 6, 7, 8])]),  # case 4: `none`, as real profiles say
    ([], [("none", list(range(9)))]),  # no marks: one candidate group
], ids=["partial-overlap", "nested", "none-wins", "only-none", "no-marks"])
def test_seed_grouping_cases(npu: Any, scopes: Scopes, expected: list[tuple[str, list[int]]]) -> None:
    compiled = compile_npu(chain(scopes), X, **sk(SAFE))
    assert compiled.superkernels == expected
    names = [t.name for t in compiled.plan.tasks if t.op_type == "SuperKernel"]
    assert all(n.startswith(f"sk_{i}_{s}_start_static_kernel_") for i, (n, (s, _)) in enumerate(zip(names, expected)))
    parsed = [parse_superkernel_name(n) for n in names]  # index first, kernel function names
    assert [(p.scope, p.index) for p in parsed] == [(s, i) for i, (s, _) in enumerate(expected)]
    kernels = {k.index: k for k in compiled.kernels}
    assert [(p.first_op, p.last_op) for p in parsed] == [
        (npu._grouping.function_name(kernels[ks[0]]), npu._grouping.function_name(kernels[ks[-1]]))
        for _, ks in expected]


def test_fused_outputs_are_bitwise_equal_to_the_reference(npu: Any) -> None:
    plain, marked = chain([]), chain([(1, 4, "sk1"), (3, 7, "sk2")])
    x = torch.randn(16, 32)
    ref = compile_npu(plain, (x,), super_kernel_optimize=False, static_kernel_compile=True)
    fused = compile_npu(marked, (x,), **sk({"early_start": 1}, static_kernel_compile=True))
    a, b = ref(*ref.flat_args)[0], fused(*fused.flat_args)[0]
    assert torch.equal(a.view(torch.int32), b.view(torch.int32))


def test_empty_scope_makes_no_superkernel(npu: Any, tmp_path: Path) -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        begin("cast"); y = y.to(torch.float32); end("cast")  # noqa: E702  (a no-op: gone after AOT)
        begin("main"); y = y + 1; end("main")  # noqa: E702
        return y

    compiled = compile_npu(f, X, **sk(SAFE))
    compiled(*compiled.flat_args)
    assert compiled.superkernels == [("main", [1])]
    log = meta(tmp_path, "sk_fusion_fail_reasons.log").read_text()
    assert "scope:cast}: reason: OP_UNSUPPORT, reasonDetail: empty scope" in log


def test_long_names_truncate_and_merge_and_scope_limit(npu: Any) -> None:
    a, b = "x" * 255 + "A", "x" * 255 + "B"
    compiled = compile_npu(chain([(1, 2, a), (3, 4, b)], n=4), X, **sk(SAFE))
    assert compiled.superkernels == [("x" * 255, [0, 1, 2, 3])]
    many = compile_npu(chain([(i, i, f"s{i}") for i in range(1, 67)], n=66), X, **sk(SAFE))
    assert [s for s, _ in many.superkernels] == [f"s{i}" for i in range(1, 65)]
    assert sum("EXCEED_SCOPE_MAX" in line for line in many.plan.fail_lines) == 2


# ------------------------------------------------------------------ unfusible ops and faults
def with_sort(x: torch.Tensor) -> torch.Tensor:
    begin("s")
    y = x * 2
    v, _ = torch.sort(y)
    z = v + 1
    end("s")
    return z


def test_aicpu_op_splits_unless_task_breaker_bypass(npu: Any) -> None:
    split = compile_npu(with_sort, X, **sk(SAFE))
    assert split.kernels[1].core == "AI_CPU"
    assert split.superkernels == [("s", [0]), ("s", [2])]
    assert any("opType:Sort" in line and "reason: DEFAULT_NODE" in line for line in split.plan.fail_lines)
    bypass = compile_npu(with_sort, X, **sk({**SAFE, "aggressive_opt_strategies": {"task_breaker_bypass": 1}}))
    assert bypass.superkernels == [("s", [0, 2])]
    assert [t.op_type for t in bypass.plan.tasks] == ["SuperKernel", "Sort"]


def with_embedding(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    begin("emb")
    rows = torch.nn.functional.embedding(x.argmax(dim=1), table)
    out = rows * 2
    end("emb")
    return out


def test_no_dcci_corrupts_a_gather_and_safe_dcci_does_not(npu: Any) -> None:
    inputs = (torch.randn(4, 8), torch.randn(8, 6))
    ref = compile_npu(with_embedding, inputs, super_kernel_optimize=False)
    expected = ref(*ref.flat_args)[0]
    none = compile_npu(with_embedding, inputs, **sk({}))
    bad = none(*none.flat_args)[0]
    assert not torch.equal(bad, expected) and torch.allclose(bad, expected, rtol=0.2, atol=1.0)
    for optimize in (SAFE, {"dcci_before_kernel_start": [".*GatherV2.*"]}):
        ok = compile_npu(with_embedding, inputs, **sk(optimize))
        assert torch.equal(ok(*ok.flat_args)[0], expected)
    disabled = compile_npu(with_embedding, inputs, **sk({"dcci_disable_on_kernel": [".*Gather.*"]}))
    assert not torch.equal(disabled(*disabled.flat_args)[0], expected)


def with_wait(x: torch.Tensor) -> torch.Tensor:
    begin("comm")
    y = torch.ops._c10d_functional.wait_tensor(x * 2)
    z = y + 1
    end("comm")
    return z


def test_wait_op_splits_or_would_hang(npu: Any) -> None:
    safe = compile_npu(with_wait, X, **sk(SAFE))
    assert safe.superkernels == [("comm", [0]), ("comm", [2])]
    assert not safe.hangs
    bypass = compile_npu(with_wait, X, **sk({**SAFE, "aggressive_opt_strategies": {"value_breaker_bypass": 1}}))
    assert bypass.superkernels == [("comm", [0, 1, 2])] and bypass.hangs


HANG_SCRIPT = """
import torch, torch_npu
def f(x):
    torch.npu.super_kernel_scope_begin("comm")
    y = torch.ops._c10d_functional.wait_tensor(x * 2)
    z = y + 1
    torch.npu.super_kernel_scope_end("comm")
    return z
options = {"super_kernel_optimize": True, "super_kernel_debug_options": {"debug_op_exec_trace": 1},
           "super_kernel_optimize_options": {"aggressive_opt_strategies": {"value_breaker_bypass": 2}}}
with torch.no_grad():
    compiled = torch.compile(f, backend="npugraph_ex", options=options, dynamic=False, fullgraph=True)
    print("FORWARD", flush=True)
    compiled(torch.randn(4, 8))
print("RETURNED", flush=True)
"""


def test_value_breaker_bypass_really_hangs_and_traces(npu: Any, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": EMULATOR_PATH, "ASCEND_PROCESS_LOG_PATH": str(tmp_path / "log"),
           "ASCEND_WORK_PATH": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-c", HANG_SCRIPT], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    plog_dir = tmp_path / "log" / "debug" / "plog"
    try:
        deadline = time.monotonic() + 45
        while not (plog_dir.is_dir() and any(plog_dir.iterdir())) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
            time.sleep(0.2)
        time.sleep(0.5)
        assert proc.poll() is None, "the first forward returned instead of hanging"
    finally:
        proc.kill()
        out, _ = proc.communicate()
    assert b"FORWARD" in out and b"RETURNED" not in out
    trace = next(plog_dir.glob("plog-*.log")).read_text()
    assert "sk_0_comm_start_static_kernel_Mul_" in trace and "stuck in op 1:ValueWait" in trace


# ------------------------------------------------------------------ options
def test_unknown_top_level_key_raises_value_error(npu: Any) -> None:
    with pytest.raises(ValueError, match="Invalid option 'super_kernel_optimise'"):
        compile_npu(chain([]), X, super_kernel_optimise=True)


@pytest.mark.parametrize("optimize", [
    {"dcci_after_kernel_end": (".*",)}, {"early_start": "1"}, {"no_such_key": 1},
    {"aggressive_opt_strategies": {"task_breaker_bypass": 1.0}},
])
def test_bad_sk_option_raises_at_first_forward_only(npu: Any, optimize: dict[str, Any]) -> None:
    compiled = compile_npu(chain([]), X, **sk(optimize))  # compiling passes
    with pytest.raises(RuntimeError, match="super_kernel_optimize_options"):
        compiled(*compiled.flat_args)


def test_legacy_version_has_the_old_key_set(npu: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(npu, "__version__", "2.10.0.post2")
    bad = compile_npu(chain([]), X, **sk({"early_start": 1}))
    with pytest.raises(RuntimeError, match="early_start"):
        bad(*bad.flat_args)
    ok = compile_npu(chain([]), X, **sk({"preload_code": 2}))
    ok(*ok.flat_args)
    written = json.loads(meta(tmp_path, "sk_options.json").read_text())
    assert written == {"super_kernel_optimize_options": {"preload_code": 2, "split_mode": 4, "stream_fusion": 1}}


def test_out_of_range_int_is_clamped_and_recorded(npu: Any, tmp_path: Path) -> None:
    compiled = compile_npu(chain([]), X, **sk({"preload_code": 3, "split_mode": 0, **SAFE}))
    with pytest.warns(UserWarning, match="out of range"):
        compiled(*compiled.flat_args)
    written = json.loads(meta(tmp_path, "sk_options.json").read_text())["super_kernel_optimize_options"]
    assert written["preload_code"] == 1 and written["split_mode"] == 4
    assert written["dcci_after_kernel_end"] == [".*"] and written["dcci_disable_on_kernel"] == []
    assert written["aggressive_opt_strategies"] == {"task_breaker_bypass": 0, "value_breaker_bypass": 0,
                                                    "event_breaker_bypass": 0}
    assert compiled.effective_options == written


def test_no_sk_meta_without_the_kernel_meta_switch(npu: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ASCEND_OP_COMPILE_SAVE_KERNEL_META")  # as in sktune.apply or a user's own compile
    compiled = compile_npu(chain([(1, 9, "all")]), X, **sk(SAFE))
    compiled(*compiled.flat_args)
    assert not (tmp_path / "sk_meta").exists()


def static_run(fn: Callable[..., Any], optimize: dict[str, Any], **extra: Any) -> dict[str, Any]:
    compiled = compile_npu(fn, X, **sk({**optimize, **SAFE}, static_kernel_compile=True, **extra))
    compiled(*compiled.flat_args)
    return compiled.emulated_static_compile


def test_static_cache_keys_the_option_map_on_2_14(npu: Any) -> None:
    fn = chain([(1, 9, "all")])
    ref = compile_npu(fn, X, super_kernel_optimize=False, static_kernel_compile=True)
    ref(*ref.flat_args)
    first = static_run(fn, {"early_start": 1})
    per = npu._static.SECONDS_PER_KERNEL
    assert first["compiled"] == first["kernels"] == 2 and first["seconds"] == 2 * per  # SK off is another key
    assert first["uncached_s"] == 2 * per and first["emulated"] is True
    assert static_run(fn, {"early_start": 1})["seconds"] == 0.0  # same options: done in this process
    other = static_run(fn, {"early_start": 0})
    assert other["compiled"] == 2 and other["stale"] == 0 and not other["disk_hit"]
    npu._static.COMPILED_OPS.clear()  # a new process: the on-disk cache answers (same option map)
    again = static_run(fn, {"early_start": 1})
    assert again["disk_hit"] and again["seconds"] == 0.0
    npu._static.COMPILED_OPS.clear()
    assert static_run(fn, {"early_start": 1}, disable_static_kernel_compile_cache=True)["compiled"] == 2


def test_static_cache_is_stale_on_2_10_post2(npu: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(npu, "__version__", "2.10.0.post2")
    fn = chain([(1, 9, "all")])
    with pytest.raises(ValueError, match="Invalid option 'disable_static_kernel_compile_cache'"):
        compile_npu(fn, X, **sk({}, disable_static_kernel_compile_cache=True))
    ref = compile_npu(fn, X, super_kernel_optimize=False, static_kernel_compile=True)
    ref(*ref.flat_args)
    assert ref.emulated_static_compile["compiled"] == 2
    hit = compile_npu(fn, X, **sk({"preload_code": 2}, static_kernel_compile=True))
    hit(*hit.flat_args)
    # op hashes alone: the SK-off kernels count as built, none is compiled again
    assert hit.emulated_static_compile == {**hit.emulated_static_compile, "compiled": 0, "stale": 2, "seconds": 0.0}
    assert hit.effective_options["preload_code"] == 2  # op_compiler gets no option map there


def test_super_kernel_optimize_zero_means_on(npu: Any) -> None:
    fn = chain([(1, 9, "all")])
    on = compile_npu(fn, X, super_kernel_optimize=0, super_kernel_optimize_options=SAFE, static_kernel_compile=0)
    assert [scope for scope, _ in on.superkernels] == ["all"] and on.state.static_kernels is False
    assert on.config.local == {"super_kernel_optimize": "0", "super_kernel_optimize_options": SAFE}


@pytest.mark.parametrize("options, error", [
    ({"capture_limit": 0}, ValueError), ({"capture_limit": "64"}, ValueError), ({"mode": "reduce-overhead"}, ValueError),
    ({"super_kernel_optimize": 2}, ValueError), ({"capture_error_mode": "bogus"}, ValueError),
    ({"_vllm_aclnn_static_kernel_sym_range": [1.5]}, TypeError), ({"super_kernel_optimize_options": [1]}, TypeError),
    ({"post_grad_custom_pre_pass": 3}, TypeError), ({"data_dump_dir": "/no/such/dir"}, FileNotFoundError),
])
def test_compiler_config_checks_values(npu: Any, options: dict[str, Any], error: type) -> None:
    with pytest.raises(error):
        npu._config.CompilerConfig(options)


def test_compiler_config_defaults_and_vllm_keys(npu: Any) -> None:
    config = npu._config.CompilerConfig({"_vllm_aclnn_static_kernel_sym_index": 1,
                                         "_vllm_aclnn_static_kernel_sym_range": [1, 8]})
    assert config.mode == "npugraph_ex" and config.capture_limit == 64
    assert config.local == {}  # nothing on: static kernels and SuperKernel off


def test_npugraphs_is_a_separate_backend_without_superkernel(npu: Any) -> None:
    from torch._dynamo import lookup_backend

    gm, args = capture(chain([(1, 9, "all")]), *X)
    compiled = lookup_backend("npugraphs")(gm, args, options=sk(SAFE))  # options are dropped, as in torch-npu
    assert lookup_backend("npugraphs") is not lookup_backend("npugraph_ex")
    assert compiled.superkernels == [] and torch.equal(compiled(*args)[0], chain([])(X[0]))


# ------------------------------------------------------------------ profiler files
def profile_runs(npu: Any, fn: Callable[[], Any], out: Path, active: int = 3, level: str = "Level0",
                 steps: bool = True) -> Any:
    """``steps`` False: no schedule, so no profiler steps (and no Step Id)."""
    prof = npu.profiler
    schedule = prof.schedule(wait=0, warmup=2, active=active, repeat=1, skip_first=0) if steps else None
    with prof.profile(activities=[prof.ProfilerActivity.CPU, prof.ProfilerActivity.NPU], schedule=schedule,
                      on_trace_ready=prof.tensorboard_trace_handler(str(out)),
                      experimental_config=prof._ExperimentalConfig(profiler_level=level,
                                                                   aic_metrics=prof.AiCMetrics.AiCoreNone,
                                                                   data_simplification=True)) as p:
        for _ in range(2 + active):
            fn()
            torch.npu.synchronize()
            p.step()
    return summarize(find_profile_files(out))


def test_the_profiler_surface_is_torch_npu_s(npu: Any, tmp_path: Path, capsys: Any,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """torch-npu 2.14.0's signatures and habits (docs/npu_api.md, "Profiler"): keyword-only
    profile(), no unknown keywords, AI Core metrics at Level0 warned about and reset, bad
    schedule arguments warned about and reset, a default output folder."""
    prof = npu.profiler
    with pytest.raises(TypeError):
        prof.profile([prof.ProfilerActivity.CPU])  # keyword-only
    with pytest.raises(TypeError):
        prof.profile(activites=[prof.ProfilerActivity.CPU])  # a misspelt keyword
    with pytest.raises(TypeError):
        prof._ExperimentalConfig(bogus=1)
    capsys.readouterr()
    config = prof._ExperimentalConfig(profiler_level=prof.ProfilerLevel.Level0)  # default metrics: PipeUtilization
    assert config._aic_metrics == prof.AiCMetrics.AiCoreNone == "ACL_AICORE_NONE"
    assert "reset aic metrics to None" in capsys.readouterr().out
    prof._ExperimentalConfig(profiler_level=prof.ProfilerLevel.Level0, aic_metrics=prof.AiCMetrics.AiCoreNone)
    assert capsys.readouterr().out == ""
    bad = prof.schedule(wait=-1, active=0, warmup=1)
    assert (bad.wait, bad.active) == (0, 1) and "reset it to 1" in capsys.readouterr().out
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ASCEND_WORK_PATH", raising=False)
    x = torch.randn(4, 8)
    ref = compile_npu(chain([]), (x,), super_kernel_optimize=False)
    with prof.profile(activities=[prof.ProfilerActivity.NPU], schedule=prof.schedule(wait=0, warmup=1, active=1),
                      on_trace_ready=prof.tensorboard_trace_handler(async_mode=False)) as p:
        for _ in range(2):
            ref(*ref.flat_args)
            p.step()
    assert len(list(tmp_path.glob("*_ascend_pt"))) == 1  # the working directory, as on a host


def test_profiles_parse_and_fusion_shortens_the_step(npu: Any, tmp_path: Path) -> None:
    x = torch.randn(16, 32)
    ref = compile_npu(chain([]), (x,), super_kernel_optimize=False)
    fused = compile_npu(chain([(1, 9, "all")]), (x,), **sk({"early_start": 1, **SAFE}))
    base = profile_runs(npu, lambda: ref(*ref.flat_args), tmp_path / "ref")
    cand = profile_runs(npu, lambda: fused(*fused.flat_args), tmp_path / "sk")
    assert [s.step for s in base.steps] == [2, 3, 4] == [s.step for s in cand.steps]
    assert all(s.kernels == 9 for s in base.steps) and all(s.kernels == 1 for s in cand.steps)
    (row,) = cand.superkernels  # index first, the static kernels' function names
    assert (row.scope, row.index, row.count) == ("all", 0, 3)
    assert row.name.startswith("sk_0_all_start_static_kernel_Mul_")
    assert row.first_op.startswith("static_kernel_Mul_") and row.last_op.startswith("static_kernel_Mul_")
    assert planned_vs_actual(Plan.make([Scope(0, 8, "all")]), [asdict(row)])["fused"] == ["all"]
    assert max(s.span_us for s in cand.steps) < min(s.span_us for s in base.steps)
    # 8 launch gaps of 5 µs in a step; Free, as torch-npu counts it, also holds the 50 µs of host
    # time before the next step's first kernel (the last step has none after it).
    assert all(s.gap_us == pytest.approx(8 * 5.0) for s in base.steps)
    assert [s.free_us for s in base.steps] == [pytest.approx(90.0), pytest.approx(90.0), pytest.approx(40.0)]
    lines = next((tmp_path / "ref").rglob("kernel_details.csv")).read_text().splitlines()
    assert lines[0] == LEVEL0_HEADER
    first = lines[1].split(",")
    assert first[:5] == ["2", "0", "aclnnMul_MulAiCore_Mul", "Mul", "AI_VECTOR_CORE"]
    assert first[5] == '"1736413971000000.000\t"'
    assert '"""16,32"""' in lines[1] and "DT_FLOAT" in lines[1]


# torch-npu 2.14.0's Level0 kernel_details.csv as sktune reads the wheel (ascend_parsers; the emulator
# keeps its own copy, as it stands in for torch_npu), Step Id with profiler steps
LEVEL0_HEADER = ",".join((STEP_ID, *LEVEL0_BASE, *LEVEL0_OPTIONAL))


def test_profile_without_steps_has_no_step_id(npu: Any, tmp_path: Path) -> None:
    fused = compile_npu(chain([(1, 9, "all")]), X, **sk(SAFE))
    summary = profile_runs(npu, lambda: fused(*fused.flat_args), tmp_path, steps=False)
    out = next(tmp_path.rglob("ASCEND_PROFILER_OUTPUT"))
    assert (out / "kernel_details.csv").read_text().splitlines()[0] == LEVEL0_HEADER.removeprefix("Step Id,")
    assert (out / "step_trace_time.csv").read_text().splitlines()[1].startswith("0,,")  # Step empty
    assert not summary.step_ids and [s.step for s in summary.steps] == [0] and summary.steps[0].kernels == 5
    with pytest.raises(ProfileError, match="no Step Id column"):
        step_spans(summary.to_json(), 5)


def test_sktune_profile_labels_the_emulator_s_profiles_emulated(npu: Any, tmp_path: Path) -> None:
    # Its figures read as a device's: "Per step (device) … span µs 97.003", no word of emulation.
    import json
    import subprocess
    import sys

    fused = compile_npu(chain([(1, 9, "all")]), X, **sk(SAFE))
    profile_runs(npu, lambda: fused(*fused.flat_args), tmp_path)
    run = next(tmp_path.glob("*_ascend_pt"))
    shown = subprocess.run([sys.executable, "-m", "sktune", "profile", str(run)], capture_output=True, text=True,
                           timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "EMULATED: written by sktune's emulated Ascend" in " ".join(shown.stdout.split())
    data = subprocess.run([sys.executable, "-m", "sktune", "profile", str(run), "--json"], capture_output=True,
                          text=True, timeout=120)
    assert json.loads(data.stdout)["emulated"] is True
    from sktune.measure.ascend_files import find_profile_files

    assert find_profile_files(tmp_path).emulated  # a folder of runs: the newest is read, and so is its mark


def test_level1_keeps_op_summary_columns(npu: Any, tmp_path: Path) -> None:
    ref = compile_npu(chain([]), X, super_kernel_optimize=False)
    summary = profile_runs(npu, lambda: ref(*ref.flat_args), tmp_path, active=1, level="Level1")
    header = next(tmp_path.rglob("kernel_details.csv")).read_text().splitlines()[0]
    assert header.startswith("Step Id,Device_id,Model ID,Task ID,Stream ID,Name,Type,OP State,Accelerator Core,")
    assert header.endswith(",HF32 Eligible,Input Shapes,Input Data Types,Input Formats,Output Shapes,"
                           "Output Data Types,Output Formats,Context ID")
    assert summary.steps[0].kernels == 9


def test_marker_kernels_show_in_unfused_runs(npu: Any, tmp_path: Path) -> None:
    marked = compile_npu(chain([(1, 3, "a")]), X, super_kernel_optimize=False)
    summary = profile_runs(npu, lambda: marked(*marked.flat_args), tmp_path, active=2)
    assert summary.markers_filtered == 2 * 3 and len(summary.steps) == 2
    assert not summary.superkernels


def test_torch_compile_path_with_options_kwarg(npu: Any, tmp_path: Path) -> None:
    torch._dynamo.reset()
    with torch.no_grad():
        model = torch.compile(chain([(2, 5, "mid")]), backend="npugraph_ex", options=sk(SAFE),
                              dynamic=False, fullgraph=True)
        out = model(X[0])
    torch._dynamo.reset()
    assert torch.equal(out, chain([])(X[0]))
    fused = meta(tmp_path, "sk_fused_nodes.log").read_text()
    assert fused.startswith("sk_0_mid_start_static_kernel_Add_") and fused.index("_end_static_kernel_Mul_") > 0
    assert ": scope:mid, nodes:[1:Add, 2:Mul, 3:Add, 4:Mul]" in fused
