"""--summary-json after Ctrl-C or SIGTERM: a script that reads it gets what was saved."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.tuned_study import TinyStudy, tiny_study


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> TinyStudy:
    return tiny_study(tmp_path_factory)


def test_a_stopped_run_writes_the_summary_of_its_saved_trials(tuned: TinyStudy, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from sktune.cli.run_cmd import _stopped_summary, _write_stopped_summary

    out = tmp_path / "s.json"
    _write_stopped_summary(out, _stopped_summary(tuned.name, tuned.storage), "terminated")
    data = json.loads(out.read_text())
    assert data["stopped"] == "terminated" and data["study"] == tuned.name
    assert data["n_trials"] >= 1 and "best_plan" in data
    assert "summary of the trials saved so far written to" in capsys.readouterr().err


def test_a_run_stopped_before_anything_was_saved_writes_no_summary(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from sktune.cli.run_cmd import _stopped_summary, _write_stopped_summary

    out = tmp_path / "s.json"
    _write_stopped_summary(out, _stopped_summary("s", f"sqlite:///{tmp_path}/none.db"), "interrupted")
    assert not out.exists()
    err = " ".join(capsys.readouterr().err.split())
    assert f"no summary written to {out}" in err and "does not exist" in err


def test_a_run_stopped_before_its_study_was_prepared_writes_no_summary(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    # Handed to another worker that prepares it now: it wrote an empty study's summary (0
    # trials, no model) beside "this run saved nothing".
    import optuna

    from sktune.cli.run_cmd import _stopped_summary, _write_stopped_summary
    from sktune.tuning.attrs import StudyAttr

    storage = f"sqlite:///{tmp_path}/s.db"
    study = optuna.create_study(study_name="s", storage=storage)
    study.set_user_attr(StudyAttr.CREATOR, {})  # an sktune study its creator left unprepared
    out = tmp_path / "s.json"
    _write_stopped_summary(out, _stopped_summary("s", storage), "interrupted")
    assert not out.exists()
    err = " ".join(capsys.readouterr().err.split())
    assert f"no summary written to {out}: this run saved nothing" in err


def test_a_run_stopped_after_its_finalists_round_shows_its_result(tuned: TinyStudy,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # Stopped while profiling the best: it said only "interrupted … run the same command again",
    # which ran more trials; the finished result was shown nowhere.
    from typer.testing import CliRunner

    import sktune.tuning.loop
    from sktune.cli.app import app

    def stopped(after_finalists: bool):
        def tune(*args: object, **kwargs: object) -> None:
            stop = KeyboardInterrupt()
            stop.after_finalists = after_finalists  # as loop._recorded_if_stopped marks it
            raise stop
        return tune

    table = f"study {tuned.name} (each row timed against unfused in the same run)"
    args = ["run", str(tuned.model), "--study", tuned.name, "--storage", tuned.storage]
    monkeypatch.setattr(sktune.tuning.loop, "tune", stopped(after_finalists=True))
    result = CliRunner().invoke(app, args)
    out = " ".join(result.output.split())
    assert result.exit_code == 130 and table in out
    assert "interrupted: after its finalists' round: the result above stands" in out
    # Stopped before this run's round (a resume's search): an earlier run's table is not shown.
    monkeypatch.setattr(sktune.tuning.loop, "tune", stopped(after_finalists=False))
    result = CliRunner().invoke(app, args)
    out = " ".join(result.output.split())
    assert result.exit_code == 130 and table not in out and "interrupted: completed trials are saved" in out
