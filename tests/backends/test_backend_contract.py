"""The contract every backend keeps with the search: every plan the real search space
proposes (every anchor, every seed, 50 sampled plans) compiles and runs on that backend
without an option error.

Plans come from the path a user takes: the worker's description of the captured model,
``space_from_description``, ``starting_points`` and Optuna's sampler through
``SearchSpace.suggest``; nothing here is built by hand. (The npu backend once rejected
every plan the search produced while all its hand-built tests passed.)
"""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from sktune.plan import Plan
from sktune.worker.runner import RunnerConfig, TrialRunner
from sktune.tuning.space_setup import space_from_workload, starting_points
from sktune.verify import compare_outputs, flatten_outputs

ROOT = Path(__file__).resolve().parents[2]
N_SAMPLED = 50


def searched_plans(runner: TrialRunner, n_sampled: int = N_SAMPLED, seed: int = 0) -> dict[Plan, str]:
    """Every plan the search would try first, then ``n_sampled`` sampled ones, by origin."""
    workload = runner.describe()
    space = space_from_workload(workload)
    plans: dict[Plan, str] = {}
    for name, params in starting_points(space, workload):
        plans.setdefault(space.decode(params), name)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    for k in range(n_sampled):
        trial = study.ask()
        plans.setdefault(space.suggest(trial), f"sampled {k}")
        study.tell(trial, 1.0)
    return plans


def compile_all(runner: TrialRunner, plans: dict[Plan, str]) -> dict[str, int]:
    """Compile and run each plan once; any exception fails the test with the plan named."""
    counts = {"plans": len(plans), "bitwise": 0}
    for plan, origin in plans.items():
        try:
            out = flatten_outputs(runner.backend.compile(runner.graph, plan)(*runner.args[0]))
        except Exception as exc:  # noqa: BLE001 - report which plan broke the contract
            pytest.fail(f"{origin} plan failed on {runner.backend.name}: {type(exc).__name__}: {exc}\n{plan.dumps()}")
        counts["bitwise"] += not compare_outputs(runner.references[0], out)
    return counts


# Inductor compiles cost ~1-5 s each (cpp_wrapper ones more): ~2 min, so it runs with the slow
# tests (CI runs them); the default run covers the same path through `sktune run` (test_run_e2e).
@pytest.mark.slow
@pytest.mark.parametrize("n_sampled", [N_SAMPLED])
def test_inductor_compiles_every_searched_plan(n_sampled: int, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor-cache"))
    runner = TrialRunner(RunnerConfig(str(ROOT / "tests" / "models" / "tiny_norm.py"), backend="inductor",
                                      input_sets=1, probe_cache=str(tmp_path / "probe.json")))
    plans = searched_plans(runner, n_sampled)
    assert any(o == "fuse-all" for o in plans.values()) and any(o.startswith("sampled") for o in plans.values())
    assert all("fallback_ops" in p.option_dict for p in plans)
    counts = compile_all(runner, plans)
    assert counts["bitwise"] >= 1  # at least the unfused anchor


def test_npu_compiles_every_searched_plan(npu_emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the backend's profiles and CANN work paths land here
    runner = TrialRunner(RunnerConfig(str(ROOT / "studies" / "moe_block.py"), backend="npu", input_sets=1))
    plans = searched_plans(runner)
    origins = set(plans.values())
    assert {"no-scopes", "full-model", "full-model+dcci_after_kernel_end", "scope-per-layer",
            "scope-per-mlp", "no-scopes+speed-options"} <= origins, origins
    speed = next(p for p, o in plans.items() if o == "no-scopes+speed-options")
    assert speed.scopes == () and speed.option_dict["early_start"] == 1
    # moe_block's router topk runs on the AI CPU: the bypass is searched, and tried at once.
    assert speed.option_dict["aggressive_opt_strategies.task_breaker_bypass"] == 1
    # npu plans carry SuperKernel options only: Inductor's fallbacks never reach it.
    assert not any("fallback_ops" in p.option_dict for p in plans)
    assert any(p.option_dict["dcci_strategy"].startswith("disable:") for p in plans)
    counts = compile_all(runner, plans)
    assert counts["bitwise"] >= 1
