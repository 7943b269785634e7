from pathlib import Path

import pytest
import torch

from sktune.errors import ModelFileError
from sktune.load import build, draw_inputs, load_model_file


def test_loads_contract(test_models: Path) -> None:
    source = load_model_file(test_models / "tiny_norm.py")
    assert isinstance(build(source), torch.nn.Module)
    a, b = draw_inputs(source, 0), draw_inputs(source, 1)
    assert not torch.equal(a[0], b[0])


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("missing.py", "not found"),
        ("syntax_error.py", "syntax error"),
        ("no_build.py", "does not define build_model"),
    ],
)
def test_bad_files_are_named(test_models: Path, name: str, expected: str) -> None:
    with pytest.raises(ModelFileError, match=expected):
        load_model_file(test_models / name)


def test_build_raising_is_reported(test_models: Path) -> None:
    source = load_model_file(test_models / "build_raises.py")
    with pytest.raises(ModelFileError, match="build_model\\(\\).*raised RuntimeError: weights not found"):
        build(source)


def test_non_module_and_non_tensor_inputs(tmp_path: Path) -> None:
    path = tmp_path / "bad.py"
    path.write_text("def build_model():\n    return 3\n\ndef example_inputs(seed=0):\n    return [1, 2]\n")
    source = load_model_file(path)
    with pytest.raises(ModelFileError, match="not a torch.nn.Module"):
        build(source)
    with pytest.raises(ModelFileError, match="tuple of tensors"):
        draw_inputs(source, 0)
