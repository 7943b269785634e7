"""``sktune doctor``'s judgements on fake observations: each case a reviewer found where a
row said "confirmed" (or blamed the wrong cause) for what it had not seen. Fast: no device,
no emulator run (one CLI call that typer refuses before any work)."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from sktune.doctor import records
from sktune.doctor.cache_checks import Compile, _built_before, judge_cache
from sktune.doctor.compile_checks import judge_marker_pairing, judge_options_accepted
from sktune.doctor.env_checks import judge_cann_version, judge_trace_dir, judge_versions
from sktune.doctor.meta_checks import (SecondCompile, judge_effective_options, judge_fail_reason_log,
                                       judge_sk_meta_location)
from sktune.doctor.profile_checks import judge_superkernel_rows
from sktune.doctor.runner import Check, run_checks
from tests.cli.test_cli import sktune

PID = str(os.getpid())


def _meta(work: Path, *parts: str, name: str = "sk_fused_nodes.log") -> Path:
    path = work.joinpath("sk_meta", *parts, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")
    return path


def test_a_second_compile_whose_sk_meta_is_not_under_its_own_work_path_differs(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    found = [_meta(first, PID, "model_1")]
    once = judge_sk_meta_location(first, found, [], found, SecondCompile("other_placement", second, (), 3))
    assert once.kind == "differs" and "other_placement" in once.status and str(second) in once.status
    assert "3 sk_meta directories" in once.status
    own = SecondCompile("other_placement", second, (_meta(second, PID, "model_2"),), 1)
    assert judge_sk_meta_location(first, found, [], found, own).kind == "confirmed"
    assert judge_sk_meta_location(first, found, [], found, "the second compile failed: X").kind == "could not check"


def test_sk_meta_in_another_layout_is_named_not_called_missing(tmp_path: Path) -> None:
    other = _meta(tmp_path, PID, "7")  # sk_meta/<pid>/<id>/, not model_<id>
    seen = judge_sk_meta_location(tmp_path, [], [], [other], "not reached")
    assert seen.kind == "differs" and "sk_meta/<pid>/<id>/" in seen.status and str(other.parent) in seen.status
    assert "no sk_fusion_fail_reasons.log" not in seen.status


def test_fail_lines_without_a_readable_reason_differ_and_an_empty_log_says_unexercised(tmp_path: Path) -> None:
    log = tmp_path / "sk_fusion_fail_reasons.log"
    line = "node 5 (Add) was not fused: op unsupported"
    unread = judge_fail_reason_log([log], [(None, line), ("DEFAULT_NODE", "reason: DEFAULT_NODE")])
    assert unread.kind == "differs" and line in unread.status and "1 of 2" in unread.status
    empty = judge_fail_reason_log([log], [])
    assert empty.kind == "confirmed" and "not exercised" in empty.detail


def test_an_options_dump_missing_keys_or_comparing_nothing_is_not_confirmed(tmp_path: Path) -> None:
    dump = tmp_path / "sk_options.json"
    empty = judge_effective_options("checked", dump, "", {"dcci_after_kernel_end": [".*"]}, {})
    assert empty.kind == "differs" and "dcci_after_kernel_end" in empty.status and "not in the dump" in empty.status
    nothing = judge_effective_options("checked", dump, "", {}, {"split_mode": 0})
    assert nothing.kind == "could not check" and "compared nothing" in nothing.status
    nested = judge_effective_options("checked", dump, "", {"a": {"b": 1}}, {"a": {}})
    assert nested.kind == "differs" and "a.b" in nested.status
    rel = Path(os.path.relpath(dump))
    same = judge_effective_options("checked", rel, "", {"split_mode": 0}, {"split_mode": 0})
    assert same.kind == "confirmed" and str(dump.resolve()) in same.detail  # the path printed absolute


def test_a_pattern_list_that_differs_is_not_blamed_on_clamping(tmp_path: Path) -> None:
    dump = tmp_path / "sk_options.json"
    pattern = judge_effective_options("checked", dump, "", {"dcci_after_kernel_end": [".*"]},
                                      {"dcci_after_kernel_end": [".*Mul.*"]})
    assert pattern.kind == "differs" and "clamp" not in pattern.status and "pattern list" in pattern.status
    assert str(dump) in pattern.detail
    clamped = judge_effective_options("checked", dump, "", {"early_start": 5}, {"early_start": 0})
    assert "clamped" in clamped.status


def test_the_cache_rows_on_an_op_hash_release_give_the_cause_when_compiles_take_real_time() -> None:
    from sktune.backends.npu_static_cache import static_cache_rule

    session = SimpleNamespace(backend=SimpleNamespace(static_cache=static_cache_rule("2.10.0.post2")))
    first = Compile("main", 0.12, False, True)  # wall time of a compile that built nothing
    why = _built_before(session, first)  # type: ignore[arg-type]
    assert why is not None and "op hash alone" in why
    row = judge_cache("static_cache_option_sets", first, [Compile("other_options", 0.11, True, True),
                                                           Compile("main_again", 0.12, True, True)], "", why)
    assert row.kind == "could not check" and "op hash alone" in row.status
    # A stale kernel reused (outputs not bitwise) differs there all the same: it went to the detail only.
    stale = judge_cache("static_cache_scope_placements", first, [Compile("other_placement", 0.1, True, False)], "", why)
    assert stale.kind == "differs" and "other_placement" in stale.status and "op hash alone" in stale.detail
    full = SimpleNamespace(backend=SimpleNamespace(static_cache=static_cache_rule("2.14.0")))
    assert _built_before(full, first) is None  # type: ignore[arg-type]


def test_options_accepted_says_when_cann_used_other_options() -> None:
    row = judge_options_accepted(3, "full", "a, b, c", None, "dcci_after_kernel_end: requested ['.*'], used []")
    assert row.kind == "confirmed" and "shows other options" in row.detail and "dcci_after_kernel_end" in row.detail
    assert "other options" not in judge_options_accepted(3, "full", "a, b, c", None, None).detail


def test_only_a_refusal_naming_super_kernel_scope_confirms_marker_pairing() -> None:
    other = judge_marker_pairing("RuntimeError: ACL stream synchronize failed, error code 507035")
    assert other.kind == "could not check" and "507035" in other.status
    torch_npu = ("RuntimeError: No matching torch.npu.super_kernel_scope_begin found for "
                 "torch.npu.super_kernel_scope_end operator 'x'")
    assert judge_marker_pairing(torch_npu).kind == "confirmed"
    assert judge_marker_pairing(None).kind == "differs"


def test_a_wrong_main_result_differs_in_marker_pairing() -> None:
    row = judge_marker_pairing("RuntimeError: super_kernel_scope_begin('t') is never closed", "1 of 512 elements differ")
    assert row.kind == "differs" and "not bitwise equal" in row.status and "1 of 512" in row.status


def _device_down(session: object) -> records.CheckResult:
    return records.could_not("device", "torch.npu.is_available() is False")


def _refused(session: object) -> records.CheckResult:
    return records.differs("refusal", "refused: RuntimeError: no device")


def _host(session: object) -> records.CheckResult:
    return records.confirmed("host", "ok")


def test_an_unusable_device_is_one_cause_not_a_row_of_refusals() -> None:
    checks = [Check("host", _host, device=False), Check("marker", _refused), Check("options", _refused)]
    rows = run_checks(object(), checks, timeout_s=5, probe=Check("device", _device_down))  # type: ignore[arg-type]
    assert rows[0].kind == "confirmed"
    for row in rows[1:]:
        assert row.status == "could not check: the device is not usable (torch.npu.is_available() is False)"
    assert all(r.kind == "differs" for r in run_checks(object(), checks[1:], timeout_s=5))  # type: ignore[arg-type]


def test_hang_trace_path_does_not_claim_the_location_was_seen(tmp_path: Path) -> None:
    row = judge_trace_dir(tmp_path / "debug" / "plog", False)
    assert row.kind == "confirmed" and "no trace was seen" in row.detail and "would go to" not in row.detail


def test_superkernel_rows_under_another_type_are_named() -> None:
    name = "sk_0_doctor_norm_start_static_kernel_MatMulV2_1a2b_end_static_kernel_Mul_3c4d"
    row = judge_superkernel_rows(["doctor_norm"], [], [(name, "SUPER_KERNEL")])
    assert row.kind == "differs" and "SUPER_KERNEL" in row.status and name in row.status
    assert "nothing was fused" not in row.status


@pytest.mark.parametrize("value", ["inf", "1e10"])
def test_a_huge_timeout_is_refused_without_a_traceback(tmp_path: Path, value: str) -> None:
    result = sktune("doctor", "--timeout", value, cwd=tmp_path, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr + result.stdout
    assert "86400" in result.stderr + result.stdout


def test_cann_version_is_shown_not_confirmed(tmp_path: Path) -> None:
    row = judge_cann_version([(tmp_path / "ascend_toolkit_install.info", "8.2.RC1")])
    assert row.kind == "info" and row.to_json()["kind"] == "info" and records.is_valid_status(row.status)


def test_the_old_key_set_still_checks_the_torch_pin() -> None:
    row = judge_versions("2.13.0+cpu", "2.10.0.post2", "legacy", emulated=False)
    assert row.kind == "differs" and "old SuperKernel key set" in row.status and "pins (2.10.0.*)" in row.status
    assert "pins" not in judge_versions("2.10.0", "2.10.0.post2", "legacy", emulated=False).status


def test_the_summary_names_failing_rows_and_an_empty_detail_leaves_no_bar(capsys: pytest.CaptureFixture) -> None:
    from sktune.cli.doctor_cmd import _print, counts_line

    report = records.DoctorReport("npu", False, (records.confirmed("a", "ok"), records.differs("b", "x"),
                                                 records.could_not("c", "y"), records.info("d", "CANN 8")), "/w")
    assert counts_line(report) == "1 confirmed, 1 differs (b), 1 could not check (c), 1 info (d)"
    assert [c["kind"] for c in report.to_json()["checks"]] == ["confirmed", "differs", "could_not_check", "info"]
    assert report.to_json()["workdir"] == "/w"
    _print(report, Path("/w"), None)
    lines = capsys.readouterr().out.splitlines()
    assert "b: differs: x" in lines and not any(line.endswith("|") or line.endswith("| ") for line in lines)


def test_superkernel_rows_in_reference_steps_differ() -> None:
    name = "sk_0_sk0_start_static_kernel_MatMulV2_1a2b_end_static_kernel_Mul_3c4d"
    row = judge_superkernel_rows(["sk0"], [{"name": name}], [], [name])
    assert row.kind == "differs" and "unfused reference's steps" in row.status
    assert judge_superkernel_rows(["sk0"], [{"name": name}], [], []).kind == "confirmed"


def test_the_tiny_model_uses_the_scope_names_the_search_gives() -> None:
    from sktune.doctor.tiny_model import capture_tiny

    tiny = capture_tiny("cpu")
    assert [s.name for s in tiny.placement] == ["sk0", "sk1"]
    assert [s.name for s in tiny.other_placement] == ["sk0", "sk1"]
