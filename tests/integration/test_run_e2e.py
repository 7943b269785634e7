"""``sktune run`` end to end on a studies model: real compiles, real timing, real study."""

from __future__ import annotations

import json
import os
from pathlib import Path

import optuna
import pytest
import torch

from sktune.host_cpu import cache_tag
from tests.cli.test_cli import sktune
from tests.integration.test_reliability import within_budget

SUMMARY_KEYS = {"study", "backend", "n_trials", "n_complete", "n_infeasible", "n_failed", "baseline_s", "best_s",
                "speedup", "speedup_ci", "verified_bitwise", "input_sets", "best_plan", "groups"}


def finished(trials: list) -> list:
    """Trials that ran (enqueued anchors not yet run are WAITING)."""
    return [t for t in trials if t.state.is_finished()]


@pytest.mark.slow  # ~63 s: the default suite took 12:09 on a clean clone here; CI's slow run covers it
def test_run_summary_and_resume(studies_dir: Path, tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path}/study.db"
    summary_path = tmp_path / "summary.json"
    result = sktune("run", str(studies_dir / "quant_block.py"), "--backend", "inductor", "--trials", "7",
                    "--storage", storage, "--study", "e2e", "--summary-json", str(summary_path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads(summary_path.read_text())
    assert SUMMARY_KEYS <= set(data)
    assert data["study"] == "e2e" and data["backend"] == "inductor" and data["input_sets"] == 3
    # 7 trials, plus the best plan tried once with each costly option value (tuning/refine.py)
    assert data["n_trials"] in (7, 8) and data["n_complete"] + data["n_failed"] + data["n_interrupted"] + data["n_pruned"] == data["n_trials"]
    assert data["verified_bitwise"] is True
    lo, hi = data["speedup_ci"]
    assert lo <= data["speedup"] <= hi
    assert abs(data["speedup"] - data["baseline_s"] / data["best_s"]) < 1e-9
    scopes = data["best_plan"]["scopes"]
    assert all({"name", "first_op", "last_op"} <= set(s) for s in scopes)
    fused = sorted(i for g in data["groups"] for i in g)
    assert len(fused) == len(set(fused)), "an op is in two groups"
    assert f"best #{data['best_trial']}" in result.stdout  # the summary table names the best trial
    # Where it ran: exactness follows the CPU's vector width (host_cpu.py).
    assert data["cpu"]["capability"] == torch.backends.cpu.get_cpu_capability() and data["cpu"]["name"]
    assert f"({data['cpu']['capability']} vectors)" in result.stdout
    assert "USDT" not in result.stdout + result.stderr  # Kineto's profiler_start/stop lines (measure/raw_events.py)

    study = optuna.load_study(study_name="e2e", storage=storage)
    trials = finished(study.get_trials())
    assert len(trials) == data["n_trials"]
    refined = [t for t in trials if str(t.user_attrs.get("anchor", "")).startswith("best+")]
    assert len(trials) - len(refined) == 7
    anchors = [t.user_attrs.get("anchor") for t in trials]
    # The starting points that can be the best run first (quant_block: fuse-all is exact);
    # the unfused plan after them, once, for the finalists' round.
    assert anchors[0] == "fuse-all" and anchors.count("unfused") == 1
    unfused = trials[anchors.index("unfused")]
    assert unfused.state == optuna.trial.TrialState.COMPLETE and unfused.constraints == {"bitwise": 0.0}
    assert unfused.value > 0 and unfused.user_attrs["timing"]["n_batches"] > 0
    assert all("plan" in t.user_attrs for t in trials)
    assert study.user_attrs["profile_baseline"]["busy_us"] > 0
    phases = study.user_attrs["phases_s"]  # where the run's time went after start-up
    assert list(phases) == ["search", "refine", "yardsticks", "finalists", "through_compile", "profiles"]
    assert min(phases.values()) >= 0
    assert phases["search"] > 0 and phases["profiles"] > 0
    assert os.path.isdir(tmp_path / ".sktune" / "cache" / "e2e")

    again = sktune("run", str(studies_dir / "quant_block.py"), "--backend", "inductor", "--trials", "2",
                   "--storage", storage, "--study", "e2e", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    # Two more measured trials; a refinement only if the best plan changed to an untried one. A
    # sampled plan that the first run measured is reused, not compiled, and costs no trial.
    resumed = finished(optuna.load_study(study_name="e2e", storage=storage).get_trials())
    reused = [t for t in resumed if "reused_from" in t.user_attrs]
    assert all(t.user_attrs["compiled"] is False and t.user_attrs["reused_from"] < t.number for t in reused)
    assert len([t for t in resumed if not str(t.user_attrs.get("anchor", "")).startswith("best+")]) == 9 + len(reused)

    # One Inductor cache per CPU and capability (Inductor's key names neither: host_cpu.py);
    # under another capability the verdicts would not carry over, so the resume is refused.
    assert [p.name for p in (tmp_path / ".sktune" / "cache" / "e2e").iterdir()] == [cache_tag()]
    if torch.backends.cpu.get_cpu_capability() != "DEFAULT":  # else no other capability exists here
        scalar = sktune("run", str(studies_dir / "quant_block.py"), "--backend", "inductor", "--trials", "1",
                        "--no-probe", "--storage", storage, "--study", "e2e", cwd=tmp_path,
                        env={**os.environ, "ATEN_CPU_CAPABILITY": "default"})
        assert scalar.returncode == 1 and "cpu_capability" in scalar.stderr and "--allow-changed" in scalar.stderr
        assert "Traceback" not in scalar.stderr
        # The refusal is the one line: no progress bar left above it (the steps it announced, a
        # resume's "load, capture, reference", are test_cli.py's test_the_start_up_line_announces_only_what_runs).
        assert "starting worker" not in scalar.stderr and scalar.stderr.lstrip().startswith("error:")


@pytest.mark.slow  # ~1 min: three worker faults and restarts; CI runs it (.ci/run)
def test_crash_raise_and_garbage_are_failed_trials(test_models: Path, tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path}/faults.db"
    env = {**os.environ, "SKTUNE_TEST_FAULT": "crash,raise,garbage", "SKTUNE_TEST_FAULT_MARKER": str(tmp_path / "n")}
    result = sktune("run", str(test_models / "tiny_norm.py"), "--backend", "inductor", "--trials", "5",
                    "--storage", storage, "--study", "f", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    trials = finished(optuna.load_study(study_name="f", storage=storage).get_trials())
    reasons = [t.user_attrs.get("failure", "") for t in trials]
    assert reasons[0].startswith("crash: worker exited with code 3")
    assert reasons[1] == "error: RuntimeError: injected fault"
    assert reasons[2].startswith("error: malformed result")
    assert [t.state.name for t in trials][:5] == ["FAIL"] * 3 + ["COMPLETE"] * 2  # then any refinement
    assert "Traceback" not in result.stderr


def _fault_env(kind: str, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "SKTUNE_TEST_FAULT": kind, "SKTUNE_TEST_FAULT_MARKER": str(tmp_path / f"{kind}.fired")}


@pytest.mark.slow  # ~2 min: a 30 s hang plus two worker restarts; CI runs it (.ci/run)
def test_hung_and_crashed_trials_are_failed_and_study_continues(test_models: Path, tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path}/faults.db"
    for kind, reason in (("hang", "hang"), ("segfault", "crash")):
        result = sktune("run", str(test_models / "tiny_norm.py"), "--backend", "inductor", "--trials", "2",
                        "--storage", storage, "--study", "faults", "--trial-timeout", "30",
                        cwd=tmp_path, env=_fault_env(kind, tmp_path))
        assert result.returncode == 0, result.stderr[-3000:]
        assert (tmp_path / f"{kind}.fired").exists()
        trials = optuna.load_study(study_name="faults", storage=storage).get_trials()
        failed = [t for t in trials if t.state == optuna.trial.TrialState.FAIL]
        assert failed and failed[-1].user_attrs["failure"].startswith(reason)
    # --trials 2 twice; past the budget, the unfused plan may run for the finalists and the best
    # with a costly option (tuning/refine.py).
    trials = within_budget(finished(optuna.load_study(study_name="faults", storage=storage).get_trials()))
    assert len(trials) == 4
    assert sum(t.state == optuna.trial.TrialState.COMPLETE for t in trials) == 2
