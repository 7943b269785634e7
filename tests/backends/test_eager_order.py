"""sum / mean / softmax (and log_softmax, shielded) in eager's order: bitwise and still
fused (on this project's x86 CPUs with torch 2.13: docs/measured.md "Exact forms"; the
exactness probe checks each machine before the search relies on it).

The sum is written out with ``eager_order.LANES`` lanes, read at run time: 8 on every x86
build and SVE256, 4 on ARM's NEON. Where it and tests/cpu_facts.py's reading differ the
tests of the rewritten sum are expected to fail."""

from pathlib import Path

import pytest
import torch
from torch import fx

from sktune.backends.eager_order import MAX_LENGTH, eager_order_sum
from sktune.backends.inductor import InductorBackend
from sktune.graph.capture import capture
from sktune.load import build, draw_inputs, load_model_file
from sktune.plan import Plan, Scope
from sktune.verify import compare_outputs, flatten_outputs
from tests.cpu_facts import needs_eager_order_sum

pytestmark = pytest.mark.exactness  # CI runs these again as an AVX2 and a vector-less CPU (.ci/run)

MODELS = Path(__file__).parent.parent / "models"


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32)


@needs_eager_order_sum
@pytest.mark.parametrize("shape", [(1, 32, 128), (8, 1, 128), (3, 37), (5, 100), (2, 7, 19), (3, 5), (4, MAX_LENGTH)])
def test_the_written_out_order_is_eagers_own(shape) -> None:
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(len(shape))) * 3
    assert torch.equal(_bits(eager_order_sum(x)), _bits(x.sum(-1, keepdim=True)))


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    import os

    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path_factory.mktemp("inductor-cache"))
    torch.set_grad_enabled(False)


@needs_eager_order_sum
def test_mean_and_softmax_fuse_bitwise_in_eager_order(cache) -> None:
    source = load_model_file(MODELS / "tiny_norm.py")
    graph = capture(build(source), draw_inputs(source, 0))
    assert {"mean", "softmax"} <= {o.target for o in graph.ops}
    everything = [Scope(0, len(graph.ops) - 1, "all")]
    backend = InductorBackend(for_trials=True)
    plain = backend.compile(graph, Plan.make(everything))
    exact = backend.compile(graph, Plan.make(everything, {"eager_order": True}))
    for seed in range(3):
        args = graph.args_for(draw_inputs(source, seed))
        ref = flatten_outputs(graph.gm(*args))
        assert compare_outputs(ref, flatten_outputs(plain(*args)))  # Inductor's own order differs
        assert compare_outputs(ref, flatten_outputs(exact(*args))) == []


@needs_eager_order_sum
def test_an_instance_the_rewrite_does_not_cover_runs_as_aten(cache) -> None:
    """A mean over the first dim is not rewritten: it must fall back to ATen, not to
    Inductor's inexact reduction."""
    def fn(x):
        return (x * 2).mean(0, keepdim=True) + (x * 3).mean(-1, keepdim=True)

    x = torch.randn(64, 96, generator=torch.Generator().manual_seed(0))
    gm = fx.symbolic_trace(fn)
    from sktune.graph.capture import opgraph_from

    graph = opgraph_from(gm, (x,), (x,))
    plan = Plan.make([Scope(0, len(graph.ops) - 1, "all")], {"eager_order": True})
    compiled = InductorBackend(for_trials=True).compile(graph, plan)
    for seed in range(3):
        y = torch.randn(64, 96, generator=torch.Generator().manual_seed(seed + 1)) * 5
        assert compare_outputs(flatten_outputs(fn(y)), flatten_outputs(compiled(y))) == []


@needs_eager_order_sum
def test_log_softmax_stays_bitwise_with_the_sum_rewritten(cache) -> None:
    """Fused log_softmax is bitwise; its default decomposition sums with aten.sum, which the
    eager-order rewrite must not reach (ATen's log_softmax kernel sums as Inductor does)."""
    def fn(x):
        return torch.log_softmax(x * 2, -1) + x.sum(-1, keepdim=True)

    from sktune.graph.capture import opgraph_from

    gm = fx.symbolic_trace(fn)
    for shape in [(1, 32, 128), (3, 37), (2, 7, 19)]:
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
        graph = opgraph_from(gm, (x,), (x,))
        plan = Plan.make([Scope(0, len(graph.ops) - 1, "all")], {"eager_order": True})
        compiled = InductorBackend(for_trials=True).compile(graph, plan)
        for seed in range(3):
            y = torch.randn(*shape, generator=torch.Generator().manual_seed(seed + 1)) * 3
            assert compare_outputs(flatten_outputs(fn(y)), flatten_outputs(compiled(y))) == []


@pytest.mark.parametrize("machine, capability, lanes", [
    ("x86_64", "AVX512", 8), ("x86_64", "AVX2", 8), ("x86_64", "DEFAULT", 8),
    ("aarch64", "DEFAULT", 4), ("aarch64", "SVE256", 8)])
def test_the_sums_lanes_follow_the_cpu(monkeypatch: pytest.MonkeyPatch, machine: str, capability: str,
                                       lanes: int) -> None:
    """ATen's sum lanes are read at run time (an AVX-512 x86 runs the AVX2 sum; NEON has 4),
    and on this CPU they agree with tests/cpu_facts.py's reading."""
    import platform

    from sktune.backends import eager_order
    from tests.cpu_facts import sum_lanes

    assert eager_order.LANES == eager_order.aten_sum_lanes() == sum_lanes()
    monkeypatch.setattr(platform, "machine", lambda: machine)
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    assert eager_order.aten_sum_lanes() == lanes
