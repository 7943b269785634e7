"""A best exact plan that fuses nothing is the unfused graph itself: the summary, the CLI,
the report and the export say "keep the model unfused", with speedup exactly 1.0 and no
interval, whatever noise its trial measured (hand-made study, no compile)."""

from __future__ import annotations

import optuna
import pytest

from sktune.cli.summary_view import print_summary
from sktune.report import data
from sktune.report.export import export_python
from sktune.report.html import render
from sktune.tuning.attrs import StudyAttr
from sktune.tuning.summary import summary
from tests.report_fixtures import _plan, _timing

OPS = [{"index": i, "name": f"n{i}", "target": t, "module": "", "module_type": "Net", "source": ""}
       for i, t in enumerate(["pow", "mean", "mul", "add"])]


def hand_made_study(trials: list[tuple[str | None, list, float, bool]]) -> optuna.Study:
    """An inductor study over OPS with one complete trial per (anchor or None, scopes, ratio,
    bitwise), each a distinct plan."""
    study = optuna.create_study(direction="minimize")
    for key, value in {"model": "m.py", "backend": "inductor", "threads": 1, "input_sets": 3, "ops": OPS,
                       "boundaries": [0, 1, 2], "environment": {"backend": "inductor", "threads": "1"}}.items():
        study.set_user_attr(key, value)
    choices = ["eager", "fuse", "half", "cut"][:len(trials)]  # one value per trial: distinct plans
    dist = {"block:0": optuna.distributions.CategoricalDistribution(choices)}
    for choice, (anchor, scopes, ratio, bitwise) in zip(choices, trials, strict=True):
        study.add_trial(optuna.trial.create_trial(
            value=ratio, params={"block:0": choice}, distributions=dist,
            user_attrs={"plan": _plan(scopes), "timing": _timing(ratio), "mismatches": [],
                        **({"anchor": anchor} if anchor else {})},
            constraints={"bitwise": 0.0 if bitwise else 2.0}))
    return study


def study_whose_best_fuses_nothing(noise_ratio: float) -> optuna.Study:
    return hand_made_study([("unfused", [(None, 0, 3)], noise_ratio, True), ("fuse-all", [("sk0", 0, 3)], 0.6, False)])


@pytest.mark.parametrize("noise_ratio", [0.96, 1.04])  # measured either side of 1 under load
def test_a_best_that_fuses_nothing_is_exactly_one_with_no_interval(noise_ratio: float,
                                                                   capsys: pytest.CaptureFixture) -> None:
    study = study_whose_best_fuses_nothing(noise_ratio)
    out = summary(study)
    assert out["best_fuses_nothing"] is True and out["best_trial"] == 0
    assert out["speedup"] == 1.0 and out["speedup_ci"] is None and out["search_speedup"] == 1.0
    assert out["best_s"] == out["baseline_s"] and out["significant"] is False
    assert data.verdict(out).startswith("Keep the model unfused")
    assert data.comparison(out)["ratio"].tolist()[-1] == 1.0
    assert "keep the model unfused" in render(study).lower()
    assert "keep it unfused" in export_python(study)
    print_summary(out)
    printed = capsys.readouterr().out
    assert "1.00× (unfused)" in printed and "keep the model unfused" in printed


def npu_result(seconds: float, uncached: float, effective: str) -> "TrialResult":
    from sktune.measure.stats import PairedTiming
    from sktune.pipe.protocol import StaticCompile, TrialResult

    return TrialResult(True, (), PairedTiming(1e-3, 1e-3, 1.0, (0.99, 1.01), 10), (), (), 0.1, 0.1, 0.1,
                       {"effective_options": effective, "effective_options_forms": "sk_meta/sk_options.json"},
                       StaticCompile(seconds, uncached, emulated=True))


def test_static_compile_reaches_the_summary_with_one_effective_options_warning(
        caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture) -> None:
    """An emulated npu study: each trial's emulated static-compile seconds (summed over its
    shapes) become the estimated host time with and without the cache; an absent options
    dump warns once per study, never fails a trial."""
    from sktune.pipe.protocol import TrialResult
    from sktune.tuning.trial_notes import note_result

    study = study_whose_best_fuses_nothing(0.96)
    for key, value in {"backend": "npu", "environment": {"backend": "npu", "emulated": "true"},
                       "startup_s": {"load": 2.0}, "phases_s": {"search": 8.0}}.items():
        study.set_user_attr(key, value)
    with caplog.at_level("WARNING", logger="sktune.tuning.trial_notes"):
        for answers in ([(20.0, 20.0, "absent"), (10.0, 10.0, "absent")], [(0.0, 20.0, "unrecognised")]):
            trial = study.ask()
            for seconds, uncached, effective in answers:  # one per shape
                note_result(trial, npu_result(seconds, uncached, effective))
            study.tell(trial, 1.0)
    assert study.trials[-2].user_attrs["static_compile"] == {"seconds": 30.0, "uncached_s": 30.0, "emulated": True}
    assert len([r for r in caplog.records if "not compared" in r.message]) == 1
    out = summary(study)
    assert out["static_compile"] == {"trials": 2, "startups": 0, "verifications": 0, "seconds": 30.0,
                                     "uncached_s": 50.0, "emulated": True}
    assert out["estimated_host_time"] == {"wall_s": 10.0, "runs": 1, "with_cache_s": 40.0, "without_cache_s": 60.0,
                                          "emulated": True}
    assert out["effective_options_checked"] is False and "trial 2" in out["effective_options_warning"]
    assert "compares only sk_meta/sk_options.json" in out["effective_options_warning"]  # the backend's forms
    assert "estimated host time (emulated)" in render(study)
    print_summary(out)
    printed = " ".join(capsys.readouterr().out.split())  # rich wraps lines
    assert "estimated host time (emulated): 0 min 40 s with the static-kernel cache, 1 min 00 s without" in printed
    assert "effective options not checked" in printed
    assert TrialResult.from_json(npu_result(1.0, 2.0, "checked").to_json()).static_compile.uncached_s == 2.0


def test_the_estimate_counts_every_run_and_the_references_static_compiles() -> None:
    """A resumed emulated study: the worker time of each run, and the static compiles of each
    start-up's references (they fill the cache the trials then hit). One run's wall time next
    to every run's compiles, without the references, read 4 s where one compile costs minutes."""
    from sktune.tuning.host_time import record_run

    study = study_whose_best_fuses_nothing(0.96)
    for key, value in {"backend": "npu", "environment": {"backend": "npu", "emulated": "true"},
                       "startup_s": {"load": 2.0}, "phases_s": {"search": 8.0}}.items():
        study.set_user_attr(key, value)
    trial = study.ask()
    trial.set_user_attr("static_compile", {"seconds": 0.0, "uncached_s": 110.0, "emulated": True})
    study.tell(trial, 1.0)
    created = describe_workload({"load": 2.0, "capture": 1.0}, {"seconds": 270.0, "uncached_s": 270.0,
                                                                "emulated": True, "references": 1})
    record_run(study, created, {"search": 7.0})
    # Resumed: the cache served its start-up; its finalist was verified at a verify-only shape,
    # whose references and plan no trial holds.
    record_run(study, describe_workload({"load": 0.5}, None), {"search": 3.5},
               [{"seconds": 6.0, "uncached_s": 9.0, "emulated": True}])
    out = summary(study)
    assert out["static_compile"] == {"trials": 1, "startups": 1, "verifications": 1, "seconds": 276.0,
                                     "uncached_s": 389.0, "emulated": True}
    assert out["estimated_host_time"] == {"wall_s": 14.0, "runs": 2, "with_cache_s": 290.0,
                                          "without_cache_s": 403.0, "emulated": True}
    # A study whose first runs finished under an older sktune: their time is kept, once.
    from sktune.tuning.host_time import record_earlier_runs, run_records

    older = study_whose_best_fuses_nothing(0.96)
    older.set_user_attr("startup_s", {"load": 2.0})
    older.set_user_attr("phases_s", {"search": 8.0})
    record_earlier_runs(older)
    record_run(older, describe_workload({"load": 0.5}, None), {"search": 3.5})
    record_earlier_runs(older)
    assert sorted(r["wall_s"] for r in run_records(older)) == [4.0, 10.0]
    from sktune.tuning.host_time import host_time_lines

    assert host_time_lines(out)[0] == (
        "estimated host time (emulated): 4 min 50 s with the static-kernel cache, 6 min 43 s without it (the "
        "worker time of its 2 runs, 0 min 14 s, plus the emulated static compiles of 1 trial, the references of "
        "1 start-up and 1 verification at verify-only shapes)")


def describe_workload(startup_s: dict[str, float], static: dict | None) -> "Workload":
    from sktune.capabilities import Capabilities
    from sktune.pipe.workload import Workload

    return Workload((), (), Capabilities(), {"backend": "npu"}, "sha", [], startup_s=startup_s, startup_static=static)


def test_inductor_study_has_no_static_compile_figures() -> None:
    out = summary(study_whose_best_fuses_nothing(0.96))
    assert out["static_compile"] is None and out["estimated_host_time"] is None
    assert out["effective_options_checked"] is None


def test_a_yardstick_reads_as_exact_at_its_one_shape_not_as_not_exact() -> None:
    """A yardstick is never feasible (it must not be named best), yet the report's trials
    table and history say where it was exact instead of "not exact"."""
    from sktune.report import trials_data

    study = study_whose_best_fuses_nothing(0.96)
    dist = {"block:0": optuna.distributions.CategoricalDistribution(["eager", "fuse"])}
    for mismatches in (0.0, 3.0):
        study.add_trial(optuna.trial.create_trial(
            value=0.5, params={"block:0": "fuse"}, distributions=dist,
            user_attrs={"plan": _plan([("sk0", 0, 3)]), "timing": _timing(0.5), "anchor": "yardstick:bs1",
                        "yardstick": "bs1", "mismatches": []},
            constraints={"bitwise": mismatches}))
    table = trials_data.trials_table(study)
    assert table["bitwise"].tolist() == ["yes", "no", "yes, at bs1 only", "no, at bs1"]
    assert trials_data.history(study)["status"].tolist() == ["exact", "not exact", "yardstick", "yardstick"]
    assert summary(study)["best_trial"] == 0  # still never the best
    assert "yes, at bs1 only" in render(study)


def test_best_vs_the_starting_points_uses_the_finalists_round(capsys: pytest.CaptureFixture) -> None:
    """The quick start once printed "best vs the starting points: fuse-all 1.24×" under a table
    of best 1.12× and fuse-all 1.09×: the best's search trial had met a disturbed baseline
    (ratio 0.76). The best and every starting point re-measured in the finalists' round are
    compared by those figures; the others by their search trial."""
    study = hand_made_study([("unfused", [(None, 0, 3)], 1.0, True), ("fuse-all", [("sk0", 0, 3)], 0.94, True),
                             ("safe-runs", [("sk0", 0, 1), (None, 2, 3)], 0.963, True),
                             (None, [("sk0", 1, 3)], 0.761, True)])
    best = {"trial": 3, "timing": _timing(0.894)}
    study.set_user_attr("finalists", [best])
    study.set_user_attr("confirm_best", {**best, "bitwise": True})
    study.set_user_attr("confirm_fuse_all", {"trial": 1, "timing": _timing(0.917), "bitwise": True})
    study.set_user_attr("confirm_unfused", {"trial": 0, "timing": _timing(1.0)})
    out = summary(study)
    assert out["best_trial"] == 3 and out["search_speedup"] == pytest.approx(1 / 0.761)
    anchors = {a["anchor"]: a for a in out["anchors"]}
    assert set(anchors) == {"fuse-all", "safe-runs"}  # not the best itself, nor unfused (the headline's yardstick)
    assert anchors["fuse-all"]["timing_source"] == "re-measured"
    assert anchors["fuse-all"]["best_speedup_over"] == pytest.approx(0.917 / 0.894)
    assert anchors["safe-runs"]["timing_source"] == "search"
    assert anchors["safe-runs"]["best_speedup_over"] == pytest.approx(0.963 / 0.894)
    print_summary(out)
    printed = " ".join(capsys.readouterr().out.split())
    assert "fuse-all 1.03×" in printed and "safe-runs 1.08×" in printed
    # A copy (a twin two workers queued took fuse-all's outcome) does not replace the round's figure,
    # and a starting point whose plan is the best's is the best itself (a warm plan measured again).
    dist = {"block:0": optuna.distributions.CategoricalDistribution(["eager", "fuse", "half", "cut"])}
    for anchor, choice, scopes, ratio in (("fuse-all", "fuse", [("sk0", 0, 3)], 0.94),
                                          ("warm:x#0", "cut", [("sk0", 1, 3)], 0.761)):
        study.add_trial(optuna.trial.create_trial(
            value=ratio, params={"block:0": choice}, distributions=dist, constraints={"bitwise": 0.0},
            user_attrs={"plan": _plan(scopes), "timing": _timing(ratio), "mismatches": [], "anchor": anchor,
                        **({"reused_from": 1} if anchor == "fuse-all" else {})}))  # the warm plan: measured
    again = {a["anchor"]: a for a in summary(study)["anchors"]}
    assert set(again) == {"fuse-all", "safe-runs"} and again["fuse-all"] == anchors["fuse-all"]


def test_a_best_named_by_its_search_trial_is_provisional_and_says_why(capsys: pytest.CaptureFixture) -> None:
    """An interrupted first run, or a trial another worker finished after this run's finalists'
    round: the figures are the search's, and the verdict must not read as the round's."""
    study = hand_made_study([("unfused", [(None, 0, 3)], 1.0, True), (None, [("sk0", 1, 3)], 0.8, True)])
    out = summary(study)
    assert out["timing_source"] == "search" and "no finalists' round has completed" in out["provisional"]
    assert data.verdict(out).startswith("Provisional: no finalists' round has completed")
    print_summary(out)
    assert "provisional: no finalists' round" in " ".join(capsys.readouterr().out.split())
    study.set_user_attr("finalists_failed", "hang: no answer within 300 s; worker killed")
    assert summary(study)["provisional"].startswith("the finalists' round failed (hang: no answer")

    study = hand_made_study([("unfused", [(None, 0, 3)], 1.0, True), (None, [("sk0", 1, 3)], 0.8, True),
                             (None, [("sk0", 0, 3)], 0.7, True)])
    round_ = {"trial": 1, "timing": _timing(0.82)}  # the round ran before trial 2 finished
    study.set_user_attr("finalists", [round_])
    study.set_user_attr("confirm_best", {**round_, "bitwise": True})
    later = summary(study)
    assert later["best_trial"] == 2 and later["provisional"].startswith("trial #2 finished after the last finalists'")
    study.set_user_attr("finalists", [round_, {"trial": 2, "timing": _timing(0.72)}])
    study.set_user_attr("confirm_best", {"trial": 2, "timing": _timing(0.72), "bitwise": True})
    confirmed = summary(study)
    assert confirmed["provisional"] is None and confirmed["timing_source"] == "re-measured"
    assert not data.verdict(confirmed).startswith("Provisional")
    # The report says what the CLI says about the verify-only shapes, and each row's own baseline.
    study.set_user_attr("verify_shapes", ["bs2", "bs4"])
    study.set_user_attr("verified", [{"trial": 2, "shapes": {n: {"bitwise": True, "mismatches": 0, "reason": None,
                                                                "seconds": 0.5} for n in ("bs2", "bs4")}}])
    page = render(study)
    assert "verify-only shapes (2: bs2, bs4; not timed): best plan bitwise at all" in page
    assert "its unfused µs" in page and "0 pruned or skipped" in page
    assert (data.comparison(summary(study))["baseline_s"] > 0).all()


def test_keeping_unfused_gives_each_shape_a_regret_its_line_adds_up_to() -> None:
    """The line read "regret +309.8 % at its search 1.35×" where the regret was against 1.0."""
    from sktune.tuning.summary import _fuses_nothing

    shape = {"baseline_s": 1e-3, "best_s": 7e-4, "speedup": 1.4, "speedup_ci": [1.2, 1.6], "search_speedup": 1.35,
             "best_alone_speedup": 4.098, "yardstick_speedup": None, "regret": 4.098 / 1.35 - 1}
    out = {"baseline_s": 1e-3, "shapes": {"n64": shape}}
    _fuses_nothing(out)
    assert shape["search_speedup"] == 1.0 and shape["regret"] == pytest.approx(4.098 / shape["search_speedup"] - 1)


def test_a_trial_its_stopped_run_failed_is_interrupted_not_failed() -> None:
    """"1 failed" with "interrupted: its sktune process was killed" as the most frequent reason:
    a stopped run says nothing of a plan, and the plan runs again."""
    from sktune.tuning.attrs import TrialAttr
    from sktune.tuning.summary import summary

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study()
    for reason in ("interrupted: its sktune process was killed", "hang: past --trial-timeout"):
        study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL,
                                                  user_attrs={TrialAttr.FAILURE: reason}))
    out = summary(study)
    assert (out["n_failed"], out["n_interrupted"]) == (1, 1)
    assert out["failure_reasons"] == [["hang: past --trial-timeout", 1]]
    from sktune.report import trials_data
    from sktune.report.export import no_result

    assert list(trials_data.history(study)["status"]) == ["interrupted", "failed"]
    assert [f["kind"] for f in trials_data.failures(study)] == ["interrupted", "hang"]
    assert "1 failed, 1 interrupted (their run stopped; their plans run again)" in no_result(out)


def test_a_through_compile_figure_is_shown_only_for_the_best_it_timed() -> None:
    from sktune.measure.stats import PairedTiming
    from sktune.tuning.through_compile import through_compile_line, through_compile_summary

    study = optuna.create_study()
    assert through_compile_summary(study, 3) is None  # not timed (emulated, device-profiled, unfused best)
    applied = PairedTiming(100e-6, 80e-6, 0.8, (0.78, 0.82), 30)  # against the eager model
    over_direct = PairedTiming(55e-6, 80e-6, 80 / 55, (1.4, 1.5), 30)  # against the plan called directly
    study.set_user_attr(StudyAttr.THROUGH_COMPILE, {"trial": 3, "shape": "bs8", "applied": applied.to_json(),
                                                    "over_direct": over_direct.to_json(), "mismatches": 2,
                                                    "compile_s": 1.0})
    assert through_compile_summary(study, 4) is None  # timed for a best since replaced
    entry = through_compile_summary(study, 3)
    assert entry["speedup"] == pytest.approx(1.25) and entry["call_cost_s"] == pytest.approx(25e-6)
    assert entry["call_cost_ci"] == pytest.approx([22e-6, 27.5e-6])
    line = through_compile_line(entry)
    assert "at shape bs8: 1.25× [1.22, 1.28] over the eager model" in line
    assert "the call adds 25.0 µs [22.0, 27.5] to the plan called directly" in line
    assert "NOT bitwise those of the unfused model (2 elements differ)" in line and "not significant" not in line
    unsure = {**entry, "speedup": 1.1, "speedup_ci": [0.96, 1.17]}  # seen on a walk, unmarked
    assert "1.10× [0.96, 1.17] (not significant: the interval includes 1) over the eager" in through_compile_line(unsure)
    # Measurably slower than eager as exported (a walk: 0.70× beside a table of 1.29×): said, and a warning.
    from sktune.tuning.through_compile import through_compile_warns

    slower = {**entry, "bitwise": True, "mismatches": 0, "speedup": 0.7, "speedup_ci": [0.68, 0.73]}
    assert "SLOWER than the eager model here" in through_compile_line(slower) and through_compile_warns(slower)
    assert "SLOWER" not in through_compile_line(unsure) and not through_compile_warns({**unsure, "bitwise": True})
    assert through_compile_warns(entry)  # not bitwise
    study.set_user_attr(StudyAttr.THROUGH_COMPILE, {"trial": 3, "failed": "hang: no answer within 300 s"})
    assert through_compile_line(through_compile_summary(study, 3)).endswith(
        "FAILED, so the exported call is untested (hang: no answer within 300 s)")


def test_a_best_verified_before_a_resume_across_a_change_says_so() -> None:
    # After --allow-changed the table said "bitwise yes" of a best verified on the model as it was.
    from datetime import datetime, timedelta

    from sktune.tuning.summary import _verified_before_change

    study = optuna.create_study()
    study.add_trial(optuna.trial.create_trial(value=0.5))
    assert not _verified_before_change(study, 0)  # never resumed across a change
    later = (datetime.now() + timedelta(minutes=5)).isoformat(timespec="seconds")
    study.set_user_attr("resumed_across", [{"at": later, "changed": ["model_sha256: …"]}])
    assert _verified_before_change(study, 0)
    earlier = (datetime.now() - timedelta(minutes=5)).isoformat(timespec="seconds")
    study.set_user_attr("resumed_across", [{"at": earlier, "changed": ["model_sha256: …"]}])
    assert not _verified_before_change(study, 0)  # its trial ran after the change
