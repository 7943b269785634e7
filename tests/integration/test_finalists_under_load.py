"""Never slower than unfused, by construction, while other work shares the cores: a
subprocess spins on a core through a small ``sktune run`` on a model where fusion does not
pay (tests/models/fusion_loses.py). The finalists' round times the unfused plan too, and
the result never names a fused plan whose re-measured interval is not wholly below 1.0
(tuning/finalists.py); "keep unfused" is speedup 1.0 and exports the unfused plan."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from tests.cli.test_cli import sktune

SPIN = "while True: pass"


@pytest.mark.slow  # ~37 s with a core kept busy; CI's slow run covers it
def test_a_loaded_run_never_names_a_fused_plan_not_measurably_faster(test_models: Path, tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path}/load.db"
    spinner = subprocess.Popen([sys.executable, "-c", SPIN])  # one core busy for the whole run
    try:
        result = sktune("run", str(test_models / "fusion_loses.py"), "--backend", "inductor", "--effort", "quick",
                        "--trials", "3", "--no-probe", "--storage", storage, "--study", "load",
                        "--summary-json", str(tmp_path / "s.json"), cwd=tmp_path, timeout=120)
        exported = sktune("export", "--study", "load", "--storage", storage, "--format", "json", cwd=tmp_path)
    finally:
        spinner.kill()
        spinner.wait()
    assert spinner.returncode is not None and result.returncode == 0, result.stderr[-3000:]
    data = json.loads((tmp_path / "s.json").read_text())
    study = optuna.load_study(study_name="load", storage=storage)
    unfused = study.user_attrs["confirm_unfused"]  # the unfused plan ran in the finalists' round
    assert study.trials[unfused["trial"]].user_attrs["anchor"] == "unfused"
    # It comes after the starting points that can win, so the 3 trials ended first: the loop
    # ran it then (loop.run_unfused_if_missing).
    assert unfused["trial"] >= 3
    best = next(f for f in data["finalists"] + [unfused] if f["trial"] == data["best_trial"])
    print(f"\nunder load: best #{data['best_trial']} fuses nothing={data['best_fuses_nothing']}, "
          f"speedup {data['speedup']}, re-measured ratio {best['timing']['ratio']:.3f} "
          f"{[round(x, 3) for x in best['timing']['ratio_ci']]}; noise floor {data['noise_floor']}; "
          f"rejected {data['rejected_best']}; reason: {data['keep_unfused_reason']}")
    assert data["timing_source"] == "re-measured"
    if data["best_fuses_nothing"]:  # keep unfused: exactly 1.0, said and exported as such
        assert data["speedup"] == 1.0 and data["speedup_ci"] is None and data["keep_unfused_reason"]
        assert "keep the model unfused" in " ".join(result.stdout.split())
        provenance = json.loads(exported.stdout)["provenance"]
        assert provenance["keep_unfused"] is True and provenance["groups"] == []
    else:  # a fused plan is named only when its re-measured interval lies wholly below 1.0
        assert best["timing"]["ratio_ci"][1] < 1.0 and data["significant"] is True
    rejected = data["rejected_best"]
    assert rejected is None or rejected["ratio_ci"][1] >= 1.0
