"""Smoke test of the search benchmark and the exactness probe on a tiny real model.

Real compiles and measurements (small: a space of at most 16 plans, 2 batch pairs each);
the figures themselves come from ``benchmarks/search_efficiency.py`` runs, not from here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sktune.benchlib.exhaustive import distinct_plans, measure_all, remeasure_top, save, small_space
from sktune.benchlib.replay import STRATEGIES, exhaustive_best, replay, summarize
from sktune.worker.probe import isolating_span, one_by_one_answers, probe_exactness, side_by_side_answers
from sktune.worker.runner import RunnerConfig, TrialRunner
from tests.cpu_facts import needs_eager_order_sum

TINY = Path(__file__).resolve().parents[1] / "models" / "tiny_norm.py"
ROOT = Path(__file__).resolve().parents[2]
# The probe's answers are numerical facts of the CPU: CI reruns these as other CPUs (.ci/run).
# tiny_norm's mean (over 64) and softmax differ fused on every ISA (the order of the sum; the
# reciprocal), its sigmoid rows (32) have no vector tail on any; probe_mix's 37 has one on all.
exactness = pytest.mark.exactness


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> TrialRunner:
    cache = tmp_path_factory.mktemp("probe") / "probe.json"
    return TrialRunner(RunnerConfig(model_path=str(TINY), input_sets=2, probe_cache=str(cache)))


@exactness
def test_probe_finds_the_inexact_ops_and_answers_from_its_cache(runner: TrialRunner, tmp_path: Path) -> None:
    found = runner.exactness
    assert not found["mean"]["alone"] and not found["softmax"]["alone"]  # reordered reductions
    assert found["sigmoid"]["alone"] and found["linear"]["alone"]
    cached = Path(runner.config.probe_cache)
    assert cached.is_file()

    class Counting:  # a runner that may not compile anything: every answer must come from the cache
        graph, backend = runner.graph, runner.backend

        def shape(self, name):  # noqa: ANN001, ANN201
            return runner.shape(name)

        def mismatches(self, plan, shape=None):  # noqa: ANN001, ANN201
            raise AssertionError("probe compiled although its cache holds the answer")

    exact = {o.name: o.exact_choice for o in runner.capabilities.options if o.exact_choice is not None}
    assert probe_exactness(Counting(), cached, exact) == found  # the exact options are part of the key


@pytest.mark.slow  # 17-20 s: keeps the default run under 10 minutes on 2 cores (CI runs it)
def test_exhaustive_table_and_replay(runner: TrialRunner, tmp_path: Path) -> None:
    workload = runner.describe()
    space, max_cuts = small_space(workload, max_configs=16)  # 16 without cuts: three fallbacks, one option
    plans = distinct_plans(space)
    assert 2 <= len(plans) <= 16
    table = measure_all(runner, space, n_batches=2)
    assert set(table) == set(plans)
    for m in (m for m in table.values() if m["ratio"] is not None):  # which side a noisy reading came from
        assert m["ratio"] == pytest.approx(m["candidate_s"] / m["baseline_s"])
    assert workload.environment["heap"]  # the heap regime the timings ran in (measure/heap.py)
    assert any(m["bitwise"] for m in table.values()) and not all(m["bitwise"] for m in table.values())
    # The fastest exact plans again, twice each: each keeps the median of its three ratios.
    first = {k: m["ratio"] for k, m in table.items()}
    again = remeasure_top(runner, table, n_batches=2, top=2)
    exact = sorted((k for k, m in table.items() if m["bitwise"]), key=first.__getitem__)
    assert set(exact[:2]) <= set(again) and len(again) <= 6  # then any that rose into the top two, up to 3 x top
    for key in again:
        ratios = table[key]["ratios"]
        assert len(ratios) == 3 and ratios[0] == first[key] and table[key]["ratio"] == sorted(ratios)[1]
    assert all("ratios" not in table[k] for k in exact if k not in again)
    path = tmp_path / "table.json"
    save(path, str(TINY), workload, max_cuts, table, (), 2)
    data = json.loads(path.read_text())
    best = exhaustive_best(data["measurements"])
    runs = [replay(data, s, seed, max_trials=2 * len(plans)) for s in STRATEGIES for seed in range(2)]
    for run in runs:
        assert run.best_so_far == tuple(sorted(run.best_so_far, reverse=True))  # best never rises
    result = summarize(runs, best)
    assert set(result) == set(STRATEGIES)
    assert all(row["seeds"] == 2 for row in result.values())

    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "search_efficiency.py"), "replay", str(path),
                          "--seeds", "2", "--max-trials", "20"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "sktune" in out.stdout and "random needs" in out.stdout


@pytest.mark.slow  # ~18 s on a 2.8 GHz Xeon (the probe side by side, then one compile per span); CI runs it (.ci/run)
@exactness
@needs_eager_order_sum  # mean's answer with the exact options
def test_side_by_side_probe_gives_the_one_by_one_answers_in_one_compile(test_models: Path) -> None:
    """The probe compiles every op's span side by side in one graph (and the inexact ones
    once more with the exact options); its answers must be those of one compile per span."""
    runner = TrialRunner(RunnerConfig(model_path=str(test_models / "probe_mix.py"), input_sets=2))
    graph, legal = runner.graph, set(runner.graph.boundaries)
    spans = {f"{i} {op.target}": isolating_span(i, len(graph.ops), legal) for i, op in enumerate(graph.ops)
             if op.target != "getitem"}
    exact = {o.name: o.exact_choice for o in runner.capabilities.options if o.exact_choice is not None}
    runner.backend.compile_counts()
    together = side_by_side_answers(runner, None, spans, exact)
    assert runner.backend.compile_counts()["regions_compiled"] == 2  # all alone, then the inexact with options
    assert together == one_by_one_answers(runner, None, spans, exact)
    by_target = {key.split()[1]: answer for key, answer in together.items()}
    # The model mixes all three answers, so agreement above is not agreement on "all exact".
    assert by_target["linear"] == {"alone": True, "exact_options": None}
    assert by_target["mean"] == {"alone": False, "exact_options": True}
    assert by_target["tanh"] == {"alone": False, "exact_options": False}


@exactness
def test_starting_points_that_can_be_best_run_first(runner: TrialRunner) -> None:
    """Issue 24: the anchors the probe calls inexact (fuse-all: tiny_norm's mean and softmax
    differ fused) come after every starting point that can be the best exact plan, and so
    does the unfused plan (never the best fused one; the loop runs it when the search ends
    before it did: test_unfused_runs_when_the_search_ends_before_it)."""
    from sktune.space.search_space import FUSE_ALL, UNFUSED
    from sktune.tuning.space_setup import space_from_workload, starting_points

    workload = runner.describe()
    space = space_from_workload(workload)
    points = starting_points(space, workload)
    names = [name for name, _ in points]
    exact = workload.exact()
    hopeless = [name for name, params in points
                if exact.hopeless(space.decode(params), workload.targets, space.exact_options, space.fallback_option)]
    assert FUSE_ALL in hopeless and UNFUSED not in hopeless and names[0] != UNFUSED
    first_hopeless = min(names.index(n) for n in hopeless)
    assert names.index(UNFUSED) == first_hopeless - 1 > 0  # after all that can win, before the inexact
    assert all(n in hopeless for n in names[first_hopeless:])
