"""``sktune profile`` as a user meets it: a subprocess, its output and exit code."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "npu_profiles"
RUN = FIXTURES / "localhost_41234_20250109120000123_ascend_pt"
REAL = Path(__file__).resolve().parents[1] / "fixtures" / "npu_profiles" / "real" / "kernel_details_bf16_train.csv"


def sktune(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sktune", "profile", *args], capture_output=True, text=True,
                          timeout=120)


def test_json_contract_on_fixture() -> None:
    result = sktune(str(RUN), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert {"steps", "by_core", "top_kernels"} <= set(data)
    step = data["steps"][0]
    assert {"step", "span_us", "busy_us", "gap_us", "kernels", "free_us"} <= set(step)
    assert (step["span_us"], step["busy_us"], step["gap_us"], step["kernels"]) == (149.0, 121.25, 27.75, 7)
    assert step["free_us"] == 30.125  # step_trace's Free, apart: it runs to the next step's first kernel
    assert data["by_core"]["HCCL"] == 50.0
    assert all(set(k) == {"name", "type", "total_us", "count"} for k in data["top_kernels"])
    assert [s["scope"] for s in data["superkernels"]] == ["layer_0", "decoder_layer_1"]


def test_json_on_real_file() -> None:
    result = sktune(str(REAL), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert [s["step"] for s in data["steps"]] == [19] and data["steps"][0]["kernels"] == 25  # one task under two names counts once
    assert next(iter(data["by_core"])) == "MIX_AIC"
    assert data["emulated"] is False  # a real Ascend's file: never labelled emulated


def test_human_summary_on_fixture() -> None:
    result = sktune(str(FIXTURES / "kernel_details_block_dim_steps.csv"))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for text in ("Per step", "Time by core", "AI_CPU", "attn_block_2", "Marker kernels filtered: 1"):
        assert text in out


def test_human_summary_says_when_the_profile_has_no_steps() -> None:
    result = sktune(str(RUN))  # no Step Id column: a run without profiler steps
    assert result.returncode == 0, result.stderr
    assert "No Step Id column" in result.stdout and "DEFAULT_NODE ×1" in result.stdout
    assert "Free µs" in result.stdout and "up to the next step's first kernel" in " ".join(result.stdout.split())
    assert "Not in sktune's list" not in result.stdout


@pytest.mark.parametrize("kind", ["missing", "not_a_profile", "header_only", "json", "renamed_in_folder"])
def test_bad_path_is_one_message(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "nope"
    if kind == "not_a_profile":
        target = tmp_path / "notes.csv"
        target.write_text("a,b\n1,2\n")
    if kind == "header_only":  # a file cut short: its summary was empty, "nothing fused", exit 0
        target = tmp_path / "kernel_details.csv"
        target.write_text(REAL.read_text().splitlines()[0] + "\n")
    if kind == "json":  # read as a CSV, it failed on its header
        target = tmp_path / "trace_view.json"
        target.write_text('[{"ph": "X", "name": "MatMul"}]')
    if kind == "renamed_in_folder":
        target = REAL.parent
    result = sktune(str(target))
    assert result.returncode == 1
    assert result.stderr.startswith("error:") and "Traceback" not in result.stderr
    assert {"missing": "not found", "not_a_profile": "is not a kernel_details.csv",
            "header_only": "has no kernel rows", "json": "trace_view.json is not a CSV",
            "renamed_in_folder": "it holds kernel_details_bf16_train.csv: pass that file"}[kind] in result.stderr


def test_kernels_outside_every_step_are_still_summarised(tmp_path: Path) -> None:
    """Blank Step Ids: no step's figures, but the kernels are there (not "no kernel rows")."""
    import csv

    rows = list(csv.reader(REAL.open(encoding="utf-8-sig")))
    column = rows[0].index("Step Id")
    for row in rows[1:]:
        row[column] = ""
    target = tmp_path / "kernel_details.csv"
    with target.open("w", newline="") as f:
        csv.writer(f).writerows(rows)
    result = sktune(str(target), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["steps"] == [] and data["top_kernels"]
