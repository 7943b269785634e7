"""The best stitched plan is retried once with its regions compiled whole (hand-made study)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from sktune.backends.inductor import InductorBackend
from sktune.graph.capture import capture
from sktune.load import build, draw_inputs, load_model_file
from sktune.space.search_space import build_space
from sktune.tuning.records import TrialAttr
from sktune.tuning.refine import UNSTITCHED, refine_best, stitches, unstitched_params
from tests.report_fixtures import _timing

MODELS = Path(__file__).parent.parent / "models"


@pytest.fixture(scope="module")
def space():
    source = load_model_file(MODELS / "stack_deeper.py")
    graph = capture(build(source), draw_inputs(source, 0))
    caps = InductorBackend().capabilities(graph)
    return build_space([o.target for o in graph.ops], [o.module for o in graph.ops], graph.boundaries, caps)


def _study_with(space, params: dict, ratio: float) -> optuna.Study:
    study = optuna.create_study(direction="minimize")
    dist = {k: optuna.distributions.CategoricalDistribution(v) for k, v in space.domains().items()}
    study.add_trial(optuna.trial.create_trial(
        value=ratio, params=params, distributions={k: dist[k] for k in params},
        user_attrs={TrialAttr.PLAN: space.decode(params).to_json(), TrialAttr.TIMING: _timing(ratio)},
        constraints={"bitwise": 0.0}))
    return study


def test_the_best_stitched_plan_gets_one_unstitched_trial(space) -> None:
    anchors = dict(space.anchors())
    best = anchors["fuse-all+fallbacks"]
    assert stitches(space.decode(best), space)
    study = _study_with(space, best, 0.7)
    ran: list[dict] = []

    def objective(trial: optuna.Trial) -> float:
        plan = space.suggest(trial)
        ran.append(plan.option_dict)
        trial.set_user_attr(TrialAttr.PLAN, plan.to_json())
        return 0.69

    refine_best(study, space, objective)
    assert len(ran) == 1 and ran[0]["stitch_units"] is False
    last = study.trials[-1]
    assert last.user_attrs[TrialAttr.ANCHOR] == UNSTITCHED
    assert space.decode(last.params).scopes == space.decode(best).scopes
    assert unstitched_params(study, space) is None  # tried already: not again on a resumed run


def test_no_refinement_when_no_region_spans_a_layer(space) -> None:
    per_unit = space.params_for([True] * len(space.blocks), split=space.unit_edges())
    assert not stitches(space.decode(per_unit), space)
    assert unstitched_params(_study_with(space, per_unit, 0.7), space) is None
