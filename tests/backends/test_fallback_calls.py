"""A fallback inside a region costs what the op costs eagerly (issue 26).

Inductor's Python wrapper calls a fallback as ``torch.ops.aten.X.overload(...)`` (an
OpOverload, 1-2 µs slower than eager's ``torch.X``), then asserts the output's size,
stride and alignment; it asserts every input's size and stride too. The regions sktune
compiles call eager's binding and carry no asserts (docs/measured.md, "Cost of a
fallback inside a region"). One compile, without kernels of its own.
"""

import re

import pytest
import torch
from torch import nn

from sktune.backends.inductor import InductorBackend
from sktune.backends.inductor_tables import FALLBACK_ATEN, eager_binding
from sktune.graph.capture import capture
from sktune.plan import Plan, Scope
from sktune.verify import compare_outputs, flatten_outputs

aten = torch.ops.aten
OP_OVERLOAD_CALL = re.compile(r"torch\.ops\.aten\.\w+\.\w+\(")


class DecodeScores(nn.Module):
    """A decode step's attention scores (bmm with one query row) with three more fallbacks;
    nothing else, so the region compiles no kernel of its own (a fast test)."""

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(torch.softmax(torch.matmul(q, k.transpose(-2, -1)), -1).mean(-1, keepdim=True))


@pytest.fixture(scope="module")
def compiled_code(tmp_path_factory):
    import os

    from torch._inductor import config
    from torch._inductor.utils import run_and_get_code

    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(tmp_path_factory.mktemp("inductor-cache")))
    torch.set_grad_enabled(False)
    gen = torch.Generator().manual_seed(0)
    inputs = (torch.randn(1, 4, 1, 32, generator=gen), torch.randn(1, 4, 33, 32, generator=gen))
    graph = capture(DecodeScores().eval(), inputs)
    args = graph.args_for(inputs)
    plan = Plan.make([Scope(0, len(graph.ops) - 1, "all")],
                     {"fallback_ops": ["matmul", "mean", "sigmoid", "softmax"]})
    with config.patch(force_disable_caches=True):  # a cache hit generates no code to read
        compiled, codes = run_and_get_code(InductorBackend().compile, graph, plan)
    return graph, args, compiled, "\n".join(codes)


def test_fallbacks_call_eager_bindings_without_asserts(compiled_code) -> None:
    graph, args, compiled, code = compiled_code
    assert not OP_OVERLOAD_CALL.findall(code), "a fallback is called as an OpOverload"
    for binding in ("bmm", "_softmax", "mean", "sigmoid"):
        assert f"torch._C._VariableFunctions.{binding}(" in code, f"{binding} not called through eager's binding"
    assert "assert_size_stride(" not in code and "assert_alignment(" not in code
    assert not compare_outputs(flatten_outputs(graph.gm(*args)), flatten_outputs(compiled(*args)))


def test_wrapper_table_restored_after_compile(compiled_code) -> None:
    from torch._inductor.codegen.custom_extern_kernel_codegen import CUSTOM_EXTERN_KERNEL_CODEGEN

    assert not [k for k in CUSTOM_EXTERN_KERNEL_CODEGEN if k.startswith("torch.ops.aten.")]


def test_every_fallback_has_an_eager_binding() -> None:
    assert eager_binding(aten.mean.dim) == "torch._C._VariableFunctions.mean"
    assert eager_binding(aten.silu.default) == "torch._C._nn.silu"
    assert eager_binding(aten.mean.out) is None and eager_binding(aten.sin.int) is None
    for op_type, names in FALLBACK_ATEN.items():
        for name in names:
            assert eager_binding(getattr(aten, name).default) is not None, op_type
