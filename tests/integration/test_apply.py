"""``sktune.apply`` and the exported Python snippet on a real study: same bits, same regions."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import TYPE_CHECKING

import optuna
import pytest
import torch

import sktune
from sktune.backends import get_backend
from sktune.backends.inductor import _Region
from sktune.errors import PlanError
from sktune.graph.capture import capture
from sktune.graph.grouping import regions
from sktune.host_cpu import cpu_name
from sktune.load import build, draw_inputs, load_model_file
from sktune.report.export import export_json, export_python
from sktune.plan import Plan, Scope
from sktune.tuning.records import best_plan, records
from sktune.tuning.storage import load_existing_study
from sktune.verify import compare_outputs, flatten_outputs
from tests.tuned_study import TinyStudy, tiny_study

if TYPE_CHECKING:
    from sktune.worker.runner import TrialRunner


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles the same forward with a new backend: keep Dynamo's per-code cache small."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> TinyStudy:
    return tiny_study(tmp_path_factory)


@pytest.fixture(scope="module")
def study(tuned: TinyStudy) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    return load_existing_study(tuned.name, tuned.storage)


@pytest.fixture(scope="module")
def unfused(tuned: TinyStudy):
    """The captured graph, run eagerly: the reference every tuned plan reproduces bit for bit."""
    torch.set_num_threads(1)  # as tuned (--threads 1)
    source = load_model_file(tuned.model)
    with torch.no_grad():
        graph = capture(build(source), draw_inputs(source, 0))
    inputs = [draw_inputs(source, seed) for seed in range(3)]
    with torch.no_grad():
        refs = [flatten_outputs(graph.gm(*graph.args_for(x))) for x in inputs]
    return source, graph, inputs, refs


def n_regions(module: torch.nn.Module) -> int:
    (compiled,) = sktune.applied_plan(module).compiled
    return sum(isinstance(node.target, _Region) for node in compiled.graph.nodes)  # type: ignore[union-attr]


def check_bitwise(module: torch.nn.Module, inputs, refs) -> None:
    with torch.no_grad():
        for k, x in enumerate(inputs):
            assert compare_outputs(refs[k], flatten_outputs(module(*x))) == [], f"input set {k}"


def test_exported_snippet_reproduces_the_verified_outputs(study, unfused) -> None:
    source, graph, inputs, refs = unfused
    snippet = export_python(study)
    ast.parse(snippet)
    # Exactness follows vector width: the snippet names the CPU it was verified on.
    assert f"Verified bitwise on {cpu_name()} ({torch.backends.cpu.get_cpu_capability()} vectors)" in snippet
    namespace = {"model": build(source)}
    exec(compile(snippet, "<sktune export>", "exec"), namespace)
    model = namespace["model"]
    check_bitwise(model, inputs, refs)
    plan = best_plan(study)
    assert plan is not None and Plan.from_json({k: v for k, v in namespace["PLAN"].items() if k != "n_ops"}) == plan
    assert n_regions(model) == len(regions(len(graph.ops), plan.scopes))


def test_apply_builds_the_tuned_op_graph_and_fuses_the_plans_regions(study, unfused) -> None:
    source, graph, inputs, refs = unfused
    # The exact trial with the most regions: a real fusion, not the unfused anchor.
    exact = [r for r in records(study) if r.feasible and r.plan]
    plan = max((Plan.from_json(r.plan) for r in exact), key=lambda p: len(regions(len(graph.ops), p.scopes)))
    spans = regions(len(graph.ops), plan.scopes)
    assert spans, "the study should have an exact plan that fuses something"
    model = sktune.apply(build(source), plan, backend="inductor")
    check_bitwise(model, inputs, refs)
    applied = sktune.applied_plan(model)
    assert len(applied.graphs) == 1 and n_regions(model) == len(spans)
    assert [op.to_json() for op in applied.graphs[0].ops] == study.user_attrs["ops"]
    # Same bits as the backend applied to sktune's own capture (what the trial verified).
    direct = get_backend("inductor").compile(graph, plan)
    with torch.no_grad():
        for x in inputs:
            assert compare_outputs(flatten_outputs(direct(*graph.args_for(x))), flatten_outputs(model(*x))) == []


def test_apply_accepts_the_json_export(study, unfused) -> None:
    source, _, inputs, refs = unfused
    model = sktune.apply(build(source), export_json(study))
    check_bitwise(model, inputs[:1], refs[:1])
    assert sktune.applied_plan(model).tuned.n_ops == len(study.user_attrs["ops"])


@pytest.fixture
def recompile_limit():
    """Dynamo's recompile limit at its default for the test, and as it was after it."""
    from sktune._apply import DYNAMO_RECOMPILE_LIMIT

    was = torch._dynamo.config.recompile_limit
    torch._dynamo.config.recompile_limit = DYNAMO_RECOMPILE_LIMIT
    yield
    torch._dynamo.config.recompile_limit = was


def test_apply_serves_every_verified_shape_past_dynamo_s_recompile_limit(recompile_limit: None) -> None:
    # dynamic=False makes each shape a graph of its own: the 9th failed (FailOnRecompileLimitHit).
    from sktune._apply import DYNAMO_RECOMPILE_LIMIT, EXPORT_VERSION_KEY

    rows = range(1, DYNAMO_RECOMPILE_LIMIT + 3)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
    # Verified at the first two only (a run stopped before its round): the rest are verify-only shapes.
    doc = {EXPORT_VERSION_KEY: 1, "plan": Plan.make([Scope(0, 1, None)], {}).to_json(),
           "provenance": {"verified_shapes": {f"bs{n}": [[[n, 8], "torch.float32"]] for n in rows[:2]},
                          "verify_only_shapes": [f"bs{n}" for n in rows[2:]]}}
    compiled = sktune.apply(model, doc)
    with torch.no_grad():
        for n in rows:
            x = torch.randn(n, 8)
            assert torch.equal(compiled(x), model(x))
    assert torch._dynamo.config.recompile_limit == len(rows) + DYNAMO_RECOMPILE_LIMIT


def test_op_count_mismatch_is_a_plan_error(unfused) -> None:
    source, graph, inputs, _ = unfused
    n = len(graph.ops)
    plan = {**Plan.make([Scope(0, 3, "sk0")]).to_json(), "n_ops": n + 5}
    model = sktune.apply(build(source), plan)
    with pytest.raises(PlanError, match=f"differs from the tuned one: it has {n} ops.*graph of {n + 5} ops"), \
            torch.no_grad():
        model(*inputs[0])
    too_far = sktune.apply(build(source), Plan.make([Scope(0, n + 2, "sk0")]))
    with pytest.raises(PlanError, match=f"differs from the tuned one: it has {n} ops.*reach op {n + 2}"), \
            torch.no_grad():
        too_far(*inputs[0])


def test_a_plan_with_another_backends_options_is_a_plan_error(unfused) -> None:
    source, _, inputs, _ = unfused
    npu_plan = Plan.make([Scope(0, 3, "sk0")], {"super_kernel_debug_options": {"debug_op_exec_trace": 1}})
    model = sktune.apply(build(source), npu_plan, backend="inductor")
    with pytest.raises(PlanError, match="'super_kernel_debug_options' is not in the backend's option space"), \
            torch.no_grad():
        model(*inputs[0])
    unknown_fallback = sktune.apply(build(source), Plan.make([Scope(0, 3, "sk0")], {"fallback_ops": ["nope"]}),
                                    backend="inductor")
    with pytest.raises(PlanError, match=r"falls back on \['nope'\]"), torch.no_grad():
        unknown_fallback(*inputs[0])
    # An export document names its study's backend: with no backend= it is the one applied.
    from sktune._apply import EXPORT_VERSION_KEY, TunedPlan, applied_plan

    document = {EXPORT_VERSION_KEY: 1, "plan": npu_plan.to_json(), "provenance": {"backend": "npu"}}
    assert TunedPlan.parse(document).backend == "npu" and TunedPlan.parse(npu_plan.to_json()).backend is None
    import sktune._apply as applying

    asked: list[str] = []

    def recorded(name: str, *args: object, **kwargs: object) -> object:
        asked.append(name)
        return get_backend("inductor")  # torch-npu may be the emulator here, or missing: not what is checked

    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(applying, "get_backend", recorded)
        sktune.apply(build(source), document)
    assert asked == ["npu"]  # the backend the document's study was tuned with
    inductor_document = {**document, "plan": Plan.make([Scope(0, 3, "sk0")]).to_json(),
                         "provenance": {"backend": "inductor"}}
    assert applied_plan(sktune.apply(build(source), inductor_document)).backend.name == "inductor"


def test_op_type_mismatch_is_a_plan_error(study, unfused) -> None:
    source, _, inputs, _ = unfused
    document = export_json(study)
    document["provenance"]["op_types"] = ["relu"] + document["provenance"]["op_types"][1:]
    model = sktune.apply(build(source), document)
    with pytest.raises(PlanError, match="op 0 is 'pow' here but 'relu'"), torch.no_grad():
        model(*inputs[0])


def test_apply_is_lazy_and_import_sktune_stays_light() -> None:
    import subprocess
    import sys

    code = "import sys, sktune; assert 'torch' not in sys.modules; assert callable(sktune.apply); print('ok')"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
    assert "apply" in sktune.__all__
    with pytest.raises(ValueError, match="not returned by sktune.apply"):
        sktune.applied_plan(torch.nn.Linear(2, 2))


def test_the_study_times_its_best_through_apply_as_the_export_runs_it(study: optuna.Study) -> None:
    """The trials call the captured graph directly; a user calls sktune.apply (torch.compile),
    and Dynamo runs on every call: a cost the table does not hold (docs/measured.md)."""
    from sktune.tuning.summary import summary
    from sktune.tuning.through_compile import through_compile_line

    data = summary(study)
    through = data["through_compile"]
    assert (through is None) == data["best_fuses_nothing"]  # nothing to apply: nothing timed
    if through is None:
        return
    assert through["trial"] == data["best_trial"] and through["failed"] is None
    assert through["bitwise"] and through["mismatches"] == 0  # apply reproduces the verified outputs
    assert through["step_s"] > 0 and through["eager_s"] > 0 and through["direct_s"] > 0
    lo, hi = through["call_cost_ci"]
    assert lo <= hi and "the call adds" in through_compile_line(through)
    assert through_compile_line(through).replace("×", "x") in export_python(study)
    assert export_json(study)["provenance"]["through_compile"] == through


@pytest.fixture(scope="module")
def runner() -> "TrialRunner":
    from sktune.worker.runner import RunnerConfig, TrialRunner

    return TrialRunner(RunnerConfig(model_path=str(Path(__file__).resolve().parents[1] / "models" / "tiny_norm.py"),
                                    n_batches=2))


def _fuse_all_and_its_direct_mismatches(runner: "TrialRunner") -> tuple[Plan, int]:
    """The fuse-all plan, and the output elements its direct compile gets wrong on this CPU."""
    shape = runner.shape(None)
    plan = runner.backend.fuse_all_plan(shape.graph)
    direct = runner.backend.compile(shape.graph, plan)
    return plan, sum(m.count for ref, args in zip(shape.references, shape.args)
                     for m in compare_outputs(ref, flatten_outputs(direct(*args))))


def test_the_worker_times_a_plan_through_apply_with_the_bits_of_its_direct_compile(runner: "TrialRunner") -> None:
    """Whatever the plan's exactness on this CPU, apply runs the same regions: the same bits."""
    from sktune.pipe.protocol import ThroughCompileRequest

    plan, expected = _fuse_all_and_its_direct_mismatches(runner)
    result = runner.through_compile(ThroughCompileRequest(plan, rounds=2, n_batches=2))
    assert result.mismatches == expected
    assert result.applied.n_batches == 4 and result.over_direct.n_batches == 4 and result.compile_s > 0


def test_confirm_times_every_plan_in_rounds_whose_order_rotates(runner: "TrialRunner",
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The finalists' round and the through-compile timing share one loop: each pair gets
    n_batches per round, and none goes first in every round."""
    from sktune.pipe.protocol import ConfirmRequest

    shape = runner.shape(None)
    plans = (Plan(), runner.backend.fuse_all_plan(shape.graph), Plan())
    result = runner.confirm(ConfirmRequest(plans, rounds=3, n_batches=2))
    assert [t.n_batches for t in result.timings] == [6, 6, 6]
    # Each plan verified as the round compiled it, against the unfused run: outputs that differ.
    fuse_all, fuse_all_differs = _fuse_all_and_its_direct_mismatches(runner)
    unfused = Plan.make([Scope(0, len(shape.graph.ops) - 1, None)])  # a scope with no name fuses nothing
    checked = runner.confirm(ConfirmRequest((unfused, fuse_all), rounds=1, n_batches=1))
    assert checked.mismatches[0] == 0 and (checked.mismatches[1] > 0) == (fuse_all_differs > 0)
    firsts: list[str] = []
    pairs = [(lambda: None, lambda k=k: k) for k in "abc"]
    real = runner.backend.time_batches

    def recorded(baseline, candidate, n_batches, batch_target_s):  # noqa: ANN001, ANN202
        firsts.append(candidate())
        return real(baseline, candidate, n_batches=n_batches, batch_target_s=batch_target_s)

    monkeypatch.setattr(runner.backend, "time_batches", recorded)
    runner._interleaved_rounds(pairs, rounds=3, n_batches=1)
    assert firsts == [*"abc", *"bca", *"cab"]


@pytest.mark.parametrize("model", ["aliased_outputs.py", "dict_outputs.py"])
def test_a_model_returning_a_tensor_twice_and_an_input_is_compared_in_its_own_structure(model: str) -> None:
    """The captured graph returns each distinct tensor once and no input: compared with its
    references, the applied model's three outputs read as 'NOT bitwise' (a missing output
    per input set), although torch.equal holds for each. A dict is compared by its values."""
    from sktune.pipe.protocol import ThroughCompileRequest
    from sktune.worker.runner import RunnerConfig, TrialRunner

    path = Path(__file__).resolve().parents[1] / "models" / model
    runner = TrialRunner(RunnerConfig(model_path=str(path), n_batches=2))
    plan, expected = _fuse_all_and_its_direct_mismatches(runner)
    result = runner.through_compile(ThroughCompileRequest(plan, rounds=1, n_batches=1))
    assert result.mismatches == expected  # the same bits as the direct compile; no output "missing"


def test_a_failure_through_apply_still_leaves_no_dynamo_cache(runner: "TrialRunner",
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import sktune._apply
    from sktune.pipe.protocol import ThroughCompileRequest

    resets: list[bool] = []
    monkeypatch.setattr(torch._dynamo, "reset", lambda: resets.append(True))

    def broken(model, plan, backend):  # noqa: ANN001, ANN202
        def call(*args):  # noqa: ANN002, ANN202
            raise PlanError("the model's graph differs from the tuned one")
        return call

    monkeypatch.setattr(sktune._apply, "apply", broken)
    plan = runner.backend.fuse_all_plan(runner.shape(None).graph)
    with pytest.raises(PlanError):
        runner.through_compile(ThroughCompileRequest(plan, rounds=1, n_batches=1))
    assert resets == [True]


_SHIFT = torch.linspace(0.0, 1.0, 8)  # a module-level tensor: Dynamo passes it as an argument too


class _SquareWeight(torch.nn.Module):
    """A parameter with the input's own shape: among Dynamo's arguments it looked like an input.
    A global tensor and one held in a list are arguments that are no input either."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.linspace(-1.0, 1.0, 64).reshape(8, 8))
        self.cache = [torch.full((8,), 0.5)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ self.weight) + _SHIFT + self.cache[0]


@pytest.mark.parametrize("root", ["module", "sequential"])  # Dynamo names a Sequential's own module L['fn']
@pytest.mark.parametrize(("rows", "warned"), [(8, False), (4, True)])
def test_apply_warns_at_an_unverified_shape_even_beside_a_parameter_of_the_verified_one(
        rows: int, warned: bool, root: str, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from sktune._apply import EXPORT_VERSION_KEY

    document = {EXPORT_VERSION_KEY: 1, "plan": Plan().to_json(),
                "provenance": {"verified_shapes": {"rows8": [[[8, 8], "torch.float32"]]}}}
    module = _SquareWeight() if root == "module" else torch.nn.Sequential(_SquareWeight(), _SquareWeight())
    model = sktune.apply(module.eval(), document)
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="sktune"):
        model(torch.randn(rows, 8))
    assert ("plan was not verified on (verified: rows8 [[8, 8]])" in caplog.text) is warned


def test_without_dynamo_s_sources_the_user_inputs_are_the_arguments_less_the_module_s_tensors() -> None:
    module = _SquareWeight().eval()
    applied = sktune.applied_plan(sktune.apply(module, Plan()))
    x = torch.randn(4, 8)
    assert applied.user_inputs([module.weight.detach(), x], None) == [x]  # another torch: no sources
    assert applied.user_inputs([module.weight.detach(), x], [False, True]) == [x]
