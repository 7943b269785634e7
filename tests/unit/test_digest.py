"""A captured graph's code and weights digests (graph/digest.py): the same model gives the same
digests however it was captured; an edited constant in an imported module changes the code's,
replaced weights change the weights'. A resumed study compares them (tuning/resume.py)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch

from sktune.graph import digest
from sktune.graph.capture import capture
from sktune.graph.capture_cache import capture_cached
from sktune.graph.digest import graph_digests

MODELS = Path(__file__).resolve().parent.parent / "models"


@pytest.fixture
def helper(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """A module the model imports, as a user's project has: its constant can be edited."""
    module = types.ModuleType("sktune_test_helper")
    module.EPS = 1e-6
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module


class Norm(torch.nn.Module):
    def __init__(self, helper: types.ModuleType) -> None:
        super().__init__()
        self.helper = helper
        self.weight = torch.nn.Parameter(torch.linspace(0.5, 1.5, 64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.helper.EPS) * self.weight


def digests_of(model: torch.nn.Module) -> dict[str, str]:
    torch._dynamo.reset()  # a new capture, as a new run makes
    return graph_digests(capture(model, (torch.randn(8, 64),)))


def test_the_same_model_gives_the_same_digests_captured_or_loaded_from_the_cache(tmp_path: Path) -> None:
    from sktune.load import build, draw_inputs, load_model_file

    source = load_model_file(MODELS / "tiny_norm.py")
    model, inputs = build(source), draw_inputs(source, 0)
    fresh, reused = capture_cached(model, inputs, tmp_path, source.sha256)
    loaded, reused_again = capture_cached(build(source), inputs, tmp_path, source.sha256)
    assert (reused, reused_again) == (False, True)
    assert graph_digests(fresh) == graph_digests(loaded)
    assert set(graph_digests(fresh)) == {"code_sha256", "weights_sha256"}


def test_an_edited_constant_in_an_imported_module_changes_the_code_digest_only(helper: types.ModuleType) -> None:
    model = Norm(helper)
    before = digests_of(model)
    helper.EPS = 1e-5  # the model file is unchanged: its hash cannot tell
    after = digests_of(model)
    assert after["code_sha256"] != before["code_sha256"]
    assert after["weights_sha256"] == before["weights_sha256"]


def test_replaced_weights_change_the_weights_digest_only(helper: types.ModuleType) -> None:
    model = Norm(helper)
    before = digests_of(model)
    with torch.no_grad():
        model.weight.add_(1.0)  # a replaced checkpoint, same shapes
    after = digests_of(model)
    assert after["weights_sha256"] != before["weights_sha256"]
    assert after["code_sha256"] == before["code_sha256"]


def test_a_large_tensor_is_hashed_at_spaced_elements(helper: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past FULL_ELEMENTS a tensor is sampled (a device-resident model is not copied whole):
    a replaced checkpoint changes the sampled elements; one unsampled element does not."""
    monkeypatch.setattr(digest, "FULL_ELEMENTS", 40)  # the 64-element weight: every 2nd, to its end
    model = Norm(helper)
    before = digests_of(model)
    with torch.no_grad():
        model.weight[1] += 1.0
    assert digests_of(model)["weights_sha256"] == before["weights_sha256"]
    with torch.no_grad():
        model.weight[62] += 1.0  # past the first FULL_ELEMENTS: still sampled
    assert digests_of(model)["weights_sha256"] != before["weights_sha256"]
    with torch.no_grad():
        model.weight.mul_(2.0)
    assert digests_of(model)["weights_sha256"] != before["weights_sha256"]
