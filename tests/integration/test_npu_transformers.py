"""A transformers Llama (tests/models/tiny_llama.py) imports, runs and is tuned on the emulated Ascend.

transformers imports ``torch_npu`` as soon as it finds one and then takes its Ascend
branches (``from torch_npu import npu_fusion_attention``, ``torch.npu.manual_seed_all``,
...), so the emulator must carry that surface or no transformers model even imports
(README, "The emulated Ascend"). Each step runs in a subprocess, as a user would.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from tests.cli.test_cli import sktune as run_cli
from tests.emulated_npu import EMULATOR_PATH

pytestmark = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                reason="transformers is not installed (the dev extra installs it)")

ROOT = Path(__file__).resolve().parents[2]
TINY_LLAMA = ROOT / "tests" / "models" / "tiny_llama.py"

# What transformers does with torch_npu on import, when seeding, and in a forward.
_IMPORT_AND_RUN = f"""
import sys, torch, transformers
from transformers import LlamaModel
from transformers.utils import is_torch_npu_available
from torch_npu import npu_fusion_attention
print("npu", is_torch_npu_available(), is_torch_npu_available(check_device=True))
transformers.set_seed(0)  # calls torch.npu.manual_seed_all
sys.path.insert(0, {str(TINY_LLAMA.parent)!r})
import tiny_llama
out = tiny_llama.build_model().eval()(*tiny_llama.example_inputs(0))
print("out", tuple(out.shape), bool(torch.isfinite(out).all()))
"""


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=300)


def _env(emulated: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SKTUNE_NPU_DEVICE")}
    env["HF_HUB_OFFLINE"] = "1"  # the model is built from a config: nothing may come from the hub
    if emulated:
        env["PYTHONPATH"] = os.pathsep.join([EMULATOR_PATH, str(ROOT)])
    return env


def test_transformers_imports_and_runs_with_the_emulator() -> None:
    result = _python(_IMPORT_AND_RUN, _env(emulated=True))
    assert result.returncode == 0, result.stderr[-4000:]
    assert "npu True True" in result.stdout  # transformers took its Ascend branches
    assert "out (1, 16, 64) True" in result.stdout


def test_tiny_llama_runs_without_torch_npu() -> None:
    """The same model file is a plain CPU model where no torch_npu exists (a held-out model)."""
    code = _IMPORT_AND_RUN.replace("from torch_npu import npu_fusion_attention\n", "")
    result = _python(code, _env(emulated=False))
    assert result.returncode == 0, result.stderr[-4000:]
    assert "npu False False" in result.stdout and "out (1, 16, 64) True" in result.stdout


@pytest.mark.slow  # ~24 s: the default suite stood at 9:02 of its 10 minutes; CI's slow run covers it
def test_sktune_run_npu_on_a_transformers_llama(tmp_path: Path) -> None:
    summary = tmp_path / "summary.json"
    result = run_cli("run", str(TINY_LLAMA), "--backend", "npu", "--effort", "quick", "--trials", "10",
                     "--storage", f"sqlite:///{tmp_path}/llama.db", "--summary-json", str(summary),
                     cwd=tmp_path, env=_env(emulated=True))
    assert result.returncode == 0, result.stderr[-4000:]
    data = json.loads(summary.read_text())
    assert data["device"] == "npu-emulator" and data["emulated"] is True
    assert data["verified_bitwise"] is True
    # transformers' module paths are read: the two decoder layers are found as repeated units
    anchors = {str(t.user_attrs.get("anchor")) for t in optuna.load_study(
        study_name=data["study"], storage=f"sqlite:///{tmp_path}/llama.db").trials}
    assert "scope-per-layer" in anchors
