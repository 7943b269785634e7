"""The command line as a user meets it: subprocesses, exit codes, messages."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest


def sktune(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 600):
    return subprocess.run([sys.executable, "-m", "sktune", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=timeout)


def test_inspect_json_contract(test_models: Path) -> None:
    result = sktune("inspect", str(test_models / "tiny_norm.py"), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert {"index", "name", "target", "module", "source"} <= set(data["ops"][0])
    assert [op["index"] for op in data["ops"]] == list(range(len(data["ops"])))
    assert all(0 <= b < len(data["ops"]) - 1 for b in data["boundaries"])
    assert data["repeated_units"] is None and data["shapes"] is None


def test_inspect_piped_keeps_module_paths_and_source_lines_whole(tmp_path: Path) -> None:
    """Piped, the table was 80 columns wide: module paths and the source column were cut."""
    model = tmp_path / "a_model_file_with_a_long_name.py"
    model.write_text(
        "import torch\n\n\nclass Inner(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.projection_with_a_long_name = torch.nn.Linear(8, 8)\n\n"
        "    def forward(self, x):\n        return torch.relu(self.projection_with_a_long_name(x))\n\n\n"
        "class M(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.an_encoder_block_with_a_long_name = Inner()\n\n"
        "    def forward(self, x):\n        return self.an_encoder_block_with_a_long_name(x) * 2\n\n\n"
        "def build_model():\n    return M()\n\n\n"
        "def example_inputs(seed=0):\n    return (torch.randn(4, 8, generator=torch.Generator().manual_seed(seed)),)\n")
    result = sktune("inspect", str(model))
    assert result.returncode == 0, result.stderr
    assert "an_encoder_block_with_a_long_name.projection_with_a_long_name" in result.stdout
    assert "a_model_file_with_a_long_name.py:10" in result.stdout


@pytest.mark.slow  # ~17 s on a 2.8 GHz Xeon (two inspect runs capturing every shape); CI runs it (.ci/run)
def test_inspect_captures_every_shape_and_refuses_shapes_that_run_other_ops(test_models: Path) -> None:
    result = sktune("inspect", str(test_models / "two_widths.py"))
    assert result.returncode == 0, result.stderr
    assert re.search(r"the same \d+ ops at each of wide, narrow", " ".join(result.stdout.split()))
    refused = sktune("inspect", str(test_models / "shape_branch.py"), "--json")
    assert refused.returncode == 1 and refused.stdout == "" and "Traceback" not in refused.stderr
    assert "shapes 'bs1' and 'bs4' capture different graphs: op 0 is tanh" in refused.stderr
    verify = sktune("inspect", str(test_models / "verify_widths.py"), "--json")  # verify-only shapes captured too
    assert verify.returncode == 0, verify.stderr
    assert json.loads(verify.stdout)["verify_only_shapes"] == ["w32", "w37"]


@pytest.mark.slow  # ~8 s on a 2.8 GHz Xeon (inspect captures the 24-layer decoder); CI runs it (.ci/run)
def test_inspect_finds_the_repeated_layers_of_the_decoder_stack() -> None:
    stack = Path(__file__).resolve().parents[2] / "studies" / "decoder_stack.py"
    result = sktune("inspect", str(stack), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert len(data["ops"]) >= 1000
    units = data["repeated_units"]["units"]
    assert data["repeated_units"]["container"] == "layers" and len(units) == 8
    assert len({last - first for first, last in units}) == 1
    assert all(op["module"].startswith("layers.3") for op in data["ops"][units[3][0]:units[3][1] + 1])


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("missing.py", "model file not found"),  # found in the main process
        (".", "is a folder; name the model's Python file"),  # tests/models itself
        ("syntax_error.py", "syntax error"),  # in the main process too, before a study is created
        ("no_build.py", "does not define build_model"),  # in the worker, loading the file
        # The same path as no_build.py, each message also checked in-process (tests/unit/test_load.py):
        # slow, to keep the default run under 10 minutes on 2 cores (a worker start each, ~5 s).
        pytest.param("no_inputs_fn.py", "does not define example_inputs", marks=pytest.mark.slow),
        pytest.param("build_raises.py", "weights not found", marks=pytest.mark.slow),
        ("returns_int.py", "must return tensors"),  # in the worker, capturing
        ("writes_buffer.py", "writes the model's buffer 'running'"),  # inspect checks as run's worker does
        ("graph_break.py", "cannot be captured as one graph (graph break at "),  # a branch on .item()
        ("shape_branch.py", "capture different graphs: op 0 is tanh"),
        ("verify_branch.py", "'bs8' is a verify-only shape: drop it from verify_shapes()"),  # at start-up
    ],
)
def test_user_errors_are_one_message(test_models: Path, tmp_path: Path, model: str, message: str) -> None:
    command = "inspect" if model in {"graph_break.py", "writes_buffer.py"} else "run"
    args = [command, str(test_models / model)]
    if command == "run":
        args += ["--storage", f"sqlite:///{tmp_path}/s.db", "--trials", "1"]
    result = sktune(*args, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    # No progress bar left above the error where output is piped ("starting worker (load, …)… 0:…").
    assert not re.search(r"^(starting worker|opening the study)", result.stderr, re.MULTILINE), result.stderr
    if model in ("syntax_error.py", "."):  # a typo leaves no empty study behind to resume
        assert not (tmp_path / "s.db").exists()
    elif command == "run" and model != "missing.py":  # the worker failed: the study it created is gone
        assert optuna.get_all_study_names(f"sqlite:///{tmp_path}/s.db") == []


@pytest.mark.slow  # 17-20 s: keeps the default run under 10 minutes on 2 cores (CI runs it)
def test_run_refuses_nondeterministic_and_mutating_models(test_models: Path, tmp_path: Path) -> None:
    for model, message in (("nondeterministic.py", "nondeterministic"), ("mutates_input.py", "modifies its input")):
        result = sktune("run", str(test_models / model), "--storage", f"sqlite:///{tmp_path}/s.db", cwd=tmp_path)
        assert result.returncode == 1, result.stderr
        assert message in result.stderr and "Traceback" not in result.stderr


def test_debug_shows_traceback(test_models: Path, tmp_path: Path) -> None:
    result = sktune("inspect", str(test_models / "no_build.py"), "--debug", cwd=tmp_path)
    assert result.returncode != 0 and "Traceback" in result.stderr


@pytest.mark.parametrize("args", [["--trials", "0"], ["--trials", "-3"], ["--threads", "0"], ["--backend", "tpu"],
                                  ["--effort", "fast"], ["--patience", "0"], ["--shapes", "bs1,"],
                                  ["--shapes", "bs1"], ["--seed", "-5"], ["--seed", "99999999999"],
                                  ["--trial-timeout", "inf"], ["--patience", "3", "--no-stop"]])
def test_bad_flags_rejected(test_models: Path, tmp_path: Path, args: list[str]) -> None:
    result = sktune("run", str(test_models / "tiny_norm.py"), *args, cwd=tmp_path)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("url", ["nosuchdb://user:hunter2@x/y", "postgresql://user:hunter2@127.0.0.1:1/db",
                                 "postgresql://:hunter2@127.0.0.1:1/db", "postgresql://me:hun@hunter2@127.0.0.1:1/db"])
def test_bad_or_unreachable_storage_url(test_models: Path, tmp_path: Path, url: str) -> None:
    result = sktune("run", str(test_models / "tiny_norm.py"), "--storage", url, "--trials", "1", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "cannot open" in result.stderr and "hunter2" not in result.stderr and "***" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow  # 6-9 s on a 2.8 GHz Xeon (four CLI runs); CI runs it (.ci/run)
def test_outputs_that_cannot_be_written_are_refused_before_any_work(test_models: Path, tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    for args, message in ((["run", str(test_models / "tiny_norm.py"), "--summary-json", "out"], "out is a directory"),
                          (["run", str(test_models / "tiny_norm.py"), "--summary-json", "no/s.json"], "does not exist"),
                          (["export", "--study", "s", "--format", "json", "-o", "out"], "out is a directory")):
        result = sktune(*args, "--storage", f"sqlite:///{tmp_path}/s.db", cwd=tmp_path)
        assert result.returncode == 1 and message in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    assert not (tmp_path / "s.db").exists()  # no study was opened, no worker started


def test_a_cache_folder_that_cannot_be_made_is_one_message(test_models: Path, tmp_path: Path) -> None:
    (tmp_path / ".sktune").write_text("")  # the cache lives under .sktune/ in the folder sktune runs in
    result = sktune("run", str(test_models / "tiny_norm.py"), "--storage", f"sqlite:///{tmp_path}/s.db", cwd=tmp_path)
    assert result.returncode == 1 and "cannot create sktune's cache folder" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow  # ~27 s (trials hang to --trial-timeout): keeps the default run under 10 minutes; CI runs it
def test_a_run_whose_every_trial_failed_says_why_and_exits_1(test_models: Path, tmp_path: Path) -> None:
    env = {**os.environ, "SKTUNE_TEST_FAULT": ",".join(["raise"] * 20), "SKTUNE_TEST_FAULT_MARKER": str(tmp_path / "n")}
    result = sktune("run", str(test_models / "tiny_norm.py"), "--trials", "2", "--storage",
                    f"sqlite:///{tmp_path}/s.db", "--study", "f", "--summary-json", str(tmp_path / "s.json"),
                    cwd=tmp_path, env=env)
    assert result.returncode == 1, result.stderr[-3000:]
    data = json.loads((tmp_path / "s.json").read_text())  # written all the same: it says what failed
    assert data["n_complete"] == 0 and data["n_failed"] == data["n_trials"] >= 3  # the unfused plan too
    assert data["failure_reasons"] == [["error: RuntimeError: injected fault", data["n_failed"]]]
    assert "no bitwise-exact plan, not even the unfused one" in result.stderr
    assert "most often: error: RuntimeError: injected fault" in result.stderr
    exported = sktune("export", "--study", "f", "--format", "json", "--storage", f"sqlite:///{tmp_path}/s.db", cwd=tmp_path)
    assert exported.returncode == 1 and "most often: error: RuntimeError: injected fault" in exported.stderr


def test_an_interrupt_during_start_up_says_that_nothing_was_saved(test_models: Path, tmp_path: Path) -> None:
    run = subprocess.Popen([sys.executable, "-m", "sktune", "run", str(test_models / "slow_build.py"), "--storage",
                            f"sqlite:///{tmp_path}/s.db", "--study", "s"], cwd=tmp_path, stderr=subprocess.PIPE,
                           text=True)
    deadline = time.monotonic() + 60
    while not (tmp_path / "s.db").exists() and time.monotonic() < deadline:  # the study is opened
        time.sleep(0.1)
    time.sleep(1.0)  # the worker builds the model for a minute
    run.send_signal(signal.SIGINT)
    _, stderr = run.communicate(timeout=60)
    assert run.returncode == 130, stderr
    assert "stopped before the study was prepared, so nothing was saved" in stderr
    assert optuna.get_all_study_names(f"sqlite:///{tmp_path}/s.db") == []


def test_npu_backend_without_torch_npu(studies_dir: Path, tmp_path: Path) -> None:
    result = sktune("run", str(studies_dir / "quant_block.py"), "--backend", "npu", "--trials", "1",
                    "--storage", f"sqlite:///{tmp_path}/s.db", cwd=tmp_path)
    assert result.returncode == 1
    assert "needs torch-npu" in result.stderr and "sktune[npu]" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / ".sktune").exists()  # refused before its cache folder was made


def test_the_patch_export_names_the_compile_that_honours_its_markers() -> None:
    """The backend declares it (``scope_markers_under``); the CLI names no backend."""
    from sktune.cli.export_cmd import marker_compiles

    assert marker_compiles("npu") == []  # its own markers: nothing to note
    assert marker_compiles("inductor") == ['torch.compile(backend="npugraph_ex")']


@pytest.mark.parametrize(("space_inputs", "probing", "steps"), [
    (True, True, "load, capture, reference, op profile, exactness probe"),
    (True, False, "load, capture, reference, op profile"),
    (False, True, "load, capture, reference"),  # a resumed study, or one its creator prepares: theirs are used
])
def test_the_start_up_line_announces_only_what_runs(space_inputs: bool, probing: bool, steps: str) -> None:
    from sktune.cli.run_cmd import _Progress
    from sktune.tuning.loop import startup_steps

    progress = _Progress(3)
    progress.on_status(f"starting worker ({startup_steps(space_inputs, probing)})…")
    assert progress.progress.tasks[0].description == f"starting worker ({steps})…"


def test_the_progress_bar_widens_for_each_trial_on_top_of_the_budget() -> None:
    """Skipped, reused and past-budget trials do not use up --trials (budget.TrialBudget,
    loop.run_unfused_if_missing): the bar read 5/4 at the end of a run."""
    from sktune.cli.run_cmd import _Progress
    from sktune.tuning.attrs import TrialAttr

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study()
    progress = _Progress(3)
    reuses = [{TrialAttr.REUSED_FROM: 0}] * 11  # the 11th in a row counts: a converged sampler must end
    for attrs in ({}, {TrialAttr.SKIPPED: "hopeless"}, *reuses, {TrialAttr.PAST_BUDGET: True}, {}):
        trial = study.ask()
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        progress.on_trial(study, study.tell(trial, 1.0))
    task = progress.progress.tasks[0]
    assert (task.completed, task.total) == (15, 15)  # 3 used up --trials; 12 came on top


def test_a_worker_warns_once_of_another_on_this_host_even_one_started_after_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The first of two workers found no other at start-up: it hears of the second after a trial."""
    import os
    import socket

    from sktune.cli.run_cmd import _Progress
    from sktune.tuning.attrs import TrialAttr

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study()
    progress = _Progress(3)
    printed: list[str] = []
    # The progress bar's console is the CLI's one err_console: patched for this test only.
    monkeypatch.setattr(progress.progress.console, "print", lambda text, *a, **k: printed.append(str(text)))
    progress.on_trial(study, study.tell(study.ask(), 1.0))
    assert printed == []
    other = study.ask()  # a RUNNING trial of another live process here (our parent)
    other.set_user_attr(TrialAttr.WORKER, {"host": socket.gethostname(), "pid": os.getppid()})
    for _ in range(2):
        progress.on_trial(study, study.tell(study.ask(), 1.0))
    assert len(printed) == 1 and f"[{os.getppid()}] are tuning this study on this host too" in printed[0]


def test_the_best_is_compared_with_each_starting_point_the_summary_lists() -> None:
    from sktune.cli.summary_view import starting_points_line

    def point(anchor: str, trial: int, over: float, bitwise: bool = True) -> dict:
        return {"anchor": anchor, "trial": trial, "best_speedup_over": over, "bitwise": bitwise}

    # The summary's anchors: the best, the unfused plan and refinement trials are never among them.
    anchors = [point("fuse-all", 0, 1.2, bitwise=False), point("safe-runs", 2, 1.1)]
    assert starting_points_line({"best_trial": 5, "anchors": anchors}) == (
        "best vs the starting points: fuse-all 1.20× (not bitwise); safe-runs 1.10×")
    assert starting_points_line({"best_trial": 5, "anchors": []}) is None
    lucky = {**point("gap-top-half", 3, 0.95), "timing_source": "search"}  # a search minimum, never re-timed
    assert starting_points_line({"best_trial": 5, "anchors": [lucky]}) == (
        "best vs the starting points: gap-top-half 0.95× (its search figure, not re-timed)")
    both = {**lucky, "bitwise": False}  # one parenthesis: it read "(not bitwise) (its search figure, …)"
    assert starting_points_line({"best_trial": 5, "anchors": [both]}) == (
        "best vs the starting points: gap-top-half 0.95× (not bitwise; its search figure, not re-timed)")
    assert starting_points_line({"best_trial": None, "anchors": anchors}) is None


@pytest.mark.slow  # ~47 s (two runs, one killed midway): keeps the default run under 10 minutes; CI runs it
def test_a_worker_stopped_from_outside_is_an_interrupted_trial_whose_plan_runs_again(
        test_models: Path, tmp_path: Path) -> None:
    """SIGTERM to the whole process group (timeout, a job scheduler) reaches the worker too; if
    the run sees the worker gone first, that was no crash of the plan (it was measured again
    on resume, and a crash would have been reused as the plan's outcome)."""
    storage = f"sqlite:///{tmp_path}/s.db"
    env = {**os.environ, "SKTUNE_TEST_FAULT": "sigterm", "SKTUNE_TEST_FAULT_MARKER": str(tmp_path / "n")}
    result = sktune("run", str(test_models / "tiny_norm.py"), "--trials", "2", "--storage", storage, "--study", "t",
                    cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    trials = optuna.load_study(study_name="t", storage=storage).get_trials()
    first = trials[0]
    assert first.state == optuna.trial.TrialState.FAIL
    assert first.user_attrs["failure"] == "interrupted: worker stopped by signal 15"
    again = [t for t in trials[1:] if t.params == first.params]  # the same starting point, measured this time
    assert again and again[0].state == optuna.trial.TrialState.COMPLETE and "reused_from" not in again[0].user_attrs


def test_sigterm_stops_the_tuning_as_ctrl_c_does_and_only_the_tuning() -> None:
    import signal as signals

    from sktune.cli.run_cmd import Terminated, sigterm_as_interrupt

    before = signals.getsignal(signals.SIGTERM)
    with pytest.raises(Terminated), sigterm_as_interrupt():
        os.kill(os.getpid(), signals.SIGTERM)
        time.sleep(5)  # the handler raises at once
    assert signals.getsignal(signals.SIGTERM) is before  # the summary's writes are not cut short


@pytest.mark.parametrize(("data", "line"), [
    ({"study": "s", "best_plan": {"scopes": []}, "best_fuses_nothing": False, "speedup": 1.71, "best_trial": 7},
     "s: best exact 1.71× (trial 7)"),  # the table's best, re-measured: the bar named trial 3's search figure
    ({"study": "s", "best_plan": {"scopes": []}, "best_fuses_nothing": False, "speedup": 5.36, "best_trial": 0,
      "emulated": True}, "s: best exact 5.36× emulated (trial 0)"),  # never read as an NPU figure
    ({"study": "s", "best_plan": {"scopes": []}, "best_fuses_nothing": True}, "s: keep the model unfused"),
    ({"study": "s", "best_plan": None}, "s: no exact plan"),
])
def test_the_progress_bar_ends_on_the_result_the_table_shows(data: dict, line: str) -> None:
    from sktune.cli.run_cmd import _Progress

    progress = _Progress(16)
    progress.progress.update(progress.task, advance=15, description="s: best exact 1.80× (trial 3)")
    progress.finish(data)
    task = progress.progress.tasks[0]
    assert task.description == line and (task.completed, task.total) == (15, 15)  # patience ended it at 15/16


def test_resuming_with_another_backend_is_refused_before_a_worker_starts(test_models: Path, tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path}/s.db"
    tuned = optuna.create_study(study_name="on_npu", storage=storage)
    tuned.set_user_attr("backend", "npu")
    tuned.set_user_attr("space", "signature")
    result = sktune("run", str(test_models / "tiny_norm.py"), "--backend", "inductor", "--study", "on_npu",
                    "--storage", storage, "--trials", "1", cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "study 'on_npu' was tuned with backend npu, not inductor" in result.stderr
    assert "Resume it with --backend npu" in result.stderr and "starting worker" not in result.stderr
    assert len(optuna.load_study(study_name="on_npu", storage=storage).trials) == 0


def test_a_resumed_study_says_so_with_what_was_done() -> None:
    from sktune.cli.run_cmd import resuming_line

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(study_name="s")
    assert resuming_line(study) is None  # a new study
    for value, mismatches in ((0.8, 0.0), (0.5, 2.0)):  # exact, then not bitwise
        study.add_trial(optuna.trial.create_trial(value=value, user_attrs={"plan": {"scopes": []}},
                                                  constraints={"bitwise": mismatches}))
    assert resuming_line(study).startswith("resuming study 's': 2 trials done earlier (1 exact)")
    from sktune.cli.run_cmd import _emulated  # after the figure the resume line and the bar name

    assert _emulated({"environment": {"backend": "npu", "emulated": "true"}}) == " emulated"
    assert _emulated({"environment": {"backend": "inductor"}}) == ""
    # Opened while another worker was creating it: its trials are not an earlier run's.
    assert resuming_line(study, joined=True).startswith(
        "joined study 's', which another worker created: 2 trials done so far (1 exact)")
    # A trial running now is a live worker's (start-up fails a dead one's): joined, not resumed.
    study.ask()
    assert resuming_line(study).startswith(
        "joined study 's' while other workers tune it (trial #2 running): 2 trials done so far (1 exact)")
    # The best's figure as the last run's table gave it: re-measured in its finalists' round.
    from sktune.measure.stats import PairedTiming

    timed = optuna.create_study(study_name="t")
    searched, remeasured = PairedTiming(1e-4, 0.8e-4, 0.8, (0.78, 0.82), 30), PairedTiming(1e-4, 0.9e-4, 0.9, (0.88, 0.92), 30)
    timed.add_trial(optuna.trial.create_trial(value=0.8, constraints={"bitwise": 0.0}, user_attrs={
        "plan": {"scopes": []}, "timing": searched.to_json()}))
    assert "best exact so far 1.25× (trial 0)" in resuming_line(timed)
    timed.set_user_attr("confirm_best", {"trial": 0, "timing": remeasured.to_json(), "bitwise": True})
    assert "best exact so far 1.11× (trial 0, re-measured)" in resuming_line(timed)
    # Kept unfused: the table's verdict, not the unfused plan's noise against itself.
    timed.set_user_attr("confirm_best", {"trial": 0, "timing": remeasured.to_json(), "bitwise": True,
                                         "keep_unfused_reason": "no exact finalist fuses anything"})
    assert resuming_line(timed).endswith("; so far: keep the model unfused (trial 0)")
