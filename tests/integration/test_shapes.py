"""One plan for several served shapes, end to end: a graph per shape, verification at
every shape, the weighted score, the per-shape summary rows, export and apply."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import optuna
import pytest
import torch

import sktune
from sktune.load import load_model_file
from sktune.space.plan import Plan, Scope
from sktune.tuning.probe import probe_exactness
from sktune.tuning.protocol import TrialRequest
from sktune.tuning.runner import RunnerConfig, TrialRunner
from tests.cli.test_cli import sktune as cli
from tests.integration.test_npu_e2e import emulated_env

SHAPE_KEYS = {"weight", "baseline_s", "best_s", "speedup", "speedup_ci", "verified_bitwise", "regret"}


def fuse_all(runner: TrialRunner) -> Plan:
    return Plan.make([Scope(0, len(runner.graph.ops) - 1, "all")], {})


def test_each_shape_has_its_own_graph_and_a_plan_can_be_exact_at_one_shape_only(test_models: Path,
                                                                                tmp_path: Path) -> None:
    runner = TrialRunner(RunnerConfig(model_path=str(test_models / "two_widths.py"), n_batches=2,
                                      probe_cache=str(tmp_path / "probe.json")))
    assert list(runner.describe()["shapes"]) == ["wide", "narrow"]  # heaviest first
    assert [list(t.shape) for t in runner.shape("narrow").inputs[0]] == [[1, 16]]
    assert runner.shape("narrow").graph is not runner.graph  # shapes are static: one graph each
    wide = runner.run(TrialRequest(fuse_all(runner)))
    narrow = runner.run(TrialRequest(fuse_all(runner), shape="narrow"))
    assert wide.bitwise and not narrow.bitwise  # Inductor's fused sigmoid vs eager, at 64 and 16 wide
    # The probe runs at every shape: silu alone is exact at the wide shape only, so it is not exact.
    assert probe_exactness(runner, None, {}, "wide")["silu"]["alone"] is True
    assert runner.describe()["exactness"]["silu"]["alone"] is False


def test_multi_shape_run_rejects_a_plan_inexact_at_one_shape_and_reports_each_shape(
        test_models: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    storage = f"sqlite:///{tmp_path}/s.db"
    summary_path = tmp_path / "summary.json"
    result = cli("run", str(test_models / "two_widths.py"), "--backend", "inductor", "--trials", "3",
                 "--storage", storage, "--study", "both", "--summary-json", str(summary_path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    study = optuna.load_study(study_name="both", storage=storage)
    fused = next(t for t in study.trials if t.user_attrs.get("anchor") == "fuse-all")
    assert fused.user_attrs["shapes"]["wide"]["bitwise"] and not fused.user_attrs["shapes"]["narrow"]["bitwise"]
    assert fused.constraints["bitwise"] > 0  # exact at the heavier shape, and still rejected
    data = json.loads(summary_path.read_text())
    assert set(data["shapes"]) == {"wide", "narrow"}
    assert all(SHAPE_KEYS <= set(s) for s in data["shapes"].values())
    assert data["best_trial"] != fused.number and all(s["verified_bitwise"] for s in data["shapes"].values())
    weighted = data["shapes"]["wide"]["speedup"] ** 0.7 * data["shapes"]["narrow"]["speedup"] ** 0.3
    assert data["speedup"] == pytest.approx(weighted)
    assert "at wide" in result.stdout and "at narrow" in result.stdout

    exported = cli("export", "--study", "both", "--storage", storage, "--format", "json", cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr[-3000:]
    document = json.loads(exported.stdout)
    assert set(document["provenance"]["verified_shapes"]) == {"wide", "narrow"}
    source = load_model_file(test_models / "two_widths.py")
    model = sktune.apply(source.build_model(), document)
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="sktune"):
        model(*source.example_inputs(0, shape="narrow"))
        assert "not verified on" not in caplog.text
        model(torch.randn(1, 32))  # a width no study verified
    assert "called at input shapes the plan was not verified on (verified: wide [[1, 64]], narrow [[1, 16]])" \
        in caplog.text


@pytest.mark.slow  # ~30 s (a second study); CI runs it (.ci/run)
def test_shapes_subset_is_tuned_and_exported_alone(test_models: Path, tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path}/s.db"
    result = cli("run", str(test_models / "two_widths.py"), "--backend", "inductor", "--trials", "3",
                 "--shapes", "wide", "--storage", storage, "--study", "wide", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    study = optuna.load_study(study_name="wide", storage=storage)
    fused = next(t for t in study.trials if t.user_attrs.get("anchor") == "fuse-all")
    assert list(fused.user_attrs["shapes"]) == ["wide"] and fused.constraints["bitwise"] == 0  # exact there
    exported = cli("export", "--study", "wide", "--storage", storage, "--format", "json", cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert json.loads(exported.stdout)["provenance"]["verified_shapes"] == {"wide": [[[1, 64], "torch.float32"]]}


def test_npu_backend_compiles_one_graph_per_shape(test_models: Path, tmp_path: Path) -> None:
    summary_path = tmp_path / "summary.json"
    result = cli("run", str(test_models / "two_widths.py"), "--backend", "npu", "--trials", "3",
                 "--storage", f"sqlite:///{tmp_path}/s.db", "--summary-json", str(summary_path), cwd=tmp_path,
                 env=emulated_env())
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads(summary_path.read_text())
    assert data["emulated"] and set(data["shapes"]) == {"wide", "narrow"}
    assert all(s["verified_bitwise"] for s in data["shapes"].values())
