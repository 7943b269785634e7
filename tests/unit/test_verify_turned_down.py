"""Plans turned down at a verify-only shape (records.verify_turned_down): which outcomes turn a
plan down for good, and the best after a round that turned one down (no worker, no compile)."""

from __future__ import annotations

from typing import Any

import optuna
import pytest

from sktune.measure.stats import PairedTiming
from sktune.plan import Plan, Scope
from sktune.tuning.attrs import StudyAttr
from sktune.tuning.records import best_record, feasible_trials, top_records

N_OPS = 5
UNFUSED = Plan.make([Scope(0, N_OPS - 1, None)], {})


def fused(size: int) -> Plan:
    return Plan.make([Scope(0, N_OPS - 1, "all")], {"max_fusion_size": size})


def study_of(plans: list[tuple[Plan, float]]) -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study()
    study.set_user_attr(StudyAttr.OPS, [{"index": i, "target": "relu", "module": ""} for i in range(N_OPS)])
    dist = {"k": optuna.distributions.IntDistribution(0, 9)}
    for k, (plan, ratio) in enumerate(plans):
        timing = PairedTiming(1e-5, ratio * 1e-5, ratio, (ratio - 0.01, ratio + 0.01), 30).to_json()
        study.add_trial(optuna.trial.create_trial(
            value=ratio, params={"k": k}, distributions=dist, constraints={"bitwise": 0.0},
            user_attrs={"plan": plan.to_json(), "timing": timing, **({"anchor": "unfused"} if k == 0 else {})}))
    return study


def verified(study: optuna.Study, outcomes: dict[int, dict[str, Any]]) -> None:
    study.set_user_attr(StudyAttr.VERIFIED, [{"trial": n, "shapes": {"w37": o}} for n, o in outcomes.items()])


def test_the_round_s_verdict_stands_when_it_turned_a_finalist_down() -> None:
    # Finalists #1-#3 (search order), #1 turned down, #3 re-measured fastest and named. The check
    # "did a trial outside the round enter the top?" saw #0 (unfused) climb into the top 3 once
    # #1 left it, dropped the verdict and named #2, never verified.
    study = study_of([(UNFUSED, 1.0), (fused(16), 0.55), (fused(64), 0.6), (fused(256), 0.7)])
    verified(study, {1: {"bitwise": False, "mismatches": 3, "reason": None}, 3: {"bitwise": True, "mismatches": 0}})
    study.set_user_attr(StudyAttr.FINALISTS, [{"trial": n} for n in (1, 2, 3)])
    study.set_user_attr(StudyAttr.CONFIRM_BEST, {"trial": 3, "bitwise": True})
    assert best_record(study).number == 3
    assert [r.number for r in top_records(study, 3)] == [2, 3, 0]
    assert [t.number for t in feasible_trials(study)] == [0, 2, 3]  # patience and the seeds skip #1 too


@pytest.mark.parametrize(("outcome", "down"), [
    ({"bitwise": False, "mismatches": 3, "reason": None}, True),
    ({"bitwise": False, "mismatches": 0, "reason": "not verifiable: shapes 'w32' and 'w37' capture different graphs"},
     True),
    ({"bitwise": False, "mismatches": 0, "reason": "the worker gave no answer (timed out)"}, False),  # may pass
])
def test_only_what_the_plan_decides_turns_it_down_for_good(outcome: dict[str, Any], down: bool) -> None:
    study = study_of([(UNFUSED, 1.0), (fused(16), 0.55)])
    verified(study, {0: outcome, 1: outcome})
    assert [r.number for r in top_records(study, 2)] == ([0] if down else [1, 0])  # the unfused plan never


@pytest.mark.parametrize(("outcome", "kind", "cell"), [
    ({"bitwise": False, "mismatches": 3, "reason": None}, "verify-only", "no, at verify-only w37"),
    ({"bitwise": False, "mismatches": 0, "reason": "the worker gave no answer (timed out)"}, "not verified",
     "yes where tuned (not verified at w37)"),
])
def test_the_report_s_failures_and_trials_table_agree_on_what_turned_a_plan_down(
        outcome: dict[str, Any], kind: str, cell: str) -> None:
    # The failures section called any failed verification "not bitwise at verify-only shape"
    # (a time-out too) while the trials table said "yes" for the same plan, still feasible.
    from sktune.report.trials_data import failures, trials_table

    study = study_of([(UNFUSED, 1.0), (fused(16), 0.55)])
    verified(study, {1: outcome})
    [item] = failures(study)
    assert (item["trial"], item["kind"]) == (1, kind)
    assert ("is not bitwise" in item["reason"]) == (kind == "verify-only")
    assert trials_table(study).set_index("number").loc[1, "bitwise"] == cell


def test_a_mismatch_is_named_before_a_time_out_at_another_verify_only_shape() -> None:
    from sktune.tuning.verified import describe_failure

    failed = describe_failure(4, {"w32": {"bitwise": False, "mismatches": 0, "reason": "timed out"},
                                  "w37": {"bitwise": False, "mismatches": 2, "reason": None}})
    assert (failed["shape"], failed["plan_decided"]) == ("w37", True)
    assert failed["why"].startswith("trial #4 is not bitwise at verify-only shape 'w37'")


def test_a_verification_the_plan_decided_is_reused_and_a_time_out_is_asked_again() -> None:
    from sktune.pipe.verify_shapes import VerifyResult
    from sktune.tuning.verified import verify_plan

    class Worker:
        def __init__(self) -> None:
            self.asked: list[str] = []

        def verify(self, request: Any, timeout: float) -> VerifyResult:
            self.asked.append(request.shape)
            return VerifyResult(request.shape, 0)

    worker = Worker()
    known = {"w8": {"bitwise": True, "mismatches": 0, "reason": None, "seconds": 2.0},
             "w32": {"bitwise": False, "mismatches": 0, "reason": "the worker gave no answer (timed out)"}}
    outcomes = verify_plan(worker, fused(16), ["w8", "w32", "w37"], 60.0, known=known)  # type: ignore[arg-type]
    assert worker.asked == ["w32", "w37"] and outcomes["w8"] == known["w8"]
    assert all(o["bitwise"] for o in outcomes.values())
    worker.asked.clear()
    known["w32"] = {"bitwise": False, "mismatches": 3, "reason": None}  # the plan's own: it stands, and stops there
    assert not verify_plan(worker, fused(16), ["w8", "w32", "w37"], 60.0, known=known)["w32"]["bitwise"]  # type: ignore[arg-type]
    assert worker.asked == []


def test_fuse_all_whose_worker_timed_out_at_a_verify_only_shape_is_not_called_not_bitwise() -> None:
    # The summary read a time-out as "no (at verify-only w37)" beside the table's "yes where tuned".
    from sktune.tuning.summary import summary
    from sktune.tuning.verified import fuse_all_bitwise

    study = optuna.create_study()
    study.set_user_attr(StudyAttr.OPS, [{"index": i, "target": "relu", "module": ""} for i in range(N_OPS)])
    study.set_user_attr(StudyAttr.VERIFY_SHAPES, ["w37"])
    dist = {"k": optuna.distributions.IntDistribution(0, 9)}
    for k, (plan, ratio, anchor) in enumerate([(UNFUSED, 1.0, "unfused"), (fused(16), 0.55, "fuse-all")]):
        timing = PairedTiming(1e-5, ratio * 1e-5, ratio, (ratio - 0.01, ratio + 0.01), 30).to_json()
        study.add_trial(optuna.trial.create_trial(
            value=ratio, params={"k": k}, distributions=dist, constraints={"bitwise": 0.0},
            user_attrs={"plan": plan.to_json(), "timing": timing, "anchor": anchor}))
    verified(study, {1: {"bitwise": False, "mismatches": 0, "reason": "the worker gave no answer (timed out)"}})
    fuse_all = summary(study)["fuse_all"]
    assert fuse_all["bitwise"] is True and fuse_all["not_verified_at"] == ["w37"]
    assert fuse_all_bitwise(fuse_all) == "yes where tuned (not verified at the verify-only shapes)"
