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
from sktune.plan import Plan, Scope
from sktune.worker.probe import probe_exactness
from sktune.pipe.protocol import TrialRequest
from sktune.worker.runner import RunnerConfig, TrialRunner
from tests.cli.test_cli import sktune as cli
from tests.cpu_facts import describe, pointwise_tail_exact
from tests.integration.test_npu_e2e import emulated_env
from tests.models.two_widths import WIDTHS

pytestmark = pytest.mark.exactness  # CI runs these again as an AVX2 and a vector-less CPU (.ci/run)

SHAPE_KEYS = {"weight", "baseline_s", "best_s", "speedup", "speedup_ci", "verified_bitwise", "regret"}


def exact_widths() -> dict[str, bool] | None:
    """At which of two_widths' shapes its fused chain is bitwise on this CPU, read from the
    vector lengths ATen and Inductor use here (tests/cpu_facts.py, tests/models/two_widths.py
    say why); None where those are not known (ARM, or ATen's and Inductor's widths differ)."""
    exact = {name: pointwise_tail_exact(width) for name, width in WIDTHS.items()}
    return None if None in exact.values() else exact  # type: ignore[return-value]


def exact_widths_or_skip() -> dict[str, bool]:
    exact = exact_widths()
    if exact is None:
        pytest.skip(f"two_widths' exactness is not known for {describe()}")
    return exact


def fuse_all(runner: TrialRunner) -> Plan:
    return Plan.make([Scope(0, len(runner.graph.ops) - 1, "all")], {})


def test_each_shape_has_its_own_graph_and_a_plan_can_be_exact_at_one_shape_only(test_models: Path,
                                                                                tmp_path: Path) -> None:
    exact = exact_widths_or_skip()
    runner = TrialRunner(RunnerConfig(model_path=str(test_models / "two_widths.py"), n_batches=2,
                                      probe_cache=str(tmp_path / "probe.json")))
    assert list(runner.describe().shapes) == ["wide", "narrow"]  # heaviest first
    assert [list(t.shape) for t in runner.shape("narrow").inputs[0]] == [[1, WIDTHS["narrow"]]]
    assert runner.shape("narrow").graph is not runner.graph  # shapes are static: one graph each
    wide = runner.run(TrialRequest(fuse_all(runner)))
    narrow = runner.run(TrialRequest(fuse_all(runner), shape="narrow"))
    assert {"wide": wide.bitwise, "narrow": narrow.bitwise} == exact  # with vectors: exact at wide only
    # The probe runs at every shape: silu alone exact at the wide shape only is not exact.
    assert probe_exactness(runner, None, {}, "wide")["silu"]["alone"] is exact["wide"]
    assert runner.describe().exactness["silu"]["alone"] is all(exact.values())


@pytest.mark.slow  # ~55 s (8 trials at two shapes, so that fuse-all is reached); CI runs it (.ci/run)
def test_multi_shape_run_rejects_a_plan_inexact_at_one_shape_and_reports_each_shape(
        test_models: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    if exact_widths_or_skip() != {"wide": True, "narrow": False}:
        pytest.skip("the fused chain is exact at both widths on this CPU (no vectors): no plan to reject")
    storage = f"sqlite:///{tmp_path}/s.db"
    summary_path = tmp_path / "summary.json"
    result = cli("run", str(test_models / "two_widths.py"), "--backend", "inductor", "--trials", "8",  # fuse-all (inexact by the probe) runs after the starting points that can win
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
    from sktune.report import data as report_data  # the report names the shape its profiles ran at
    assert set(report_data.time_breakdown(study)["shape"]) == {"wide"}  # the heaviest

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
    verified = f"verified: wide [[1, {WIDTHS['wide']}]], narrow [[1, {WIDTHS['narrow']}]]"
    assert f"called at input shapes the plan was not verified on ({verified})" in caplog.text


@pytest.mark.slow  # ~30 s (a second study); CI runs it (.ci/run)
def test_shapes_subset_is_tuned_and_exported_alone(test_models: Path, tmp_path: Path) -> None:
    assert exact_widths_or_skip()["wide"]
    storage = f"sqlite:///{tmp_path}/s.db"
    result = cli("run", str(test_models / "two_widths.py"), "--backend", "inductor", "--trials", "3",
                 "--shapes", "wide", "--storage", storage, "--study", "wide", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    study = optuna.load_study(study_name="wide", storage=storage)
    fused = next(t for t in study.trials if t.user_attrs.get("anchor") == "fuse-all")
    assert list(fused.user_attrs["shapes"]) == ["wide"] and fused.constraints["bitwise"] == 0  # exact there
    exported = cli("export", "--study", "wide", "--storage", storage, "--format", "json", cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr[-3000:]
    provenance = json.loads(exported.stdout)["provenance"]
    # The shape --shapes left out is still served: the best is verified there (never timed), as
    # any named best must be bitwise at every verify-only shape.
    assert provenance["verify_only_shapes"] == ["narrow"]
    assert provenance["verified_shapes"] == {"wide": [[[1, WIDTHS["wide"]], "torch.float32"]],
                                             "narrow": [[[1, WIDTHS["narrow"]], "torch.float32"]]}


@pytest.mark.slow  # ~17 s on a 2.8 GHz Xeon (emulated npu, three shapes); CI runs it (.ci/run)
def test_npu_backend_compiles_one_graph_per_shape(test_models: Path, tmp_path: Path) -> None:
    summary_path = tmp_path / "summary.json"
    result = cli("run", str(test_models / "two_widths.py"), "--backend", "npu", "--trials", "3",
                 "--storage", f"sqlite:///{tmp_path}/s.db", "--summary-json", str(summary_path), cwd=tmp_path,
                 env=emulated_env())
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads(summary_path.read_text())
    assert data["emulated"] and set(data["shapes"]) == {"wide", "narrow"}
    assert all(s["verified_bitwise"] for s in data["shapes"].values())
