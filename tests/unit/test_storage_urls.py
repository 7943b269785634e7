"""Storage URLs as users write them: passwords masked in every form, the SQLite file found
in every form (drivers, SQLite's URI form), journals told from databases by scheme first,
and a storage failure that names its cause."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from sktune.errors import SktuneError
from sktune.tuning.settings import TuneSettings, file_name
from sktune.tuning.storage import journal_path, load_existing_study, mask_url, sqlite_file, storage_error


@pytest.mark.parametrize(("url", "masked"), [
    ("postgresql://user:secret@host/db", "postgresql://user:***@host/db"),
    ("postgresql://:secret@host:1/db", "postgresql://:***@host:1/db"),  # no user name
    ("postgresql://user:se@cret@host/db", "postgresql://user:***@host/db"),  # a raw @ in the password
    ("postgresql://user:pa/ss@host/db", "postgresql://user:***@host/db"),  # SQLAlchemy takes a / there
    ("postgresql://user@host/db", "postgresql://user@host/db"),
    ("postgresql://u:p@host/db?sslmode=require", "postgresql://u:***@host/db?sslmode=require"),
    ("sqlite:///s.db", "sqlite:///s.db"),
])
def test_a_password_is_masked_in_every_form(url: str, masked: str) -> None:
    assert mask_url(url) == masked


def test_a_storage_error_stays_readable_and_hides_what_a_driver_leaks() -> None:
    from sktune.tuning.storage import storage_error

    err = OSError('password authentication failed for user "postgres"')
    assert storage_error(err, "postgresql://postgres:postgres@h/db") == (
        'OSError: password authentication failed for user "postgres"')  # the user name is no secret
    leak = OSError("failed to resolve host 'cret@127.0.0.1': Name or service not known")
    assert "cret" not in storage_error(leak, "postgresql://me:se@cret@127.0.0.1/db")


@pytest.mark.parametrize(("url", "file"), [
    ("sqlite:///s.db", "s.db"), ("sqlite:////abs/s.db", "/abs/s.db"), ("sqlite+pysqlite:///s.db", "s.db"),
    ("sqlite:///file:/tmp/s.db?mode=ro&uri=true", "/tmp/s.db"), ("sqlite:///:memory:", None), ("sqlite://", None),
    ("postgresql://u:p@h/db", None), ("journal:s.log", None),
])
def test_the_sqlite_file_of_a_url(url: str, file: str | None) -> None:
    assert sqlite_file(url) == file


def test_a_database_url_ending_in_log_is_a_database_not_a_journal() -> None:
    assert journal_path("sqlite:///results.log") is None
    assert journal_path("results.log") == "results.log" and journal_path("journal:x.db") == "x.db"


def test_report_and_export_open_sqlite_read_only_and_name_what_is_wrong(tmp_path: Path) -> None:
    db = tmp_path / "s.log"  # a database whose name ends like a journal's
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    optuna.create_study(study_name="s", storage=f"sqlite:///{db}")
    assert load_existing_study("s", f"sqlite:///{db}").study_name == "s"
    read_only = f"sqlite:///file:{db}?mode=ro&uri=true"
    assert load_existing_study("s", read_only).study_name == "s"
    with pytest.raises(SktuneError, match="is a directory; name the database file"):
        load_existing_study("s", f"sqlite:///{tmp_path}")
    with pytest.raises(SktuneError, match="^OperationalError: attempt to write a readonly database") as refused:
        try:  # the cause leads, not Optuna's guess of "invalid data … exceeding max length"
            optuna.create_study(study_name="new", storage=read_only)
        except Exception as exc:
            raise SktuneError(storage_error(exc)) from None
    assert "max length" not in str(refused.value)


def test_a_study_name_keeps_its_cache_inside_the_cache_folder(tmp_path: Path) -> None:
    for name in ("../../escaped", "/tmp/abs", "a/b"):
        cache = TuneSettings(Path("m.py"), backend="inductor", study_name=name, cache_root=tmp_path).compile_cache
        assert cache.is_relative_to(tmp_path.resolve()) and cache.parent.parent == tmp_path.resolve()
    assert file_name("quant_block-inductor") == "quant_block-inductor"
    assert file_name("a/b") != file_name("a_b")  # two names, two folders


def test_report_and_export_leave_a_database_without_optuna_tables_as_it_was(tmp_path: Path) -> None:
    """RDBStorage creates Optuna's tables in any database it opens: a report pointed at the
    wrong database (an empty PostgreSQL, a project's own SQLite file) must not write to it."""
    import sqlite3

    db = tmp_path / "app.db"
    with sqlite3.connect(db) as conn:
        conn.execute("create table users (id integer)")
    with pytest.raises(SktuneError, match="holds no Optuna study tables"):
        load_existing_study("s", f"sqlite:///{db}")
    with sqlite3.connect(db) as conn:
        assert [r[0] for r in conn.execute("select name from sqlite_master where type = 'table'")] == ["users"]
    empty = tmp_path / "empty.db"
    empty.touch()
    with pytest.raises(SktuneError, match="holds no Optuna study tables"):
        load_existing_study("s", f"sqlite:///{empty}")
    assert empty.stat().st_size == 0


def _storage_failure(tmp_path: Path) -> Exception:
    """What a running study meets when its database fails under it (here its trials table is gone)."""
    import sqlite3

    url = f"sqlite:///{tmp_path}/lost.db"
    study = optuna.create_study(study_name="s", storage=url)
    with sqlite3.connect(tmp_path / "lost.db") as db:
        db.execute("DROP TABLE trials")
    try:
        study.ask()
    except Exception as exc:
        return exc
    raise AssertionError("the storage did not fail")


def test_a_failure_inside_the_storage_is_told_from_others(tmp_path: Path) -> None:
    from sktune.tuning.storage import raised_by_storage

    assert raised_by_storage(_storage_failure(tmp_path))
    try:
        raise ValueError("a bug of ours")
    except ValueError as exc:
        assert not raised_by_storage(exc)


def test_a_storage_that_fails_during_a_run_is_one_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A dropped connection or an unwritable journal mid-run ended in a 20-50 frame traceback.
    from typer.testing import CliRunner

    import sktune.tuning.loop
    from sktune.cli.app import app

    failure = _storage_failure(tmp_path)

    def tune(*args: object, **kwargs: object) -> None:
        raise failure

    monkeypatch.setattr(sktune.tuning.loop, "tune", tune)
    model = tmp_path / "m.py"
    model.write_text("")
    result = CliRunner().invoke(app, ["run", str(model), "--storage", "postgresql://me:hunter2@db/s"])
    assert result.exit_code == 1, result.output
    said = " ".join(result.output.split())
    assert "error: the study's storage postgresql://me:***@db/s failed during the run" in said
    assert "no such table: trials" in said and "run the same command to resume" in said
    assert "hunter2" not in said and "Traceback" not in said


def test_a_missing_postgres_driver_names_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from sktune.tuning.storage import make_storage

    monkeypatch.setitem(sys.modules, "psycopg", None)  # as where it is not installed
    with pytest.raises(SktuneError, match=r"driver 'psycopg' is not installed \(pip install 'sktune\[postgres\]'\)"):
        make_storage("postgresql://postgres@127.0.0.1:1/db")


def test_a_journal_cut_short_is_refused_before_a_write_breaks_it(tmp_path: Path) -> None:
    # Optuna reads past a cut last line but appends the next record to it: the study then no
    # longer opened ("AssertionError: Should not reach").
    from sktune.tuning.resume import open_study

    url = f"journal:{tmp_path}/s.log"
    study, created = open_study("s", url, seed=0)
    assert created
    log = tmp_path / "s.log"
    whole = log.read_bytes()
    assert whole.endswith(b"\n")
    open_study("s", url, seed=0)  # a whole journal opens
    log.write_bytes(whole[:-10])
    with pytest.raises(SktuneError, match="ends in a line cut short"):
        open_study("s", url, seed=0)
    assert log.read_bytes() == whole[:-10]  # nothing appended


def test_an_error_of_ours_or_optunas_own_logic_is_no_storage_failure(tmp_path: Path) -> None:
    from sktune.tuning.storage import raised_by_storage

    try:
        try:
            optuna.load_study(study_name="none", storage=f"sqlite:///{tmp_path}/s.db")
        except KeyError:  # Optuna's "Record does not exist", raised in its storage: no failure
            raise ValueError("a bug of ours") from None
    except ValueError as exc:
        assert not raised_by_storage(exc)
    study = optuna.create_study(storage=f"sqlite:///{tmp_path}/s.db")
    trial = study.ask()
    study.tell(trial, 1.0)
    try:
        study.tell(trial, 2.0)  # finished already (by another worker, say): Optuna's rule, not a failure
    except Exception as exc:
        assert not raised_by_storage(exc)


def test_a_journal_line_being_written_is_not_taken_for_a_cut_one(tmp_path: Path) -> None:
    import threading

    from sktune.tuning.storage import check_journal_whole

    log = tmp_path / "s.log"
    log.write_bytes(b'{"op_code": 0}\n{"op_co')

    def another_worker_writes() -> None:  # ends its line, starts the next
        with log.open("ab") as f:
            f.write(b'de": 1}\n{"op_')

    writer = threading.Timer(0.1, another_worker_writes)
    writer.start()
    check_journal_whole(f"journal:{log}", settle_s=0.5)  # it grew meanwhile: not refused
    writer.join()
    with pytest.raises(SktuneError, match="cut short"):
        check_journal_whole(f"journal:{log}", settle_s=0.1)  # still cut, and unchanged
