"""``sktune doctor``: the first-run checklist, run through the CLI on the emulated Ascend
(tests/npu_emulator), plus its judging on fake observations. Under the emulator every
guess holds by construction; what is checked is that each check runs and reports."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from sktune.doctor import records
from sktune.doctor.cache_checks import Compile, judge_cache
from sktune.doctor.meta_checks import judge_effective_options, judge_fail_reason_log, judge_sk_meta_location
from sktune.doctor.profile_checks import judge_profile_columns, judge_superkernel_rows
from sktune.doctor.runner import CHECK_NAMES, Check, run_checks
from sktune.measure.ascend_parsers import LEVEL0_BASE
from tests.cli.test_cli import sktune
from tests.emulated_npu import EMULATOR_PATH

ROOT = Path(__file__).resolve().parents[2]
SK_ROW = "sk_0_doctor_norm_start_static_kernel_MatMulV2_1a2b_end_static_kernel_Mul_3c4d"


def _env(tmp: Path, emulated: bool = True) -> dict[str, str]:
    paths = [EMULATOR_PATH, str(ROOT)] if emulated else [str(ROOT)]
    # TMPDIR: the doctor's fresh working directory lands in the test's; no real log dir is touched.
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "TMPDIR": str(tmp),
            "ASCEND_PROCESS_LOG_PATH": str(tmp / "ascend-log")}


@pytest.fixture(scope="module")
def doctor_json(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("doctor")
    started = time.monotonic()
    result = sktune("doctor", "--backend", "npu", "--json", "-o", str(tmp / "doctor.json"), cwd=tmp,
                    env=_env(tmp), timeout=180)
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    data = json.loads(result.stdout)
    assert json.loads((tmp / "doctor.json").read_text()) == data
    return {"data": data, "elapsed": elapsed, "cwd": tmp}


def test_every_check_runs_and_is_confirmed_under_the_emulator(doctor_json: dict) -> None:
    data = doctor_json["data"]
    assert set(data) == {"device", "emulated", "workdir", "checks"}
    assert Path(data["workdir"]).is_absolute() and Path(data["workdir"]).is_dir()
    assert data["device"] == "npu-emulator" and data["emulated"] is True
    assert [c["name"] for c in data["checks"]] == list(CHECK_NAMES)
    # What the emulator cannot stand for (a CANN toolkit, the torch a real torch-npu pins) is
    # "could not check", never "confirmed".
    unchecked = {"versions": "the torch it pins is not checked", "cann_version": "no CANN toolkit is read"}
    for check in data["checks"]:
        assert set(check) == {"name", "status", "detail", "kind"}
        assert check["kind"] == records.JSON_KINDS[records.CheckResult("x", check["status"]).kind], check
        assert records.is_valid_status(check["status"]), check
        if check["name"] in unchecked:
            assert check["status"].startswith("could not check: emulated") and unchecked[check["name"]] in \
                check["status"], check
        else:
            assert check["status"] == "confirmed", check
        assert check["detail"].startswith("(emulated)"), check
    assert doctor_json["elapsed"] < 60  # aim: well under 30 s
    assert not (doctor_json["cwd"] / ".sktune").exists()  # the run's files stay in its own directory


def test_the_table_names_every_check(tmp_path: Path) -> None:
    result = sktune("doctor", cwd=tmp_path, env=_env(tmp_path), timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "EMULATED" in result.stdout and "12 confirmed" in result.stdout
    # Piped (a file, an issue): one whole line a check, not a table folded at 80 columns.
    lines = result.stdout.splitlines()
    assert [line.split(":", 1)[0] for line in lines[1:len(CHECK_NAMES) + 1]] == list(CHECK_NAMES)
    assert any(line.startswith("marker_pairing: confirmed | (emulated) paired markers") for line in lines)
    assert any(line.startswith("12 confirmed, 0 differs, 2 could not check (versions, cann_version)")
               and "files of this run: " in line for line in lines)


def test_an_old_key_set_release_still_runs_every_check_it_can(tmp_path: Path) -> None:
    """torch-npu 2.10.0.post2 has no dcci keys: doctor's plans must not ask for them, or every
    device check would end in an option error instead of an answer (and a refused option
    would pass for npugraph_ex refusing unpaired markers)."""
    env = {**_env(tmp_path), "TORCH_NPU_EMULATOR_VERSION": "2.10.0.post2"}
    result = sktune("doctor", "--json", cwd=tmp_path, env=env, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert not any("NpuOptionError" in c["status"] + c["detail"] for c in checks.values()), checks
    for name in ("options_accepted", "sk_meta_location", "profile_columns", "superkernel_rows"):
        assert checks[name]["status"] == "confirmed", checks[name]
    # Without dcci keys the emulated gather reads stale scalars: the main run's wrong result is
    # reported in a row that always runs, not lost behind the cache rows' "could not check".
    assert checks["marker_pairing"]["kind"] == "differs" and "not bitwise equal" in checks["marker_pairing"]["status"]
    assert "refused" in checks["marker_pairing"]["detail"]
    assert checks["versions"]["status"].startswith("differs: ") and "old SuperKernel key set" in checks["versions"]["status"]
    # The old release's wrong outputs (no dcci keys: the emulated gather reads stale data) differ in
    # every row that compiled; the cache rows give the cause of having no miss to time beside it.
    for name in ("static_cache_option_sets", "static_cache_scope_placements"):
        assert checks[name]["status"].startswith("differs: outputs not bitwise equal"), checks[name]
        assert "by the op hash alone" in checks[name]["detail"]


@pytest.mark.parametrize(("emulated", "args", "message"), [
    (True, ["--backend", "inductor"], "the inductor backend has no assumptions"),
    (True, ["--backend", "tpu"], "unknown backend"),
    (False, [], "sktune doctor checks an Ascend host, and torch-npu cannot be used here"),
    # Checked before the checks, which can take many minutes on a device.
    (True, ["-o", "no/such/dir/doctor.json"], "-o: directory"),
])
def test_cannot_run_is_one_message(tmp_path: Path, emulated: bool, args: list[str], message: str) -> None:
    result = sktune("doctor", *args, cwd=tmp_path, env=_env(tmp_path, emulated), timeout=120)
    assert result.returncode == 1, result.stdout
    assert message in result.stderr and "Traceback" not in result.stderr
    assert "--backend inductor" not in result.stderr  # run's advice, which doctor refuses


# ----------------------------------------------------------------- judging fake observations
def test_a_different_header_differs_and_shows_both() -> None:
    seen = judge_profile_columns(("Step Id", *LEVEL0_BASE[:-1], "Block Dim"))
    assert seen.kind == "differs" and "Block Dim" in seen.status and "Block Num" in seen.detail
    assert judge_profile_columns(("Step Id", *LEVEL0_BASE, "Mix Block Num")).kind == "confirmed"


def test_superkernel_rows_differ_when_a_scope_is_missing_or_the_form_is_old() -> None:
    missing = judge_superkernel_rows(["doctor_norm", "doctor_tail"], [{"name": SK_ROW}])
    assert missing.kind == "differs" and "doctor_tail" in missing.status
    old = judge_superkernel_rows(["doctor_norm"], [{"name": "sk_doctor_norm_start_MatMulV2_end_Mul_0"}])
    assert old.kind == "differs" and "sk_<n>_<scope>" in old.status
    assert judge_superkernel_rows(["doctor_norm"], [{"name": SK_ROW}]).kind == "confirmed"
    assert judge_superkernel_rows(["doctor_norm"], []).kind == "differs"


def test_a_cache_miss_where_a_hit_was_expected_differs() -> None:
    first = Compile("main", 240.0, False, True)
    missed = judge_cache("static_cache_option_sets", first, [Compile("main_again", 230.0, True, True)])
    assert missed.kind == "differs" and "main_again was a miss, expected a hit" in missed.status
    inexact = judge_cache("static_cache_scope_placements", first, [Compile("other_placement", 3.0, True, False)])
    assert inexact.kind == "differs" and "other_placement" in inexact.status
    assert judge_cache("x", first, [Compile("again", 3.0, True, True)]).kind == "confirmed"
    assert judge_cache("x", Compile("main", 0.0, False, True), []).kind == "could not check"


def test_meta_findings_that_differ(tmp_path: Path) -> None:
    absent = judge_effective_options("absent", None, "no sk_options.json under x/sk_meta", {"a": 1}, None)
    assert absent.kind == "differs" and "effective_options_checked: false" in absent.detail
    log = tmp_path / "sk_fusion_fail_reasons.log"
    unknown = judge_fail_reason_log([log], [("NEW_CANN_REASON", "Node [..] reason: NEW_CANN_REASON, x")])
    assert unknown.kind == "differs" and "reason: NEW_CANN_REASON, x" in unknown.status
    assert judge_fail_reason_log([log], [("DEFAULT_NODE", "reason: DEFAULT_NODE")]).kind == "confirmed"
    assert judge_fail_reason_log([], []).kind == "differs"
    stray = judge_sk_meta_location(tmp_path / "work", [], [tmp_path / "sk_meta" / "sk_fusion_fail_reasons.log"], [],
                                   "not reached")
    assert stray.kind == "differs" and "working directory instead" in stray.status


# ----------------------------------------------------------------- isolation and bounds
def _raises(session: object) -> records.CheckResult:
    raise ValueError("boom")


def _hangs(session: object) -> records.CheckResult:
    time.sleep(30)
    raise AssertionError("unreachable in the test")


def _fine(session: object) -> records.CheckResult:
    return records.confirmed("fine", "ok")


def test_an_exception_is_its_rows_could_not_check_and_a_hang_is_bounded() -> None:
    checks = [Check("raises", _raises), Check("fine", _fine), Check("hangs", _hangs), Check("after", _fine),
              Check("host_only", _fine, device=False)]
    started = time.monotonic()
    rows = {r.name: r for r in run_checks(object(), checks, timeout_s=0.5)}  # type: ignore[arg-type]
    assert time.monotonic() - started < 5
    assert rows["raises"].status == "could not check: ValueError: boom"
    assert rows["fine"].status == "confirmed"
    assert rows["hangs"].status.startswith("could not check: timed out after 0.5 s")
    assert "--timeout" in rows["hangs"].status
    assert rows["after"].status.startswith("could not check: skipped: hangs did not finish")
    assert rows["host_only"].status == "confirmed"
    assert all(records.is_valid_status(r.status) for r in rows.values())


def test_cann_version_is_read_where_torch_npu_reads_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sktune.doctor import env_checks

    info = tmp_path / "latest" / "aarch64-linux" / "ascend_toolkit_install.info"
    info.parent.mkdir(parents=True)
    info.write_text("package_name=Ascend-cann-toolkit\nversion=8.2.RC1\narch=aarch64\n")
    monkeypatch.setenv("ASCEND_HOME_PATH", str(tmp_path / "latest"))
    monkeypatch.delenv("ASCEND_TOOLKIT_HOME", raising=False)
    monkeypatch.setattr(env_checks, "DEFAULT_TOOLKIT", tmp_path / "absent")
    found = env_checks.judge_cann_version(env_checks.cann_version_files())
    # Shown, not compared with anything: never "confirmed".
    assert found.kind == "info" and found.to_json()["kind"] == "info" and "CANN 8.2.RC1" in found.detail
    monkeypatch.setenv("ASCEND_HOME_PATH", str(tmp_path / "absent"))
    assert env_checks.judge_cann_version(env_checks.cann_version_files()).kind == "could not check"


def test_a_torch_torch_npu_does_not_pin_differs() -> None:
    from sktune.doctor.env_checks import judge_versions

    assert judge_versions("2.13.0+cpu", "2.14.0", "full", emulated=False).kind == "differs"
    assert judge_versions("2.14.0", "2.14.0.post1", "full", emulated=False).kind == "confirmed"
    assert judge_versions("2.10.0", "2.10.0.post2", "legacy", emulated=False).kind == "differs"


def test_step_trace_free_is_judged_against_both_readings_of_the_idle() -> None:
    """Two steps of two 10 µs kernels 5 µs apart, the next step 50 µs after: torch-npu's
    parser counts those 50 µs in the first step's Free."""
    import pandas as pd

    from sktune.doctor.profile_checks import judge_step_trace_free

    base = 1_736_413_971_000_000_000
    starts = [base, base + 15_000, base + 75_000, base + 90_000]  # ns
    kernels = pd.DataFrame({"step": [1, 1, 2, 2], "start_ns": starts, "duration_us": [10.0] * 4,
                            "is_duplicate": [False] * 4})

    def trace(*free: float) -> pd.DataFrame:
        return pd.DataFrame({"step": [1, 2], "free_us": list(free)})

    seen = judge_step_trace_free(kernels, trace(55.0, 5.0))
    assert seen.kind == "confirmed" and "up to the next step's first kernel" in seen.detail
    own = judge_step_trace_free(kernels, trace(5.0, 5.0))
    assert own.kind == "differs" and "between each step's own kernels only" in own.status
    assert judge_step_trace_free(kernels, trace(30.0, 5.0)).kind == "differs"


def test_an_unusable_device_is_said_once_per_row_not_as_refusals(tmp_path: Path) -> None:
    """Tensors sent to a device torch cannot use: the device rows give that cause, not
    "a graph with paired sktune markers was refused"."""
    env = {**_env(tmp_path), "SKTUNE_NPU_DEVICE": "npu"}
    result = sktune("doctor", "--json", cwd=tmp_path, env=env, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    for name in ("marker_pairing", "options_accepted", "superkernel_rows", "hang_trace_path"):
        assert checks[name]["status"].startswith("could not check: the device is not usable (the tiny model does "
                                                 "not run on 'npu'"), checks[name]
    assert checks["versions"]["status"].startswith("could not check: emulated"), checks["versions"]
