"""Verification at verify-only shapes on the emulated Ascend: what it stands for in static
compiles. On a host the worker's wall time holds them; the emulator states them, and the
study's estimated host time adds them (``host_time``). Every number is emulated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sktune.pipe.verify_shapes import VerifyRequest, VerifyResult
from sktune.plan import Plan, Scope
from sktune.tuning.supervisor import SupervisedWorker
from sktune.worker.runner import RunnerConfig, TrialRunner

MODEL = Path(__file__).resolve().parents[1] / "models" / "verify_widths.py"
FUSE_ALL = Plan.make([Scope(0, 4, "all")], {})


def test_a_verification_states_the_static_compiles_of_its_references_and_its_plan(npu_emulator: Any) -> None:
    runner = TrialRunner(RunnerConfig(str(MODEL), backend="npu", input_sets=1, n_batches=2))
    startup = runner.backend.startup_static_compile()
    first = runner.verify(VerifyRequest(FUSE_ALL, "w32"))
    again = runner.verify(VerifyRequest(FUSE_ALL, "w32"))
    assert first.static_compile is not None and again.static_compile is not None
    # The first holds the shape's references (taken on first use) and the plan's new kernels;
    # the same plan again finds every kernel in the static-kernel cache.
    references = runner.backend.startup_static_compile()["seconds"] - startup["seconds"]
    assert references > 0 and first.static_compile["seconds"] > references
    assert again.static_compile["seconds"] == 0.0 < again.static_compile["uncached_s"]
    assert first.static_compile["emulated"] and VerifyResult.from_json(first.to_json()) == first


def test_the_supervisor_keeps_the_run_s_verification_compiles(monkeypatch: Any) -> None:
    """Kept for the run's record (``host_time.record_run``): no trial holds them."""
    worker = SupervisedWorker({}, None)
    answers = iter([{"shape": "w32", "mismatches": 0, "static_compile": {"seconds": 3.0, "uncached_s": 4.0,
                                                                           "emulated": True}},
                    {"shape": "w37", "mismatches": 1}])
    monkeypatch.setattr(worker, "request", lambda *args: next(answers))
    worker.verify(VerifyRequest(FUSE_ALL, "w32"), 1.0)
    worker.verify(VerifyRequest(FUSE_ALL, "w37"), 1.0)
    assert worker.verify_static == [{"seconds": 3.0, "uncached_s": 4.0, "emulated": True}]
