"""Which repair of a bisected dcci mismatch is worth a trial (``tuning/dcci_seed.py``), and
the npu anchors' order (``space/ascend_anchors.py``): scripted studies, no compile."""

from __future__ import annotations

from typing import Any

import optuna
import pytest

from sktune.backends.npu_option_space import search_options
from sktune.capabilities import Capabilities, OptionSpec
from sktune.space.ascend_anchors import superkernel_anchors
from sktune.space.search_space import SearchSpace, build_space
from sktune.tuning.dcci_seed import DCCI_FROM_CULPRIT, enqueue_dcci_seed, not_worth_it
from sktune.pipe.protocol import BisectResult
from sktune.tuning.attrs import TrialAttr

TARGETS = ["mul", "index_select", "add", "linear", "gather", "add"]
MODULES = ["layers.0.norm", "layers.0.mlp", "layers.0.mlp", "layers.1.mlp", "layers.1.mlp", ""]
FOUND = BisectResult((1, 2), 3, ("gather", "add"), ("GatherV2", "Add"))
WAITING = optuna.trial.TrialState.WAITING


@pytest.fixture
def space() -> SearchSpace:
    options = tuple(search_options(["Add", "GatherV2", "MatMulV2", "Mul"]))
    capabilities = Capabilities(options=options, unmarked_plans=True, anchor_set="superkernel")
    return build_space(TARGETS, MODULES, list(range(len(TARGETS) - 1)), capabilities)


def dcci(space: SearchSpace) -> OptionSpec:
    return next(o for o in space.options if o.name == "dcci_strategy")


def why_not(study: optuna.Study, space: SearchSpace, ratio: float, choice: str) -> str | None:
    """Why repairing a plan with ``choice`` (to flush around the culprit's GatherV2) is not worth it."""
    return not_worth_it(study, ratio, dcci(space), choice, "only:GatherV2")


def whole(space: SearchSpace, dcci: str, **options: Any) -> dict[str, Any]:
    return space.params_for([True] * len(space.blocks), dcci_strategy=dcci, **options)


def run(study: optuna.Study, space: SearchSpace, params: dict[str, Any] | None, ratio: float,
        mismatches: int) -> optuna.trial.FrozenTrial:
    """One scripted trial of ``params`` (None: the oldest waiting trial, e.g. a repair); an
    inexact one queues its repair as the objective does."""
    if params is not None:
        assert not study.get_trials(states=(WAITING,)), "Optuna would run the waiting trial first"
        study.enqueue_trial(params)
    ran: list[int] = []

    def objective(trial: optuna.Trial) -> float:
        space.suggest(trial)
        ran.append(trial.number)
        trial.set_constraint("bitwise", float(mismatches))
        if mismatches:
            enqueue_dcci_seed(trial, space, FOUND, ratio)
        return ratio

    study.optimize(objective, n_trials=1)
    return study.trials[ran[0]]


def repairs(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return [t for t in study.trials if t.user_attrs.get(TrialAttr.ANCHOR) == DCCI_FROM_CULPRIT]


def new_study() -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    return optuna.create_study(direction="minimize")


def test_the_first_mismatch_queues_its_repair_with_the_ratio_it_came_from(space: SearchSpace) -> None:
    study = new_study()
    first = run(study, space, whole(space, "none"), 0.30, 3)
    (repair,) = repairs(study)
    assert repair.state == WAITING and repair.system_attrs["fixed_params"]["dcci_strategy"] == "only:GatherV2"
    assert repair.user_attrs[TrialAttr.SEEDED_FROM] == {"range": [1, 2], "kernel_types": ["GatherV2", "Add"],
                                                        "trial": first.number, "ratio": 0.30}


def test_each_bisected_trial_says_what_repair_came_of_its_culprit(space: SearchSpace) -> None:
    """Queued, or why not: a culprit with no repair (a walk's attention models) said nothing."""
    study = new_study()
    first = run(study, space, whole(space, "none"), 0.30, 3)
    assert first.user_attrs[TrialAttr.DCCI_REPAIR] == "queued with dcci_strategy=only:GatherV2"
    unaligned = BisectResult((1, 2), 3, ("gather", "add"), None)  # kernels and ops did not line up

    def objective(trial: optuna.Trial) -> float:
        space.suggest(trial)
        trial.set_constraint("bitwise", 3.0)
        assert enqueue_dcci_seed(trial, space, unaligned, 0.25) is None
        return 0.25

    other = new_study()
    other.enqueue_trial(whole(space, "none"))
    other.optimize(objective, n_trials=1)
    said = other.trials[0].user_attrs[TrialAttr.DCCI_REPAIR]
    assert said.startswith("none: the culprit's device op types are unknown"), said


def test_a_slower_mismatch_queues_nothing_while_a_faster_ones_repair_waits_or_is_exact(space: SearchSpace) -> None:
    study = new_study()
    run(study, space, whole(space, "none"), 0.30, 3)
    assert why_not(study, space, 0.35, "disable:Mul") == "trial 1 repairs a plan at least as fast (0.300)"
    assert why_not(study, space, 0.20, "none") is None  # faster than the plan being repaired
    run(study, space, None, 0.31, 0)  # the repair: exact
    run(study, space, whole(space, "none", early_start=1), 0.35, 3)
    assert len(repairs(study)) == 1
    faster = run(study, space, whole(space, "none", auto_op_parallel=1), 0.20, 3)
    assert [r.user_attrs[TrialAttr.SEEDED_FROM]["trial"] for r in repairs(study)] == [0, faster.number]


def test_a_no_flush_plan_slower_than_the_best_exact_is_not_repaired(space: SearchSpace) -> None:
    study = new_study()
    run(study, space, whole(space, "safe"), 0.40, 0)
    assert "the best exact trial is faster (0.400)" in str(why_not(study, space, 0.45, "none"))
    run(study, space, whole(space, "none"), 0.45, 3)
    assert repairs(study) == []
    # A plan that flushes elsewhere may be slower than its repair: still worth one.
    assert why_not(study, space, 0.45, "disable:GatherV2") is None


def test_a_repair_that_came_out_inexact_does_not_block_the_next(space: SearchSpace) -> None:
    study = new_study()
    run(study, space, whole(space, "none"), 0.30, 3)
    run(study, space, None, 0.31, 2)  # the repair: mismatches of another cause
    assert repairs(study)[0].state == optuna.trial.TrialState.COMPLETE  # ran, still inexact
    assert why_not(study, space, 0.35, "none") is None


def test_the_speed_option_anchors_come_right_after_unfused(space: SearchSpace) -> None:
    names = [name for name, _ in superkernel_anchors(space, MODULES)]
    assert names[:3] == ["unfused", "no-scopes+speed-options", "full-model+dcci_after_kernel_end+speed-options"]
    assert {"no-scopes", "full-model", "full-model+dcci_after_kernel_end", "scope-per-mlp"} <= set(names[3:])


def test_a_repair_whose_run_was_stopped_is_queued_again_on_resume(space: SearchSpace) -> None:
    """A repair is queued once, when its culprit is bisected: a Ctrl-C during it lost it (on
    npu a trial is minutes of compile, and the repair may be the fastest exact plan)."""
    from sktune.tuning.dcci_seed import requeue_stopped_seeds
    from sktune.tuning.trial_writer import mark_stopped

    study = new_study()
    run(study, space, whole(space, "none"), 0.30, 3)
    (queued,) = repairs(study)
    stopped = study.ask()  # the repair, stopped midway
    assert stopped.number == queued.number
    mark_stopped(stopped)
    study.tell(stopped, state=optuna.trial.TrialState.FAIL)
    run(study, space, whole(space, "none"), 0.30, 3)  # the same plan, the same culprit: its repair queued again
    assert [t.state for t in repairs(study)] == [optuna.trial.TrialState.FAIL, WAITING]
    assert requeue_stopped_seeds(study) == []  # it waits already: nothing to add
    run(study, space, None, 0.32, 0)  # the repair ran and came out exact

    study = new_study()
    run(study, space, whole(space, "none"), 0.30, 3)
    stopped = study.ask()
    mark_stopped(stopped)
    study.tell(stopped, state=optuna.trial.TrialState.FAIL)
    assert requeue_stopped_seeds(study) == [stopped.number]  # a resume queues it again, as it was
    again = study.get_trials(states=(WAITING,))
    kept = {k: v for k, v in study.trials[stopped.number].user_attrs.items() if k != TrialAttr.FAILURE}
    assert [t.user_attrs for t in again] == [kept] and kept[TrialAttr.ANCHOR] == DCCI_FROM_CULPRIT
    assert again[0].system_attrs["fixed_params"] == study.trials[stopped.number].system_attrs["fixed_params"]
    assert requeue_stopped_seeds(study) == []  # once


def test_scope_per_layer_scopes_the_layers_only() -> None:
    """As a serving stack places it: one scope per repeated layer; the embedding before the
    first layer and the head after the last stay unscoped (a scope around the embedding
    alone made this anchor inexact on the emulated Ascend)."""
    layer = [("mul", "norm"), ("linear", "mlp.up"), ("relu", "mlp"), ("linear", "mlp.down"), ("add", "")]
    targets = ["embedding"] + [t for _ in range(3) for t, _ in layer] + ["linear"]
    modules = ["embed"] + [f"layers.{i}" + (f".{m}" if m else "") for i in range(3) for _, m in layer] + ["head"]
    options = tuple(search_options(["Add", "GatherV2", "MatMulV2", "Mul"]))
    space = build_space(targets, modules, list(range(len(targets) - 1)),
                        Capabilities(options=options, unmarked_plans=True, anchor_set="superkernel"))
    assert space.repeats is not None and space.repeats.units == ((1, 5), (6, 10), (11, 15))
    params = dict(superkernel_anchors(space, modules))["scope-per-layer"]
    fused = [(s.first_op, s.last_op) for s in space.decode(params).scopes if s.name is not None]
    assert fused == [(1, 5), (6, 10), (11, 15)]
