"""The report's data extraction (no plotly) on a real small study, and escaping of hostile
user text all the way into the HTML."""

from __future__ import annotations

import math

import optuna
import pandas as pd
import pytest

from sktune.report import data, trials_data
from sktune.report.html import render
from sktune.tuning.records import best_record, top_records
from sktune.tuning.summary import summary
from tests.report_fixtures import EVIL, EVIL_IMG, NPU_FUSION, RealStudy, hostile_study, real_study  # noqa: F401


@pytest.fixture(scope="module")
def study(real_study: RealStudy) -> optuna.Study:  # noqa: F811
    return real_study.load()


def finished(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return [t for t in study.get_trials() if t.state.is_finished()]


def test_history_one_row_per_finished_trial_and_best_so_far_never_rises(study: optuna.Study) -> None:
    hist = trials_data.history(study)
    trials = finished(study)
    refined = [t for t in trials if str(t.user_attrs.get("anchor", "")).startswith("best+")]
    assert len(trials) - len(refined) == 8 and len(refined) <= 1  # tiny_norm's one costly option: cpp_wrapper
    assert hist["number"].tolist() == [t.number for t in trials]
    assert (hist["status"] == "failed").sum() == 1  # the injected crash
    failed = hist[hist["status"] == "failed"].iloc[0]
    assert failed["failure"].startswith("crash:") and pd.isna(failed["ratio"])
    best = hist["best_so_far"].dropna().tolist()
    assert best and all(b <= a for a, b in zip(best, best[1:]))
    # best-so-far follows the search ratios; the named best is the re-measured winner among the top few
    assert best[-1] == pytest.approx(top_records(study, 1)[0].ratio)
    assert best_record(study).number in {f["trial"] for f in study.user_attrs["finalists"]}
    exact = hist[hist["status"] == "exact"]
    assert (exact["ratio"] >= best[-1]).all()


def test_the_history_marks_the_named_best_and_says_why_it_is_not_the_line_s_lowest(study: optuna.Study) -> None:
    from sktune.report.figures import history_figure

    hist = trials_data.history(study)
    named = best_record(study).number
    [star] = [t for t in history_figure(hist, named).data if t.name.startswith("named best")]
    assert list(star.x) == [named] and star.name == f"named best (#{named}, after the finalists' round)"
    [guess] = [t for t in history_figure(hist, named, by_round=False).data if t.name.startswith("named best")]
    assert guess.name == f"named best (#{named}, provisional: no round)"  # a stopped run's: its search figure
    lowest = hist["best_so_far"].dropna().iloc[-1]
    elsewhere = hist.assign(ratio=[lowest if n == named else max(r, lowest * 1.01) if pd.notna(r) else r
                                   for n, r in zip(hist["number"], hist["ratio"])])
    assert trials_data.history_note(elsewhere, named) is None  # it is the line's lowest: nothing to explain
    other = int(hist.loc[hist["ratio"].notna() & (hist["ratio"] > lowest), "number"].iloc[0])
    note = trials_data.history_note(hist, other)
    assert note is not None and f"trial #{other}" in note and f"the line's lowest {lowest:.3f}" in note


def test_fusion_map_matches_the_summary_groups(study: optuna.Study) -> None:
    fm = data.fusion_map(study)
    s = summary(study)
    assert fm.trial == s["best_trial"]
    assert fm.n_groups == len(s["groups"])
    planned = fm.ops[fm.ops["row"] == "planned"]
    assert planned["op"].tolist() == list(range(s["n_ops"]))
    assert sorted(planned[planned["kind"] == "fused"]["op"]) == sorted(i for g in s["groups"] for i in g)
    for k, group in enumerate(s["groups"], start=1):
        assert sorted(planned[planned["group"] == k]["op"]) == sorted(group)
    assert not fm.has_actual  # inductor reports no separate "actual" fusion


def test_fusion_map_planned_and_actual_rows() -> None:
    fm = data.fusion_map(hostile_study(fusion=NPU_FUSION))
    assert fm.trial == 2 and fm.n_groups == 1 and fm.has_actual
    kinds = {row: part.set_index("op")["kind"].tolist() for row, part in fm.ops.groupby("row")}
    assert kinds["planned"] == ["fused", "fused", "never", "unfused"]
    assert kinds["actual"] == ["unfused", "unfused", "never", "unfused"]  # sk0 was planned, not fused
    assert any("sk9" in n for n in fm.notes) and any("sk0" in n for n in fm.notes)


def test_summary_comparison_and_verdict(study: optuna.Study) -> None:
    s = summary(study)
    comp = data.comparison(s)
    assert comp["plan"].tolist()[0] == "unfused baseline"
    best = comp[comp["plan"] == "best exact plan"].iloc[0]
    assert best["verified"] == "yes" and best["ratio_lo"] <= best["ratio"] <= best["ratio_hi"]
    assert best["ratio"] == pytest.approx(1 / s["speedup"])
    assert f"#{s['best_trial']}" in data.verdict(s)
    env = data.environment(study)
    assert env["backend"] == "inductor" and env["torch"].startswith("2.") and env["threads"] == "1"


def test_time_breakdown_and_kernels(study: optuna.Study) -> None:
    tb = data.time_breakdown(study)
    assert tb["which"].tolist() == ["unfused baseline", "best exact plan"]
    for r in tb.itertuples():
        assert r.busy_us > 0 and r.busy_us + r.gap_us + r.unrecorded_us == pytest.approx(r.step_us, rel=1e-6)
    kernels = data.top_kernels(study)
    assert set(kernels["which"]) == {"unfused baseline", "best exact plan"}
    # Per-step medians: a trivial op may round to 0 µs at the profiler's resolution on a fast CPU.
    assert (kernels["total_us"] >= 0).all() and (kernels.groupby("which")["total_us"].max() > 0).all()


def test_an_older_npu_study_s_kernel_totals_read_per_step() -> None:
    """Before ``kernels_per_step`` an npu profile kept totals over its five profiled steps."""
    study = optuna.create_study()
    kernels = [{"name": "sk_0_x", "type": "SuperKernel", "total_us": 50.0, "count": 5}]
    study.set_user_attr("profile_baseline", {"step_us": 12.0, "steps": 5, "superkernels": [], "top_kernels": kernels})
    study.set_user_attr("profile_best", {"step_us": 12.0, "steps": 5, "superkernels": [], "top_kernels": kernels,
                                         "kernels_per_step": True})
    frame = data.top_kernels(study)
    assert frame["total_us"].tolist() == [10.0, 50.0] and frame["count"].tolist() == [1.0, 5.0]


def test_trials_table_and_failures(study: optuna.Study) -> None:
    table = trials_data.trials_table(study)
    assert len(table) == len(finished(study))
    failed = table[table["state"] == "FAIL"]
    assert len(failed) == 1 and failed["reason"].iloc[0].startswith("crash:") and failed["bitwise"].iloc[0] == ""
    complete = table[table["state"] == "COMPLETE"]
    assert (complete["ratio_lo"] <= complete["ratio"]).all() and (complete["ratio"] <= complete["ratio_hi"]).all()
    items = trials_data.failures(study)
    kinds = [i["kind"] for i in items]
    assert kinds.count("crash") == 1
    n_mismatching = sum(1 for r in complete.itertuples() if r.bitwise == "no")
    assert kinds.count("mismatch") == n_mismatching
    for item in items:
        assert item["plan"]["scopes"] is not None
        if item["kind"] == "mismatch":
            assert not item["mismatches"].empty and (item["mismatches"]["max_ulp"] > 0).all()


def _exact_trial(fused: str, cut: bool, ratio: float) -> optuna.trial.FrozenTrial:
    dist = optuna.distributions.CategoricalDistribution
    return optuna.trial.create_trial(
        params={"block:0": fused, "cut:0": cut}, value=ratio,
        distributions={"block:0": dist(["fuse", "eager"]), "cut:0": dist([False, True])},
        constraints={"bitwise": 0.0},
    )


def test_importances_name_the_parameter_that_decides_the_ratio() -> None:
    study = optuna.create_study(direction="minimize")
    # Fusing block 0 halves the ratio whatever the cut: the block must dominate.
    for k in range(12):
        fused, cut = ("fuse", "eager")[k % 2], bool(k // 2 % 2)
        study.add_trial(_exact_trial(fused, cut, (0.5 if fused == "fuse" else 1.0) + 0.001 * k))
    imp, note = trials_data.importances(study)
    assert note is None
    assert imp["importance"].between(0, 1).all() and math.isclose(imp["importance"].sum(), 1.0, rel_tol=1e-6)
    assert imp.iloc[0]["param"] == "block:0"


def test_importances_that_cannot_tell_the_parameters_apart_are_a_note() -> None:
    """Six trials gave every one of 15 parameters the same weight: a chart of equal bars."""
    study = optuna.create_study(direction="minimize")
    for k in range(4):  # the ratio follows neither parameter
        study.add_trial(_exact_trial(("fuse", "eager")[k % 2], bool(k // 2), 0.7))
    imp, note = trials_data.importances(study)
    assert imp.empty and "weigh the same" in note


def test_parallel_coordinates(study: optuna.Study) -> None:
    frame, params = trials_data.parallel(study)
    assert len(frame) == sum(1 for t in finished(study) if t.state == optuna.trial.TrialState.COMPLETE)
    assert params and all(frame[p].astype(str).nunique() > 1 for p in params)


def test_importances_with_too_few_trials_is_a_note() -> None:
    study = hostile_study()  # 2 exact trials
    imp, note = trials_data.importances(study)
    assert imp.empty and "at least" in note


def test_hostile_text_is_escaped_everywhere() -> None:
    page = render(hostile_study())
    for raw in (EVIL, EVIL_IMG):
        assert raw not in page
        # An unescaped string inside a plotly figure would show up JSON-encoded instead.
        assert raw.replace("<", "\\u003c").replace(">", "\\u003e") not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;img src=x onerror=alert(2)&gt;" in page


def test_figures_escape_hover_text_and_labels() -> None:
    from sktune.report import figures

    study = hostile_study()
    fig = figures.fusion_map_figure(data.fusion_map(study))
    texts = [t for trace in fig.data for t in list(trace.hovertext) + list(trace.text)]
    assert any("&lt;script&gt;" in t for t in texts)
    assert not any("<script" in t or "<img" in t for t in texts)
    kernels = figures.kernels_figure(data.top_kernels(study))
    assert all("<script" not in y for trace in kernels.data for y in trace.y)


def test_two_kernels_whose_names_share_a_long_head_get_two_rows() -> None:
    from sktune.report import figures

    names = ["graph_11_cpp_fused__to_copy_abs_amax_clamp_clamp_min_div_mul_round_silu_split_1",
             "graph_11_cpp_fused__to_copy_abs_amax_clamp_clamp_min_div_round_0"]
    kernels = pd.DataFrame([{"which": "unfused baseline", "name": n, "total_us": 5.0 + i, "count": 1}
                            for i, n in enumerate(names)], columns=["which", "name", "total_us", "count"])
    (trace, _) = figures.kernels_figure(kernels).data
    assert len(set(trace.y)) == 2 and all(len(y) <= 48 for y in trace.y)
    assert figures._axis_labels(["a" * 60, "a" * 60]) == ["a" * 31 + "…" + "a" * 16, "a" * 31 + "…" + "a" * 16 + " (2)"]


def test_the_verdict_reads_at_a_glance_and_says_why_nothing_completed() -> None:
    failed = {"best_trial": None, "n_trials": 3, "n_complete": 0, "n_failed": 3,
              "failure_reasons": [["hang: no answer within 1 s; worker killed", 3]]}
    assert data.verdict_kind(failed) == "none"
    assert data.verdict(failed) == (
        "Nothing to recommend: no bitwise-exact plan, not even the unfused one: 0 of 3 trials completed, 3 failed; "
        "most often: hang: no answer within 1 s; worker killed (3×); a hang is a trial past --trial-timeout: raise "
        "it for a model that is slow to compile.")
    rejected = {"best_trial": None, "keep_unfused_reason": "trial #2 is not bitwise at verify-only shape 'bs4'"}
    assert data.verdict(rejected) == "Keep the model unfused: trial #2 is not bitwise at verify-only shape 'bs4'."
    assert data.verdict_kind(rejected) == "caution"
    use = {"best_trial": 2, "verified_bitwise": True, "significant": True, "best_fuses_nothing": False}
    assert data.verdict_kind(use) == "use"
    assert data.verdict_kind({**use, "provisional": "no finalists' round has completed"}) == "caution"
    assert data.verdict_kind({**use, "best_fuses_nothing": True}) == "caution"


def test_a_failure_reason_that_begins_with_its_kind_says_it_once() -> None:
    from sktune.report.html import _failure

    item = {"trial": 3, "kind": "hang", "reason": "hang: no answer within 1 s", "anchor": "", "plan": None,
            "mismatches": pd.DataFrame()}
    assert "<b>hang</b>: no answer within 1 s</summary>" in _failure(item, [])


def test_a_multi_shape_mismatch_says_at_which_shape() -> None:
    from sktune.report.html import _failure

    study = optuna.create_study()
    mismatch = {"shape": "narrow", "input_set": 0, "output_index": 0, "count": 3, "first_index": 5, "max_ulp": 2,
                "reason": "values", "detail": "3 elements differ"}
    study.add_trial(optuna.trial.create_trial(value=0.5, user_attrs={"mismatches": [mismatch]},
                                              constraints={"bitwise": 1.0}))
    [item] = trials_data.failures(study)
    assert item["reason"] == "1 output mismatch(es) at shape narrow on 1 input set(s), max ULP 2"
    assert "<th>shape</th>" in _failure(item, []) and '<td data-v="narrow">narrow</td>' in _failure(item, [])
    assert trials_data.trials_table(study).loc[0, "reason"] == item["reason"]


def test_page_embeds_plotly_once_and_needs_no_network() -> None:
    page = render(hostile_study())
    assert page.count("window.PlotlyConfig") == 1  # plotly.js inline, once
    assert "<script src=" not in page and 'src="http' not in page
    assert page.count('class="plotly-graph-div"') >= 4


def test_empty_study_renders() -> None:
    study = optuna.create_study()
    page = render(study)
    assert "No bitwise-exact plan" in page and "No finished trial" in page


def test_the_history_says_its_failed_row_is_no_ratio() -> None:
    """Failed trials sit in a row above the highest ratio: the chart names that row, or it reads
    as a ratio 5 % above the slowest trial."""
    import pandas as pd

    from sktune.report import figures

    hist = pd.DataFrame({"number": [0, 1, 2], "status": ["exact", "failed", "exact"], "ratio": [1.0, None, 0.8],
                         "anchor": ["", "", ""], "failure": ["", "hang", ""], "best_so_far": [1.0, 1.0, 0.8]})
    texts = [a.text for a in figures.history_figure(hist).layout.annotations]
    assert any(t.startswith("no ratio (failed)") for t in texts)
    assert not any(a.text.startswith("no ratio") for a in figures.history_figure(hist.drop(index=1)).layout.annotations)
