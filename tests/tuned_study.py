"""One real small study (``sktune run`` on tests/models/tiny_norm.py), made once per test session.

Test modules call ``tiny_study(tmp_path_factory)`` from a module fixture; the study is
built under the session's base temp directory the first time and reused after that. Its
first trial is crashed on purpose (the test-only fault hook: a segfault in the worker), so
the study also holds a failed trial, and the run shows that a crash does not stop it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

TINY_MODEL = Path(__file__).resolve().parent / "models" / "tiny_norm.py"
STUDY_NAME = "t"
TRIALS = 8


@dataclass(frozen=True)
class TinyStudy:
    root: Path  # working directory of the run (holds the Inductor cache)
    storage: str
    name: str
    model: Path


def tiny_study(factory: pytest.TempPathFactory) -> TinyStudy:
    root = factory.getbasetemp() / "tiny_study"
    db = root / "x.db"
    study = TinyStudy(root, f"sqlite:///{db}", STUDY_NAME, TINY_MODEL)
    if (root / "done").exists():
        return study
    root.mkdir(exist_ok=True)
    env = {**os.environ, "SKTUNE_TEST_FAULT": "segfault", "SKTUNE_TEST_FAULT_MARKER": str(root / "fault")}
    result = subprocess.run(
        [sys.executable, "-m", "sktune", "run", str(TINY_MODEL), "--backend", "inductor", "--trials", str(TRIALS),
         "--storage", study.storage, "--study", STUDY_NAME],
        capture_output=True, text=True, cwd=root, env=env, timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "leaked semaphore" not in result.stderr  # the crashed worker held no process-shared lock
    (root / "done").write_text("")
    return study
