"""torch-npu installed on a host whose CANN environment is not sourced: its libraries are not
found, so torch's extension autoload makes every ``import torch`` fail. That is a new Ascend
host's likeliest first state; each command says what to do in one line, never a traceback.

The torch_npu here is a stand-in made for this test (a package whose import fails as the real
one does without CANN, with the entry point torch autoloads), not torch-npu."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.cli.test_cli import sktune

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def unsourced(tmp_path: Path) -> dict[str, str]:
    package = tmp_path / "site" / "torch_npu"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        'raise ImportError("libhccl.so: cannot open shared object file: No such file or directory")\n')
    info = tmp_path / "site" / "torch_npu-2.14.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch_npu\nVersion: 2.14.0\n")
    (info / "entry_points.txt").write_text("[torch.backends]\ntorch_npu = torch_npu:_autoload\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(ROOT)])}


@pytest.mark.parametrize("args", [["run", str(ROOT / "studies" / "quant_block.py"), "--trials", "2"], ["doctor"]])
def test_every_command_says_to_source_cann(tmp_path: Path, unsourced: dict[str, str], args: list[str]) -> None:
    result = sktune(*args, cwd=tmp_path, env=unsourced, timeout=120)
    assert result.returncode == 1, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert "import torch failed: its device extension torch_npu did not load (ImportError: libhccl.so" in result.stderr
    assert "set_env.sh" in result.stderr and "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in result.stderr


def test_without_autoload_the_npu_backend_and_doctor_say_to_source_cann(tmp_path: Path,
                                                                       unsourced: dict[str, str]) -> None:
    env = {**unsourced, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    for args in (["doctor"], ["run", str(ROOT / "studies" / "quant_block.py"), "--backend", "npu", "--trials", "2"]):
        result = sktune(*args, cwd=tmp_path, env=env, timeout=300)
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
        assert "libhccl.so" in result.stderr and "set_env.sh" in result.stderr, result.stderr
        assert "pip install 'sktune[npu]'" not in result.stderr  # it is installed: installing is not the fix
