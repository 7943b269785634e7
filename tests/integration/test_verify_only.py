"""Verify-only shapes (``verify_shapes()``): the worker captures one when a plan is first
verified there, compares bitwise without timing, and says why a shape cannot be verified;
a finalist inexact at one of them is never named best (tuning/finalists.py); the summary,
the CLI line and the export say what was verified. The re-measured timings are stored fakes;
the verification is real, in-process, on tests/models/verify_widths.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import pytest

from sktune.cli.summary_view import print_summary
from sktune.errors import CaptureError
from sktune.measure.stats import PairedTiming
from sktune.pipe.protocol import ConfirmRequest, ConfirmResult, WorkerFailure
from sktune.pipe.verify_shapes import VerifyOnlyShapes, VerifyRequest, VerifyResult
from sktune.plan import Plan, Scope
from sktune.report.export import export_json, export_python
from sktune.report.html import render
from sktune.report.trials_data import failures, parallel, trials_table
from sktune.tuning.finalists import confirm_finalists
from sktune.tuning.attrs import StudyAttr
from sktune.tuning.records import best_record, records, top_records
from sktune.tuning.summary import summary
from sktune.tuning.supervisor import SupervisedWorker, runner_config
from sktune.tuning.verified import capture_limit_warning, fuse_all_bitwise
from sktune.worker.runner import RunnerConfig, TrialRunner
from tests.cli.test_cli import sktune as cli
from tests.cpu_facts import describe, pointwise_tail_exact
from tests.models.verify_widths import WIDTHS

pytestmark = pytest.mark.exactness  # CI runs these again as an AVX2 and a vector-less CPU (.ci/run)

N_OPS = 5  # slice, silu, mul, sigmoid, add
UNFUSED = Plan.make([Scope(0, N_OPS - 1, None)], {})
FUSE_ALL = Plan.make([Scope(0, N_OPS - 1, "all")], {})
FALLBACKS = Plan.make([Scope(0, N_OPS - 1, "all")], {"fallback_ops": ["sigmoid", "silu"]})


@pytest.fixture(scope="module")
def runner() -> TrialRunner:
    models = Path(__file__).resolve().parents[1] / "models"
    return TrialRunner(RunnerConfig(model_path=str(models / "verify_widths.py"), n_batches=2))


@pytest.fixture(scope="module")
def premise(runner: TrialRunner) -> None:
    """The fixture's numerical fact, read on this CPU: fuse-all is inexact at w37 only, the
    fallback plan exact at both. Where the vector widths are known (tests/cpu_facts.py) the
    observed answers must be the predicted ones; the tests that need a shape to reject skip
    where there is none (no vectors) or where the CPU's facts are not known (ARM)."""
    at = [runner.verify(VerifyRequest(plan, name)).bitwise
          for plan, name in ((FUSE_ALL, "w32"), (FUSE_ALL, "w37"), (FALLBACKS, "w32"), (FALLBACKS, "w37"))]
    assert at[2:] == [True, True], "a fallback runs ATen's own kernel: exact on any CPU"
    fused = [pointwise_tail_exact(WIDTHS[name]) for name in ("w32", "w37")]
    if None not in fused:
        assert at == [*fused, True, True], f"{describe()}: fuse-all at w32, w37, fallbacks at w32, w37"
    if at != [True, False, True, True]:
        pytest.skip(f"no verify-only shape to reject on {describe()}: {at}")


def test_verify_only_shapes_are_captured_on_first_use_and_compared_without_timing(tmp_path: Path) -> None:
    models = Path(__file__).resolve().parents[1] / "models"
    fresh = TrialRunner(RunnerConfig(model_path=str(models / "verify_widths.py"), n_batches=2))
    assert fresh.verify_shapes() == VerifyOnlyShapes(("w32", "w37"))
    assert fresh.verify_only._prepared == {} and list(fresh.shape_sets) == ["wide"]  # start-up captured none
    first = fresh.verify(VerifyRequest(UNFUSED, "w32"))
    assert first.bitwise and first.input_shapes == [[[32, 35], "torch.float32"]]
    assert list(fresh.verify_only._prepared) == ["w32"]  # kept; w37 still not captured
    with pytest.raises(ValueError, match="unknown verify-only shape 'wide'"):
        fresh.verify(VerifyRequest(UNFUSED, "wide"))


@pytest.mark.slow  # ~14 s on a 2.8 GHz Xeon (a worker start and verify-only captures); CI runs it (.ci/run)
def test_verification_crosses_the_pipe(test_models: Path) -> None:
    config = runner_config(model_path=str(test_models / "verify_widths.py"), n_batches=2)
    with SupervisedWorker(config, None) as worker:
        worker.start()
        assert worker.verify_shapes(60.0) == VerifyOnlyShapes(("w32", "w37"))
        answer = worker.verify(VerifyRequest(UNFUSED, "w37"), 60.0)
        assert isinstance(answer, VerifyResult) and answer.bitwise and answer.shape == "w37"
        assert answer.static_compile is None and worker.verify_static == []  # not emulated: the wall time holds it
        unknown = worker.verify(VerifyRequest(UNFUSED, "bs9"), 60.0)
        assert isinstance(unknown, WorkerFailure) and "unknown verify-only shape 'bs9'" in unknown.reason


def test_a_verify_only_shape_with_other_ops_is_refused_at_start_up(test_models: Path) -> None:
    # It was found after the whole search, as "not bitwise" at every fused finalist.
    path = test_models / "verify_branch.py"
    with pytest.raises(CaptureError, match=r"shapes 'bs1' and 'bs8' capture different graphs: .*'bs8' is a "
                                           r"verify-only shape: drop it from verify_shapes\(\)"):
        TrialRunner(RunnerConfig(model_path=str(path), n_batches=2))
    result = VerifyResult("bs8", 0, "not verifiable: shapes 'bs1' and 'bs8' capture different graphs")
    assert VerifyResult.from_json(result.to_json()) == result  # as it crosses the pipe


def timing(ratio: float, lo: float, hi: float) -> dict[str, Any]:
    return PairedTiming(1e-5, ratio * 1e-5, ratio, (lo, hi), 30).to_json()


SEARCHED = {UNFUSED: (1.0, 0.97, 1.03), FUSE_ALL: (0.55, 0.5, 0.6), FALLBACKS: (0.8, 0.75, 0.85)}


def make_study(plans: list[Plan], anchors: dict[int, str] | None = None) -> optuna.Study:
    """The unfused trial (0), then ``plans`` in order, each exact at the tuned shape ``wide``;
    ``anchors``: trial number -> anchor name (the unfused one is named always)."""
    study = optuna.create_study(direction="minimize")
    ops = [{"index": i, "name": f"n{i}", "target": t, "module": "", "module_type": "Gate", "source": ""}
           for i, t in enumerate(["getitem", "silu", "mul", "sigmoid", "add"])]
    for key, value in {"model": "verify_widths.py", "backend": "inductor", "threads": 1, "input_sets": 3,
                       "ops": ops, "boundaries": [0, 1, 2, 3], "environment": {"backend": "inductor"},
                       "shapes": {"wide": {"weight": 1.0, "input_shapes": [[[32, 67], "torch.float32"]]}}}.items():
        study.set_user_attr(key, value)
    dist = {"k": optuna.distributions.IntDistribution(0, 9)}
    for k, plan in enumerate([UNFUSED, *plans]):
        t = timing(*SEARCHED[plan])
        attrs = {"plan": plan.to_json(), "timing": t, "mismatches": [],
                 "shapes": {"wide": {"weight": 1.0, "timing": t, "mismatches": 0, "bitwise": True}}}
        if plan == UNFUSED or k in (anchors or {}):
            attrs["anchor"] = "unfused" if plan == UNFUSED else anchors[k]  # type: ignore[index]
        study.add_trial(optuna.trial.create_trial(value=SEARCHED[plan][0], params={"k": k}, distributions=dist,
                                                  user_attrs=attrs, constraints={"bitwise": 0.0}))
    return study


class InProcessWorker:
    """The finalists' worker: the timing round from stored fakes, verification for real."""

    def __init__(self, runner: TrialRunner) -> None:
        self.runner, self.verified = runner, []

    def confirm(self, request: ConfirmRequest, timeout: float) -> ConfirmResult:
        return ConfirmResult(tuple(PairedTiming.from_json(timing(*SEARCHED[p])) for p in request.plans),
                             (0,) * len(request.plans))

    def verify_shapes(self, timeout: float) -> VerifyOnlyShapes:
        return self.runner.verify_shapes()

    def verify(self, request: VerifyRequest, timeout: float) -> VerifyResult:
        self.verified.append((request.plan, request.shape))
        return self.runner.verify(request)


def test_a_finalist_inexact_at_a_verify_only_shape_is_not_named_best(runner: TrialRunner, premise: None,
                                                                     capsys: pytest.CaptureFixture) -> None:
    study = make_study([FUSE_ALL, FALLBACKS])
    worker = InProcessWorker(runner)
    confirm_finalists(study, worker, timeout=60.0, top=3)  # type: ignore[arg-type]
    # Fuse-all is the fastest, wholly below 1.0 and exact at the tuned shape: passed over at w37.
    assert worker.verified == [(FUSE_ALL, "w32"), (FUSE_ALL, "w37"), (FALLBACKS, "w32"), (FALLBACKS, "w37")]
    assert best_record(study).number == 2
    recorded = {v["trial"]: v["shapes"] for v in study.user_attrs[StudyAttr.VERIFIED]}
    assert recorded[1]["w37"]["mismatches"] > 0 and not recorded[1]["w37"]["bitwise"]
    assert all(o["bitwise"] for o in recorded[2].values())
    out = summary(study)
    assert out["best_trial"] == 2 and out["best_fuses_nothing"] is False
    verify = out["verify_shapes"]
    assert verify["shapes"] == ["w32", "w37"] and verify["verified_bitwise"] is True
    assert set(verify["best"]) == {"w32", "w37"} and verify["seconds"] > 0
    assert [(r["trial"], r["shape"]) for r in verify["rejected"]] == [(1, "w37")]
    assert out["capture_limit_warning"] is None  # inductor
    from sktune.tuning.verified import not_bitwise_at  # a fuse-all row's cell names it (summary.fuse_all)
    assert not_bitwise_at(study).get(1) == ["w37"] and not not_bitwise_at(study).get(2)
    provenance = export_json(study)["provenance"]
    assert provenance["verified_shapes"] == {"wide": [[[32, 67], "torch.float32"]],
                                             "w32": [[[32, 35], "torch.float32"]],
                                             "w37": [[[32, 40], "torch.float32"]]}
    assert provenance["verify_only_shapes"] == ["w32", "w37"]
    assert "verified bitwise, not timed, at the verify-only shapes w32, w37" in export_python(study)
    print_summary(out)
    printed = " ".join(capsys.readouterr().out.split())
    assert "verify-only shapes (2: w32, w37; not timed): best plan bitwise at all; passed over: trial #1" in printed


def test_fuse_all_never_verified_at_the_verify_only_shapes_is_not_called_bitwise_there() -> None:
    study = make_study([FALLBACKS, FUSE_ALL], {2: "fuse-all"})
    study.set_user_attr(StudyAttr.VERIFY_SHAPES, ["w32", "w37"])  # no round verified anything yet
    out = summary(study)
    fuse_all = out["fuse_all"]
    assert fuse_all["bitwise"] is True and fuse_all["not_verified_at"] == ["w32", "w37"]
    assert fuse_all_bitwise(fuse_all) == "yes where tuned (not verified at the verify-only shapes)"
    # A run stopped before its round: the export says where its best was never verified.
    assert out["verify_shapes"]["best"] is None
    assert "# NOT verified at the served shapes w32, w37 (verify-only, or left out by --shapes)" in export_python(study)
    assert export_json(study)["provenance"]["verify_only_shapes"] == ["w32", "w37"]


def test_no_finalist_exact_at_every_verify_only_shape_keeps_unfused(runner: TrialRunner, premise: None) -> None:
    study = make_study([FUSE_ALL])
    confirm_finalists(study, InProcessWorker(runner), timeout=60.0, top=3)  # type: ignore[arg-type]
    out = summary(study)
    assert out["best_trial"] == 0 and out["best_fuses_nothing"] is True
    assert out["keep_unfused_reason"].startswith("trial #1 is not bitwise at verify-only shape 'w37' (")
    assert out["verify_shapes"]["best"]["w37"]["bitwise"]  # the unfused plan, verified for the record
    assert "w37" in export_json(study)["provenance"]["verified_shapes"]


def test_a_round_whose_finalists_were_all_turned_down_gives_the_next_exact_plans_a_round(
        runner: TrialRunner, premise: None) -> None:
    # One finalist (top=1): fuse-all, turned down at w37. It said "keep unfused" although the
    # study held an exact plan (fallbacks) bitwise at every shape and faster than unfused.
    study = make_study([FUSE_ALL, FALLBACKS], {1: "fuse-all"})
    worker = InProcessWorker(runner)
    confirm_finalists(study, worker, timeout=60.0, top=1)  # type: ignore[arg-type]
    assert best_record(study).number == 2
    out = summary(study)
    assert out["best_trial"] == 2 and out["best_fuses_nothing"] is False
    assert [(r["trial"], r["shape"]) for r in out["verify_shapes"]["rejected"]] == [(1, "w37")]
    assert out["fuse_all"]["bitwise"] is False and out["fuse_all"]["not_bitwise_at"] == ["w37"]
    # A plan turned down stays turned down: no longer feasible, kept in the record by a later round.
    assert not next(r for r in records(study) if r.number == 1).feasible
    assert [r.number for r in top_records(study, 3)] == [2, 0]
    # The report's trials sections agree with its summary (they called it bitwise, a failure-free study).
    table = trials_table(study).set_index("number")
    assert table.loc[1, "bitwise"] == "no, at verify-only w37" and table.loc[2, "bitwise"] == "yes"
    assert not parallel(study)[0].set_index("number").loc[1, "bitwise"]
    [failure] = failures(study)
    assert failure["trial"] == 1 and failure["kind"] == "verify-only" and "'w37'" in failure["reason"]
    assert "<h3>Mismatches (1)</h3>" in render(study)
    before = len(worker.verified)
    confirm_finalists(study, worker, timeout=60.0, top=1)  # type: ignore[arg-type]  (a resume's round)
    assert {v["trial"] for v in study.user_attrs[StudyAttr.VERIFIED]} >= {1, 2}
    # What an earlier round verified stands: no compile again (minutes each on a device).
    assert best_record(study).number == 2 and len(worker.verified) == before
    # Resumed across a change after those verifications: their inputs may differ now, so each
    # is asked again, and fuse-all's turn-down no longer holds either.
    from datetime import datetime, timedelta

    later = (datetime.now() + timedelta(minutes=1)).isoformat(timespec="seconds")
    study.set_user_attr(StudyAttr.RESUMED_ACROSS, [{"at": later, "changed": ["model_sha256: …"]}])
    assert next(r for r in records(study) if r.number == 1).feasible
    confirm_finalists(study, worker, timeout=60.0, top=1)  # type: ignore[arg-type]
    assert worker.verified[before:][:2] == [(FUSE_ALL, "w32"), (FUSE_ALL, "w37")]


def test_npu_warns_past_capture_limit() -> None:
    study = optuna.create_study()
    study.set_user_attr(StudyAttr.BACKEND, "npu")
    study.set_user_attr(StudyAttr.SHAPES, {"bs1": {"weight": 1.0}, "bs8": {"weight": 1.0}})
    study.set_user_attr(StudyAttr.VERIFY_SHAPES, [f"bs{n}" for n in range(16, 16 + 62)])  # 2 + 62 = 64: at it
    assert capture_limit_warning(study) is None
    study.set_user_attr(StudyAttr.VERIFY_SHAPES, [f"bs{n}" for n in range(16, 16 + 63)])
    assert capture_limit_warning(study).startswith("65 shapes declared (2 tuned + 63 verify-only), more than "
                                                   "npugraph_ex's capture_limit (64 by default)")
    study.set_user_attr(StudyAttr.BACKEND, "inductor")
    assert capture_limit_warning(study) is None


def test_the_capture_limit_warning_is_in_the_summary_and_one_cli_line(capsys: pytest.CaptureFixture) -> None:
    study = make_study([FALLBACKS])  # one tuned shape, no finalists' round
    study.set_user_attr(StudyAttr.BACKEND, "npu")
    study.set_user_attr(StudyAttr.VERIFY_SHAPES, [f"bs{n}" for n in range(2, 72)])
    out = summary(study)
    assert out["capture_limit_warning"].startswith("71 shapes declared (1 tuned + 70 verify-only)")
    assert out["verify_shapes"]["best"] is None and out["verify_shapes"]["verified_bitwise"] is False
    print_summary(out)
    printed = " ".join(capsys.readouterr().out.split())
    assert "warning: 71 shapes declared" in printed and "set capture_limit to at least 71" in printed
    assert "the best plan was not verified there" in printed


@pytest.mark.slow  # ~20 s: a whole study; the pipe and the rule have fast tests above
def test_run_verifies_the_best_at_every_verify_only_shape(test_models: Path, tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path}/s.db"
    result = cli("run", str(test_models / "verify_widths.py"), "--backend", "inductor", "--trials", "3",
                 "--storage", storage, "--study", "v", "--summary-json", str(tmp_path / "s.json"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads((tmp_path / "s.json").read_text())
    verify = data["verify_shapes"]
    assert verify["shapes"] == ["w32", "w37"] and verify["verified_bitwise"] is True
    assert all(o["bitwise"] for o in verify["best"].values())
    study = optuna.load_study(study_name="v", storage=storage)
    recorded = {v["trial"]: v["shapes"] for v in study.user_attrs[StudyAttr.VERIFIED]}
    assert data["best_trial"] in recorded
    failed = {n for n, shapes in recorded.items() if not all(o["bitwise"] for o in shapes.values())}
    assert data["best_trial"] not in failed and {r["trial"] for r in verify["rejected"]} == failed
    assert "verify-only shapes (2: w32, w37; not timed)" in " ".join(result.stdout.split())
    assert set(export_json(study)["provenance"]["verified_shapes"]) == {"wide", "w32", "w37"}


def test_a_run_stopped_while_verifying_leaves_no_half_round(runner: TrialRunner, premise: None) -> None:
    # The round's re-timing was recorded before verification: a stop there read as a finished
    # round, and the best as "finished after the last finalists' round (another worker's trial…)".
    class StoppedWhileVerifying(InProcessWorker):
        def verify(self, request: VerifyRequest, timeout: float) -> VerifyResult:
            raise KeyboardInterrupt

    study = make_study([FUSE_ALL, FALLBACKS])
    with pytest.raises(KeyboardInterrupt):
        confirm_finalists(study, StoppedWhileVerifying(runner), timeout=60.0, top=3)  # type: ignore[arg-type]
    assert StudyAttr.FINALISTS not in study.user_attrs and StudyAttr.CONFIRM_BEST not in study.user_attrs
    assert summary(study)["provisional"].startswith("no finalists' round has completed")


def test_input_shapes_left_out_by_shapes_are_verified_there(test_models: Path) -> None:
    # --shapes wide tuned at wide and said nothing of narrow: neither tuned nor verified there,
    # while the CLI called wide "100% of the traffic" and the export "every served shape".
    from sktune.tuning.verified import verify_shapes_line

    wide_only = TrialRunner(RunnerConfig(model_path=str(test_models / "two_widths.py"), n_batches=2,
                                         shapes=("wide",)))
    workload = wide_only.describe()
    assert list(workload.shapes) == ["wide"] and workload.left_out_shapes == ("narrow",)
    assert workload.verify_shapes == ("narrow",)
    assert wide_only.verify(VerifyRequest(Plan.make([Scope(0, len(workload.ops) - 1, None)]), "narrow")).bitwise
    line = verify_shapes_line({"shapes": ["narrow"], "left_out": ["narrow"], "rejected": [], "seconds": 0.1,
                               "best": {"narrow": {"bitwise": True, "mismatches": 0, "reason": None}}})
    assert "(1: narrow; not timed; narrow: input_shapes() left out by --shapes): best plan bitwise at all" in line
    # A shape left out whose graph runs other ops: tuned apart with --shapes, as before; named, not verified.
    branchy = TrialRunner(RunnerConfig(model_path=str(test_models / "shape_branch.py"), n_batches=2,
                                       shapes=("bs1",)))
    assert branchy.describe().left_out_shapes == ("bs4",) and branchy.verify_only.names == ()
    line = verify_shapes_line({"shapes": [], "left_out": ["bs4"], "rejected": [], "seconds": 0.0, "best": {}})
    assert "bs4: left out by --shapes and NOT verified (its graph runs other ops)" in line
