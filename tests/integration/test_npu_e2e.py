"""``sktune run --backend npu`` end to end on the emulated Ascend (tests/npu_emulator).

Each step runs the real CLI in a subprocess that finds the emulator's ``torch_npu`` on
``PYTHONPATH``, exactly as README's emulator command does. Every time these runs produce
is the emulator's model of a device, never an NPU figure; what is checked is the path:
plans compile, outputs are verified, faults are caught, files parse.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from sktune.graph.grouping import regions
from tests.cli.test_cli import sktune as run_cli
from tests.emulated_npu import EMULATOR_PATH

ROOT = Path(__file__).resolve().parents[2]
MOE = ROOT / "studies" / "moe_block.py"


def emulated_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([EMULATOR_PATH, str(ROOT)]), **extra}


def sktune(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The CLI as the other CLI tests run it, with the emulator on the path."""
    return run_cli(*args, cwd=cwd, env=env or emulated_env())


@pytest.fixture(scope="module")
def moe_study(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("npu_e2e")
    storage = f"sqlite:///{root}/npu.db"
    result = sktune("run", str(MOE), "--backend", "npu", "--effort", "quick", "--trials", "12", "--study", "moe",
                    "--storage", storage, "--summary-json", str(root / "summary.json"), cwd=root)
    assert result.returncode == 0, result.stderr[-4000:]
    return {"root": root, "storage": storage, "result": result,
            "summary": json.loads((root / "summary.json").read_text()),
            "study": optuna.load_study(study_name="moe", storage=storage)}


@pytest.mark.slow  # the emulated npu study behind it: 30-40 s on a 2.8 GHz Xeon; CI runs it (.ci/run)
def test_run_completes_labelled_emulated_and_verified(moe_study: dict) -> None:
    data, result = moe_study["summary"], moe_study["result"]
    assert data["backend"] == "npu" and data["device"] == "npu-emulator" and data["emulated"] is True
    assert data["cpu"] is None  # npu kernels are built for the device, not the host CPU
    assert data["verified_bitwise"] is True and data["speedup"] > 1
    assert "EMULATED Ascend" in result.stdout and "(emulated)" in result.stdout
    anchors = {a["anchor"]: a for a in data["anchors"]}
    measured = {str(t.user_attrs.get("anchor")) for t in moe_study["study"].trials}
    assert {"unfused", "no-scopes", "full-model", "full-model+dcci_after_kernel_end", "scope-per-layer",
            "scope-per-mlp"} <= measured
    best_anchor = moe_study["study"].trials[data["best_trial"]].user_attrs.get("anchor")
    assert anchors and set(anchors) <= measured - {"None", "unfused", best_anchor}  # the best and unfused: not
    assert not any(a.startswith("best+") for a in anchors)  # starting points; refinement trials neither
    assert all(a["best_speedup_over"] >= 1 - 1e-9 for a in anchors.values() if a["bitwise"])
    study = moe_study["study"]
    plans = [t.user_attrs["plan"] for t in study.trials if "plan" in t.user_attrs]
    assert not any("fallback_ops" in p["options"] for p in plans), "Inductor options never reach the npu"


def _expected_superkernels(plan: dict, n_ops: int, targets: list[str], kernelless: list[bool]) -> int:
    """SuperKernels the plan asks for: one per region; without task_breaker_bypass an AI CPU op
    (topk) splits its region; pieces that launch no kernel make none."""
    from sktune.plan import Plan

    parsed = Plan.from_json(plan)
    bypass = parsed.option_dict.get("aggressive_opt_strategies.task_breaker_bypass") == 1
    count = 0
    for first, last in regions(n_ops, parsed.scopes):
        piece: list[int] = []
        for i in list(range(first, last + 1)) + [None]:
            if i is None or (targets[i] == "topk" and not bypass):
                count += any(not kernelless[j] for j in piece)
                piece = []
            else:
                piece.append(i)
    return count


@pytest.mark.slow  # the emulated npu study behind it: 30-40 s on a 2.8 GHz Xeon; CI runs it (.ci/run)
def test_planned_groups_are_the_superkernels_in_the_profile(moe_study: dict) -> None:
    from sktune.graph.aliasing import kernelless_ops
    from sktune.graph.capture import capture
    from sktune.load import build, draw_inputs, load_model_file

    source = load_model_file(MOE)
    inputs = draw_inputs(source, 0)
    graph = capture(build(source), inputs)
    kernelless = list(kernelless_ops(graph.gm, graph.args_for(inputs)))
    targets = [op.target for op in graph.ops]
    study = moe_study["study"]
    best = moe_study["summary"]["best_trial"]
    checked = 0
    for t in study.trials:
        observed = t.user_attrs.get("observed") or {}
        if t.state != optuna.trial.TrialState.COMPLETE or "superkernels" not in observed:
            continue
        fusion = observed["fusion"]
        assert fusion["not_fused"] == [] and fusion["unexpected"] == [], (t.number, fusion)
        if t.user_attrs["plan"]["scopes"]:
            assert sorted({k["scope"] for k in observed["superkernels"]}) == fusion["planned"]
            rows = len(observed["superkernels"])
            assert rows == _expected_superkernels(t.user_attrs["plan"], len(targets), targets, kernelless), t.number
            checked += 1
        else:
            assert fusion["automatic"], "SuperKernel on without scopes fuses what it can"
    assert checked >= 3
    assert study.trials[best].constraints == {"bitwise": 0.0}


@pytest.mark.slow  # the emulated npu study behind it: 30-40 s on a 2.8 GHz Xeon; CI runs it (.ci/run)
def test_corrupting_options_are_infeasible_and_bisected(moe_study: dict) -> None:
    """The runtime's default dcci (no flush) lets the expert gather read stale indices."""
    study = moe_study["study"]
    full = next(t for t in study.trials if t.user_attrs.get("anchor") == "full-model")
    assert full.state == optuna.trial.TrialState.COMPLETE and full.constraints["bitwise"] > 0
    assert full.user_attrs["mismatches"][0]["count"] > 0
    found = full.user_attrs["smallest_failing_range"]
    first, last = found["range"]
    assert "gather" in found["op_types"] and last - first < 40, found
    safe = next(t for t in study.trials if t.user_attrs.get("anchor") == "full-model+dcci_after_kernel_end")
    assert safe.constraints == {"bitwise": 0.0}


@pytest.mark.slow  # ~25 s on a 2.8 GHz Xeon (report, export, apply and profile under the emulator); CI runs it (.ci/run)
def test_report_export_apply_and_profile(moe_study: dict) -> None:
    root, storage = moe_study["root"], moe_study["storage"]
    report = sktune("report", "--study", "moe", "--storage", storage, "-o", str(root / "r.html"), cwd=root)
    assert report.returncode == 0, report.stderr[-3000:]
    html = (root / "r.html").read_text()
    assert "EMULATED Ascend" in html and "step µs (emulated)" in html
    # Where time goes: the device profile, said emulated; no CPU profiler's caveats, no Inductor options.
    assert "on the emulated Ascend: its model of a device, not an NPU" in html
    assert "busy time vs gap (torch_npu.profiler, emulated," in html and "profiler-inflated" not in html
    assert "fallback_ops" not in html.split('id="fusion"')[1].split('id="time"')[0]
    assert "Upper row: the plan; lower row: the fusion the backend reported" in html
    assert "The best plan against each starting point" in html

    snippet = sktune("export", "--study", "moe", "--storage", storage, "--format", "python", cwd=root)
    assert snippet.returncode == 0, snippet.stderr[-3000:]
    # Its figures are the emulator's, not an NPU's: said on the figure, and in the JSON's provenance.
    assert "# Emulated (the emulated Ascend's model of a device, not an NPU measurement): speedup" in snippet.stdout
    assert "# Measured" not in snippet.stdout
    document = sktune("export", "--study", "moe", "--storage", storage, "--format", "json", cwd=root)
    assert json.loads(document.stdout)["provenance"]["emulated"] is True
    script = root / "use_it.py"
    script.write_text(f"""
import importlib.util, json, torch
torch.set_grad_enabled(False)
spec = importlib.util.spec_from_file_location("moe", {str(MOE)!r}); moe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(moe)
x = moe.example_inputs(1)
model = moe.build_model().eval()
expected = model(*x)
{snippet.stdout}
pasted = model(*x)
import sktune
applied = sktune.apply(moe.build_model().eval(), PLAN, backend="npu")(*x)
print(json.dumps([bool(torch.equal(pasted, expected)), bool(torch.equal(applied, expected))]))
""")
    ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=root,
                         env=emulated_env(), timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert json.loads(ran.stdout.strip().splitlines()[-1]) == [True, True]

    # Of a study's profiles only the baseline's and the best's stay (a timing session's is read
    # once: 103 directories after a 7-trial study kept them all); the summary names the best's.
    profiles = sorted((root / ".sktune" / "npu-profiles").iterdir())
    best_profile = Path(moe_study["summary"]["profile_best"]["profile_dir"])
    assert len(profiles) == 2 and best_profile in {p.resolve() for p in profiles}, profiles
    assert f"the best's device profile: {best_profile}" in moe_study["result"].stdout
    shown = sktune("profile", str(best_profile), "--json", cwd=root)
    assert shown.returncode == 0, shown.stderr[-3000:]
    summary = json.loads(shown.stdout)
    assert summary["steps"] and summary["markers_filtered"] >= 0 and summary["top_kernels"]


@pytest.mark.slow  # ~1 min, mostly the watchdog waiting on hung workers; CI runs it (.ci/run)
def test_hanging_trial_is_failed_diagnosed_once_and_the_study_goes_on(tmp_path: Path) -> None:
    """value_breaker_bypass fuses the wait op: the emulated SuperKernel deadlocks, as real ones can.

    The hanging plan is queued, not left to the sampler (whose local search may try other
    moves first): the full-model anchor with the bypass on, run by the resumed study."""
    storage = f"sqlite:///{tmp_path}/hang.db"
    logs = tmp_path / "ascend-log"
    args = [str(ROOT / "tests" / "models" / "npu_wait.py"), "--backend", "npu", "--effort", "quick", "--no-stop",
            "--trial-timeout", "5", "--study", "hang", "--storage", storage]
    env = emulated_env(ASCEND_PROCESS_LOG_PATH=str(logs))
    first = sktune("run", *args, "--trials", "3", cwd=tmp_path, env=env)
    assert first.returncode == 0, first.stderr[-4000:]
    study = optuna.load_study(study_name="hang", storage=storage)
    # Any whole-model scope (the speed-option variants run first now): the bypass fuses the wait op.
    full_model = next(t for t in study.trials if str(t.user_attrs.get("anchor", "")).startswith("full-model"))
    study.enqueue_trial({**full_model.params, "aggressive_opt_strategies.value_breaker_bypass": 1})
    result = sktune("run", *args, "--trials", "12", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "Traceback" not in result.stderr
    trials = [t for t in optuna.load_study(study_name="hang", storage=storage).trials if t.state.is_finished()]
    hung = [t for t in trials if t.user_attrs.get("failure", "").startswith("hang")]
    assert hung, [(t.number, t.state.name, t.user_attrs.get("plan", {}).get("options")) for t in trials]
    assert all(t.state == optuna.trial.TrialState.FAIL for t in hung)
    assert all(t.user_attrs["plan"]["options"]["aggressive_opt_strategies.value_breaker_bypass"] for t in hung)
    diagnosed = [t for t in hung if "diagnosis" in t.user_attrs]
    assert len(diagnosed) == 1, "one debug rerun per run by default (--diagnose 1)"
    diagnosis = diagnosed[0].user_attrs["diagnosis"]
    assert diagnosis["plan"]["options"]["super_kernel_debug_options"] == {"debug_op_exec_trace": 1}
    assert diagnosis["outcome"].startswith("hang")
    plogs = list(logs.rglob("*.log"))
    assert plogs and "wait" in plogs[0].read_text().lower()
    later = [t for t in trials if t.number > hung[0].number and t not in hung]
    assert later, "the study goes on after the hang: later trials are measured or pruned"
    assert not [t for t in trials if t.state == optuna.trial.TrialState.FAIL and t not in hung]
