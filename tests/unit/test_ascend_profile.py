"""Ascend profile parsers: fixtures in the documented formats (numbers worked out by hand
below) and the real bf16 training file in fixtures/npu_profiles/real."""

from __future__ import annotations

import csv
import json
import shutil
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sktune.errors import SktuneError
from sktune.measure.ascend_files import ProfileError, ProfileFiles, find_profile_files
from sktune.measure.ascend_parsers import (
    KNOWN_FAIL_REASONS,
    LEVEL0_BASE,
    LEVEL0_OPTIONAL,
    STEP_ID,
    SuperKernelName,
    is_known_fail_reason,
    parse_superkernel_name,
    read_fusion_fail_reasons,
    read_kernel_details,
    read_step_trace,
)
from sktune.measure.ascend_summary import union_ns, kernels_per_step, step_spans, summarize

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "npu_profiles"
RUN = FIXTURES / "localhost_41234_20250109120000123_ascend_pt"
OUTPUT = RUN / "ASCEND_PROFILER_OUTPUT"
STEPS_CSV = FIXTURES / "kernel_details_block_dim_steps.csv"
FAIL_LOG = FIXTURES / "sk_meta" / "sk_fusion_fail_reasons.log"
REAL_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "npu_profiles" / "real"
REAL = REAL_DIR / "kernel_details_bf16_train.csv"

# Fixture 1 (no Step Id, Block Num), µs after the base time, markers excluded:
#   RmsNorm [10, 30]  MatMulV2 [25, 55]  sk_layer_0 [60, 100]  HCCL [70, 120]
#   sk_decoder_layer_1 [130, 140]  Add [150.5, 152.75]  sk_layer_0 [155, 159]
#   span = 159 - 10 = 149; busy = 45 + 60 + 10 + 2.25 + 4 = 121.25; span - busy = 27.75
#   step_trace_time.csv Free = 30.125; markers: begin, placeholder, end = 3


def test_find_accepts_run_dir_output_dir_and_bare_csv() -> None:
    for path in (RUN, OUTPUT, OUTPUT / "kernel_details.csv"):
        files = find_profile_files(path)
        assert files.kernel_details == OUTPUT / "kernel_details.csv"
        assert files.step_trace == OUTPUT / "step_trace_time.csv"
        assert files.profile_dir == RUN
        assert files.note is None
    bare = find_profile_files(STEPS_CSV)
    assert (bare.kernel_details, bare.step_trace, bare.profile_dir) == (STEPS_CSV, None, None)


def test_find_takes_the_newest_run_and_says_so(tmp_path: Path) -> None:
    for stamp in ("20250109120000123", "20250110080000000", "20240101000000000"):
        shutil.copytree(RUN, tmp_path / f"host_7_{stamp}_ascend_pt")
    files = find_profile_files(tmp_path)
    assert files.profile_dir == tmp_path / "host_7_20250110080000000_ascend_pt"
    assert files.step_trace is not None
    assert files.note is not None and "3 *_ascend_pt" in files.note and "20250110080000000" in files.note


@pytest.mark.parametrize(
    ("layout", "message"),
    [("missing", "profile path not found"), ("empty", "no Ascend profile"),
     ("unparsed", "analyse"), ("bad_csv", "is not a kernel_details.csv"),
     ("blank_csv", "not a readable CSV: it is empty"), ("long_row", "not a readable CSV: .*Expected 2 fields in line 3, saw 3"),
     ("step_trace_only", "no kernel_details.csv in .*ASCEND_PROFILER_OUTPUT \\(it holds step_trace_time.csv\\): "
                         "the profile.s analysis wrote no kernel details"),
     ("csv_a_directory", "kernel_details.csv is a directory"),
     ("runs_one_level_down", "its subfolders hold \\*_ascend_pt directories .*pass one of those")],
)
def test_find_or_read_fails_with_one_clear_error(tmp_path: Path, layout: str, message: str) -> None:
    target = tmp_path / "x"
    if layout == "empty":
        target.mkdir()
    elif layout == "unparsed":
        target = tmp_path / "host_1_20250101000000000_ascend_pt"
        (target / "FRAMEWORK").mkdir(parents=True)
    elif layout == "bad_csv":
        target = tmp_path / "kernel_details.csv"
        target.write_text("Op,Time\nAdd,1\n")
    elif layout == "blank_csv":
        target = tmp_path / "kernel_details.csv"
        target.write_text("\n  \n")
    elif layout == "long_row":  # a record longer than its header: no column to put a field in
        target = tmp_path / "kernel_details.csv"
        target.write_text("Op,Time\nAdd,1\nMul,2,3\n")
    elif layout == "step_trace_only":  # parsed, but kernel_details.csv was not written
        target = tmp_path / "host_1_20250101000000000_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
        target.mkdir(parents=True)
        (target / "step_trace_time.csv").write_text("Step,Free\n1,2\n")
    elif layout == "csv_a_directory":
        target = tmp_path / "ASCEND_PROFILER_OUTPUT"
        (target / "kernel_details.csv").mkdir(parents=True)
    elif layout == "runs_one_level_down":  # sktune's own .sktune/npu-profiles/<pid>-<tag>/*_ascend_pt
        (tmp_path / "x" / "13173-abc" / "host_1_20250101000000000_ascend_pt").mkdir(parents=True)
    with pytest.raises(SktuneError, match=message):
        summarize(find_profile_files(target))


def test_read_kernel_details_no_step_id_block_num() -> None:
    df = read_kernel_details(OUTPUT / "kernel_details.csv")
    assert {"step", "name", "type", "core", "start_us", "duration_us", "wait_us", "block_num",
            "is_marker", "is_superkernel"} <= set(df.columns)
    assert len(df) == 10 and set(df["step"]) == {0}
    assert df["start_ns"].iloc[1] == 1736413971000010000  # quoted, trailing tab, exact
    assert df["start_us"].iloc[1] == pytest.approx(1736413971000010.0)
    hccl = df[df["core"] == "HCCL"].iloc[0]
    assert pd.isna(hccl["task_id"]) and pd.isna(hccl["wait_us"]) and pd.isna(hccl["block_num"])
    assert hccl["duration_us"] == 50.0
    assert df["block_num"].iloc[1] == 40 and df["mix_block_num"].iloc[3] == 48
    assert list(df.loc[df["is_marker"], "name"]) == ["sk_scope_kernel_begin", "sk_placeholder_kernel",
                                                      "sk_scope_kernel_end"]
    assert df["is_superkernel"].sum() == 3 and not df["is_duplicate"].any()


def test_read_kernel_details_step_id_block_dim() -> None:
    df = read_kernel_details(STEPS_CSV)
    assert list(df["step"]) == [1, 1, 1, 2, 2, 2, 2, 3, 3, 3]
    assert df["block_num"].iloc[0] == 24 and pd.isna(df["block_num"].iloc[8])
    assert df["mix_block_num"].iloc[6] == 48


def test_read_kernel_details_tolerates_na_times_bom_and_spacing(tmp_path: Path) -> None:
    path = tmp_path / "k.csv"
    path.write_text("\ufeffName , Type,Accelerator Core,Start Time (us),Duration(us)\n"
                    'A,Add,AI_CORE,"100.5\t",2\n'
                    "B,Add,AI_CORE,N/A,3\n"
                    'C,Cast,AI_CPU,"110\t",N/A\n', encoding="utf-8")
    df = read_kernel_details(path)
    assert list(df["name"]) == ["A", "B", "C"] and set(df["step"]) == {0}
    assert pd.isna(df["start_ns"].iloc[1]) and pd.isna(df["duration_us"].iloc[2])
    assert df["wait_us"].isna().all() and df["block_num"].isna().all()
    summary = summarize(ProfileFiles(kernel_details=path))
    assert summary.untimed_rows == 2
    assert summary.steps[0].kernels == 3 and summary.steps[0].span_us == 2.0 and summary.steps[0].busy_us == 2.0


def test_read_step_trace() -> None:
    trace = read_step_trace(OUTPUT / "step_trace_time.csv")
    row = trace.iloc[0]
    assert row["step"] == 0 and row["free_us"] == 30.125 and row["stage_us"] == 151.375
    assert row["computing_us"] + row["communication_not_overlapped_us"] + row["free_us"] == row["stage_us"]


def test_summary_with_step_trace() -> None:
    summary = summarize(find_profile_files(RUN))
    (step,) = summary.steps
    assert (step.step, step.span_us, step.busy_us, step.kernels) == (0, 149.0, 121.25, 7)
    # The gap is span − busy; Free (30.125) counts the idle up to the next step's first kernel too.
    assert step.gap_us == 27.75 and step.free_us == 30.125
    assert summary.markers_filtered == 3 and summary.duplicates_dropped == 0
    assert summary.by_core == {"HCCL": 50.0, "MIX_AIC": 44.0, "AI_CORE": 30.0, "AI_VECTOR_CORE": 22.25,
                               "MIX_AIV": 10.0}
    assert [(k.name, k.total_us, k.count) for k in summary.top_kernels[:2]] == [
        ("hcom_allReduce__512_1_1", 50.0, 1), ("sk_layer_0_start_RmsNorm_end_MatMulV2_0", 44.0, 2)]
    assert not any(k.name.startswith(("sk_scope_kernel", "sk_placeholder")) for k in summary.top_kernels)
    assert [(s.scope, s.first_op, s.last_op, s.index, s.total_us, s.count) for s in summary.superkernels] == [
        ("layer_0", "RmsNorm", "MatMulV2", 0, 44.0, 2), ("decoder_layer_1", "Add", "Cast", 1, 10.0, 1)]


def test_summary_without_step_trace_has_no_free() -> None:
    summary = summarize(ProfileFiles(kernel_details=OUTPUT / "kernel_details.csv"))
    assert summary.steps[0].gap_us == 27.75 and summary.steps[0].free_us is None


def test_a_file_cut_short_leaves_its_cut_row_out_and_says_so(tmp_path: Path) -> None:
    """A copy stopped midway ends in a row with fewer fields than the header: its duration may
    be cut to its first digits. Left out of every figure, and counted."""
    whole = summarize(ProfileFiles(kernel_details=REAL))
    text = REAL.read_text(encoding="utf-8")
    cut = tmp_path / "kernel_details.csv"
    head, rest = text.split("\n", 1)
    body = f"{head}\n   \n{rest}"  # a whitespace-only line too, which pandas skips
    cut.write_text(body[:body.rstrip("\n").rfind("\n") + 60], encoding="utf-8")  # 60 characters of the last row
    summary = summarize(ProfileFiles(kernel_details=cut))
    assert summary.cut_rows == 1 and whole.cut_rows == 0
    assert summary.steps[-1].kernels == whole.steps[-1].kernels - 1 and summary.untimed_rows == whole.untimed_rows
    trace = tmp_path / "step_trace_time.csv"
    lines = (OUTPUT / "step_trace_time.csv").read_text().splitlines()
    trace.write_text("\n".join([*lines, lines[1][:20]]) + "\n")  # a second step's row, cut
    assert read_step_trace(trace).attrs["cut_rows"] == 1 and len(read_step_trace(trace)) == 1
    assert summarize(ProfileFiles(kernel_details=cut, step_trace=trace)).cut_rows == 2


def test_a_file_cut_inside_a_quoted_field_leaves_that_row_out_and_says_so(tmp_path: Path) -> None:
    """Start times and shapes are quoted: a copy stopped inside one was refused whole."""
    whole = summarize(ProfileFiles(kernel_details=REAL))
    text = REAL.read_text(encoding="utf-8").rstrip("\n")
    last = text.rfind("\n")
    cut = tmp_path / "kernel_details.csv"
    cut.write_text(text[:text.index('"', last) + 5], encoding="utf-8")  # inside the last row's first quoted field
    summary = summarize(ProfileFiles(kernel_details=cut))
    assert summary.cut_rows == 1
    assert sum(s.kernels for s in summary.steps) == sum(s.kernels for s in whole.steps) - 1


@pytest.mark.parametrize("value", ["inf", "-inf", "1e400", "-50"])
def test_an_unusable_duration_is_untimed_never_a_crash_or_a_negative_busy(tmp_path: Path, value: str) -> None:
    """``inf`` raised OverflowError out of ``sktune profile``; ``-50`` was subtracted from busy."""
    frame = pd.read_csv(REAL, dtype=str, keep_default_na=False)
    frame.loc[5, "Duration(us)"] = value
    damaged = tmp_path / "kernel_details.csv"
    frame.to_csv(damaged, index=False)
    whole, summary = summarize(ProfileFiles(kernel_details=REAL)), summarize(ProfileFiles(kernel_details=damaged))
    assert summary.untimed_rows == whole.untimed_rows + 1
    assert summary.steps[0].busy_us <= whole.steps[0].busy_us and summary.steps[0].busy_us > 0


@pytest.mark.parametrize(("column", "value"), [("Step Id", "inf"), ("Start Time(us)", "1e400")])
def test_an_unreadable_step_or_start_is_counted_not_a_crash(tmp_path: Path, column: str, value: str) -> None:
    frame = pd.read_csv(REAL, dtype=str, keep_default_na=False)
    frame.loc[5, column] = value
    damaged = tmp_path / "kernel_details.csv"
    frame.to_csv(damaged, index=False)
    summary = summarize(ProfileFiles(kernel_details=damaged))
    assert summary.unstepped_rows + summary.untimed_rows == 1


def test_a_damaged_or_mismatched_step_trace_leaves_free_out_with_a_note(tmp_path: Path) -> None:
    """step_trace_time.csv only adds Free beside the gap: the kernels' figures stand without it."""
    empty = tmp_path / "step_trace_time.csv"
    empty.write_text("")
    summary = summarize(ProfileFiles(kernel_details=OUTPUT / "kernel_details.csv", step_trace=empty))
    assert summary.steps[0].gap_us == 27.75 and summary.steps[0].free_us is None
    assert "step_trace_time.csv left out, so no Free" in summary.note and "it is empty" in summary.note
    lines = (OUTPUT / "step_trace_time.csv").read_text().splitlines()
    other = tmp_path / "other_step_trace_time.csv"
    rows = [line.split(",") for line in lines[1:]]
    other.write_text("\n".join([lines[0], *[",".join([row[0], "77", *row[2:]]) for row in rows]]) + "\n")
    mismatched = summarize(ProfileFiles(kernel_details=STEPS_CSV, step_trace=other))
    assert "has no Free for step(s) 1, 2, 3 of kernel_details.csv (it has steps 77)" in mismatched.note


def test_summary_three_steps_block_dim() -> None:
    # step 1: MatMul [0,10], Add [5,8] inside it, Cast [20,25]          -> span 25,    busy 15
    # step 2: MatMul [100,110], Add [110,112.5], marker, SK [120,121.75] -> span 21.75, busy 14.25
    # step 3: Add [200,203], HCCL [201,211], AI_CPU [215,216.5]          -> span 16.5,  busy 12.5
    summary = summarize(find_profile_files(STEPS_CSV))
    assert [(s.step, s.span_us, s.busy_us, s.gap_us, s.kernels) for s in summary.steps] == [
        (1, 25.0, 15.0, 10.0, 3), (2, 21.75, 14.25, 7.5, 3), (3, 16.5, 12.5, 4.0, 3)]
    assert summary.by_core == {"AI_CORE": 20.0, "AI_VECTOR_CORE": 13.5, "HCCL": 10.0, "MIX_AIC": 1.75,
                               "AI_CPU": 1.5}
    assert summary.markers_filtered == 1
    (sk,) = summary.superkernels
    assert (sk.scope, sk.first_op, sk.last_op, sk.index) == ("attn_block_2", "MatMulV3", "Add", 7)
    assert summary.top_kernels[2].name == "aclnnAdd_AddAiCore_Add" and summary.top_kernels[2].count == 3


def _level0(path: Path, steps: bool, rows: list[str]) -> Path:
    """A kernel_details.csv with the Level0 header (``ascend_parsers.LEVEL0_*``) and ``rows``."""
    header = ",".join([*([STEP_ID] if steps else []), *LEVEL0_BASE, *LEVEL0_OPTIONAL])
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def test_level0_file_with_real_superkernel_names(tmp_path: Path) -> None:
    sk = f"sk_0_decoder.layer.0.mlp_start_{GMM}_end_clear_ops"
    path = _level0(tmp_path / "kernel_details.csv", True, [
        '2,0,aclnnAdd_AddAiCore_Add,Add,AI_VECTOR_CORE,"1736413971000000.000\t",2,0,40,0,"""8,8""",DT_FLOAT,ND,'
        '"""8,8""",DT_FLOAT,ND',
        f'2,0,{sk},SuperKernel,MIX_AIC,"1736413971000007.000\t",10,5,20,40,N/A,N/A,N/A,N/A,N/A,N/A',
        f'3,0,{sk},SuperKernel,MIX_AIC,"1736413971000100.000\t",11,5,20,40,N/A,N/A,N/A,N/A,N/A,N/A',
        ',0,aclnnCast_CastAiCore_Cast,Cast,AI_VECTOR_CORE,"1736413971000200.000\t",1,0,40,0,N/A,N/A,N/A,N/A,N/A,N/A',
    ])
    df = read_kernel_details(path)
    assert list(df["block_num"]) == [40, 20, 20, 40] and list(df["mix_block_num"]) == [0, 40, 40, 0]
    assert df["task_id"].isna().all()  # Level0 has no Task ID / Stream ID
    summary = summarize(ProfileFiles(kernel_details=path))
    assert [(s.step, s.kernels, s.span_us) for s in summary.steps] == [(2, 2, 17.0), (3, 1, 11.0)]
    assert summary.step_ids and summary.unstepped_rows == 1  # a blank Step Id: outside every step
    assert [(k.scope, k.first_op, k.last_op, k.index, k.count) for k in summary.superkernels] == [
        ("decoder.layer.0.mlp", GMM, "clear_ops", 0, 2)]
    assert step_spans(summary.to_json(), 2) == [17.0, 11.0]


def test_kernels_per_step_are_medians_over_the_steps_not_totals(tmp_path: Path) -> None:
    """Beside a step's time a kernel's bar must be its time in a step: the totals over five
    profiled steps read five times too large (a report's "median time per step")."""
    na = ",N/A" * 6
    path = _level0(tmp_path / "kernel_details.csv", True, [
        f'2,0,mm,MatMulV2,AI_CORE,"1736413971000000.000\t",10,0,20,0{na}',
        f'2,0,add,Add,AI_VECTOR_CORE,"1736413971000011.000\t",2,0,40,0{na}',
        f'2,0,add,Add,AI_VECTOR_CORE,"1736413971000014.000\t",3,0,40,0{na}',
        f'3,0,mm,MatMulV2,AI_CORE,"1736413971000100.000\t",12,0,20,0{na}',
        f'3,0,add,Add,AI_VECTOR_CORE,"1736413971000113.000\t",4,0,40,0{na}',
        f'4,0,mm,MatMulV2,AI_CORE,"1736413971000200.000\t",14,0,20,0{na}',  # add did not run in step 4
        f',0,cast,Cast,AI_VECTOR_CORE,"1736413971000300.000\t",99,0,40,0{na}',  # outside every step
    ])
    kernels = kernels_per_step(read_kernel_details(path))
    assert kernels == [{"name": "mm", "type": "MatMulV2", "total_us": 12.0, "count": 1},
                       {"name": "add", "type": "Add", "total_us": 4.0, "count": 1}]  # median of 5, 4, 0
    assert [k.total_us for k in summarize(ProfileFiles(kernel_details=path)).top_kernels][:2] == [99.0, 36.0]


def test_profile_without_step_id_is_one_step_and_cannot_time_steps(tmp_path: Path) -> None:
    path = _level0(tmp_path / "kernel_details.csv", False, [
        '0,aclnnAdd_AddAiCore_Add,Add,AI_VECTOR_CORE,"1736413971000000.000\t",2,0,40,0,N/A,N/A,N/A,N/A,N/A,N/A',
        '0,aclnnAdd_AddAiCore_Add,Add,AI_VECTOR_CORE,"1736413971000060.000\t",2,0,40,0,N/A,N/A,N/A,N/A,N/A,N/A',
    ])
    summary = summarize(ProfileFiles(kernel_details=path))
    assert not summary.step_ids and [(s.step, s.kernels, s.span_us) for s in summary.steps] == [(0, 2, 62.0)]
    with pytest.raises(ProfileError, match=r"no Step Id column.*prof\.step\(\)"):
        step_spans(summary.to_json(), 2)
    stepped = summarize(find_profile_files(STEPS_CSV)).to_json()
    with pytest.raises(ProfileError, match="has 3 steps, expected 4"):
        step_spans(stepped, 4)


def test_to_json_is_plain_json() -> None:
    data = json.loads(json.dumps(summarize(find_profile_files(RUN)).to_json()))
    assert {"steps", "by_core", "top_kernels", "superkernels", "markers_filtered"} <= set(data)
    assert {"step", "span_us", "busy_us", "gap_us", "kernels"} <= set(data["steps"][0])
    assert set(data["top_kernels"][0]) == {"name", "type", "total_us", "count"}
    assert data["fusion_fail_reasons"][1]["reason"] == "OP_UNSUPPORT"  # sk_meta/ next to the run


GMM = "static_kernel_GroupedMatmul_8c1f03ab"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # the real form: index first, kernel function names, scope ``none`` where none was named
        (f"sk_0_none_start_{GMM}_end_clear_ops", SuperKernelName("none", GMM, "clear_ops", 0)),
        (f"sk_1_decoder.layer.0.mlp_start_{GMM}_end_static_kernel_Add_5e0a91c2",
         SuperKernelName("decoder.layer.0.mlp", GMM, "static_kernel_Add_5e0a91c2", 1)),
        ("sk_12_layer_3_start_static_kernel_Mul_0a_end_static_kernel_Add_77",
         SuperKernelName("layer_3", "static_kernel_Mul_0a", "static_kernel_Add_77", 12)),
        ("sk_3_0_start_a_end_b", SuperKernelName("0", "a", "b", 3)),  # a scope of digits only
        ("sk_2_sk0_start_static_kernel_Cast_1_end_static_kernel_Cast_1",
         SuperKernelName("sk0", "static_kernel_Cast_1", "static_kernel_Cast_1", 2)),  # sktune's own names
        ("sk_0_fuse-all_start_f_end_g", SuperKernelName("fuse-all", "f", "g", 0)),
        # both forms fit: the real (index-first) reading wins without hints
        ("sk_0_layer_start_A_end_B_1", SuperKernelName("layer", "A", "B_1", 0)),
        # the older documented form: index last, op types
        ("sk_0_start_Add_end_Cast_3", SuperKernelName("0", "Add", "Cast", 3)),
        ("sk_layer_0_start_RmsNorm_end_MatMulV2_0", SuperKernelName("layer_0", "RmsNorm", "MatMulV2", 0)),
        ("sk_decoder_layer_1_start_Add_end_Cast_12", SuperKernelName("decoder_layer_1", "Add", "Cast", 12)),
        ("sk_model.layers.3_start_Mul_end_Add_2", SuperKernelName("model.layers.3", "Mul", "Add", 2)),
        ("sk_a_start_b_start_Add_end_Cast_0", SuperKernelName("a_start_b", "Add", "Cast", 0)),
        ("sk_scope_kernel_begin", None),
        ("sk_placeholder_kernel", None),
        ("aclnnMatmul_MatMulCommon_MatMulV2", None),
        ("sk_layer_start_Add_end_Cast", None),
        ("sk__start_Add_end_Cast_0", None),
    ],
)
def test_parse_superkernel_name(name: str, expected: SuperKernelName | None) -> None:
    assert parse_superkernel_name(name) == expected


@pytest.mark.parametrize(
    ("name", "scopes", "expected"),
    [
        ("sk_0_layer_start_A_end_B_1", ["0_layer"], SuperKernelName("0_layer", "A", "B", 1)),
        ("sk_0_layer_start_A_end_B_1", ["layer"], SuperKernelName("layer", "A", "B_1", 0)),
        ("sk_4_a_start_b_start_f_end_g", ["a"], SuperKernelName("a", "b_start_f", "g", 4)),
        ("sk_4_a_start_b_start_f_end_g", [], SuperKernelName("a_start_b", "f", "g", 4)),
        ("sk_1_x_end_y_start_f_end_g", ["x_end_y"], SuperKernelName("x_end_y", "f", "g", 1)),
        ("sk_1_s_start_f_end_g", ["other"], SuperKernelName("s", "f", "g", 1)),  # no hint fits: preferred reading
    ],
)
def test_parse_superkernel_name_with_the_plans_scopes(name: str, scopes: list[str],
                                                      expected: SuperKernelName) -> None:
    assert parse_superkernel_name(name, scopes) == expected


def test_read_fusion_fail_reasons() -> None:
    rows = read_fusion_fail_reasons(FAIL_LOG)
    assert [(r["op"], r["reason"]) for r in rows] == [
        (None, None),
        ("static_kernel_Cast_9f3a", "OP_UNSUPPORT"),
        ("aclnnFlashAttentionScore_FlashAttentionScore_FlashAttentionScore", "TASK_GROUP_NOT_EMPTY"),
        ("Unique", "DEFAULT_NODE"),
        ("MatMulV3", "NOT_IN_SCOPE"),
        ("GatherV2", "IN_UNFUSIBLE_SCOPE"),
        (None, None),
    ]
    assert rows[-1]["raw"].startswith("Scope 0")


KNOWN_REASONS = ["DEFAULT_NODE", "TASK_GROUP_NOT_EMPTY", "OP_UNSUPPORT", "NOT_IN_SCOPE", "IN_UNFUSIBLE_SCOPE",
                 "ISOLATED_EVENT", "EXIST_DEADLOCK", "EXTERNAL_DEPEND", "KERNEL_ATTR_GET_FAILED", "EXCEED_SCOPE_MAX",
                 "EXCEED_CORE_MAX", "DYNAMIC_TASK_UNSUPPORT", "SIMT_OP_UNSUPPORT", "DEADLOCK_DETECTED",
                 "SYNCALL_OP_DROP", "RESOURCE_INSUFFICIENT", "NO_TARGET_NODE", "UNRECOVERABLE_FAIL"]


def test_fail_reasons_known_set_and_unknown_ones_verbatim(tmp_path: Path) -> None:
    log = tmp_path / "sk_fusion_fail_reasons.log"
    known = [f"Node [nodeId:{i}, streamId:1] - KernelInfos{{funcName:f{i}, kernelType:AIV_ONLY}}: reason: {r}"
             for i, r in enumerate(KNOWN_REASONS)]
    log.write_text("\n".join([
        *known,
        "Node [nodeId:40] - KernelInfos{funcName:w, kernelType:MIX_AIC}: reason: VALUE_WAIT_UNSUPPORT",
        "Node [nodeId:41] - KernelInfos{funcName:g}: reason: OP_UNSUPPORT_V2, reasonDetail: OP_UNSUPPORT",
        "Node [nodeId:42] - KernelInfos{funcName:h, kernelType:AIV_ONLY}: reason: BRAND_NEW",
        "Scope 1 (scopeId=1): status RESOURCE_INSUFFICIENT",
        "Sort SOME_FUTURE_REASON",
        "Scope 0 (scopeId=0): 4 nodes, 1 streams, scopeNames=[layer_0]",
    ]))
    rows = read_fusion_fail_reasons(log)
    assert [r["reason"] for r in rows[:len(known)]] == KNOWN_REASONS
    assert all(is_known_fail_reason(r["reason"]) for r in rows[:len(known)])
    assert [(r["op"], r["reason"]) for r in rows[len(known):]] == [
        ("w", "VALUE_WAIT_UNSUPPORT"), ("g", "OP_UNSUPPORT_V2"), ("h", "BRAND_NEW"),
        (None, "RESOURCE_INSUFFICIENT"), ("Sort", "SOME_FUTURE_REASON"), (None, None)]
    assert is_known_fail_reason("VALUE_WAIT_UNSUPPORT") and set(KNOWN_REASONS) == KNOWN_FAIL_REASONS
    assert not any(is_known_fail_reason(r) for r in ("OP_UNSUPPORT_V2", "BRAND_NEW", "SOME_FUTURE_REASON"))


@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 20)), max_size=12))
def test_union_matches_brute_force(pairs: list[tuple[int, int]]) -> None:
    intervals = [(start, start + length) for start, length in pairs]
    covered = {t for start, stop in intervals for t in range(start, stop)}
    assert union_ns(intervals) == len(covered)


# ---------------------------------------------------------------- the real file
def _oracle(path: Path) -> tuple[Decimal, Decimal, int]:
    """Span, busy and kernel count with the csv module and Decimal: an independent check. One
    task (stream, task id, start) counts once, whatever the names it is listed under."""
    with path.open(newline="") as f:
        header, *body = list(csv.reader(f))
    s, d = header.index("Start Time(us)"), header.index("Duration(us)")
    stream, task = header.index("Stream ID"), header.index("Task ID")
    unique = list({(r[stream], r[task], r[s].strip()): tuple(v.strip() for v in r) for r in reversed(body)}.values())
    spans = sorted((Decimal(r[s]), Decimal(r[s]) + Decimal(r[d])) for r in unique)
    busy, end = Decimal(0), None
    for start, stop in spans:
        if end is None or start > end:
            busy, end = busy + stop - start, stop
        elif stop > end:
            busy, end = busy + stop - end, stop
    return max(e for _, e in spans) - spans[0][0], busy, len(unique)


def test_real_file_reads() -> None:
    df = read_kernel_details(REAL)
    assert len(df) == 29 and set(df["step"]) == {19}
    assert df["start_ns"].iloc[0] == 1736413971558972912
    assert df["block_num"].iloc[0] == 16  # from Block Dim
    # Three exact repeats, and FlashAttentionScore's task again as "…_varlen" (same task, start, duration).
    assert df["is_duplicate"].sum() == 4 and not df["is_marker"].any() and not df["is_superkernel"].any()
    (varlen,) = df[df["is_duplicate"] & df["name"].str.endswith("_varlen")].itertuples()
    (kept,) = df[~df["is_duplicate"] & (df["start_ns"] == varlen.start_ns)].itertuples()
    assert (kept.task_id, kept.stream_id, kept.duration_us) == (varlen.task_id, varlen.stream_id, varlen.duration_us)
    assert kept.name + "_varlen" == varlen.name


def test_real_file_summary_matches_independent_oracle() -> None:
    summary = summarize(find_profile_files(REAL))
    span, busy, kernels = _oracle(REAL)
    (step,) = summary.steps
    assert step.step == 19 and step.kernels == kernels == 25
    assert Decimal(str(step.span_us)) == span and Decimal(str(step.busy_us)) == busy
    assert step.gap_us == pytest.approx(float(span - busy), abs=1e-6) and step.free_us is None
    assert summary.duplicates_dropped == 4 and summary.markers_filtered == 0 and summary.superkernels == ()
    assert list(summary.by_core) == ["MIX_AIC", "AI_CORE", "AI_VECTOR_CORE"]
    assert summary.by_core["MIX_AIC"] == pytest.approx(5072.22 - 405.228)  # the _varlen row counted once
    assert sum(summary.by_core.values()) == pytest.approx(step.busy_us)  # one stream: no overlap
    assert summary.top_kernels[0].type == "FlashAttentionScoreGrad" and summary.top_kernels[0].count == 4
