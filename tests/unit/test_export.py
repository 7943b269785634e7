"""``sktune export``: JSON provenance, the Python snippet, the scope-marker patch, the CLI."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import torch

from sktune.backends.npu import NpuBackend
from sktune.errors import ExportError
from sktune.graph.capture import capture
from sktune.load import build, draw_inputs, load_model_file
from sktune.report.export import export_json, export_patch, export_python
from sktune.plan import Plan, Scope
from sktune.tuning.storage import load_existing_study
from tests.tuned_study import TinyStudy, tiny_study

STRAIGHT = '''\
import torch


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(16, 16)

    def forward(self, x):
        h = self.proj(x)
        h = torch.relu(h)
        g = h * 2.0
        g = g + 1.0
        y = torch.tanh(g)
        return y + x


class Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.out = torch.nn.Linear(16, 16)

    def forward(self, x):
        z = self.block(x)
        return self.out(z) * 0.5


def build_model():
    torch.manual_seed(0)
    return Outer()


def example_inputs(seed=0):
    return (torch.randn(4, 16, generator=torch.Generator().manual_seed(seed)),)
'''
# ops of STRAIGHT (line): 0 linear (10), 1 relu (11), 2 mul (12), 3 add (13), 4 tanh (14), 5 add (15),
# 6 linear (26), 7 mul (26)
TIMING = {"baseline_s": 2e-4, "candidate_s": 1e-4, "ratio": 0.5, "ratio_ci": [0.45, 0.6], "n_batches": 30}


# -- a hand-made study around a real capture --------------------------------------------
@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    root = tmp_path_factory.mktemp("straight")
    path = root / "straight.py"
    path.write_text(STRAIGHT)
    source = load_model_file(path)
    with torch.no_grad():
        graph = capture(build(source), draw_inputs(source, 0))
    ops = [op.to_json() for op in graph.ops]
    assert [op["target"] for op in ops] == ["linear", "relu", "mul", "add", "tanh", "add", "linear", "mul"]
    return path, ops


def make_study(tmp_path: Path, model: Path, ops: list[dict], plan: Plan, backend: str = "npu",
               feasible: bool = True) -> optuna.Study:
    """A study holding what ``sktune run`` records, with one trial carrying ``plan``."""
    import hashlib

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(study_name="hand", storage=f"sqlite:///{tmp_path}/hand.db", direction="minimize")
    environment = {"torch": torch.__version__, "threads": "1", "backend": backend}
    if backend == "npu":
        environment.update(torch_npu="2.14.0", device="Ascend910B", key_set="full")
    attrs = {"model": str(model), "model_sha256": hashlib.sha256(model.read_bytes()).hexdigest(), "backend": backend,
             "threads": 1, "input_sets": 3, "ops": ops, "boundaries": list(range(len(ops) - 1)),
             "environment": environment, "input_shapes": [[[4, 16], "torch.float32"]]}
    for key, value in attrs.items():
        study.set_user_attr(key, value)
    study.add_trial(optuna.trial.create_trial(
        value=TIMING["ratio"], user_attrs={"plan": plan.to_json(), "timing": TIMING, "mismatches": []},
        constraints={"bitwise": 0.0 if feasible else 3.0}))
    return study


class MarkerLog:
    """Stands in for ``torch.npu`` so that a patched model runs on CPU and logs its markers."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None]] = []

    def super_kernel_scope_begin(self, name: str | None) -> None:
        self.calls.append(("begin", name))

    def super_kernel_scope_end(self, name: str | None) -> None:
        self.calls.append(("end", name))


def test_patch_applies_and_runs_the_markers_around_the_scopes(straight, tmp_path: Path, monkeypatch) -> None:
    path, ops = straight
    plan = Plan.make([Scope(1, 3, "sk0"), Scope(4, 5, "sk1"), Scope(2, 2, None)])
    diff = export_patch(make_study(tmp_path, path, ops, plan), root=path.parent)
    assert diff.startswith("--- a/straight.py\n+++ b/straight.py\n")
    added = [line[1:] for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert added == [
        '        torch.npu.super_kernel_scope_begin("sk0")',
        "        torch.npu.super_kernel_scope_begin(None)",
        "        torch.npu.super_kernel_scope_end(None)",
        '        torch.npu.super_kernel_scope_end("sk0")',
        '        torch.npu.super_kernel_scope_begin("sk1")',
        "        _sktune_out = y + x",
        '        torch.npu.super_kernel_scope_end("sk1")',
        "        return _sktune_out",
    ]
    patched_dir = tmp_path / "tree"
    patched_dir.mkdir()
    (patched_dir / "straight.py").write_text(STRAIGHT)
    result = subprocess.run(["patch", "-p1"], input=diff, text=True, capture_output=True, cwd=patched_dir)
    assert result.returncode == 0, result.stdout + result.stderr
    patched = (patched_dir / "straight.py").read_text()
    ast.parse(patched)
    # Exported where the model file is not below: the diff names the bare file, and says where
    # to apply it from; `patch -p1 -d` that folder works from anywhere (a walk's patch failed).
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    away = export_patch(make_study(elsewhere, path, ops, plan), root=elsewhere)
    assert away.startswith(f"Apply from the model's folder: patch -p1 -d {path.parent.resolve()} < THIS_FILE\n")
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "straight.py").write_text(STRAIGHT)
    applied = subprocess.run(["patch", "-p1", "-d", str(tmp_path / "copy")], input=away, text=True,
                             capture_output=True, cwd=elsewhere)
    assert applied.returncode == 0 and (tmp_path / "copy" / "straight.py").read_text() == patched, applied.stdout
    log = MarkerLog()
    monkeypatch.setattr(torch, "npu", log, raising=False)
    source = load_model_file(patched_dir / "straight.py")
    x = draw_inputs(source, 1)
    with torch.no_grad():
        assert torch.equal(build(source)(*x), build(load_model_file(path))(*x))
    assert log.calls == [("begin", "sk0"), ("begin", None), ("end", None), ("end", "sk0"),
                         ("begin", "sk1"), ("end", "sk1")]
    # As on a host: with torch-npu installed, `import torch` loads it (torch's device-backend
    # autoload), so the patched file, which imports torch alone, finds torch.npu's markers.
    from tests.emulated_npu import EMULATOR_PATH

    run = ("import sys, torch; sys.path.insert(0, '.'); import straight; from sktune.load import draw_inputs, "
           "load_model_file; x = draw_inputs(load_model_file(__import__('pathlib').Path('straight.py')), 1); "
           "print(type(torch.npu).__name__, 'torch_npu' in sys.modules, straight.build_model()(*x).sum().item())")
    on_host = subprocess.run([sys.executable, "-c", run], capture_output=True, text=True, cwd=patched_dir,
                             env={**os.environ, "PYTHONPATH": EMULATOR_PATH}, timeout=120)
    assert on_host.returncode == 0, on_host.stderr[-2000:]
    with torch.no_grad():
        expected = build(load_model_file(path))(*x).sum().item()
    assert on_host.stdout.split() == ["module", "True", str(expected)]


@pytest.mark.parametrize(("scopes", "message"), [
    ([Scope(4, 6, "sk1")],
     "scope sk1 (ops 4..6) starts in Block.forward (line 14) and ends in Outer.forward (line 26): "
     "no single function holds it; use sktune.apply("),
    ([Scope(6, 6, "sk2")], "lines 26..26 of Outer.forward also run op 7 (mul"),
    ([Scope(7, 7, "sk3")], "lines 26..26 of Outer.forward also run op 6 (linear"),
    ([Scope(2, 6, "sk4"), Scope(4, 4, "sk5")], "scope sk4 (ops 2..6) starts in Block.forward (line 12)"),
])
def test_patch_refuses_scopes_that_do_not_map_onto_lines(straight, tmp_path: Path, scopes, message) -> None:
    path, ops = straight
    study = make_study(tmp_path, path, ops, Plan.make(scopes))
    with pytest.raises(ExportError) as info:
        export_patch(study)
    assert message in str(info.value)


def test_patch_of_a_whole_forward(straight, tmp_path: Path) -> None:
    path, ops = straight
    diff = export_patch(make_study(tmp_path, path, ops, Plan.make([Scope(0, 5, "blk")])), root=path.parent)
    added = [line[1:].strip() for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert added == ['torch.npu.super_kernel_scope_begin("blk")', "_sktune_out = y + x",
                     'torch.npu.super_kernel_scope_end("blk")', "return _sktune_out"]
    assert diff.index('begin("blk")') < diff.index("h = self.proj(x)")


def test_patch_refuses_a_changed_model_file_and_an_op_called_from_the_edge(straight, tmp_path: Path) -> None:
    path, ops = straight
    changed = tmp_path / "straight.py"
    changed.write_text(STRAIGHT + "\n# edited\n")
    study = make_study(tmp_path, path, ops, Plan.make([Scope(1, 3, "sk0")]))
    with pytest.raises(ExportError, match="changed since study 'hand' was tuned"):
        export_patch(study, model_file=changed)
    other = tmp_path / "rotary.py"  # --model naming another file: not "changed"
    other.write_text(STRAIGHT + "\n# another model\n")
    with pytest.raises(ExportError, match=r"rotary.py is not the model file study 'hand' was tuned on \(straight.py"):
        export_patch(study, model_file=other)
    # Resumed across that change: re-running the study cannot help (it keeps the first file's ops).
    import hashlib

    study.set_user_attr("resumed_across", [{"model_sha256": hashlib.sha256(changed.read_bytes()).hexdigest(),
                                            "changed": ["model_sha256: …"]}])
    with pytest.raises(ExportError, match=r"resumed across the change \(--allow-changed\) but keeps the ops .* "
                                          r"tune it in a new --study"):
        export_patch(study, model_file=changed)
    # An op right before the scope whose line is unknown may run inside the begin statement.
    relabelled = [dict(op, source="") if op["index"] == 6 else op for op in ops]
    (tmp_path / "b").mkdir()
    study = make_study(tmp_path / "b", path, relabelled, Plan.make([Scope(7, 7, "sk0")]))
    with pytest.raises(ExportError, match="op 6 .* runs just before the scope and may be called from line 26"):
        export_patch(study)


def test_patch_refuses_a_begin_on_a_line_that_calls_the_previous_ops(tuned: TinyStudy, tmp_path: Path) -> None:
    # tiny_norm line 23 `h = self.proj(self.norm(x))`: RMSNorm's ops (0..5) run inside it, before the linear.
    ops = load_existing_study(tuned.name, tuned.storage).user_attrs["ops"]
    study = make_study(tmp_path, tuned.model, ops, Plan.make([Scope(6, 6, "sk0")]), backend="inductor")
    with pytest.raises(ExportError, match=r"op 5 \(mul, .*tiny_norm.py:13\) runs just before the scope and may be "
                                          r"called from line 23 of Tiny.forward"):
        export_patch(study)
    (tmp_path / "c").mkdir()
    study = make_study(tmp_path / "c", tuned.model, ops, Plan.make([Scope(1, 3, "sk0")]), backend="inductor")
    with pytest.raises(ExportError, match="lines 13..13 of RMSNorm.forward also run op 0"):
        export_patch(study)


def test_npu_snippet_has_the_exact_compile_call(straight, tmp_path: Path) -> None:
    path, ops = straight
    plan = Plan.make([Scope(1, 3, "sk0")], {"early_start": 1, "dcci_strategy": "safe"})
    snippet = export_python(make_study(tmp_path, path, ops, plan))
    tree = ast.parse(snippet)
    assignments = {t.targets[0].id: ast.literal_eval(t.value) for t in tree.body
                   if isinstance(t, ast.Assign) and getattr(t.targets[0], "id", "") in ("PLAN", "OPTIONS")}
    assert assignments["OPTIONS"] == NpuBackend(torch_npu_version_="2.14.0").compile_options(plan)
    assert Plan.from_json(assignments["PLAN"]) == plan and assignments["PLAN"]["n_ops"] == len(ops)
    assert ('model = torch.compile(model, backend="npugraph_ex", options=OPTIONS, dynamic=False, fullgraph=True)'
            in snippet.splitlines())
    assert "--format patch" in snippet and 'sktune.apply(model, PLAN, backend="npu")' in snippet
    # A pasted call cannot warn at another shape (sktune.apply does): the comment names the one verified.
    assert "# Verified at input shapes [4, 16] float32 only; at any other the plan is unverified." in snippet


def test_npu_snippet_falls_back_to_apply_when_no_patch_is_possible(straight, tmp_path: Path) -> None:
    path, ops = straight
    snippet = export_python(make_study(tmp_path, path, ops, Plan.make([Scope(4, 6, "sk1")])))
    ast.parse(snippet)
    lines = snippet.splitlines()
    assert 'model = sktune.apply(model, PLAN, backend="npu")' in lines
    assert any(line.startswith("# The scopes cannot be written into your source: scope sk1") for line in lines)
    assert '#   torch.compile(model, backend="npugraph_ex", options=OPTIONS, dynamic=False, fullgraph=True)' in lines


def test_no_feasible_trial_is_an_export_error(straight, tmp_path: Path) -> None:
    path, ops = straight
    study = make_study(tmp_path, path, ops, Plan.make([Scope(0, 7, "sk0")]), feasible=False)
    for export in (export_json, export_python, export_patch):
        with pytest.raises(ExportError, match="no bitwise-exact completed trial"):
            export(study)
    study.ask()  # a worker tuning it now
    with pytest.raises(ExportError, match="0 failed, 1 running now"):
        export_json(study)


# -- the real study ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> TinyStudy:
    return tiny_study(tmp_path_factory)


def test_json_provenance(tuned: TinyStudy) -> None:
    study = load_existing_study(tuned.name, tuned.storage)
    data = export_json(study, tuned.storage)
    assert data["sktune_export_version"] == 1
    plan = Plan.from_json(data["plan"])
    prov = data["provenance"]
    best = study.trials[prov["trial"]]
    assert Plan.from_json(best.user_attrs["plan"]) == plan and best.constraints["bitwise"] <= 0
    assert {"study", "trial", "speedup", "speedup_ci", "verified_bitwise", "input_sets", "environment",
            "sktune_version", "model", "model_sha256", "storage", "n_ops", "op_types"} <= set(prov)
    assert prov["study"] == "t" and prov["input_sets"] == 3 and prov["verified_bitwise"] is True
    assert prov["emulated"] is False  # timed on this CPU (an npu-emulator study says true: test_npu_e2e)
    lo, hi = prov["speedup_ci"]
    assert lo <= prov["speedup"] <= hi
    assert prov["environment"]["torch"] == torch.__version__ and prov["sktune_version"]
    assert prov["model"] == str(tuned.model) and len(prov["model_sha256"]) == 64
    assert prov["n_ops"] == len(prov["op_types"]) == len(study.user_attrs["ops"])
    assert prov["storage"] == tuned.storage
    json.dumps(data)


def test_json_masks_credentials(tuned: TinyStudy) -> None:
    study = load_existing_study(tuned.name, tuned.storage)
    prov = export_json(study, "postgresql://user:hunter2@db.example/sk")["provenance"]
    assert prov["storage"] == "postgresql://user:***@db.example/sk"


def test_inductor_snippet_names_the_measurement(tuned: TinyStudy) -> None:
    study = load_existing_study(tuned.name, tuned.storage)
    snippet = export_python(study)
    ast.parse(snippet)
    assert 'model = sktune.apply(model, PLAN, backend="inductor")' in snippet.splitlines()
    assert "verified bitwise equal to the unfused model on 3 input sets" in snippet
    assert "95 % interval" in snippet and "torch.set_num_threads(1)" in snippet


def test_a_provisional_best_and_a_reason_of_many_lines_stay_honest_in_the_snippet(tuned: TinyStudy) -> None:
    """An export of a stopped study read "Measured: ... significant" from a search trial's figure;
    a keep-unfused reason of several lines (a compiler's message) broke the snippet's Python."""
    from sktune.report.export import _measured
    from sktune.tuning.summary import summary

    study = load_existing_study(tuned.name, tuned.storage)
    data = summary(study)
    plan = Plan.from_json(data["best_plan"])
    provisional = {**data, "provisional": "no finalists' round has completed"}
    text = "\n".join(_measured(provisional, plan, 3))
    assert "PROVISIONAL: no finalists' round has completed" in text and "significant)" not in text
    assert export_json(study)["provenance"]["provisional"] == data["provisional"]
    unfused = {**data, "best_fuses_nothing": True, "keep_unfused_reason": "capture failed:\n  Explanation: ..."}
    ast.parse("\n".join(_measured(unfused, plan, 3)))


# -- the command line ------------------------------------------------------------------------
def sktune(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sktune", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


@pytest.mark.parametrize("fmt", ["json", "python"])
def test_cli_stdout_and_file(tuned: TinyStudy, tmp_path: Path, fmt: str) -> None:
    base = ["export", "--study", tuned.name, "--storage", tuned.storage, "--format", fmt]
    result = sktune(*base, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = tmp_path / f"plan.{fmt}"
    written = sktune(*base, "-o", str(out), cwd=tmp_path)
    assert written.returncode == 0, written.stderr
    assert written.stdout == "" and str(out) in written.stderr
    assert out.read_text() == result.stdout
    if fmt == "json":
        assert json.loads(result.stdout)["provenance"]["study"] == tuned.name
    else:
        ast.parse(result.stdout)


@pytest.mark.slow  # ~9 s on a 2.8 GHz Xeon (export --format patch, then the patched file run); CI runs it (.ci/run)
def test_cli_patch(straight, tmp_path: Path) -> None:
    path, ops = straight
    make_study(tmp_path, path, ops, Plan.make([Scope(1, 3, "sk0")]))
    args = ["export", "--study", "hand", "--storage", f"sqlite:///{tmp_path}/hand.db", "--format", "patch"]
    result = sktune(*args, cwd=path.parent)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("--- a/straight.py") and '+        torch.npu.super_kernel_scope_begin("sk0")' \
        in result.stdout
    written = sktune(*args, "-o", str(tmp_path / "sk.patch"), cwd=path.parent)
    assert written.returncode == 0 and (tmp_path / "sk.patch").read_text() == result.stdout
    # The model file moved since the study: named with --model (the message said "pass the file", and no flag did).
    moved = tmp_path / "moved" / path.name
    moved.parent.mkdir()
    path.rename(moved)
    try:
        lost = sktune(*args, cwd=moved.parent)
        assert lost.returncode == 1 and "pass it with --model PATH" in lost.stderr
        found = sktune(*args, "--model", str(moved), cwd=moved.parent)
        assert found.returncode == 0 and '+        torch.npu.super_kernel_scope_begin("sk0")' in found.stdout
    finally:  # the module's other tests use the file where it was
        moved.rename(path)
    wrong = sktune("export", "--study", "hand", "--storage", f"sqlite:///{tmp_path}/hand.db", "--format", "json",
                   "--model", str(moved), cwd=moved.parent)
    assert wrong.returncode == 1 and "--model is for --format patch" in wrong.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--study", "nope"], "no study 'nope' in"),
    (["--study", "t", "--storage", "sqlite:////nonexistent/dir/x.db"], "does not exist"),
    (["--study", "t", "--storage", "postgresql://u:hunter2@127.0.0.1:1/x"], "postgresql://u:***@127.0.0.1:1/x"),
])
def test_cli_errors_are_one_message(tuned: TinyStudy, tmp_path: Path, args: list[str], message: str) -> None:
    storage = [] if "--storage" in args else ["--storage", tuned.storage]
    result = sktune("export", *args, *storage, "--format", "json", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert message in result.stderr and result.stderr.count("error:") == 1
    assert "Traceback" not in result.stderr and "hunter2" not in result.stderr and result.stdout == ""
    assert not (tmp_path / "sktune.db").exists()


def test_cli_patch_refusal_points_to_apply(straight, tmp_path: Path) -> None:
    path, ops = straight
    make_study(tmp_path, path, ops, Plan.make([Scope(4, 6, "sk1")]))  # spans two functions: no patch possible
    result = sktune("export", "--study", "hand", "--storage", f"sqlite:///{tmp_path}/hand.db", "--format", "patch",
                    cwd=tmp_path)
    assert result.returncode == 1 and "sktune.apply(" in result.stderr and "Traceback" not in result.stderr
    assert "no single function holds it" in result.stderr and result.stdout == ""


def test_the_npu_snippet_raises_capture_limit_past_the_shapes_declared() -> None:
    """Past npugraph_ex's capture_limit (64) a graph runs eager: the warning said so, and the
    snippet a user pastes still left it at 64."""
    plan = Plan.make([Scope(0, 1, "a")], {})
    env = {"torch_npu": "2.14.0"}
    at_limit = "\n".join(NpuBackend.export_snippet(plan, env, 1, shapes=64).before_plan)
    past = "\n".join(NpuBackend.export_snippet(plan, env, 1, shapes=65).before_plan)
    assert "capture_limit" not in at_limit and "'capture_limit': 65" in past


def test_the_snippet_raises_dynamo_s_recompile_limit_past_its_default() -> None:
    from sktune.report.export import _recompile_limit_lines

    assert _recompile_limit_lines(8) == []
    raised = "\n".join(_recompile_limit_lines(71))
    assert "torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 79)" in raised
    import torch._dynamo

    was = torch._dynamo.config.recompile_limit
    try:
        exec(raised, {})  # the lines run as pasted (comments, import, assignment)
        assert torch._dynamo.config.recompile_limit == max(was, 79)  # the default's headroom on top
    finally:
        torch._dynamo.config.recompile_limit = was


def test_exporting_a_study_still_being_prepared_says_so(tmp_path: Path) -> None:
    # It said "no bitwise-exact completed trial …; run more trials" of a study its creator
    # was preparing (a second worker's export during the first's start-up).
    from sktune.report.export import export_json
    from sktune.tuning.attrs import StudyAttr

    study = optuna.create_study(study_name="s", storage=f"sqlite:///{tmp_path}/s.db")
    study.set_user_attr(StudyAttr.CREATOR, {"host": "h1", "pid": 42, "at": 0.0})
    with pytest.raises(ExportError, match=r"'s' is still being prepared by the run that created it \(pid 42 on h1\)"):
        export_json(study)
