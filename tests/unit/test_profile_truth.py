"""Profiles that tell the truth (issue 24): a C++ wrapper's extern calls count as busy time;
a build whose regions recorded no kernel is partial, its unrecorded time is never gap; the
summary, the CLI and the report carry the mark; Kineto's USDT lines stay out of the output."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import optuna
import pytest
import torch

from sktune.backends import get_backend
from sktune.cli.summary_view import print_summary
from sktune.graph.capture import capture
from sktune.measure.profile import REGION_CALL, STEP, profile_steps, step_profile
from sktune.measure.raw_events import RawEvent
from sktune.report import data
from sktune.report.html import render
from sktune.plan import Plan, Scope
from sktune.tuning.summary import LEGACY_CPP_WRAPPER_REASON, summary
from tests.report_fixtures import _plan, _timing


class _Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = torch.nn.Linear(64, 128), torch.nn.Linear(128, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)) * 2 + 1).sum(-1)


@pytest.fixture(scope="module")
def cpp_wrapper_profiles() -> dict[bool, object]:
    """One region over the whole MLP with the C++ wrapper, profiled from a build with and
    without Inductor's kernel ranges (``profile_kernels``)."""
    torch.manual_seed(0)
    with torch.no_grad():
        graph = capture(_Mlp().eval(), [torch.randn(16, 64)])
        plan = Plan.make([Scope(0, len(graph.ops) - 1, "all")], {"cpp_wrapper": True})
        out = {}
        for kernels in (True, False):
            fn = get_backend("inductor", profile_kernels=kernels).compile(graph, plan)
            out[kernels] = profile_steps(lambda fn=fn: fn(*graph.flat_args), steps=5, warmup=2)
    return out


def test_a_cpp_wrappers_extern_calls_are_busy_time(cpp_wrapper_profiles: dict[bool, object]) -> None:
    profile = cpp_wrapper_profiles[True]
    names = {k["name"] for k in profile.top_kernels}
    assert {"aoti_torch_cpu_addmm_out"} <= names  # the GEMMs the C++ wrapper calls through C shims
    assert any("cpp_fused" in n for n in names)
    assert not any(n.startswith("aten::resolve_conj") for n in names)  # nested in the shim call: counted once
    gemms = sum(k["total_us"] for k in profile.top_kernels if k["name"].startswith("aoti_torch_"))
    # Both medians over the steps: each step's busy time holds its GEMMs, so the median step's
    # does too, however slow one step ran. Uncounted (the old rule), busy held only the few µs
    # of the cpp_fused kernels.
    assert profile.busy_us >= gemms > 0
    assert not profile.partial and profile.unrecorded_us == 0 and profile.partial_reason is None
    assert profile.busy_us + profile.gap_us == pytest.approx(profile.step_us, rel=1e-6)


def test_a_build_that_recorded_no_kernel_is_partial(cpp_wrapper_profiles: dict[bool, object]) -> None:
    profile = cpp_wrapper_profiles[False]
    assert profile.partial and "enable_kernel_profile" in profile.partial_reason
    assert profile.unrecorded_us > profile.busy_us  # the GEMMs and kernels ran unrecorded, inside the region call
    assert profile.busy_us + profile.gap_us + profile.unrecorded_us == pytest.approx(profile.step_us, rel=1e-6)
    as_json = profile.to_json()
    assert as_json["partial"] is True and as_json["unrecorded_us"] == profile.unrecorded_us


def test_eager_steps_are_never_partial() -> None:
    a = torch.randn(32, 32)
    profile = profile_steps(lambda: torch.relu(a) @ a, steps=3, warmup=1)
    assert not profile.partial and profile.unrecorded_us == 0


def test_unrecorded_time_is_what_a_silent_region_call_holds_beyond_its_recorded_ops() -> None:
    call = f"{REGION_CALL} abc ##"
    events = [RawEvent(STEP, 0, 100, 1), RawEvent("aten::mul", 5, 10, 1), RawEvent(call, 20, 80, 1),
              RawEvent("aten::resolve_conj", 30, 31, 1), RawEvent("aten::mean", 50, 60, 1)]
    profile = step_profile(events)
    assert (profile.busy_us, profile.unrecorded_us, profile.gap_us) == (16, 49, 35)
    kernel = RawEvent("graph_0_cpp_fused_add_0", 40, 45, 1)  # a build with kernel ranges: the call's rest is gap
    profile = step_profile(sorted([*events, kernel], key=lambda e: (e.start_us, -e.end_us)))
    assert not profile.partial and (profile.busy_us, profile.gap_us) == (21, 79)


def test_a_kernel_slowed_in_one_step_counts_its_median_step_not_its_mean() -> None:
    # Three steps of one GEMM call; in the second the machine held the thread for 1 ms.
    events = []
    for k, gemm_us in enumerate((10, 1000, 12)):
        start = k * 2000
        events += [RawEvent(STEP, start, start + gemm_us + 5, 1), RawEvent("aten::addmm", start + 1, start + 1 + gemm_us, 1)]
    profile = step_profile(events)
    assert profile.top_kernels == [{"name": "aten::addmm", "total_us": 12, "count": 1}]
    assert profile.busy_us >= profile.top_kernels[0]["total_us"]


def _study(profile_best: dict, cpp_wrapper: bool = True) -> optuna.Study:
    ops = [{"index": i, "name": f"n{i}", "target": t, "module": "", "module_type": "Net", "source": ""}
           for i, t in enumerate(["linear", "relu", "linear"])]
    study = optuna.create_study(direction="minimize")
    for key, value in {"model": "m.py", "backend": "inductor", "threads": 1, "input_sets": 3, "ops": ops,
                       "boundaries": [0, 1], "environment": {"backend": "inductor", "threads": "1"}}.items():
        study.set_user_attr(key, value)
    dist = {"block:0": optuna.distributions.CategoricalDistribution(["eager", "fuse"])}
    for anchor, scopes, ratio in (("unfused", [(None, 0, 2)], 1.0), ("fuse-all", [("sk0", 0, 2)], 0.5)):
        plan = _plan(scopes)
        if anchor == "fuse-all":
            plan["options"]["cpp_wrapper"] = cpp_wrapper
        study.add_trial(optuna.trial.create_trial(
            value=ratio, params={"block:0": "eager" if anchor == "unfused" else "fuse"}, distributions=dist,
            user_attrs={"plan": plan, "timing": _timing(ratio), "anchor": anchor, "mismatches": []},
            constraints={"bitwise": 0.0}))
    study.set_user_attr("profile_baseline", {"step_us": 900.0, "busy_us": 500.0, "gap_us": 400.0, "steps": 20,
                                             "top_kernels": [], "unrecorded_us": 0.0, "partial": False,
                                             "partial_reason": None})
    study.set_user_attr("profile_best", profile_best)
    study.set_user_attr("profile_best_trial", 1)
    return study


PARTIAL = {"step_us": 500.0, "busy_us": 40.0, "gap_us": 60.0, "steps": 20, "top_kernels": [],
           "unrecorded_us": 400.0, "partial": True, "partial_reason": "the compiled regions recorded no kernel"}


def test_summary_cli_and_report_carry_the_mark(capsys: pytest.CaptureFixture) -> None:
    study = _study(PARTIAL)
    out = summary(study)
    assert out["profile_partial"] == ["best"] and out["profile_best"]["unrecorded_us"] == 400.0
    print_summary(out)
    printed = capsys.readouterr().out
    assert "profile of the best is partial: 400.0 of 500.0 µs per step not recorded" in printed
    frame = data.time_breakdown(study)
    best = frame[frame["which"] == "best exact plan"].iloc[0]
    assert (best.gap_us, best.unrecorded_us, best.partial_reason) == (60.0, 400.0, PARTIAL["partial_reason"])
    assert frame[frame["which"] == "unfused baseline"]["partial_reason"].isna().all()
    page = render(study)
    assert "The profile of the best exact plan is partial" in page and "not recorded (kernels" in page


def test_a_whole_profile_is_not_marked() -> None:
    study = _study({**PARTIAL, "gap_us": 460.0, "unrecorded_us": 0.0, "partial": False, "partial_reason": None})
    assert summary(study)["profile_partial"] == []
    assert "is partial" not in render(study)


def test_an_older_cpp_wrapper_profile_shows_its_gap_as_not_recorded() -> None:
    legacy = {"step_us": 7583.0, "busy_us": 403.0, "gap_us": 7180.0, "steps": 20, "top_kernels": []}
    out = summary(_study(legacy))
    assert out["profile_partial"] == ["best"] and out["profile_best"]["partial_reason"] == LEGACY_CPP_WRAPPER_REASON
    assert (out["profile_best"]["gap_us"], out["profile_best"]["unrecorded_us"]) == (0.0, 7180.0)
    assert summary(_study(legacy, cpp_wrapper=False))["profile_partial"] == []  # a Python wrapper's were counted


def test_profiling_prints_no_usdt_line() -> None:
    """Kineto writes USDT lines to fd 2 on every profiler start and stop; other writes there pass."""
    script = textwrap.dedent("""
        import os, torch
        from sktune.measure.profile import profile_steps
        from sktune.measure.raw_events import recording
        with recording():
            os.write(2, b"kept line\\n")
        print(profile_steps(lambda: torch.ones(4) + 1, steps=2, warmup=1).steps)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "2"
    assert "USDT" not in result.stderr + result.stdout and "kept line" in result.stderr
