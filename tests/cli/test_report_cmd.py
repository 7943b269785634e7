"""``sktune report`` as a user meets it: output path, exit codes, one-line errors."""

from __future__ import annotations

from pathlib import Path

from tests.cli.test_cli import sktune

from tests.report_fixtures import RealStudy, real_study  # noqa: E402, F401


def test_report_default_path(real_study: RealStudy, tmp_path: Path) -> None:  # noqa: F811
    result = sktune("report", "--study", real_study.name, "--storage", real_study.storage, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    out = tmp_path / "reports" / f"{real_study.name}.html"
    assert result.stdout.strip() == f"report written to {Path('reports') / out.name}"
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and len(page) > 1_000_000  # plotly.js inline
    assert all(f'id="{a}"' in page for a in ("summary", "fusion", "time", "search", "trials", "failures"))


def test_unknown_study_is_one_message(real_study: RealStudy, tmp_path: Path) -> None:  # noqa: F811
    result = sktune("report", "--study", "nope", "--storage", real_study.storage, cwd=tmp_path)
    assert result.returncode == 1
    assert "no study 'nope'" in result.stderr and f"'{real_study.name}'" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not (tmp_path / "reports").exists()


def test_bad_storage_is_one_message_with_masked_password(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    result = sktune("report", "--study", "s", "--storage", f"sqlite:///{missing}", cwd=tmp_path)
    assert result.returncode == 1 and "does not exist" in result.stderr
    assert not missing.exists()  # never created
    result = sktune("report", "--study", "s", "--storage", "postgresql://me:hunter2@127.0.0.1:1/db", cwd=tmp_path)
    assert result.returncode == 1 and "cannot open storage" in result.stderr
    assert "hunter2" not in result.stderr and "me:***@" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_a_named_output_in_a_missing_folder_is_refused_as_export_refuses_it(
        real_study: RealStudy, tmp_path: Path) -> None:  # noqa: F811
    """Only the default folder (reports/) is made: a typo in a folder the user named is caught."""
    result = sktune("report", "--study", real_study.name, "--storage", real_study.storage,
                    "-o", str(tmp_path / "no_such" / "r.html"), cwd=tmp_path)
    assert result.returncode == 1 and f"-o: directory {tmp_path / 'no_such'} does not exist" in result.stderr
    assert not (tmp_path / "no_such").exists() and "Traceback" not in result.stderr
