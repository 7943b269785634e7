"""npu dcci from the culprit, on the emulated Ascend (every time here is emulated).

``studies/ascend_moe.py`` routes tokens with ``index_select`` (GatherV2, a gather-class
kernel that reads indices from global memory). The emulator corrupts a gather fused without
a flush (``torch_npu.__doc__``, "Faults"), and charges 0.4 µs per flush. So ``only:GatherV2``
(no flush but around the gathers) is exact where ``none`` is not, and faster than ``safe``
(a flush after every sub-op). A mismatch bisected to a range holding a GatherV2 queues the
same plan with ``only:GatherV2`` through Optuna (``tuning/dcci_seed.py``). The starting
points are queued one at a time (``resume.StartingQueue``), so that repair runs next, and
only the repair of the fastest inexact plan is queued, not one per mismatch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest

from sktune.space.ascend_anchors import superkernel_anchors
from sktune.plan import Plan
from sktune.space.search_space import SearchSpace
from sktune.tuning.dcci_seed import DCCI_FROM_CULPRIT
from sktune.tuning.resume import StartingQueue
from sktune.tuning.objective import ObjectiveRules, make_objective
from sktune.pipe.protocol import (BisectRequest, BisectResult, TimingUpdate, TrialRequest, TrialResult,
                                    WorkerFailure)
from sktune.tuning.attrs import BITWISE_CONSTRAINT, TrialAttr
from sktune.worker.runner import RunnerConfig, TrialRunner
from sktune.tuning.space_setup import space_from_workload

MOE = Path(__file__).resolve().parents[2] / "studies" / "ascend_moe.py"


class InProcessWorker:
    """The ``TrialWorker`` protocol answered by a runner in this process (no pipe)."""

    def __init__(self, runner: TrialRunner) -> None:
        self.runner = runner

    def run(self, request: TrialRequest, timeout: float) -> TrialResult | WorkerFailure:
        return self.runner.run(request)

    def more(self, n_batches: int, timeout: float) -> TimingUpdate | WorkerFailure:
        return self.runner.more(n_batches)

    def bisect(self, plan: Plan, max_runs: int, timeout: float) -> BisectResult | WorkerFailure:
        return self.runner.bisect(BisectRequest(plan, max_runs))


@pytest.fixture(scope="module")
def moe(npu_emulator: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[TrialRunner, SearchSpace, list[str]]:
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path_factory.mktemp("dcci"))  # the backend's profiles and CANN work paths
        runner = TrialRunner(RunnerConfig(str(MOE), backend="npu", input_sets=2))
    workload = runner.describe()
    return runner, space_from_workload(workload), workload.targets


def _whole_model(space: SearchSpace, dcci: str) -> dict[str, Any]:
    return space.params_for([True] * len(space.blocks), dcci_strategy=dcci)


def test_the_space_has_only_gather_and_bisection_names_its_types(moe: tuple) -> None:
    runner, space, _ = moe
    dcci = next(o for o in space.options if o.name == "dcci_strategy")
    assert "GatherV2" in runner.backend.kernel_types
    assert [c for c in dcci.choices if c.startswith("only:")] == ["only:GatherV2"]
    by_op = runner.backend.kernel_types_by_op(runner.kernelless)
    assert by_op is not None
    assert {t for t, op in zip(by_op, runner.graph.ops) if op.target == "index_select"} == {"GatherV2"}


def test_only_gather_is_exact_and_faster_than_safe(moe: tuple, monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    runner, space, _ = moe
    monkeypatch.chdir(tmp_path)
    results = {d: runner.run(TrialRequest(space.decode(_whole_model(space, d)), 2)) for d in
               ("none", "safe", "only:GatherV2")}
    assert not results["none"].bitwise
    assert results["safe"].bitwise and results["only:GatherV2"].bitwise
    # Emulated: 0.4 µs per flush, one after every sub-op under safe, after the gathers alone here.
    assert results["only:GatherV2"].timing.candidate_s < results["safe"].timing.candidate_s


def test_a_bisected_mismatch_queues_the_plan_flushed_only_at_the_culprit(moe: tuple,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path) -> None:
    runner, space, targets = moe
    monkeypatch.chdir(tmp_path)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(direction="minimize")
    study.enqueue_trial(_whole_model(space, "none"), user_attrs={TrialAttr.ANCHOR: "whole-model"})
    objective = make_objective(space, InProcessWorker(runner), ObjectiveRules((2,), 120.0, bisect_runs=4),
                               targets, None)
    study.optimize(objective, n_trials=2)
    first, seeded = study.trials
    found = first.user_attrs[TrialAttr.SMALLEST_FAILING_RANGE]
    assert first.constraints[BITWISE_CONSTRAINT] > 0 and "GatherV2" in found["kernel_types"]
    assert seeded.user_attrs[TrialAttr.ANCHOR] == DCCI_FROM_CULPRIT
    assert seeded.user_attrs[TrialAttr.SEEDED_FROM]["trial"] == first.number
    assert seeded.params == {**first.params, "dcci_strategy": "only:GatherV2"}
    assert seeded.constraints[BITWISE_CONSTRAINT] == 0 and seeded.state == optuna.trial.TrialState.COMPLETE


def test_the_repair_runs_before_the_remaining_starting_points_and_only_once(moe: tuple,
                                                                             monkeypatch: pytest.MonkeyPatch,
                                                                             tmp_path: Path) -> None:
    """Two inexact placements with the same culprit, then an exact one: the faster placement's
    repair runs right after it; the slower one's mismatch queues nothing (its repair, flushes
    added to a plan with none, cannot beat the exact repair already measured)."""
    runner, space, targets = moe
    monkeypatch.chdir(tmp_path)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    anchors = dict(superkernel_anchors(space, [op.module for op in runner.graph.ops]))
    names = ["full-model", "scope-per-layer", "full-model+dcci_after_kernel_end"]
    queue = StartingQueue([(n, anchors[n]) for n in names])
    study = optuna.create_study(direction="minimize")
    queue.top_up(study)
    objective = make_objective(space, InProcessWorker(runner), ObjectiveRules((2,), 120.0, bisect_runs=4),
                               targets, None)
    study.optimize(objective, n_trials=4, callbacks=[queue])
    ran = [t.user_attrs[TrialAttr.ANCHOR] for t in study.trials]
    assert ran == ["full-model", DCCI_FROM_CULPRIT, "scope-per-layer", "full-model+dcci_after_kernel_end"]
    whole, repair, per_layer, _ = study.trials
    assert whole.constraints[BITWISE_CONSTRAINT] > 0 and per_layer.constraints[BITWISE_CONSTRAINT] > 0
    assert "GatherV2" in per_layer.user_attrs[TrialAttr.SMALLEST_FAILING_RANGE]["kernel_types"]  # bisected
    assert per_layer.value > whole.value  # slower (emulated): not worth a repair
    assert repair.user_attrs[TrialAttr.SEEDED_FROM] == {**repair.user_attrs[TrialAttr.SEEDED_FROM],
                                                        "trial": whole.number, "ratio": whole.value}
    assert repair.constraints[BITWISE_CONSTRAINT] == 0 and repair.params["dcci_strategy"] == "only:GatherV2"
    assert queue.pending(study) == [] and not study.get_trials(states=(optuna.trial.TrialState.WAITING,))
