"""Where studies live: Optuna storages from a URL, and how their failures are told apart.

- ``sqlite:///file.db`` (default), ``postgresql://...``, any SQLAlchemy URL: RDB storage
  with a heartbeat, so a trial whose process died is failed by the next run anywhere.
- ``journal:PATH`` or a path ending in ``.log``/``.jsonl``: an Optuna journal file
  (many processes on one file system, no database server).
Which process runs which trial, and the trials a killed run left: ``workers.py``.
"""

from __future__ import annotations

import os
import re
import random
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import optuna
from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend

from sktune.errors import SktuneError
from sktune.tuning.attrs import StudyAttr, TrialAttr
from sktune.tuning.workers import GRACE_PERIOD_S

HEARTBEAT_INTERVAL_S = 10


# ``//user:password@``: no user name needed, and the password up to the last ``@`` before a
# query (a raw ``@`` or ``/`` in it). The one pattern masks it and finds it (``_host_leak``).
_PASSWORD = re.compile(r"(//[^:/@?#]*:)([^?#]*)@")


def mask_url(url: str) -> str:
    """``postgresql://user:secret@host/db`` → ``postgresql://user:***@host/db``; also with no
    user name, and with a raw ``@`` in the password (up to the last ``@`` before the path)."""
    return _PASSWORD.sub(r"\1***@", url)


def _host_leak(url: str) -> str | None:
    """For a raw ``@`` in ``url``'s password, the part after it: a driver that split the URL at
    the first ``@`` names that part as the host (``failed to resolve host 'cret@db'``)."""
    found = _PASSWORD.search(url)
    secret = found.group(2) if found else ""
    return secret.split("@", 1)[1] if "@" in secret else None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it came from, as Python prints them (``from None`` ends it)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)


def _root_cause(exc: BaseException) -> BaseException:
    """The last exception of ``exc``'s chain: what a wrapper (Optuna, SQLAlchemy) hides."""
    *_, root = _chain(exc)
    return root


# How Optuna's RDB storage words any failed commit, whatever failed underneath.
_OPTUNA_COMMIT_GUESS = "An exception is raised during the commit"


def storage_error(exc: BaseException, url: str = "") -> str:
    """One line for a storage failure, credentials masked (also what a driver leaks of
    ``url``'s password as a host name): the error and, where Optuna or SQLAlchemy wraps it, the
    cause underneath ("attempt to write a readonly database" under Optuna's generic "exception
    during the commit")."""
    root = _root_cause(exc)
    text = f"{type(exc).__name__}: {exc}".splitlines()[0].strip()
    cause = str(root).strip().splitlines()[0] if root is not exc and str(root).strip() else ""
    if cause and str(exc).startswith(_OPTUNA_COMMIT_GUESS):
        # Optuna's guess ("invalid data … exceeding max length") misleads: the cause is the error
        text = f"{type(root).__name__}: {cause} (Optuna's {type(exc).__name__} during a commit)"
    elif cause and cause not in text:
        text += f" (cause: {type(root).__name__}: {cause})"
    text = mask_url(text)
    if leak := _host_leak(url):
        for quote in "'\"":
            text = text.replace(f"{quote}{leak}@", f"{quote}***@")
    return text


def raised_by_storage(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it came from) was raised inside Optuna's storages:
    the database or journal failed under a running study, whatever the error's type (a
    journal made unwritable ends in Optuna's ``AssertionError: Should not reach``)."""
    for link in _chain(exc):
        if isinstance(link, _NOT_A_FAILURE):
            return False
        tb = link.__traceback__
        while tb is not None:
            if f"optuna{os.sep}storages{os.sep}" in tb.tb_frame.f_code.co_filename:
                return True
            tb = tb.tb_next
    return False


# What Optuna's storages raise when they work: a trial another worker finished, a name taken,
# a record (a study, a trial) that is not there. Not the storage failing.
_NOT_A_FAILURE = (optuna.exceptions.UpdateFinishedTrialError, optuna.exceptions.DuplicatedStudyError, KeyError)


def journal_path(url: str) -> str | None:
    """The file of a journal storage URL (``journal:PATH``, or a bare ``*.log``/``*.jsonl``
    path with no scheme), else None: ``sqlite:///results.log`` is a database."""
    if url.startswith("journal:") or ("://" not in url and url.endswith((".log", ".jsonl"))):
        return url.removeprefix("journal:").removeprefix("//")
    return None


def check_journal_whole(url: str, settle_s: float = 1.0) -> None:
    """Refuse to write to a journal whose last line is cut short (its writer was killed
    mid-line, or the disk filled). Optuna reads past it, but appends the next record to it:
    the two make one broken line, and the study no longer opens ("Should not reach").
    Another worker may be writing that line now, so a cut line must outlast ``settle_s``."""
    path = journal_path(url)
    if path is None:
        return
    sizes = []
    for attempt in range(2):
        try:
            with open(path, "rb") as f:
                sizes.append(f.seek(0, os.SEEK_END))
                if sizes[-1] == 0:
                    return
                f.seek(-1, os.SEEK_END)
                if f.read(1) == b"\n":
                    return
        except OSError:  # missing (a new journal) or unreadable: opening it says so
            return
        if attempt == 0:
            time.sleep(settle_s)
    if sizes[1] != sizes[0]:  # it grew: a worker is writing it, line by line
        return
    raise SktuneError(f"journal {path} ends in a line cut short (a run was killed while writing it, or the disk "
                      "filled): writing after it would break the study. Remove that incomplete last line "
                      "(a copy first), then run again")


def make_storage(url: str) -> BaseStorage:
    """An Optuna storage for ``url``; one clear (credential-free) message when it fails."""
    try:
        path = journal_path(url)
        if path is not None:
            return JournalStorage(JournalFileBackend(path))
        return _rdb_storage(url)
    except Exception as exc:
        raise SktuneError(f"cannot open storage {mask_url(url)}: {storage_error(exc, url)}{_url_hint(exc)}") from None


def _url_hint(exc: BaseException) -> str:
    """What a storage URL may be, where SQLAlchemy knew no driver for it (``redis://``, a typo),
    or which package to install, where the driver's module is missing."""
    missing = _root_cause(exc)  # Optuna wraps it in an ImportError
    if isinstance(missing, ModuleNotFoundError) and missing.name:
        install = {"psycopg": " (pip install 'sktune[postgres]')", "psycopg2": " (pip install psycopg2-binary, or "
                   "pip install 'sktune[postgres]' for psycopg, the driver SQLAlchemy 2.1 picks)"}.get(missing.name, "")
        return f"; the database driver {missing.name!r} is not installed{install}"
    return ("; a storage is a database URL that SQLAlchemy knows (sqlite:///FILE, postgresql://…, mysql://…) or "
            "journal:FILE" if type(exc).__name__ in ("NoSuchModuleError", "ArgumentError") else "")


def _rdb_storage(url: str, attempts: int = 6) -> RDBStorage:
    """RDBStorage, tolerating the race of several workers creating the tables of a fresh
    database at once (PostgreSQL: a unique violation or "already exists"; a retry finds them)."""
    for attempt in range(attempts):
        try:
            with warnings.catch_warnings():  # the heartbeat is "experimental" in Optuna; we rely on it knowingly
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                # A database server closes idle connections (a restart, an admin, a proxy's
                # timeout): the pool tests each before use, else the next trial's write fails.
                # Optuna sets this for MySQL only; SQLite has no server.
                engine = {} if sqlite_file(url) else {"pool_pre_ping": True}
                return RDBStorage(url, engine_kwargs=engine, heartbeat_interval=HEARTBEAT_INTERVAL_S,
                                  grace_period=GRACE_PERIOD_S)
        except Exception as exc:
            racing = "IntegrityError" in type(exc).__name__ or "already exists" in str(exc)
            if not racing or attempt == attempts - 1:
                raise
            time.sleep(0.2 + random.random() * 0.5)
    raise AssertionError("unreachable")


def sqlite_file(url: str) -> str | None:
    """The database file of an SQLite URL (any driver; SQLite's URI form ``file:PATH?mode=ro``
    with ``uri=true`` too), else None (another database, an in-memory one, or no URL)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return None
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    database = parsed.database
    if parsed.query.get("uri") == "true" and database.startswith("file:"):
        database = database.removeprefix("file:").split("?", 1)[0]
    return database


def _no_studies_there(url: str) -> str | None:
    """Why the storage at ``url`` holds no study, found without creating anything (opening a
    database with RDBStorage creates Optuna's tables where a report, an export or a warm
    start only meant to read), or None where it may hold some."""
    file = journal_path(url) or sqlite_file(url)
    if file and Path(file).is_dir():
        return f"{file} is a directory; name the database file"
    if file and not Path(file).is_file():
        return f"{file} does not exist (see --storage)"
    if journal_path(url) is None and not _holds_optuna_tables(url):
        return "the database holds no Optuna study tables (see --storage)"
    return None


def _study_names(backend: BaseStorage, url: str) -> list[str]:
    try:
        return optuna.get_all_study_names(backend)
    except Exception as exc:
        raise SktuneError(f"cannot open storage {mask_url(url)}: {storage_error(exc, url)}") from None


def existing_study_names(storage: str) -> list[str]:
    """The study names in ``storage``, read without creating it: [] where its file does not
    exist or its database holds no Optuna tables (a storage only read, as a warm start's)."""
    return [] if _no_studies_there(storage) else _study_names(make_storage(storage), storage)


def load_existing_study(name: str, storage: str) -> optuna.Study:
    """A study that must already exist (export, report): never creates a storage or a study.

    A missing SQLite file, an unusable storage or an unknown study name is one clear
    ``SktuneError``; credentials in the URL are masked in every message.
    """
    masked = mask_url(storage)
    if reason := _no_studies_there(storage):
        raise SktuneError(f"no study storage at {masked}: {reason}")
    backend = make_storage(storage)
    names = _study_names(backend, storage)
    if name not in names:
        known = ", ".join(repr(n) for n in sorted(names)) or "none"
        raise SktuneError(f"no study {name!r} in {masked} (studies there: {known})")
    study = optuna.load_study(study_name=name, storage=backend)
    check_made_by_sktune(study, masked)
    return study


def _holds_optuna_tables(url: str) -> bool:
    """Whether the database at ``url`` has Optuna's tables, read without creating anything."""
    from sqlalchemy import create_engine, inspect

    try:
        engine = create_engine(url)
        try:
            found = inspect(engine)
            return found.has_table("studies") and found.has_table("version_info")
        finally:
            engine.dispose()
    except Exception as exc:
        raise SktuneError(f"cannot open storage {mask_url(url)}: {storage_error(exc, url)}{_url_hint(exc)}") from None


def check_made_by_sktune(study: optuna.Study, where: str) -> None:
    """Refuse a study that ``sktune run`` did not make: an Optuna study of something else
    on a shared storage has trials without plans (a report of it failed on them, and a
    run added its trials to it). A study that sktune is still preparing has its creator."""
    if {StudyAttr.SPACE, StudyAttr.CREATOR, StudyAttr.OPS} & study.user_attrs.keys():
        return
    trials = study.get_trials(deepcopy=False)
    if not trials or any(TrialAttr.PLAN in t.user_attrs for t in trials):
        return
    raise SktuneError(f"study {study.study_name!r} in {where} was not made by sktune run (it has trials but no "
                      "sktune record); name another --study")
