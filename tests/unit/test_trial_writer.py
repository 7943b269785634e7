"""The trial-attribute writers (tuning/trial_writer.py): each key the tuner sets on a
trial is written there only, and in the stored form the readers expect."""

from __future__ import annotations

import ast
from pathlib import Path

import optuna

from sktune.measure.stats import PairedTiming
from sktune.pipe.protocol import StaticCompile
from sktune.plan import Plan, Scope
from sktune.tuning.attrs import TrialAttr
from sktune.tuning.records import TrialRecord, skipped
from sktune.tuning.shapes import ShapeOutcome
from sktune.tuning.reuse import reusable
from sktune.tuning.trial_writer import (add_static_compile, mark_interrupted, mark_skipped, record_plan,
                                        record_reused, record_shapes)

SKTUNE = Path(__file__).resolve().parents[2] / "sktune"
WRITERS = {"set_user_attr", "set_trial_user_attr"}


def _trial() -> optuna.Trial:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    return optuna.create_study().ask()


def test_only_the_writer_module_sets_a_trials_attributes() -> None:
    """``study.set_user_attr`` (study attributes) is elsewhere; a trial's are set in trial_writer.py."""
    found = []
    for path in SKTUNE.rglob("*.py"):
        if path.name == "trial_writer.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in WRITERS
                    and not (isinstance(node.func.value, ast.Name) and node.func.value.id == "study")
                    and not (isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "study")):
                found.append(f"{path.relative_to(SKTUNE.parent)}:{node.lineno}")
    assert found == []


def test_the_plan_and_a_skip_are_stored_as_the_readers_expect() -> None:
    trial = _trial()
    plan = Plan.make([Scope(0, 3, "s")], {"max_fusion_size": 16})
    record_plan(trial, plan, {})
    mark_skipped(trial, "mean (op 1) is inexact")
    frozen = trial.study.trials[0]
    assert TrialAttr.OPTION_OVERRIDES not in frozen.user_attrs  # none set: none stored
    assert frozen.user_attrs[TrialAttr.PLAN] == plan.to_json()
    assert frozen.user_attrs[TrialAttr.COMPILED] is False and skipped(frozen)
    assert TrialRecord.of(frozen).failure == "skipped: mean (op 1) is inexact"


def test_static_compile_is_summed_over_a_trials_runs() -> None:
    trial = _trial()
    add_static_compile(trial, StaticCompile(2.0, None, emulated=True))
    add_static_compile(trial, StaticCompile(3.0, 10.0, emulated=True))
    assert trial.study.trials[0].user_attrs[TrialAttr.STATIC_COMPILE] == {"seconds": 5.0, "uncached_s": 10.0,
                                                                           "emulated": True}
    add_static_compile(trial, StaticCompile(1.0, None, emulated=True))  # unknown: the sum is unknown too
    assert trial.study.trials[0].user_attrs[TrialAttr.STATIC_COMPILE]["uncached_s"] is None


def test_a_reused_trial_copies_only_the_named_keys_and_names_its_source() -> None:
    study = optuna.create_study()
    earlier = study.ask()
    timing = PairedTiming(1e-3, 8e-4, 0.8, (0.79, 0.81), 10)
    record_shapes(earlier, {"bs1": ShapeOutcome(1.0, timing, 0)})
    earlier.set_user_attr(TrialAttr.COMPILE_S, 4.0)  # a cost: stays with the trial that paid it
    study.tell(earlier, 0.8)
    trial = study.ask()
    record_reused(trial, study.trials[0], (TrialAttr.SHAPES, TrialAttr.TIMING))
    attrs = study.trials[1].user_attrs
    assert attrs == {TrialAttr.REUSED_FROM: 0, TrialAttr.SHAPES: study.trials[0].user_attrs[TrialAttr.SHAPES]}


def test_a_killed_runs_trial_fails_with_a_reason_that_lets_its_plan_run_again() -> None:
    study = optuna.create_study()
    trial = study.ask()
    record_plan(trial, Plan.make([Scope(0, 3, "s")], {}), {})
    mark_interrupted(study._storage, trial._trial_id)
    study._storage.set_trial_state_values(trial._trial_id, optuna.trial.TrialState.FAIL)
    frozen = study.trials[0]
    assert frozen.user_attrs[TrialAttr.FAILURE] == "interrupted: its sktune process was killed"
    assert not reusable(frozen)
