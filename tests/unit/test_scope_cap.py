"""The backend's cap on distinct scope names: declared as a capability, kept by the
space's decoding (names reused, regions unchanged), and enforced before compiling."""

from __future__ import annotations

import json
from dataclasses import replace

import optuna
import pytest

from sktune.capabilities import Capabilities, OptionSpec
from sktune.graph.grouping import regions
from sktune.space import search_space
from sktune.plan import Scope
from sktune.space.scope_cap import distinct_scopes, over_cap, reuse_names
from sktune.space.search_space import build_space
from sktune.tuning.budget import ClearlyWorsePruner, Effort
from sktune.tuning.loop import search
from sktune.tuning.objective import ObjectiveRules, make_objective
from sktune.tuning.attrs import TrialAttr
from tests.unit.test_objective import CHUNKS, ScriptedWorker, result

TARGETS = ["mul", "add"] * 6
CAPPED = Capabilities(options=(OptionSpec("early_start", (0, 1), 0),), unmarked_plans=True, max_scopes=3)


def test_capabilities_json_round_trip_keeps_the_cap() -> None:
    assert Capabilities.from_json(json.loads(json.dumps(CAPPED.to_json()))) == CAPPED
    uncapped = replace(CAPPED, max_scopes=None)
    assert Capabilities.from_json(json.loads(json.dumps(uncapped.to_json()))).max_scopes is None
    older = {k: v for k, v in CAPPED.to_json().items() if k != "max_scopes"}  # before the field existed
    assert Capabilities.from_json(older).max_scopes is None
    assert CAPPED.narrowed(set()).max_scopes == 3
    with pytest.raises(ValueError, match="at least 2"):
        replace(CAPPED, max_scopes=1)


def test_within_the_cap_names_are_kept_and_past_it_reused_without_changing_regions() -> None:
    scopes = [Scope(2 * k, 2 * k + 1, f"sk{k}") for k in range(6)]  # six touching scopes
    assert reuse_names(scopes[:3], 3) == scopes[:3] and reuse_names(scopes, None) == scopes
    renamed = reuse_names(scopes, 3)
    assert [s.name for s in renamed] == ["sk0", "sk1", "sk2", "sk0", "sk1", "sk2"]
    assert distinct_scopes(renamed) == 3 and over_cap(renamed, 3) is None
    assert regions(12, renamed) == regions(12, scopes)  # no two touching scopes share a name
    assert over_cap(scopes, 3) == ("6 distinct scope names, over the backend's limit of 3 "
                                   "(past it CANN silently leaves the extra scopes unfused)")
    assert distinct_scopes([Scope(0, 3, None), Scope(4, 5, "a"), Scope(7, 8, "a")]) == 1  # None is no name


def test_decoding_keeps_under_the_cap_and_the_signature_names_it() -> None:
    space = build_space(TARGETS, [f"m{i}" for i in range(12)], list(range(11)), CAPPED, stamp=False)
    split = space.params_for([True] * len(space.blocks), split_all=True)
    plan = space.decode(split)
    assert len(space.blocks) > 3 and distinct_scopes(plan.scopes) == 3 and plan == space.decode(split)
    assert space.signature()["max_scopes"] == 3 and space.capabilities.max_scopes == 3
    assert "max_scopes" not in replace(space, max_scopes=None).signature()  # uncapped studies resume as before


def test_an_over_cap_plan_is_skipped_before_compiling_and_costs_no_trial(monkeypatch) -> None:
    space = build_space(TARGETS, [f"m{i}" for i in range(12)], list(range(11)), CAPPED, stamp=False)
    over = space.params_for([True] * len(space.blocks), split_all=True)
    one_scope = space.params_for([True] * len(space.blocks))
    # A plan that did not come through the capped decoding (an older study's, a user's).
    monkeypatch.setattr(search_space, "reuse_names", lambda scopes, cap: list(scopes))
    study = optuna.create_study(direction="minimize", pruner=ClearlyWorsePruner())
    study.enqueue_trial(over, user_attrs={TrialAttr.ANCHOR: "warm:older#3"})  # anchors too: refused anyway
    study.enqueue_trial(one_scope)
    worker = ScriptedWorker([result(0.9)])
    objective = make_objective(space, worker, ObjectiveRules(CHUNKS, 60.0), TARGETS, None)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    search(study, objective, Effort(1, CHUNKS, None, 0))  # --trials 1
    skipped, ran = study.trials
    assert skipped.state == optuna.trial.TrialState.PRUNED
    assert skipped.user_attrs[TrialAttr.SKIPPED].startswith("skipped: ")
    assert "over the backend's limit of 3" in skipped.user_attrs[TrialAttr.SKIPPED]
    assert ran.state == optuna.trial.TrialState.COMPLETE  # the budget of one was left for it
    assert [c[0] for c in worker.calls] == ["run", "more", "more"]
    assert worker.calls[0][1].plan.to_json() == ran.user_attrs[TrialAttr.PLAN]
