"""What one ``sktune run`` asks for: the tuning settings and the effort they resolve to."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from sktune.host_cpu import cache_tag
from sktune.tuning.budget import EFFORTS, Effort

DEFAULT_STORAGE = "sqlite:///sktune.db"
DEFAULT_INPUT_SETS = 3  # seeds every candidate is verified on (`--input-sets`)


@dataclass(frozen=True)
class TuneSettings:
    model_path: Path
    backend: str = dataclasses.field(default_factory=lambda: _default_backend())
    trials: int | None = None  # None: the effort's
    effort: str = "default"
    timeout: float | None = None
    study_name: str | None = None
    storage: str = DEFAULT_STORAGE
    seed: int | None = 0
    threads: int = 1
    input_sets: int = DEFAULT_INPUT_SETS
    trial_timeout: float = 300.0
    bisect_runs: int | None = None  # None: the backend's default
    diagnose: int = 1  # hung trials rerun with the backend's diagnostic plan, at most this many
    allow_changed: bool = False  # resume a study although its fingerprint changed
    cache_root: Path = Path(".sktune/cache")
    probe: bool = True  # per-op exactness probe (where the backend probes), cached under cache_root
    compile_helper: bool = True  # a second process compiles half of each trial's new regions (where the backend shares compiles)
    patience: int | None = None  # None: the effort's
    stop_early: bool = True  # False: never stop for lack of gains (--no-stop)
    shapes: tuple[str, ...] | None = None  # the model's shapes to tune for (--shapes); None: all
    warm_start: tuple[str, ...] = ()  # earlier studies whose best exact plans are tried first
    warm_storage: str | None = None  # where they are (None: the same storage)

    @property
    def resolved_effort(self) -> Effort:
        """The effort preset with this run's overrides (trials, patience)."""
        preset = EFFORTS[self.effort]
        patience = (self.patience or preset.patience) if self.stop_early else None
        return dataclasses.replace(preset, trials=self.trials or preset.trials, patience=patience)

    @property
    def study(self) -> str:
        return self.study_name or f"{self.model_path.stem}-{self.backend}"

    @property
    def compile_cache(self) -> Path:
        """The study's Inductor cache directory: one per CPU and ``ATEN_CPU_CAPABILITY``, since
        Inductor's own cache key names neither (host_cpu.py)."""
        return (self.cache_root / file_name(self.study) / cache_tag()).resolve()


def file_name(study: str) -> str:
    """A study name as one file or folder name: characters unsafe in a path replaced by ``_``
    (``../x`` or ``/abs`` would place a study's cache outside the cache folder); a name so
    changed gets a short hash of itself, so that two names never share a folder by accident."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", study).lstrip(".") or "study"
    return safe if safe == study else f"{safe}-{hashlib.sha1(study.encode()).hexdigest()[:8]}"


def _default_backend() -> str:
    """The registry's default, imported when a setting is made: importing the backends
    imports torch, which ``sktune --help`` should not wait for."""
    from sktune.backends import DEFAULT_BACKEND

    return DEFAULT_BACKEND
