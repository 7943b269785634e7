"""Output paths a command writes at its end, checked before any work: a run of minutes
must not end in "cannot write" with its result lost."""

from __future__ import annotations

import os
from pathlib import Path

from sktune.errors import SktuneError


def check_output(path: Path, flag: str) -> None:
    """Refuse ``path`` (given as ``flag``) now if writing it later would fail: a directory,
    a missing parent directory, or no permission to write there."""
    target = path.resolve()
    if target.is_dir():
        raise SktuneError(f"{flag}: {path} is a directory; name a file")
    if not target.parent.is_dir():
        raise SktuneError(f"{flag}: directory {target.parent} does not exist")
    where = target if target.exists() else target.parent
    if not os.access(where, os.W_OK):  # no permission, or a read-only file system: os.access says which
        raise SktuneError(f"{flag}: cannot write {path} ({_why_not_writable(where)})")


def _why_not_writable(path: Path) -> str:
    """Why ``os.access`` refused: a read-only file system (EROFS) or permissions."""
    try:
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return "read-only file system"
    except (OSError, AttributeError):  # no statvfs (Windows): permissions are the likely cause
        pass
    return "permission denied"
