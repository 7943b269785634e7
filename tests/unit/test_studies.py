"""Contract checks for the example models in studies/.

Each study file is a plain Python file (studies/ is not a package) exposing
``build_model()`` and ``example_inputs(seed=0)``. These tests load each one by
path, as the tuner does, and check it is deterministic, does not mutate its
inputs, returns tensors, and captures with Dynamo as a single full graph that
reproduces eager output bitwise.

Studies written as Ascend serving code (``NPU_STUDIES``) import ``torch_npu``: they are
loaded with the emulated Ascend (tests/npu_emulator) imported first, never skipped.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

STUDIES_DIR = Path(__file__).resolve().parents[2] / "studies"
NPU_STUDIES = ["ascend_decoder", "ascend_moe"]
STUDY_NAMES = ["norm_chain", "decoder_block", "decoder_block_bf16", "quant_block", "decoder_stack", "moe_block",
               "shared_gate", "split_stages", "exact_sum_cut", "transpose_mix", *NPU_STUDIES]


def _load(name: str):
    if name in NPU_STUDIES:
        from tests.emulated_npu import load_emulator

        load_emulator()  # the study's ``import torch_npu`` finds the emulated Ascend
    path = STUDIES_DIR / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_test_studies_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _as_tuple(out) -> tuple[torch.Tensor, ...]:
    if isinstance(out, torch.Tensor):
        return (out,)
    assert isinstance(out, tuple), f"output must be a tensor or tuple of tensors, got {type(out)}"
    assert out, "output tuple is empty"
    for o in out:
        assert isinstance(o, torch.Tensor), f"output element is {type(o)}, not a tensor"
    return out


def _bit_equal(a, b) -> bool:
    ta, tb = _as_tuple(a), _as_tuple(b)
    return len(ta) == len(tb) and all(
        x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y) for x, y in zip(ta, tb)
    )


@pytest.fixture(scope="module", params=STUDY_NAMES)
def study(request):
    module = _load(request.param)
    return request.param, module


def test_contract(study):
    name, module = study
    assert (module.__doc__ or "").strip(), f"{name}: missing module docstring"
    assert callable(module.build_model) and callable(module.example_inputs)

    model = module.build_model()
    assert isinstance(model, torch.nn.Module)
    # Deterministic weights.
    model2 = module.build_model()
    sd1, sd2 = model.state_dict(), model2.state_dict()
    assert sd1.keys() == sd2.keys()
    for k in sd1:
        assert torch.equal(sd1[k], sd2[k]), f"{name}: weight {k} differs between builds"

    inputs0 = module.example_inputs(0)
    inputs0_again = module.example_inputs(0)
    inputs1 = module.example_inputs(1)
    default_inputs = module.example_inputs()
    assert isinstance(inputs0, tuple) and inputs0
    for t in inputs0:
        assert isinstance(t, torch.Tensor)
    assert _bit_equal(inputs0, inputs0_again)
    assert _bit_equal(inputs0, default_inputs)
    assert not _bit_equal(inputs0, inputs1), f"{name}: example_inputs(0) == example_inputs(1)"


def test_eager_deterministic_and_non_mutating(study):
    name, module = study
    model = module.build_model()
    inputs = module.example_inputs(0)
    snapshot = tuple(t.clone() for t in inputs)
    with torch.no_grad():
        out1 = model(*inputs)
        out2 = model(*inputs)
    outs = _as_tuple(out1)
    assert _bit_equal(out1, out2), f"{name}: two eager runs differ"
    assert _bit_equal(inputs, snapshot), f"{name}: forward mutated its inputs"
    for o in outs:
        if o.is_floating_point():
            assert torch.isfinite(o).all(), f"{name}: non-finite output"


def test_dynamo_fullgraph_matches_eager(study):
    name, module = study
    model = module.build_model()
    inputs = module.example_inputs(1)

    graphs: list[torch.fx.GraphModule] = []

    def counting_backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    try:
        with torch.no_grad():
            expected = model(*inputs)
            got_count = torch.compile(model, fullgraph=True, backend=counting_backend)(*inputs)
            torch._dynamo.reset()
            got_eager = torch.compile(model, fullgraph=True, backend="eager")(*inputs)
    finally:
        torch._dynamo.reset()

    assert len(graphs) == 1, f"{name}: expected one graph, got {len(graphs)}"
    n_calls = sum(
        1 for n in graphs[0].graph.nodes if n.op in ("call_function", "call_method", "call_module")
    )
    assert n_calls > 10, f"{name}: suspiciously small graph ({n_calls} call nodes)"
    assert _bit_equal(got_count, expected), f"{name}: captured graph differs from eager"
    assert _bit_equal(got_eager, expected), f"{name}: backend='eager' differs from eager"


def test_bf16_block_is_bf16():
    module = _load("decoder_block_bf16")
    assert module.DTYPE == torch.bfloat16
    model = module.build_model()
    for p in model.parameters():
        assert p.dtype == torch.bfloat16
    (x,) = module.example_inputs(0)
    assert x.dtype == torch.bfloat16
    with torch.no_grad():
        assert model(x).dtype == torch.bfloat16

    fp32 = _load("decoder_block")
    assert fp32.DTYPE == torch.float32
    for p in fp32.build_model().parameters():
        assert p.dtype == torch.float32


def test_quant_block_int8_weights():
    module = _load("quant_block")
    model = module.build_model()
    bufs = dict(model.named_buffers())
    assert bufs["gate_up_weight"].dtype == torch.int8
    assert bufs["down_weight"].dtype == torch.int8
    assert bufs["gate_up_scale"].dtype == torch.float32
    assert bufs["down_scale"].dtype == torch.float32


@pytest.mark.parametrize("name", NPU_STUDIES)
def test_ascend_studies_capture_npu_ops(name: str) -> None:
    """The fused ops reach the op list as ``npu.*`` ops, and tuple outputs keep their getitems."""
    from sktune.graph.capture import capture

    module = _load(name)
    graph = capture(module.build_model(), module.example_inputs(0))
    targets = {op.target for op in graph.ops}
    expected = {"ascend_decoder": {"npu.npu_rms_norm", "npu.npu_add_rms_norm", "npu.npu_rotary_mul",
                                   "npu.npu_incre_flash_attention", "npu.npu_swiglu"},
                "ascend_moe": {"npu.npu_rms_norm", "npu.npu_add_rms_norm", "npu.npu_moe_gating_top_k_softmax",
                               "npu.npu_grouped_matmul", "npu.npu_swiglu", "npu.npu_dynamic_quant",
                               "npu.npu_quant_matmul"}}[name]
    assert expected <= targets, expected - targets
    for op in graph.ops:
        if op.target in ("npu.npu_rms_norm", "npu.npu_add_rms_norm"):
            assert op.index not in graph.boundaries, f"a cut separates {op.name} from its getitems"
