"""Per-shape yardsticks (issue 26, honest regret): each shape's own candidates, built from
its own probe answers, measured at that shape only, never the best, never a finalist,
never reused; the regret is measured against them. A scripted worker: no compile."""

from __future__ import annotations

from dataclasses import replace

import optuna
import pytest

from sktune.cli.summary_view import print_summary

from sktune.capabilities import Capabilities, OptionSpec
from sktune.graph.opgraph import Op
from sktune.measure.op_profile import OpProfile
from sktune.pipe.workload import ServedShape, Workload
from sktune.graph.grouping import regions
from sktune.plan import Plan, Scope
from sktune.space.search_space import UNFUSED
from sktune.space.encode import params_of
from sktune.report import data
from sktune.report.html_summary import _shapes
from sktune.tuning.budget import ClearlyWorsePruner, Effort
from sktune.tuning.loop import search
from sktune.tuning.objective import ObjectiveRules, make_objective
from sktune.tuning.attrs import StudyAttr, TrialAttr
from sktune.tuning.records import best_record, is_feasible, top_records
from sktune.tuning.reuse import MeasuredPlans
from sktune.tuning.sampler import make_sampler
from sktune.tuning.shapes import shapes_summary
from sktune.tuning.summary import summary as study_summary
from sktune.tuning.space_setup import space_from_workload, starting_points
from sktune.tuning.yardsticks import PER_SHAPE, pick, run_yardsticks, shape_points, yardsticks
from tests.unit.test_objective import CHUNKS, ScriptedWorker, result
from tests.unit.test_space import BOUNDARIES, INDUCTOR_LIKE, MODULES, TARGETS


def answer(exact: bool, op: int) -> dict[str, object]:
    return {"alone": exact, "exact_options": None, "op": op}


# rsqrt (no fallback) is exact at the wide shape only; softmax is inexact at both.
WIDE = {"rsqrt": answer(True, 3), "softmax": answer(False, 10)}
NARROW = {"rsqrt": answer(False, 3), "softmax": answer(False, 10)}


def workload(capabilities: Capabilities = INDUCTOR_LIKE) -> Workload:
    ops = tuple(Op(k, f"op{k}", t, m, "", "") for k, (t, m) in enumerate(zip(TARGETS, MODULES)))
    profile = OpProfile(tuple(1.0 + k % 3 for k in range(len(TARGETS))), tuple(0.5 + k % 2 for k in range(len(TARGETS))))
    return Workload(ops, tuple(BOUNDARIES), capabilities, {"backend": "inductor", "threads": "1"}, "m", [[4, 8]],
                    op_profile=profile, exactness=NARROW,  # merged over the shapes: narrow's here
                    shapes={"wide": ServedShape(0.7, [[4, 64]]), "narrow": ServedShape(0.3, [[4, 15]])},
                    exactness_by_shape={"wide": WIDE, "narrow": NARROW})


def hopeless(w: Workload, shape: str | None, plan: Plan) -> bool:
    space = space_from_workload(w)
    exactness = w.exact() if shape is None else w.exact_at(shape)
    return exactness.hopeless(plan, w.targets, space.exact_options, space.fallback_option) is not None


def test_each_shape_gets_its_own_candidates_from_its_own_answers_only() -> None:
    w = workload()
    assert Workload.from_json(w.to_json()) == w  # the per-shape answers cross the pipe
    space = space_from_workload(w)
    found = yardsticks(space, w)
    searched = {space.decode(p) for _, p in starting_points(space, w)}
    assert found and {y.shape for y in found} == {"wide"}  # narrow's answers are the merged ones: none there
    assert len(found) == PER_SHAPE and len({space.decode(y.params) for y in found}) == PER_SHAPE
    for y in found:
        plan = space.decode(y.params)
        assert plan not in searched and hopeless(w, None, plan) and not hopeless(w, "wide", plan)
        assert y.probe_exact_at == ("wide",)
    # The study's best starting point, rebuilt from the shape's answers, comes first.
    candidates = [("gap-top-half+probe", {}), ("probe-safe-runs", {}), ("safe-runs+exact-options", {}),
                  ("safe-runs", {}), ("scope-per-unit+probe", {})]
    assert [n for n, _ in pick(candidates, "scope-per-unit+probe")] == [
        "scope-per-unit+probe", "safe-runs+exact-options", "probe-safe-runs"]


def test_a_plan_from_another_space_is_expressed_in_this_one_or_refused() -> None:
    w = workload()
    space = space_from_workload(w)
    for _, params in starting_points(space, w):  # its own plans: back to parameters that decode to them
        plan = space.decode(params)
        assert space.decode(params_of(space, plan)) == plan
    own_space, points = shape_points(w, "wide")  # cuts around softmax only: other blocks than the study's
    assert own_space.blocks != space.blocks
    for _, params in points:
        plan = own_space.decode(params)
        found = params_of(space, plan)
        assert found is None or regions(space.n_ops, space.decode(found).scopes) == regions(space.n_ops, plan.scopes)
    assert params_of(space, Plan.make([Scope(0, 6, "sk0")], plan.option_dict)) is None  # ops 6-8 cannot be cut


def run(w: Workload, worker: ScriptedWorker, refined: int = 0) -> tuple[optuna.Study, optuna.trial.FrozenTrial]:
    """One anchor exact at both shapes (0.9 at wide, 0.8 at narrow), then the yardsticks (0.5 at wide)."""
    space = space_from_workload(w)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(direction="minimize", sampler=make_sampler(0), pruner=ClearlyWorsePruner())
    study.set_user_attr(StudyAttr.BACKEND, "inductor")
    study.enqueue_trial(dict(next(p for n, p in starting_points(space, w) if n != UNFUSED)),
                        user_attrs={TrialAttr.ANCHOR: "safe-runs"})
    objective = make_objective(space, worker, ObjectiveRules(CHUNKS, 60.0, shapes=w.shape_weights), w.targets,
                               w.exact())
    search(study, objective, Effort(1, CHUNKS, None, 0))
    assert run_yardsticks(study, space, w, objective) == len(yardsticks(space, w)) + refined > 0
    return study, study.trials[0]


def test_a_yardstick_runs_at_its_shape_only_and_is_never_the_best_a_finalist_or_reused() -> None:
    w = workload()
    n = len(yardsticks(space_from_workload(w), w))
    worker = ScriptedWorker([result(0.9), result(0.8)] + [result(0.5)] * n)
    study, robust = run(w, worker)
    measured = study.trials[1:]
    requests = [call[1] for call in worker.calls if call[0] == "run"][2:]
    assert [r.shape for r in requests] == ["wide"] * n  # one run each, at its shape only
    for t in measured:
        assert t.state == optuna.trial.TrialState.COMPLETE and t.user_attrs[TrialAttr.YARDSTICK] == "wide"
        assert list(t.user_attrs[TrialAttr.SHAPES]) == ["wide"] and t.value == pytest.approx(0.5)
        assert not is_feasible(t)  # exact where it ran, faster, and still not a plan for every shape
    assert best_record(study).number == robust.number
    assert [r.number for r in top_records(study, 5)] == [robust.number]  # the finalists' candidates
    plan = Plan.from_json(measured[0].user_attrs[TrialAttr.PLAN])
    assert MeasuredPlans().find(study, plan) is None
    assert plan.dumps() not in study.sampler._tried(study.trials)  # still open to the search

    # A later trial of the same plan is measured, not given the yardstick's one-shape outcome.
    space = space_from_workload(w)
    again = ScriptedWorker([result(0.6), result(0.7, mismatches=1)])
    objective = make_objective(space, again, ObjectiveRules(CHUNKS, 60.0, shapes=w.shape_weights), w.targets,
                               w.exact())
    study.enqueue_trial(measured[0].params, user_attrs={TrialAttr.ANCHOR: "again"})
    study.optimize(objective, n_trials=1)
    assert again.calls[0][1].shape is None and TrialAttr.REUSED_FROM not in study.trials[-1].user_attrs


def test_the_regret_is_measured_against_the_yardstick_with_where_it_is_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    w = workload()
    n = len(yardsticks(space_from_workload(w), w))
    study, robust = run(w, ScriptedWorker([result(0.9), result(0.8)] + [result(0.5)] * n))
    declared = {name: s.to_json() for name, s in w.shapes.items()}
    chosen = robust.user_attrs[TrialAttr.SHAPES]
    summary = shapes_summary(declared, chosen, chosen, study.get_trials())
    wide, narrow = summary["wide"], summary["narrow"]
    assert wide["best_alone_trial"] == robust.number and wide["best_alone_speedup"] == pytest.approx(1 / 0.9)
    assert wide["regret"] == pytest.approx(0.9 / 0.5 - 1) and wide["regret_against"] == "yardstick"
    # The row can be checked by eye: the regret compares the plan's search figure, shown beside it.
    assert wide["search_speedup"] == pytest.approx(1 / 0.9)
    assert wide["regret"] == pytest.approx(2.0 / wide["search_speedup"] - 1)
    assert wide["yardstick_speedup"] == pytest.approx(2.0) and wide["yardstick_trial"] > robust.number
    assert wide["yardstick_exact"] == {"checked": ["wide"], "bitwise": ["wide"], "probe_exact": ["wide"]}
    assert narrow["yardstick_trial"] is None and narrow["regret"] == pytest.approx(0.0)

    # The summary JSON: the yardsticks counted apart, not as plans that failed to be bitwise nor as anchors.
    study.set_user_attr(StudyAttr.SHAPES, declared)
    study.set_user_attr(StudyAttr.OPS, [op.to_json() for op in w.ops])
    whole = study_summary(study)
    assert (whole["n_infeasible"], whole["n_yardsticks"]) == (0, n) and whole["best_trial"] == robust.number
    assert whole["anchors"] == []  # the yardsticks are no starting points; safe-runs is the best itself
    from sktune.report.trials_data import parallel

    assert parallel(study)[0]["number"].tolist() == [robust.number]  # a one-shape ratio is on another scale
    assert whole["shapes"]["wide"]["regret"] == pytest.approx(0.8)

    frame = data.shapes({"shapes": summary})
    assert frame.loc[0, "yardstick_exact"].startswith("bitwise at wide (checked there only; probe: wide)")
    html = _shapes({"shapes": summary})
    assert "2.00× (trial" in html and "+80.0%" in html

    # The CLI's row for it fits an 80-column terminal: short cells, no wrapping.
    import rich.console

    printed = rich.console.Console(width=80, record=True)
    monkeypatch.setattr(rich.console, "Console", lambda: printed)  # print_summary imports it when called
    print_summary(whole)
    row = next(line for line in printed.export_text().splitlines() if "yardstick #" in line)
    assert f"yardstick #{wide['yardstick_trial']}" in row and "2.00×" in row and "at wide only" in row


def test_each_shapes_fastest_exact_yardstick_is_refined_with_each_costly_value() -> None:
    costly = OptionSpec("cpp_wrapper", (False, True), False, costly_choices=(True,))
    w = workload(replace(INDUCTOR_LIKE, options=INDUCTOR_LIKE.options + (costly,)))
    n = len(yardsticks(space_from_workload(w), w))
    answers = [result(0.9), result(0.8), result(0.6, mismatches=1)] + [result(0.5)] * (n - 1) + [result(0.4)]
    study, _ = run(w, ScriptedWorker(answers), refined=1)
    first, refined = study.trials[1:-1], study.trials[-1]
    fastest = min((t for t in first if t.constraints["bitwise"] == 0), key=lambda t: t.value)
    assert refined.params == fastest.params and refined.user_attrs[TrialAttr.YARDSTICK] == "wide"
    assert refined.user_attrs[TrialAttr.OPTION_OVERRIDES] == {"cpp_wrapper": True}
    assert refined.user_attrs[TrialAttr.PLAN]["options"]["cpp_wrapper"] is True
    assert refined.user_attrs[TrialAttr.ANCHOR] == fastest.user_attrs[TrialAttr.ANCHOR] + "+cpp_wrapper=True"
    assert not is_feasible(refined)


def test_yardsticks_wait_while_a_starting_point_is_queued() -> None:
    w = workload()
    space = space_from_workload(w)
    study = optuna.create_study(direction="minimize")
    study.enqueue_trial(dict(starting_points(space, w)[0][1]), user_attrs={TrialAttr.ANCHOR: "safe-runs"})
    worker = ScriptedWorker([])
    objective = make_objective(space, worker, ObjectiveRules(CHUNKS, 60.0, shapes=w.shape_weights), w.targets,
                               w.exact())
    assert run_yardsticks(study, space, w, objective) == 0 and worker.calls == [] and len(study.trials) == 1
