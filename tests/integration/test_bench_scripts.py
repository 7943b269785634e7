"""The benchmark scripts as a developer runs them: each usage line runs, and a mistake (a
missing file, a typo in a plan or an option) ends as one line and exit code 1, never as a
traceback or minutes into the run. The figures themselves are not asserted (benchmarks
print them; docs/measured.md records them)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from sktune.benchlib.script import STUDIES, existing_file, run, study_file
from sktune.capabilities import Capabilities, OptionSpec
from sktune.errors import PlanError, SktuneError

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"


def _script(*args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def _module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_the_scale_usage_line_runs() -> None:
    # It called build_space with the arguments of an older signature and always crashed.
    out = _script(str(BENCH / "search_efficiency.py"), "scale", "studies/decoder_stack.py", "--layers", "1")
    assert out.returncode == 0, out.stderr[-2000:]
    assert re.search(r"^1 layers, \d+ ops: capture .* structure parameters", out.stdout, re.M), out.stdout


@pytest.mark.parametrize("args, says", [
    (("call_overhead.py", "no_such_model.py"), "error: model file not found: no_such_model.py"),
    (("region_shapes.py", "split_stages", "0:x"), "a plan is FIRST:LAST op spans"),
    (("shared_batch_compile.py", "decoder_block"), "defines no input_shapes()"),
    (("search_efficiency.py", "measure", "studies/no_such.py", "-o", "x.json"), "model file not found"),
    (("search_efficiency.py", "measure", "studies/quant_block.py", "-o", "x.json", "--option", "eager_ordr"),
     "--option eager_ordr: not an option of the inductor backend"),
    (("exact_plans.py", "studies/decoder_serving.py", "--shape", "bs3"), "--shape: bs3 not among the shapes of"),
])
def test_a_mistake_is_one_line_and_exit_code_1(args: tuple[str, ...], says: str) -> None:
    out = _script(str(BENCH / args[0]), *args[1:])
    assert out.returncode == 1 and says in out.stderr, out.stderr[-2000:]
    assert "Traceback" not in out.stderr and "heap:" not in out.stdout  # refused before any work


def test_search_origins_reads_a_mistyped_storage_without_creating_it(tmp_path: Path) -> None:
    missing = tmp_path / "typo.db"
    out = _script(str(BENCH / "search_origins.py"), f"sqlite:///{missing}")
    assert out.returncode == 1 and "error:" in out.stderr and "Traceback" not in out.stderr
    assert not missing.exists()  # Optuna's study listing created an empty database there


def test_live_summary_line_without_fuse_all_or_gain() -> None:
    # A study too short to reach fuse-all (the last starting point), or one whose fuse-all is
    # slower than unfused (no gain to keep), crashed the live benchmark at its last line.
    best_line = _module("search_efficiency")._best_line
    data = {"best_trial": 3, "speedup": 1.5, "speedup_ci": [1.2, 1.8], "best_fuses_nothing": False,
            "fuse_all": None, "gain_kept": None}
    assert best_line(data) == "trial #3, 1.50× [1.20, 1.80] vs unfused; no fuse-all figure (it did not run, or failed)"
    data["fuse_all"] = {"ratio": 2.0, "bitwise": False}
    assert best_line(data).endswith("fuse-all 0.50× (not bitwise)")
    data.update(fuse_all={"ratio": 0.5, "bitwise": False}, gain_kept=0.8)
    assert best_line(data).endswith("fuse-all 2.00× (not bitwise); gain kept 80%")
    data.update(best_fuses_nothing=True, speedup=1.0, speedup_ci=None)
    assert "1.00× (fuses nothing: keep the model unfused) vs unfused" in best_line(data)
    assert best_line({"best_trial": None}) == "no exact plan"


def test_a_misspelled_option_is_refused_with_the_known_ones() -> None:
    caps = Capabilities(options=(OptionSpec("eager_order", (False, True), False), OptionSpec("max_fusion_size", (8, 64), 64)))
    assert [o.name for o in caps.narrowed({"eager_order"}).options] == ["eager_order"]
    with pytest.raises(PlanError, match="eager_ordr not in this graph's option space.*: eager_order, max_fusion_size"):
        caps.narrowed({"eager_ordr"})


def test_script_edge(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def broken() -> None:
        raise SktuneError("the model file is broken")

    with pytest.raises(SystemExit) as stopped:
        run(broken)
    assert stopped.value.code == 1 and capsys.readouterr().err == "error: the model file is broken\n"
    assert study_file("split_stages") == STUDIES / "split_stages.py"  # a study by name
    assert study_file(str(STUDIES / "norm_chain.py")) == STUDIES / "norm_chain.py"  # or by path
    with pytest.raises(SktuneError, match="model file not found: .*studies/no_such_study.py"):
        study_file("no_such_study")
    with pytest.raises(SktuneError, match="is a folder; name the model's Python file"):
        study_file(str(tmp_path))  # as sktune run says it
    with pytest.raises(SktuneError, match="no such file"):
        existing_file(str(tmp_path))  # a folder is no file
