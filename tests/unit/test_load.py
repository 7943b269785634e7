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
        ("no_inputs_fn.py", "does not define example_inputs"),
    ],
)
def test_bad_files_are_named(test_models: Path, name: str, expected: str) -> None:
    with pytest.raises(ModelFileError, match=expected):
        load_model_file(test_models / name)


def test_a_syntax_error_is_found_without_running_the_file_and_names_the_file_at_fault(tmp_path: Path) -> None:
    from sktune.load import check_syntax

    model = tmp_path / "model.py"
    model.write_text("import neighbour\nraise SystemExit('ran')\n")
    check_syntax(model)  # compiled, not run
    (tmp_path / "neighbour.py").write_text("x = (\n")
    with pytest.raises(ModelFileError, match=r"neighbour\.py:1: syntax error"):
        load_model_file(model)
    model.write_text("def build_model(:\n    pass\n")
    with pytest.raises(ModelFileError, match=r"model\.py:1: syntax error"):
        check_syntax(model)
    model.write_bytes(b"x = 1\0\n")
    with pytest.raises(ModelFileError, match=r"model\.py: syntax error: .*null bytes"):
        check_syntax(model)


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


def shapes_file(tmp_path: Path, shapes: str, inputs_args: str = "seed=0, shape=None") -> Path:
    path = tmp_path / "shaped.py"
    path.write_text("import torch\n\ndef build_model():\n    return torch.nn.Identity()\n\n"
                    f"def input_shapes():\n    return {shapes}\n\n"
                    f"def example_inputs({inputs_args}):\n"
                    "    return (torch.zeros({'a': 1, 'b': 4}.get(shape or 'a', 2), 3),)\n")
    return path


def test_input_shapes_weights_subset_and_named_draws(tmp_path: Path) -> None:
    from sktune.load import shape_weights

    source = load_model_file(shapes_file(tmp_path, "{'a': 0.25, 'b': 3}"))
    assert shape_weights(source) == {"a": 0.25, "b": 3.0}
    assert shape_weights(source, ("b",)) == {"b": 3.0}
    assert draw_inputs(source, 0, "b")[0].shape == (4, 3)
    assert draw_inputs(source, 0)[0].shape == (1, 3)  # shape=None: the first one
    with pytest.raises(ModelFileError, match="--shapes: c not among the shapes .* \\(a, b\\)"):
        shape_weights(source, ("c",))


def test_a_model_without_input_shapes_has_one_unnamed_shape(test_models: Path) -> None:
    from sktune.load import shape_weights

    source = load_model_file(test_models / "tiny_norm.py")
    assert shape_weights(source) == {}
    with pytest.raises(ModelFileError, match="defines no input_shapes"):
        shape_weights(source, ("bs1",))


@pytest.mark.parametrize(("shapes", "inputs_args", "message"), [
    ("{}", "seed=0, shape=None", "non-empty dict"),
    ("[('a', 1)]", "seed=0, shape=None", "non-empty dict"),
    ("{'a': 0}", "seed=0, shape=None", "weight of 'a' must be a positive number"),
    ("{'a': float('nan')}", "seed=0, shape=None", "positive number"),
    ("{'a,b': 1}", "seed=0, shape=None", "without commas"),
    ("{'a': 1}", "seed=0", "takes no 'shape' argument"),
])
def test_bad_input_shapes_are_named(tmp_path: Path, shapes: str, inputs_args: str, message: str) -> None:
    from sktune.load import shape_weights

    with pytest.raises(ModelFileError, match=message):
        shape_weights(load_model_file(shapes_file(tmp_path, shapes, inputs_args)))


def test_runner_reports_the_model_files_mistakes_before_importing_a_backend(test_models: Path) -> None:
    # A backend's imports take seconds (Inductor's 1.1-1.8 s): a user's mistake must not wait for
    # them. build_model() raising is the last mistake that needs no backend.
    name, expected = "build_raises.py", "weights not found"
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from sktune.errors import ModelFileError\n"
        "from sktune.worker.runner import RunnerConfig, TrialRunner\n"
        "try:\n"
        f"    TrialRunner(RunnerConfig(model_path={str(test_models / name)!r}))\n"
        "except ModelFileError as exc:\n"
        "    print(exc)\n"
        "print('backend imported' if 'sktune.backends.inductor' in sys.modules else 'no backend imported')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    assert expected in out
    assert out.strip().endswith("no backend imported")
