"""The captured graph saved on disk: a second start rebuilds it without Dynamo, identically."""

import logging
from pathlib import Path

import torch

from sktune.graph import capture_cache
from sktune.graph.capture_cache import capture_cached
from sktune.load import build, draw_inputs, load_model_file
from sktune.verify import compare_outputs, flatten_outputs

STUDIES = Path(__file__).parent.parent.parent / "studies"


def _model(name: str):
    source = load_model_file(STUDIES / name)
    return source, build(source), draw_inputs(source, 0)


def test_second_start_loads_the_same_graph(tmp_path, monkeypatch) -> None:
    source, model, inputs = _model("decoder_block.py")
    first, reused = capture_cached(model, inputs, tmp_path, source.sha256)
    assert not reused and len(list(tmp_path.glob("*.pkl"))) == 1

    def no_dynamo(*_a, **_k):
        raise AssertionError("Dynamo ran although the capture was saved")

    monkeypatch.setattr(capture_cache, "capture", no_dynamo)
    second, reused = capture_cached(model, inputs, tmp_path, source.sha256)
    assert reused
    assert second.ops == first.ops and second.boundaries == first.boundaries
    assert second.input_positions == first.input_positions
    # Node metadata the exactness probe keys on survives (shapes only, no data).
    for a, b in zip(first.op_nodes, second.op_nodes):
        va, vb = a.meta.get("example_value"), b.meta.get("example_value")
        if isinstance(va, torch.Tensor):
            assert tuple(vb.shape) == tuple(va.shape) and vb.dtype == va.dtype
    other = draw_inputs(source, 1)  # other values, same signature: same outputs as the captured graph
    with torch.no_grad():
        assert compare_outputs(flatten_outputs(first.gm(*first.args_for(other))),
                               flatten_outputs(second.gm(*second.args_for(other)))) == []


def test_key_changes_with_inputs_and_model_source(tmp_path) -> None:
    source, model, inputs = _model("decoder_block.py")
    capture_cached(model, inputs, tmp_path, source.sha256)
    capture_cached(model, tuple(t[:, :16] if t.dim() > 1 else t for t in inputs), tmp_path, source.sha256)
    capture_cached(model, inputs, tmp_path, "another model file")
    assert len(list(tmp_path.glob("*.pkl"))) == 3


def test_a_stale_or_broken_file_is_captured_again(tmp_path, caplog) -> None:
    source, model, inputs = _model("decoder_block.py")
    capture_cached(model, inputs, tmp_path, source.sha256)
    (saved,) = tmp_path.glob("*.pkl")
    saved.write_bytes(b"not a pickle")
    with caplog.at_level(logging.WARNING, logger="sktune.graph.capture_cache"):
        graph, reused = capture_cached(model, inputs, tmp_path, source.sha256)
    assert not reused and "ignoring unreadable" in caplog.text
    # Weights changed in place (same key): the saved graph reads the model's tensors, so it
    # still reproduces the model and is used.
    with torch.no_grad():
        next(model.parameters()).mul_(2)
    again, reused = capture_cached(model, inputs, tmp_path, source.sha256)
    assert reused
    with torch.no_grad():
        assert compare_outputs(flatten_outputs(model(*inputs)), flatten_outputs(again.gm(*again.args_for(inputs)))) == []


def test_a_saved_graph_that_no_longer_reproduces_the_model_is_not_used(tmp_path, caplog) -> None:
    source, model, inputs = _model("decoder_block.py")
    capture_cached(model, inputs, tmp_path, source.sha256)
    original = model.forward
    model.forward = lambda *a: original(*a) * 2  # behaviour changed, key (file, classes, shapes) did not
    with caplog.at_level(logging.WARNING, logger="sktune.graph.capture_cache"):
        graph, reused = capture_cached(model, inputs, tmp_path, source.sha256)
    assert not reused and "does not reproduce the model" in caplog.text
    with torch.no_grad():
        assert compare_outputs(flatten_outputs(model(*inputs)), flatten_outputs(graph.gm(*graph.args_for(inputs)))) == []


def test_a_model_returning_a_tensor_twice_or_an_input_is_loaded_from_the_cache(tmp_path, caplog) -> None:
    """Dynamo's graph returns each distinct tensor once and no input: the check compares the
    model's outputs that way (it recaptured on every start)."""
    source = load_model_file(Path(__file__).parent.parent / "models" / "aliased_outputs.py")
    model, inputs = build(source), draw_inputs(source, 0)
    capture_cached(model, inputs, tmp_path, source.sha256)
    with caplog.at_level(logging.WARNING, logger="sktune.graph.capture_cache"):
        _, reused = capture_cached(model, inputs, tmp_path, source.sha256)
    assert reused and "does not reproduce" not in caplog.text
    original = model.forward
    model.forward = lambda x: tuple(t * 2 for t in original(x))  # now computes otherwise
    _, reused = capture_cached(model, inputs, tmp_path, source.sha256)
    assert not reused
