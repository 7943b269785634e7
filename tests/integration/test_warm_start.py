"""``--warm-start``: an earlier study's best exact plans, mapped onto the new graph, run first;
or a refusal with the reason. On the emulated Ascend (fast compiles); the mapping is
backend-neutral."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from tests.cli.test_cli import sktune as cli
from tests.integration.test_npu_e2e import emulated_env

MODELS = Path(__file__).resolve().parent.parent / "models"

def run(tmp_path: Path, model: str, study: str, *extra: str):
    return cli("run", str(MODELS / model), "--backend", "npu", "--trials", "3", "--study", study,
               "--storage", f"sqlite:///{tmp_path}/s.db", *extra, cwd=tmp_path, env=emulated_env())


@pytest.fixture(scope="module")
def earlier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("warm")
    result = run(root, "stack.py", "earlier")
    assert result.returncode == 0, result.stderr[-3000:]
    return root


@pytest.mark.slow  # ~40 s (three runs); tests/unit/test_warm_start.py covers the mapping fast; CI runs it
def test_a_deeper_model_with_the_same_layer_starts_from_the_earlier_best_plans(earlier: Path) -> None:
    result = run(earlier, "stack_deeper.py", "deeper", "--warm-start", "earlier")
    assert result.returncode == 0, result.stderr[-3000:]
    storage = f"sqlite:///{earlier}/s.db"
    old = optuna.load_study(study_name="earlier", storage=storage)
    new = optuna.load_study(study_name="deeper", storage=storage)
    noted = new.user_attrs["warm_start"]
    assert noted and all("re-stamped over 3 layers" in w["mapping"] for w in noted)
    first = new.trials[0]
    assert first.user_attrs["anchor"] == noted[0]["anchor"] == f"warm:earlier#{noted[0]['trial']}"
    earlier_params = old.trials[noted[0]["trial"]].params
    # The unit pattern, stamped over 3 layers; what only the new space asks keeps the earlier plan.
    assert {k: v for k, v in first.params.items() if k in earlier_params} == earlier_params
    assert all(k.endswith(".own") and v is False for k, v in first.params.items() if k not in earlier_params)
    assert first.state == optuna.trial.TrialState.COMPLETE  # verified and timed like any trial
    assert f"warm start: trial #{noted[0]['trial']} of study 'earlier' (changed model" in result.stdout
    # Resumed with the same --warm-start (as workers started together are): each plan noted once.
    again = run(earlier, "stack_deeper.py", "deeper", "--warm-start", "earlier", "--trials", "1")
    assert again.returncode == 0, again.stderr[-3000:]
    assert optuna.load_study(study_name="deeper", storage=storage).user_attrs["warm_start"] == noted


@pytest.mark.slow  # ~10 s each (a worker start); tests/unit/test_warm_start.py covers every refusal fast
@pytest.mark.parametrize(("model", "warm", "message"), [
    ("tiny_norm.py", "earlier", "tuned another graph"),
    ("stack.py", "nope", "no study named 'nope'"),
    ("stack.py", "same", "that is this study"),
])
def test_warm_starts_that_cannot_map_are_refused_with_the_reason(earlier: Path, model: str, warm: str,
                                                                 message: str) -> None:
    result = run(earlier, model, "same", "--warm-start", warm)
    assert result.returncode == 1 and message in result.stderr, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    if warm != "earlier":  # checked before the study is created and a worker starts, which it does not list
        assert "starting worker" not in result.stderr
        assert "'same'" not in result.stderr.split("studies there:")[-1]
