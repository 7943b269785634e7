"""studies/ascend_moe.py (torch_npu's fused ops) through the npu backend on the emulated Ascend.

Plans come from the real search space (anchors, seeds, sampled plans: ``searched_plans``,
as the backend contract test builds them); each compiles, runs and is verified against
the unfused reference. The emulator corrupts a gather fused without a data-cache flush
(stale scalars, see ``torch_npu.__doc__``), so a plan is expected bitwise exactly when
no SuperKernel holds the study's ``index_select`` unflushed. Every number is emulated.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sktune.backends.npu_option_space import only_types
from sktune.graph.grouping import regions
from sktune.plan import Plan
from sktune.worker.runner import RunnerConfig, TrialRunner
from sktune.verify import compare_outputs, flatten_outputs
from tests.backends.test_backend_contract import searched_plans
from tests.integration.test_npu_e2e import sktune

ROOT = Path(__file__).resolve().parents[2]
MOE = ROOT / "studies" / "ascend_moe.py"


def _unflushed_gather(plan: Plan, targets: list[str]) -> bool:
    """A region holding an index_select under a dcci choice that leaves GatherV2 unflushed."""
    strategy = plan.option_dict.get("dcci_strategy", "none")
    only = only_types(strategy)  # only:T1+T2 flushes around those types alone
    if strategy not in ("none", "disable:GatherV2") and (only is None or "GatherV2" in only):
        return False
    return any("index_select" in targets[first:last + 1] for first, last in regions(len(targets), plan.scopes))


@pytest.mark.slow  # 9-11 s on a 2.8 GHz Xeon (every searched plan of the Ascend studies, emulated); CI runs it (.ci/run)
def test_searched_plans_compile_and_verify(npu_emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the backend's profiles and CANN work paths land here
    runner = TrialRunner(RunnerConfig(str(MOE), backend="npu", input_sets=1))
    targets = [op.target for op in runner.graph.ops]
    assert "npu.npu_grouped_matmul" in targets
    plans = searched_plans(runner, n_sampled=8)
    assert {"no-scopes", "full-model", "full-model+dcci_after_kernel_end"} <= set(plans.values())
    exact = 0
    for plan, origin in plans.items():
        out = flatten_outputs(runner.backend.compile(runner.graph, plan)(*runner.args[0]))
        mismatches = len(compare_outputs(runner.references[0], out))
        assert (mismatches == 0) != _unflushed_gather(plan, targets), f"{origin}: {mismatches} mismatches\n{plan.dumps()}"
        exact += mismatches == 0
    assert exact >= 2  # at least the unfused anchor and the flushed full model


@pytest.mark.slow  # ~28 s; test_npu_e2e runs the npu CLI path in the default suite
def test_run_cli_end_to_end(tmp_path: Path) -> None:
    result = sktune("run", str(MOE), "--backend", "npu", "--effort", "quick", "--trials", "8", "--study", "moe",
                    "--storage", f"sqlite:///{tmp_path}/npu.db", "--summary-json", str(tmp_path / "s.json"),
                    cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["backend"] == "npu" and summary["emulated"] is True and summary["verified_bitwise"] is True
