"""A best exact plan that fuses nothing is the unfused graph itself: the summary, the CLI,
the report and the export say "keep the model unfused", with speedup exactly 1.0 and no
interval, whatever noise its trial measured (hand-made study, no compile)."""

from __future__ import annotations

import optuna
import pytest

from sktune.cli.run_cmd import _print_summary
from sktune.report import data
from sktune.report.export import export_python
from sktune.report.html import render
from sktune.tuning.summary import summary
from tests.report_fixtures import _plan, _timing

OPS = [{"index": i, "name": f"n{i}", "target": t, "module": "", "module_type": "Net", "source": ""}
       for i, t in enumerate(["pow", "mean", "mul", "add"])]


def study_whose_best_fuses_nothing(noise_ratio: float) -> optuna.Study:
    study = optuna.create_study(direction="minimize")
    for key, value in {"model": "m.py", "backend": "inductor", "threads": 1, "input_sets": 3, "ops": OPS,
                       "boundaries": [0, 1, 2], "environment": {"backend": "inductor", "threads": "1"}}.items():
        study.set_user_attr(key, value)
    dist = {"block:0": optuna.distributions.CategoricalDistribution(["eager", "fuse"])}
    for anchor, scopes, ratio, bitwise in (("unfused", [(None, 0, 3)], noise_ratio, True),
                                           ("fuse-all", [("sk0", 0, 3)], 0.6, False)):
        study.add_trial(optuna.trial.create_trial(
            value=ratio, params={"block:0": "eager" if bitwise else "fuse"}, distributions=dist,
            user_attrs={"plan": _plan(scopes), "timing": _timing(ratio), "anchor": anchor, "mismatches": []},
            constraints={"bitwise": 0.0 if bitwise else 2.0}))
    return study


@pytest.mark.parametrize("noise_ratio", [0.96, 1.04])  # measured either side of 1 under load
def test_a_best_that_fuses_nothing_is_exactly_one_with_no_interval(noise_ratio: float,
                                                                   capsys: pytest.CaptureFixture) -> None:
    study = study_whose_best_fuses_nothing(noise_ratio)
    out = summary(study)
    assert out["best_fuses_nothing"] is True and out["best_trial"] == 0
    assert out["speedup"] == 1.0 and out["speedup_ci"] is None and out["search_speedup"] == 1.0
    assert out["best_s"] == out["baseline_s"] and out["significant"] is False
    assert data.verdict(out).startswith("Keep the model unfused")
    assert data.comparison(out)["ratio"].tolist()[-1] == 1.0
    assert "keep the model unfused" in render(study).lower()
    assert "keep it unfused" in export_python(study)
    _print_summary(out)
    printed = capsys.readouterr().out
    assert "1.00× (unfused)" in printed and "keep the model unfused" in printed
