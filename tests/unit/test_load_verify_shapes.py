"""verify_shapes() in a model file (sktune/load.py): the names it returns, and each mistake
a user can make there as one ModelFileError that says what is wrong (no capture, no torch run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sktune.errors import ModelFileError
from sktune.load import SHAPES_CONTRACT, load_model_file, shape_weights, verify_shape_names

HEAD = "import torch\n\ndef build_model():\n    return torch.nn.Identity()\n\n"
INPUTS = "def example_inputs(seed=0, shape=None):\n    return (torch.zeros(int((shape or 'bs1')[2:]), 3),)\n\n"
TUNED = "def input_shapes():\n    return {'bs1': 0.6, 'bs8': 0.4}\n\n"


def model_file(tmp_path: Path, verify: str | None, tuned: str = TUNED, inputs: str = INPUTS) -> Path:
    path = tmp_path / "served.py"
    body = "" if verify is None else f"def verify_shapes():\n    return {verify}\n"
    path.write_text(HEAD + inputs + tuned + body)
    return path


def test_verify_only_names_in_the_model_s_order(tmp_path: Path) -> None:
    source = load_model_file(model_file(tmp_path, "['bs2', 'bs4', 'bs16']"))
    assert verify_shape_names(source) == ("bs2", "bs4", "bs16")
    assert shape_weights(source) == {"bs1": 0.6, "bs8": 0.4}  # never among the tuned shapes
    assert verify_shape_names(load_model_file(model_file(tmp_path, None))) == ()
    assert verify_shape_names(load_model_file(model_file(tmp_path, "[]"))) == ()
    assert verify_shape_names(load_model_file(model_file(tmp_path, "('bs2', 'bs4')"))) == ("bs2", "bs4")
    assert "def verify_shapes() -> list[str]" in SHAPES_CONTRACT


@pytest.mark.parametrize(("verify", "message"), [
    ("'bs2'", "must return a list of shape names, got 'bs2'"),
    ("{'bs2': 1.0}", "must return a list of shape names"),
    ("['bs2', 4]", "shape name 4 must be a non-empty string"),
    ("['bs2', '']", "shape name '' must be a non-empty string"),
    ("['bs2,bs4']", "without commas"),
    ("['bs2', 'bs8']", "'bs8' is also in input_shapes"),
    ("['bs2', 'bs2']", "'bs2' is listed twice"),
    ("1 / 0", "verify_shapes\\(\\) in .* raised ZeroDivisionError"),
])
def test_a_bad_verify_shapes_is_named(tmp_path: Path, verify: str, message: str) -> None:
    source = load_model_file(model_file(tmp_path, verify))
    with pytest.raises(ModelFileError, match=message):
        verify_shape_names(source)


def test_verify_shapes_needs_input_shapes_and_a_shape_argument(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="defines verify_shapes\\(\\) without input_shapes\\(\\)"):
        load_model_file(model_file(tmp_path, "['bs2']", tuned=""))
    no_shape = "def example_inputs(seed=0):\n    return (torch.zeros(1, 3),)\n\n"
    with pytest.raises(ModelFileError, match="example_inputs takes no 'shape' argument"):
        load_model_file(model_file(tmp_path, "['bs2']", inputs=no_shape))
    path = model_file(tmp_path, None)
    path.write_text(path.read_text() + "verify_shapes = ['bs2']\n")
    with pytest.raises(ModelFileError, match="verify_shapes in .* must be a function"):
        load_model_file(path)


def test_shapes_flag_cannot_pick_a_verify_only_shape(tmp_path: Path) -> None:
    source = load_model_file(model_file(tmp_path, "['bs2', 'bs4']"))
    with pytest.raises(ModelFileError, match="--shapes: bs4 in verify_shapes\\(\\) .* verified, never tuned at"):
        shape_weights(source, ("bs1", "bs4"))
    with pytest.raises(ModelFileError, match="--shapes: bs3 not among the shapes"):
        shape_weights(source, ("bs3",))


def test_the_verify_line_names_where_and_why_a_plan_is_not_bitwise() -> None:
    """It read "best plan NOT bitwise at 1" with no shape and no reason; fuse-all read "yes"
    after a verify-only shape turned it down."""
    from sktune.tuning.verified import fuse_all_bitwise, verify_shapes_line

    best = {"big": {"bitwise": False, "mismatches": 0, "reason": "capture different graphs: op 1 is tanh\n..."},
            "n37": {"bitwise": True, "mismatches": 0, "reason": None}}
    verify = {"shapes": ["n37", "big", "n100"], "best": best, "rejected": [], "seconds": 1.0}
    line = verify_shapes_line(verify)
    assert "NOT bitwise at big (big: capture different graphs: op 1 is tanh)" in line
    assert "not verified after it: n100" in line and "..." not in line
    best["big"] = {"bitwise": False, "mismatches": 3, "reason": None}
    assert "big: 3 output mismatch(es) over its input sets" in verify_shapes_line(verify)
    grown = {"shapes": ["n37", "n64"], "best": {"n37": best["n37"]}, "rejected": [], "seconds": 1.0}
    assert "best plan bitwise at n37; not verified at n64" in verify_shapes_line(grown)  # n64 declared later
    assert fuse_all_bitwise({"bitwise": False, "not_bitwise_at": ["n37"]}) == "no (at verify-only n37)"
    assert fuse_all_bitwise({"bitwise": True}) == "yes" and fuse_all_bitwise({"bitwise": False}) == "no"
