"""Exact forms at odd shapes (issue 26): every form must be bitwise against eager at last
dims that are not multiples of the vector, shorter than one vector, and at a decode step's
attention (one query row). Nothing here assumes a vector width: where the eager order
depends on it (``eager_order.vector_lanes``), an unknown width falls back to ATen, which
is bitwise too."""

from collections.abc import Callable

import pytest
import torch
from torch import fx

from sktune.backends.inductor import InductorBackend
from sktune.graph.capture import opgraph_from
from sktune.plan import Plan, Scope
from sktune.verify import compare_outputs, flatten_outputs

pytestmark = pytest.mark.exactness  # CI runs these again as an AVX2 and a vector-less CPU (.ci/run)

ODD = [(4, 7), (4, 15), (2, 3, 37)]


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    import os

    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path_factory.mktemp("inductor-cache"))
    torch.set_grad_enabled(False)
    return InductorBackend(for_trials=True)


def _assert_bitwise(backend: InductorBackend, fn: Callable[..., torch.Tensor], shapes: list[tuple[int, ...]],
                    options: dict, positive: bool = False, seeds: int = 2) -> None:
    for shape in shapes:
        gm = fx.symbolic_trace(fn)  # one graph per shape: the backend knows a graph's regions by span
        def draw(seed: int) -> tuple[torch.Tensor, ...]:
            x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 3
            return (x.abs() + 0.25 if positive else x,)

        graph = opgraph_from(gm, draw(0), draw(0))
        compiled = backend.compile(graph, Plan.make([Scope(0, len(graph.ops) - 1, "all")], options))
        for seed in range(seeds):
            x = draw(seed + 1)
            diff = compare_outputs(flatten_outputs(fn(*x)), flatten_outputs(compiled(*x)))
            assert diff == [], f"{shape}, seed {seed + 1}: {diff[0]}"


def test_decode_attention_matmul_is_bitwise_with_its_fallback(backend) -> None:
    """A one-row query against every key: Inductor lowers that bmm to a multiply and a sum
    of its own (kernel/bmm.py, tuned_bmm); the fallback keeps ATen's GEMM. The softmax
    between the two matmuls is in eager's order."""
    def attention(x):
        q = x[..., :1, :]
        scores = torch.matmul(q, x.transpose(-2, -1)) * 0.125
        return torch.matmul(torch.softmax(scores, -1), x)

    _assert_bitwise(backend, attention, [(1, 4, 33, 32), (8, 4, 33, 32), (5, 15)],
                    {"eager_order": True, "pattern_matcher": False, "fallback_ops": ["matmul"]})


def test_softmax_rows_shorter_than_a_vector_add_up_in_order(backend) -> None:
    def fn(x):
        return torch.softmax(x * 2, -1) + torch.log_softmax(x, -1)

    _assert_bitwise(backend, fn, ODD + [(3, 1), (2, 16)], {"eager_order": True})


def test_pow_in_eager_order(backend) -> None:
    """0.5 is ATen's sqrt kernel (MKL), not Inductor's sqrt; other non-integer exponents
    are Sleef's pow in Inductor: they run as ATen's; 2 and 3 stay products."""
    def fn(x):
        return x.pow(0.5) + x.pow(-0.5) * x.pow(1.5) - x.pow(2) * x.pow(3)

    _assert_bitwise(backend, fn, ODD, {"eager_order": True}, positive=True)


def test_pointwise_fallbacks_at_tail_sizes(backend) -> None:
    """sigmoid and silu compute ATen's scalar tail as a masked vector, sqrt is MKL's in
    eager: their fallbacks are bitwise at every size."""
    def fn(x):
        return torch.sigmoid(x) + torch.nn.functional.silu(x * 2) * torch.sqrt(x.abs())

    _assert_bitwise(backend, fn, ODD, {"fallback_ops": ["sigmoid", "silu", "sqrt"]})


def test_var_is_a_welford_in_double_and_its_fallback_is_bitwise(backend) -> None:
    """ATen's var over one dim is a serial Welford per row in double, rounded to float once
    (docs/measured.md, "Exact forms"); Inductor's stays in float. Written out, that order is
    no faster than eager, so var keeps its fallback, bitwise at every size."""
    def welford(row: list[float]) -> float:
        mean = m2 = 0.0
        for n, value in enumerate(row, 1):
            delta = value - mean
            mean += delta / n
            m2 += delta * (value - mean)
        return m2 / (len(row) - 1)

    for shape in [(4, 7), (4, 15), (3, 37), (2, 130)]:
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(1)) * 3 + 1
        ours = torch.tensor([welford(row) for row in x.double().tolist()], dtype=torch.float64).float()
        assert torch.equal(ours, x.var(-1)), shape
    _assert_bitwise(backend, lambda x: x.var(-1) * 2, ODD, {"fallback_ops": ["var"]})
