"""The finalists' rule (tuning/finalists.py) on stored fake timings: the unfused plan runs in
the round, and a fused plan is named best only when its re-measured ratio interval lies
wholly below 1.0; otherwise the result is "keep unfused" with speedup exactly 1.0, and the
summary, the CLI, the report and the export say so with the reason (no compile)."""

from __future__ import annotations

import html
from typing import Any

import optuna
import pytest

from sktune.cli.summary_view import print_summary
from sktune.errors import ExportError
from sktune.measure.stats import PairedTiming
from sktune.report import data
from sktune.report.export import export_json, export_patch, export_python
from sktune.report.html import render
from sktune.report.trials_data import trials_table
from sktune.tuning.finalists import confirm_finalists, finalist_verdict
from sktune.pipe.protocol import ConfirmRequest, ConfirmResult
from sktune.tuning.records import best_record
from sktune.tuning.summary import summary
from tests.report_fixtures import _plan

OPS = [{"index": i, "name": f"n{i}", "target": t, "module": "", "module_type": "Net", "source": ""}
       for i, t in enumerate(["gelu", "mul", "add", "gelu"])]
UNFUSED, FUSE_ALL, CUT = _plan([(None, 0, 3)]), _plan([("sk0", 0, 3)]), _plan([("sk0", 0, 1), ("sk1", 2, 3)])
SHAPES = {"big": 3.0, "small": 1.0}


def timing(ratio: float, lo: float, hi: float, baseline_s: float = 1e-4) -> dict[str, Any]:
    return PairedTiming(baseline_s, ratio * baseline_s, ratio, (lo, hi), 30).to_json()


def make_study(shapes: bool = False, unfused_fails: bool = False) -> optuna.Study:
    """unfused (trial 0), fuse-all (1), a sampled cut plan (2) that the search measured at 0.85."""
    study = optuna.create_study(direction="minimize")
    for key, value in {"model": "m.py", "backend": "inductor", "threads": 1, "input_sets": 3, "ops": OPS,
                       "boundaries": [0, 1, 2], "environment": {"backend": "inductor", "threads": "1"}}.items():
        study.set_user_attr(key, value)
    if shapes:
        study.set_user_attr("shapes", {n: {"weight": w, "input_shapes": [[[8, 4], "float32"]]}
                                       for n, w in SHAPES.items()})
    dist = {"block:0": optuna.distributions.CategoricalDistribution(["eager", "fuse", "cut"])}
    for anchor, plan, ratio, param in (("unfused", UNFUSED, 1.0, "eager"), ("fuse-all", FUSE_ALL, 0.97, "fuse"),
                                       (None, CUT, 0.85, "cut")):
        attrs = {"plan": plan, "timing": timing(ratio, ratio - 0.05, ratio + 0.05), "mismatches": []}
        if shapes:
            attrs["shapes"] = {n: {"weight": w, "timing": attrs["timing"], "mismatches": 0, "bitwise": True}
                               for n, w in SHAPES.items()}
        if anchor:
            attrs["anchor"] = anchor
        state = optuna.trial.TrialState.FAIL if anchor == "unfused" and unfused_fails else None
        study.add_trial(optuna.trial.create_trial(
            state=state or optuna.trial.TrialState.COMPLETE, value=None if state else ratio,
            params={"block:0": param}, distributions=dist, user_attrs=attrs,
            constraints=None if state else {"bitwise": 0.0}))
    return study


class FakeWorker:
    """Answers the finalists' round with stored timings, by plan (and shape)."""

    def __init__(self, by_plan: list[tuple[dict, dict]], differ: tuple[dict, ...] = ()) -> None:
        self.by_plan, self.rounds, self.timeouts, self.differ = by_plan, [], [], differ

    def confirm(self, request: ConfirmRequest, timeout: float) -> ConfirmResult:
        self.rounds.append(request.to_json())
        self.timeouts.append(timeout)
        plans = [plan.to_json() for plan in request.plans]
        return ConfirmResult(tuple(PairedTiming.from_json(next(t for p, t in self.by_plan if p == plan))
                                   for plan in plans), tuple(2 if plan in self.differ else 0 for plan in plans))


def run_round(study: optuna.Study, cut_ci: tuple[float, float], shapes: bool = False,
              differ: tuple[dict, ...] = ()) -> FakeWorker:
    cut_ratio = sum(cut_ci) / 2
    worker = FakeWorker([(UNFUSED, timing(1.0, 0.97, 1.03)), (FUSE_ALL, timing(1.05, 1.0, 1.1)),
                         (CUT, timing(cut_ratio, *cut_ci))], differ)
    confirm_finalists(study, worker, timeout=10.0, top=3,  # type: ignore[arg-type]
                      shapes=tuple(SHAPES.items()) if shapes else ())
    return worker


@pytest.mark.parametrize("shapes", [False, True])
def test_a_fused_best_whose_interval_reaches_1_is_keep_unfused(shapes: bool, capsys: pytest.CaptureFixture) -> None:
    study = make_study(shapes)
    worker = run_round(study, (0.95, 1.02), shapes)
    assert UNFUSED in worker.rounds[0]["plans"] and len(worker.rounds[0]["plans"]) == 3  # each plan once
    out = summary(study)
    assert out["best_trial"] == 0 and out["best_plan"] == UNFUSED and out["best_fuses_nothing"] is True
    assert out["speedup"] == 1.0 and out["speedup_ci"] is None and out["significant"] is False
    assert out["best_s"] == out["baseline_s"] and out["timing_source"] == "re-measured"
    assert "not wholly below 1.0" in out["keep_unfused_reason"] and "#2" in out["keep_unfused_reason"]
    assert out["rejected_best"]["trial"] == 2 and out["rejected_best"]["ratio_ci"][1] >= 1.0
    assert out["noise_floor"]["trial"] == 0 and out["noise_floor"]["ratio_ci"][0] < 1.0
    assert out["noise_floor"]["warning"] is None  # [0.97, 1.03]: the round read unfused as itself
    if shapes:  # the weighted timing decides; each shape is the unfused plan too
        assert set(out["shapes"]) == set(SHAPES) and all(s["speedup"] == 1.0 for s in out["shapes"].values())
    assert data.verdict(out).startswith("Keep the model unfused: the fastest fused finalist (trial #2")
    exported = export_json(study)
    assert exported["plan"] == UNFUSED and exported["provenance"]["keep_unfused"] is True
    assert "not wholly below 1.0" in exported["provenance"]["keep_unfused_reason"]
    snippet = export_python(study)
    assert "keep it unfused (the fastest fused finalist" in snippet
    assert "Nothing to apply" in snippet and "sktune.apply" not in snippet  # it would only add compile's cost
    with pytest.raises(ExportError, match="keep the model unfused .*no scope markers to add"):
        export_patch(study)
    print_summary(out)
    assert "keep the model unfused: the fastest fused finalist" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("shapes", [False, True])
def test_a_fused_best_wholly_below_1_is_named(shapes: bool) -> None:
    study = make_study(shapes)
    run_round(study, (0.80, 0.90), shapes)
    out = summary(study)
    assert out["best_trial"] == 2 and out["best_plan"] == CUT and out["best_fuses_nothing"] is False
    assert out["significant"] is True and out["keep_unfused_reason"] is None
    assert out["speedup_ci"] == pytest.approx([1 / 0.90, 1 / 0.80])
    assert export_json(study)["provenance"]["keep_unfused"] is False


@pytest.mark.parametrize("shapes", [False, True])
def test_a_finalist_not_bitwise_as_the_round_compiled_it_is_never_named(shapes: bool,
                                                                       capsys: pytest.CaptureFixture) -> None:
    """Its trial was bitwise (on the model before a resume across a change, say); the round
    compiles every finalist anyway and checks its outputs on every input set."""
    study = make_study(shapes)
    run_round(study, (0.80, 0.90), shapes, differ=(CUT,))
    out = summary(study)
    assert out["best_trial"] == 0 and out["best_fuses_nothing"] is True  # not the 1.18x cut plan
    assert out["keep_unfused_reason"].startswith("trial #2 is not bitwise as the finalists' round compiled it")
    assert [r["trial"] for r in out["round_rejected"]] == [2]
    print_summary(out)
    assert "passed over in the finalists' round: trial #2" in " ".join(capsys.readouterr().out.split())
    assert "passed over in the finalists' round: trial #2" in html.unescape(render(study))
    assert trials_table(study).set_index("number").loc[2, "bitwise"] == "no, as the finalists' round compiled it"
    # Turned down for good: a later trial (another worker's, a resume's) cannot bring it back as the best.
    dist = {"block:0": optuna.distributions.CategoricalDistribution(["eager", "fuse", "cut"])}
    study.add_trial(optuna.trial.create_trial(value=0.9, params={"block:0": "fuse"}, distributions=dist,
                                              user_attrs={"plan": FUSE_ALL, "timing": timing(0.9, 0.85, 0.95),
                                                          "mismatches": []}, constraints={"bitwise": 0.0}))
    assert best_record(study).number != 2 and export_json(study)["provenance"]["trial"] != 2


@pytest.mark.parametrize("shapes", [False, True])
def test_a_best_the_round_checked_after_a_change_is_not_verified_before_it(shapes: bool) -> None:
    import time
    from datetime import datetime

    study = make_study(shapes)  # its trials complete now, before the change
    time.sleep(1.1)  # ISO seconds: the change strictly after them, the round strictly after it
    study.set_user_attr("resumed_across", [{"at": datetime.now().isoformat(timespec="seconds")}])
    time.sleep(1.1)
    assert summary(study)["verified_before_change"] is True  # the search's best, checked before the change
    run_round(study, (0.80, 0.90), shapes)
    named = summary(study)
    assert named["best_trial"] == 2 and named["verified_before_change"] is False and named["round_rejected"] == []
    study.set_user_attr("resumed_across", [{"at": "2999-01-01T00:00:00"}])  # a change after that round
    assert summary(study)["verified_before_change"] is True


def test_the_rule_picks_the_fastest_plan_wholly_below_1() -> None:
    unfused = {"trial": 0, "timing": timing(1.0, 0.98, 1.02)}
    lucky = {"trial": 5, "timing": timing(0.90, 0.78, 1.01)}  # fastest, but its interval reaches 1
    sure = {"trial": 7, "timing": timing(0.95, 0.93, 0.97)}
    assert finalist_verdict([lucky, sure], unfused)["trial"] == 7
    kept = finalist_verdict([lucky], unfused)
    assert kept["trial"] == 0 and kept["rejected_best"]["trial"] == 5
    assert finalist_verdict([], unfused)["keep_unfused_reason"] == "no exact finalist fuses anything"
    assert finalist_verdict([], None) is None


def test_keep_unfused_without_an_exact_unfused_trial_names_no_fused_plan() -> None:
    study = make_study(unfused_fails=True)
    run_round(study, (0.95, 1.02))
    assert best_record(study) is None  # never falls back to the fused plan the round rejected
    out = summary(study)
    assert out["best_plan"] is None and "not wholly below 1.0" in out["keep_unfused_reason"]
    with pytest.raises(ExportError, match="keep the model as it is, unfused"):
        export_json(study)


def test_a_resumed_round_with_fewer_finalists_still_times_the_best_it_named() -> None:
    """A resume with --effort quick took the top 1 by search value and overturned the named
    best without timing it again."""
    study = make_study()
    run_round(study, (0.80, 0.90))
    assert best_record(study).number == 2  # named by the round, at 0.85
    lucky = dict(study.trials[2].user_attrs, plan=_plan([("sk0", 0, 0), ("sk1", 1, 3)]),
                 timing=timing(0.5, 0.45, 0.55))
    study.add_trial(optuna.trial.create_trial(  # a later search trial ahead of it by search value
        value=0.5, params={"block:0": "cut"}, distributions=study.trials[2].distributions, user_attrs=lucky,
        constraints={"bitwise": 0.0}))
    worker = FakeWorker([(UNFUSED, timing(1.0, 0.97, 1.03)), (FUSE_ALL, timing(1.05, 1.0, 1.1)),
                         (CUT, timing(0.85, 0.80, 0.90)), (lucky["plan"], timing(1.1, 1.0, 1.2))])
    confirm_finalists(study, worker, timeout=10.0, top=1)  # type: ignore[arg-type]
    assert CUT in worker.rounds[-1]["plans"] and best_record(study).number == 2
    assert summary(study)["provisional"] is None  # the round named it, beside a top of one


def test_the_previous_best_ranked_third_by_search_value_keeps_the_round_s_verdict() -> None:
    study = make_study()
    run_round(study, (0.80, 0.90))  # trial 2 named; fuse-all (0.97) ranks below it by search value
    dist = study.trials[2].distributions
    lucky = []
    for k, ratio in enumerate((0.5, 0.6)):  # two later search trials ahead of it
        plan = _plan([("sk0", 0, k), ("sk1", k + 1, 3)])
        lucky.append(plan)
        study.add_trial(optuna.trial.create_trial(
            value=ratio, params={"block:0": "cut"}, distributions=dist, constraints={"bitwise": 0.0},
            user_attrs={**study.trials[2].user_attrs, "plan": plan, "timing": timing(ratio, ratio - 0.05, ratio + 0.05)}))
    worker = FakeWorker([(UNFUSED, timing(1.0, 0.97, 1.03)), (FUSE_ALL, timing(1.05, 1.0, 1.1)),
                         (CUT, timing(0.85, 0.80, 0.90)), (lucky[0], timing(1.1, 1.0, 1.2)),
                         (lucky[1], timing(1.1, 1.0, 1.2))])
    confirm_finalists(study, worker, timeout=10.0, top=1)  # type: ignore[arg-type]
    assert best_record(study).number == 2 and summary(study)["provisional"] is None


@pytest.mark.parametrize(("n_rounds", "timeout"), [(6, 30.0), (10, 50.0)])
def test_the_round_times_as_many_rounds_as_the_effort_asks(n_rounds: int, timeout: float) -> None:
    """Its time limit grows with them: 10 s a plan for 6 rounds, three plans."""
    worker = FakeWorker([(UNFUSED, timing(1.0, 0.97, 1.03)), (FUSE_ALL, timing(1.05, 1.0, 1.1)),
                         (CUT, timing(0.85, 0.8, 0.9))])
    confirm_finalists(make_study(), worker, timeout=10.0, top=3, n_rounds=n_rounds)  # type: ignore[arg-type]
    assert [r["rounds"] for r in worker.rounds] == [n_rounds] and worker.timeouts == [pytest.approx(timeout)]


def test_a_round_that_reads_unfused_as_faster_than_itself_is_said_to_be_noisy(capsys: pytest.CaptureFixture) -> None:
    # Two workers on two cores: the unfused plan against itself read 1.75x, and the verdict said nothing.
    study = make_study(False)
    worker = FakeWorker([(UNFUSED, timing(0.57, 0.38, 0.99)), (FUSE_ALL, timing(1.05, 1.0, 1.1)),
                         (CUT, timing(0.5, 0.45, 0.55))])
    confirm_finalists(study, worker, timeout=10.0, top=3)  # type: ignore[arg-type]
    out = summary(study)
    assert out["noise_floor"]["warning"].startswith("noisy finalists' round: the unfused plan timed against itself "
                                                    "read 1.75× [1.01, 2.63]")
    print_summary(out)
    assert "noisy finalists' round" in " ".join(capsys.readouterr().out.split())
    assert "Noisy finalists" in render(study) and "excludes 1.0" in render(study)


def test_a_plan_turned_down_in_an_earlier_run_does_not_void_the_next_round_s_verdict() -> None:
    """A plan turned down ranks high by search value yet is never a finalist again: the next
    run's round once counted it as 'a later trial in the top', voided its own verdict and
    named the search's best, unverified (a walk: exported, and not bitwise at a verify-only shape)."""
    study = make_study()
    run_round(study, (0.80, 0.90), differ=(CUT,))  # the first run: the cut plan turned down
    run_round(study, (0.80, 0.90))  # a resumed run's round: unfused, fuse-all (1.05: not faster)
    assert 2 not in {e["trial"] for e in study.user_attrs["finalists"]}
    best = best_record(study)
    assert best is not None and best.number == 0 and summary(study)["provisional"] is None  # its verdict, kept
