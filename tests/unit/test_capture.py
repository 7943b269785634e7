from pathlib import Path

import pytest
import torch

from sktune.errors import CaptureError
from sktune.graph.boundaries import legal_boundaries
from sktune.graph.capture import capture
from sktune.graph.structure import find_repeats
from sktune.load import build, draw_inputs, load_model_file


@pytest.fixture(scope="module")
def tiny_graph():
    source = load_model_file(Path(__file__).parent.parent / "models" / "tiny_norm.py")
    inputs = draw_inputs(source, 0)
    with torch.no_grad():
        return capture(build(source), inputs), source


def test_ops_modules_and_sources(tiny_graph) -> None:
    graph, source = tiny_graph
    targets = [op.target for op in graph.ops]
    assert targets[:2] == ["pow", "mean"]
    assert "linear" in targets and "softmax" in targets and "chunk" in targets
    linear = graph.ops[targets.index("linear")]
    assert linear.module == "proj" and linear.module_type == "Linear"
    assert graph.ops[1].module == "norm" and graph.ops[1].module_type == "RMSNorm"
    assert all(op.source.startswith(str(source.path)) for op in graph.ops)
    assert [op.index for op in graph.ops] == list(range(len(graph.ops)))


def test_ops_of_a_global_module_belong_to_the_layer_that_called_it(test_models: Path) -> None:
    source = load_model_file(test_models / "global_module.py")
    with torch.no_grad():
        graph = capture(build(source), draw_inputs(source, 0))
    neg = [op for op in graph.ops if op.target == "neg"]
    assert [op.module for op in neg] == ["layers.0", "layers.1"]
    # So each layer is one contiguous run of ops, and the two are one repeated unit.
    repeats = find_repeats([op.target for op in graph.ops], [op.module for op in graph.ops])
    assert repeats is not None and len(repeats.units) == 2


def test_boundaries_never_split_tuple_from_getitems(tiny_graph) -> None:
    graph, _ = tiny_graph
    chunk = [op.target for op in graph.ops].index("chunk")
    assert graph.ops[chunk + 1].target == "getitem" and graph.ops[chunk + 2].target == "getitem"
    assert chunk not in graph.boundaries and chunk + 1 not in graph.boundaries
    assert chunk - 1 in graph.boundaries and chunk + 2 in graph.boundaries


class _SlicedLater(torch.nn.Module):
    """A tensor sliced four ops later (as repeat_kv slices v), beside a real tuple (chunk)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.relu(x)
        d = torch.exp(torch.cos(torch.sin(x)))
        p, q = d.chunk(2, dim=-1)
        return torch.cat([p * q, q], dim=-1) + a[:, None, :].sum(1)


def test_a_slice_of_a_tensor_blocks_no_cut_a_tuple_s_getitems_do() -> None:
    with torch.no_grad():
        graph = capture(_SlicedLater(), (torch.randn(4, 8),))
    targets = [op.target for op in graph.ops]
    relu, chunk = targets.index("relu"), targets.index("chunk")
    assert {relu, relu + 1, relu + 2} <= set(graph.boundaries)  # after relu, sin, cos: a crosses the cuts
    last_getitem = max(i for i, t in enumerate(targets) if t == "getitem" and i > chunk and i < chunk + 3)
    assert not set(range(chunk, last_getitem)) & set(graph.boundaries)  # chunk stays with its getitems


def test_legal_boundaries_pure() -> None:
    assert legal_boundaries(6, [(1, 3)]) == [0, 3, 4]
    assert legal_boundaries(1, []) == []


def test_captured_graph_reproduces_model(tiny_graph) -> None:
    graph, source = tiny_graph
    model = build(source)
    inputs = draw_inputs(source, 2)
    with torch.no_grad():
        expected = model(*inputs)
        (got,) = graph.gm(*graph.args_for(inputs))
    assert torch.equal(expected, got)


def test_graph_break_names_the_line(test_models: Path) -> None:
    source = load_model_file(test_models / "graph_break.py")
    with pytest.raises(CaptureError, match=r"cannot be captured as one graph \(graph break at ") as info:
        capture(build(source), draw_inputs(source, 0))
    assert f"{test_models / 'graph_break.py'}:7 (if y.sum().item() > 0:" in str(info.value)
    assert "branches on a tensor's value" in str(info.value)  # .item() in a branch: what to do instead
    # One line: Dynamo's own advice (torch._check, guard_or_false, its debug variables) misleads a user here.
    assert "\n" not in str(info.value) and "guard_or_false" not in str(info.value)


def test_a_forward_under_compiler_disable_is_a_graph_break_that_names_no_pytorch_file() -> None:
    """Dynamo breaks the graph in its own wrapper: no place in the user's code to name."""

    class M(torch.nn.Module):
        @torch.compiler.disable
        def forward(self, x):
            return torch.relu(x) * 2

    with pytest.raises(CaptureError, match=r"graph \(graph break\):") as info:
        capture(M(), (torch.randn(4, 3),))
    assert "torch.compiler.disable" in str(info.value)
    assert "from user code" not in str(info.value) and "external_utils" not in str(info.value)


def test_kernelless_ops_are_views_and_no_op_casts_not_in_place_writes() -> None:
    from sktune.graph.aliasing import kernelless_ops

    class M(torch.nn.Module):
        def forward(self, x):
            y = x * 2.0
            z = y.to(torch.float32)  # a no-op cast: returns y itself
            w = z.view(4, 3).relu_()  # an in-place write returns its input, but is a kernel
            return w.transpose(0, 0) + y.to(torch.float64).float()

    x = torch.randn(4, 3)
    graph = capture(M(), (x,))
    flags = dict(zip((o.target for o in graph.ops), kernelless_ops(graph.gm, graph.args_for((x,)))))
    assert flags["mul"] is False and flags["view"] is True and flags["relu_"] is False
    assert flags["transpose"] is True and flags["float"] is False and flags["add"] is False


def test_kernelless_ops_on_inference_tensors() -> None:
    """Inputs made under torch.inference_mode keep no version counter."""
    from sktune.graph.aliasing import kernelless_ops

    with torch.inference_mode():
        x = torch.randn(4, 3)
    graph = capture(torch.nn.Sequential(torch.nn.ReLU()), (x,))
    assert kernelless_ops(graph.gm, graph.args_for((x,))) == (False,)
