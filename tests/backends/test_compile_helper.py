"""The compile helper: a second process compiles about half of the new regions' work into
the shared on-disk caches; the worker's compile gives the same result, and carries on
alone if the helper dies (backends/compile_helper.py)."""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

import pytest

from sktune.backends.compile_helper import REGION_FIXED_OPS, helper_share
from sktune.plan import Plan, Scope
from sktune.worker.probe import isolating_span
from sktune.pipe.protocol import ProfileRequest, TrialRequest
from sktune.worker.runner import RunnerConfig, TrialRunner
from sktune.verify import compare_outputs, flatten_outputs

MODELS = Path(__file__).parent.parent / "models"


def _op_by_op(runner: TrialRunner, options: dict) -> Plan:
    """Every op its own region (a tuple op with its getitems): many distinct regions."""
    graph, legal = runner.graph, set(runner.graph.boundaries)
    spans = sorted({isolating_span(i, len(graph.ops), legal) for i in range(len(graph.ops))})
    return Plan.make([Scope(first, last, f"r{first}") for first, last in spans], options)


@pytest.mark.slow  # ~28 s; CI's slow run covers it
def test_helper_compiles_half_the_new_regions_and_the_worker_survives_its_death(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))  # the helper inherits it
    runner = TrialRunner(RunnerConfig(model_path=str(MODELS / "probe_mix.py"), input_sets=2, n_batches=2,
                                      compile_helper=True, capture_cache=str(tmp_path / "captures")))
    helper = runner.helper
    assert helper is not None and runner.backend.helper is helper

    plan = _op_by_op(runner, {})
    new = runner.run(TrialRequest(plan)).observed["regions_compiled"]
    assert new >= 6
    delivered = helper.delivered
    assert delivered in (new // 2, (new + 1) // 2)  # regions of (nearly) one size: half of them
    # The same program as a worker compiling alone: bit for bit.
    alone = TrialRunner(RunnerConfig(model_path=str(MODELS / "probe_mix.py"), input_sets=2, n_batches=2))
    assert alone.helper is None
    with_helper = flatten_outputs(runner.backend.compile(runner.graph, plan)(*runner.args[0]))
    assert not compare_outputs(flatten_outputs(alone.backend.compile(alone.graph, plan)(*alone.args[0])), with_helper)

    os.kill(helper.pid, signal.SIGKILL)
    with caplog.at_level(logging.WARNING, logger="sktune"):
        again = runner.run(TrialRequest(_op_by_op(runner, {"max_fusion_size": 16})))  # new regions again
    assert again.observed["regions_compiled"] >= 6 and not helper.alive
    assert "compile helper" in caplog.text
    assert helper.delivered == delivered


@pytest.mark.slow  # ~23 s: the default suite stood at 9:02 of its 10 minutes; CI's slow run covers it
def test_helper_compiles_the_fuse_all_yardstick_at_start_up_and_helps_the_profile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    runner = TrialRunner(RunnerConfig(model_path=str(MODELS / "probe_mix.py"), input_sets=2, n_batches=2,
                                      compile_helper=True, capture_cache=str(tmp_path / "captures"),
                                      prefetch_fuse_all=True))
    helper = runner.helper
    # A plan that hands the helper nothing is timed only once the yardstick is compiled:
    # nothing compiles beside a timing, however short the start-up was.
    runner.run(TrialRequest(Plan.make([Scope(0, len(runner.graph.ops) - 1, None)])))
    assert helper.delivered == 1
    fuse_all = runner.backend.fuse_all_plan(runner.graph)
    result = runner.run(TrialRequest(fuse_all))
    assert result.observed["regions_compiled"] == 1
    assert helper.delivered == 1  # the worker loaded the yardstick the helper compiled at start-up
    # What the region cost the helper is kept with the trial: it prices a whole region (refine.py).
    assert result.observed["helper_compile_s"] > 0

    # The profile compiles with kernel profiling (other cache keys): the helper takes half
    # of that build too, and the profile still names the kernels.
    plan = _op_by_op(runner, {})
    runner.run(TrialRequest(plan))
    before = helper.delivered
    profile = runner.profile(ProfileRequest(plan)).profile
    assert helper.delivered > before
    assert profile["busy_us"] > 0 and any("cpp_fused" in k["name"] for k in profile["top_kernels"])


def test_the_helpers_share_balances_the_work_largest_first() -> None:
    assert helper_share({"one": 500}) == set()  # the worker compiles a lone region itself
    assert len(helper_share({"a": 3, "b": 3})) == 1
    # A repeated unit between two small ends, in graph order: every second region would
    # have given the helper the unit and the worker only the ends.
    assert helper_share({"head": 6, "unit": 127, "tail": 9}) == {"head", "tail"}
    sizes = {f"r{k}": (k * 37) % 101 + 1 for k in range(23)}
    share = helper_share(sizes)
    work = [sum(n + REGION_FIXED_OPS for k, n in sizes.items() if (k in share) == side) for side in (True, False)]
    assert abs(work[0] - work[1]) <= max(sizes.values()) + REGION_FIXED_OPS
