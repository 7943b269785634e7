"""A region compiles for its inputs' own sizes, as torch.compile(dynamic=False) does.

Without ``inductor.static_shapes`` every region compiled as a dynamic-shape graph (the
shape environment ``cacheable()`` needs for the caches made AOTAutograd give each size a
symbol): studies/split_stages.py's stage 2 ran at 1.6x eager instead of 0.5x
(docs/measured.md "Regions compiled for their shapes"). One compile, ~10 s cold.
"""

import re

import pytest
import torch
from torch import nn

from sktune.backends.inductor import InductorBackend
from sktune.graph.capture import capture
from sktune.plan import Plan, Scope
from sktune.verify import compare_outputs, flatten_outputs

pytestmark = pytest.mark.exactness  # CI runs these again as an AVX2 and a vector-less CPU (.ci/run)

SIZE_SYMBOL = re.compile(r"\bk?s\d+\b")  # s26 in the wrapper, ks0 in a kernel's arguments


class Spread(nn.Module):
    """split_stages' stage 2 in small: each value over a new last dim of 4, its max, a scale."""

    def __init__(self) -> None:
        super().__init__()
        self.weights = nn.Parameter(1.0 + 0.1 * torch.randn(4))
        self.scale = nn.Parameter(1.0 + 0.05 * torch.randn(16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x[..., None] * self.weights).amax(-1) * self.scale


@pytest.fixture(scope="module")
def spread(tmp_path_factory):
    import os

    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(tmp_path_factory.mktemp("inductor-cache")))
    torch.set_grad_enabled(False)
    torch.manual_seed(0)
    x = torch.randn(4, 16, 16)  # batch 4 and spread 4: one symbol for both when duck-sized
    graph = capture(Spread().eval(), (x,))
    args = graph.args_for((x,))
    return graph, args, flatten_outputs(graph.gm(*args))


def test_region_code_has_no_size_symbols_and_matches_eager(spread) -> None:
    from torch._inductor import config
    from torch._inductor.utils import run_and_get_code

    graph, args, ref = spread
    plan = Plan.make([Scope(0, len(graph.ops) - 1, "all")])
    with config.patch(force_disable_caches=True):  # a cache hit generates no code to read
        compiled, codes = run_and_get_code(InductorBackend().compile, graph, plan)
    assert codes, "the region generated no code"
    symbols = sorted({m for code in codes for m in SIZE_SYMBOL.findall(code)})
    assert not symbols, f"region compiled with symbolic sizes {symbols}"
    out = flatten_outputs(compiled(*args))
    assert compare_outputs(ref, out) == []
    assert [o.stride() for o in out] == [r.stride() for r in ref]
