"""A worker measures the op profile and probe answers only when told to: a resumed run and
a worker started with the study's creator take the study's (``creator.measures_space_inputs``);
one whose creator is gone restarts its worker to measure them. The runner in this process,
then a real worker process."""

from __future__ import annotations

from pathlib import Path

import pytest

from sktune.pipe.protocol import RunnerConfig
from sktune.tuning.supervisor import SupervisedWorker, runner_config
from sktune.worker.runner import TrialRunner


TWO_OPS = (  # two op types: the probe compiles little
    "import torch\n\nclass M(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x) * 2\n\n"
    "def build_model():\n    return M()\n\n"
    "def example_inputs(seed=0):\n    return (torch.randn(4, 8, generator=torch.Generator().manual_seed(seed)),)\n")


def two_ops(tmp_path: Path) -> Path:
    model = tmp_path / "two_ops.py"
    model.write_text(TWO_OPS)
    return model


def test_a_runner_told_the_study_holds_its_space_inputs_measures_none(tmp_path: Path) -> None:
    probe_cache = tmp_path / "probe.json"
    runner = TrialRunner(RunnerConfig(model_path=str(two_ops(tmp_path)), input_sets=2, probe_cache=str(probe_cache),
                                      space_inputs=False))
    described = runner.describe()
    assert described.op_profile is None and described.exactness == {} and described.exactness_by_shape == {}
    assert "op_profile" not in (described.startup_s or {}) and not probe_cache.exists()  # no probe compiled
    assert described.kernelless and described.ops  # what the space needs besides them is there


@pytest.mark.slow  # ~9 s: two worker processes; the runner's part is above, fast; CI runs it (.ci/run)
def test_a_worker_told_the_study_holds_its_space_inputs_measures_none_until_restarted_to(tmp_path: Path) -> None:
    model, probe_cache = two_ops(tmp_path), tmp_path / "probe.json"
    config = runner_config(model_path=str(model), input_sets=2, probe_cache=str(probe_cache), space_inputs=False)
    with SupervisedWorker(config, None) as worker:
        skipped = worker.start()  # the setting crosses the process boundary
        assert skipped.op_profile is None and skipped.exactness == {} and not probe_cache.exists()
        # (Its probe is the runner's as before: left out here, it compiles for seconds.)
        measured = worker.restart_with(space_inputs=True, probe_cache=None)
        assert worker.config["space_inputs"] is True  # a later restart (after a crash) measures too
    assert measured.op_profile is not None and len(measured.op_profile.span_us) == len(measured.ops)
    assert "op_profile" in (measured.startup_s or {})
    assert (measured.ops, measured.kernelless) == (skipped.ops, skipped.kernelless)
