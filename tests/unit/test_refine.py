"""After the search the best plan is tried with each costly option value, one trial each,
one value at a time (hand-made study, a stand-in objective: no compile)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from sktune.backends.inductor import InductorBackend
from sktune.graph.capture import capture
from sktune.load import build, draw_inputs, load_model_file
from sktune.space.search_space import build_space
from sktune.tuning.attrs import StudyAttr, TrialAttr
from sktune.tuning.refine import changes_anything, next_refinement, refine_best
from tests.report_fixtures import _timing

MODELS = Path(__file__).parent.parent / "models"


BOUNDARIES: list[int] = []  # the captured graph's legal cuts, as a real study records them


@pytest.fixture(scope="module")
def space():
    source = load_model_file(MODELS / "stack_deeper.py")
    graph = capture(build(source), draw_inputs(source, 0))
    caps = InductorBackend().capabilities(graph)
    BOUNDARIES[:] = graph.boundaries
    return build_space([o.target for o in graph.ops], [o.module for o in graph.ops], graph.boundaries, caps)


def _study_with(space, params: dict, ratio: float) -> optuna.Study:
    study = optuna.create_study(direction="minimize")
    study.set_user_attr(StudyAttr.BACKEND, "inductor")
    study.set_user_attr(StudyAttr.BOUNDARIES, list(BOUNDARIES))
    dist = {k: optuna.distributions.CategoricalDistribution(v) for k, v in space.domains().items()}
    study.add_trial(optuna.trial.create_trial(
        value=ratio, params=params, distributions={k: dist[k] for k in params},
        user_attrs={TrialAttr.PLAN: space.decode(params).to_json(), TrialAttr.TIMING: _timing(ratio)},
        constraints={"bitwise": 0.0}))
    return study


def _objective(space, ratios: dict[str, float], ran: list[dict]):
    """Applies the trial's overrides as the real objective does; the ratio comes from ``ratios``."""
    def objective(trial: optuna.Trial) -> float:
        overrides = trial.user_attrs.get(TrialAttr.OPTION_OVERRIDES) or {}
        plan = space.with_options(space.suggest(trial), overrides)
        ran.append(plan.option_dict)
        trial.set_user_attr(TrialAttr.PLAN, plan.to_json())
        ratio = ratios[trial.user_attrs[TrialAttr.ANCHOR]]
        trial.set_user_attr(TrialAttr.TIMING, _timing(ratio))
        return ratio
    return objective


def test_the_best_plan_is_tried_with_each_costly_value_alone(space) -> None:
    best = dict(space.anchors())["fuse-all+fallbacks"]
    study = _study_with(space, best, 0.7)
    assert changes_anything(study, space.decode(best), space, "stitch_units")
    ran: list[dict] = []
    # Whole regions win (0.65); the C++ wrapper is still tried on the searched best alone
    # (never both together: a wrapper around one whole region compiles for minutes).
    objective = _objective(space, {"best+stitch_units=False": 0.65, "best+cpp_wrapper=True": 0.8}, ran)
    refine_best(study, space, objective)
    assert [(r["stitch_units"], r["cpp_wrapper"]) for r in ran] == [(False, False), (True, True)]
    assert [t.user_attrs[TrialAttr.ANCHOR] for t in study.trials[1:]] == [
        "best+stitch_units=False", "best+cpp_wrapper=True"]
    assert study.trials[2].user_attrs[TrialAttr.OPTION_OVERRIDES] == {"cpp_wrapper": True}
    # Each names the trial it refines: the search's best, which the finalists' round may not name.
    assert [t.user_attrs[TrialAttr.REFINED_FROM] for t in study.trials[1:]] == [0, 0]
    from sktune.report.trials_data import trials_table
    assert list(trials_table(study)["anchor"])[1:] == ["best+stitch_units=False (of #0)", "best+cpp_wrapper=True (of #0)"]
    assert next_refinement(study, space) is None  # all tried: a resumed run adds nothing


def test_stitching_is_not_retried_when_no_region_spans_a_layer(space) -> None:
    per_unit = space.params_for([True] * len(space.blocks), split=space.unit_edges())
    study = _study_with(space, per_unit, 0.7)
    assert not changes_anything(study, space.decode(per_unit), space, "stitch_units")
    name, _, overrides, refined = next_refinement(study, space)
    assert name == "best+cpp_wrapper=True" and overrides == {"cpp_wrapper": True} and refined == 0


def test_no_refinement_while_starting_points_wait(space) -> None:
    """Optuna runs queued trials first come first served: with an anchor still queued (the
    budget ran out before it), a refinement would run that anchor instead of itself."""
    anchors = dict(space.anchors())
    study = _study_with(space, anchors["fuse-all+fallbacks"], 0.7)
    study.enqueue_trial(anchors["safe-runs"], user_attrs={TrialAttr.ANCHOR: "safe-runs"})
    assert next_refinement(study, space) is None



@pytest.mark.parametrize(("yardstick_s", "helper_s", "tried"), [(9.0, 0.0, True), (40.0, 0.0, False), (9.0, 40.0, False)])
def test_whole_regions_are_left_out_where_they_cost_more_than_the_cap(space, yardstick_s: float, helper_s: float,
                                                                       tried: bool) -> None:
    """The fuse-all yardstick's compile prices a whole region: 9 s against 5 s trials is
    under a cap of 3 trials, 40 s is not (then the C++ wrapper alone is tried). When the
    compile helper compiled it, the worker only waited 9 s: the helper's 40 s count."""
    anchors = dict(space.anchors())
    study = _study_with(space, anchors["fuse-all+fallbacks"], 0.7)
    dist = {k: optuna.distributions.CategoricalDistribution(v) for k, v in space.domains().items()}
    for anchor, ratio, compile_s, bitwise in [("fuse-all", 0.5, yardstick_s, 1.0), ("safe-runs", 0.9, 5.0, 0.0),
                                             ("safe-runs+exact-options", 0.95, 5.0, 0.0)]:
        params = anchors[anchor]
        study.add_trial(optuna.trial.create_trial(
            value=ratio, params=params, distributions={k: dist[k] for k in params}, constraints={"bitwise": bitwise},
            user_attrs={TrialAttr.PLAN: space.decode(params).to_json(), TrialAttr.TIMING: _timing(ratio),
                        TrialAttr.ANCHOR: anchor, TrialAttr.COMPILE_S: compile_s,
                        TrialAttr.OBSERVED: {"helper_compile_s": helper_s} if anchor == "fuse-all" else {}}))
    ran: list[dict] = []
    objective = _objective(space, {"best+stitch_units=False": 0.65, "best+cpp_wrapper=True": 0.8}, ran)
    refine_best(study, space, objective, whole_region_cap=3)
    names = [t.user_attrs[TrialAttr.ANCHOR] for t in study.trials[4:]]
    assert names == (["best+stitch_units=False"] if tried else []) + ["best+cpp_wrapper=True"]
    skipped = study.user_attrs.get(StudyAttr.WHOLE_REGION_SKIPPED)
    if tried:
        assert skipped is None
    else:
        assert skipped == {"whole_compile_s": 40.0, "median_trial_compile_s": 5.0, "trials": 8.0, "cap_trials": 3}
        refine_best(study, space, objective, whole_region_cap=None)  # no cap (effort "thorough"): tried
        assert study.trials[-1].user_attrs[TrialAttr.ANCHOR] == "best+stitch_units=False"
