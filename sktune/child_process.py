"""What every sktune child process (the trial worker, its compile helper) does first."""

from __future__ import annotations

import os
import re
import struct
import sys
import time
import traceback
from pathlib import Path


def die_with_parent(parent_pid: int) -> None:
    """On Linux the kernel kills this process when its parent dies (SIGTERM from a job
    scheduler, SIGKILL, out of memory), even in the middle of a minute-long compile that
    would otherwise run on, orphaned, on the cores the next run times on. Elsewhere the
    closed pipe ends it at its next request."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(1)


def thread_locked_progress_bars() -> None:
    """torch.fx's ``Interpreter.run`` opens a progress bar (disabled, but tqdm creates its
    lock anyway), and tqdm's first lock is a multiprocessing one: a named semaphore that the
    resource tracker, shared with the tuner, is told to forget at exit. A child that crashes
    never tells it, so a run whose worker segfaulted ended with "resource_tracker: There
    appear to be 1 leaked semaphore objects". A child draws no bars: a thread lock does."""
    import threading

    from tqdm import tqdm  # Optuna's dependency; torch.fx uses it when it is installed

    tqdm.set_lock(threading.RLock())


# How the dynamic loader names a shared library cut short (its writer stopped midway).
_CUT_LIBRARY = re.compile(r"(/[^\n:]+?\.so): (?:file too short|invalid ELF header|ELF load command[^\n]*beyond end "
                          r"of file)")  # a path may hold spaces ("My Project"), never a colon before ".so: "


def cut_short_library(exc: BaseException, cache_dir: str | None) -> Path | None:
    """The library in this study's compile cache that ``exc`` failed to load because it is
    cut short, or None. Only a file under ``cache_dir`` is named: the caller removes it so
    that the plan compiles it afresh."""
    if not cache_dir:
        return None
    found = _CUT_LIBRARY.search("".join(traceback.format_exception(exc)))
    if found is None:
        return None
    path = Path(found.group(1))
    return path if path.resolve().is_relative_to(Path(cache_dir).resolve()) else None


SETTLED_S = 60.0  # a library unchanged this long is not being written
REPLACED_MARGIN_S = 5.0  # a replaced worker's linker, stopped mid-write, wrote nothing after its stop


def drop_cut_short_libraries(cache_dir: str, replaced_at: float | None = None) -> list[Path]:
    """Remove the compiled libraries in this study's compile cache that a stopped run's linker
    left cut short, before Inductor starts; the removed ones, for the run to say.

    Inductor compiles a library only where none exists, so a cut one stayed: a region's was
    met by a trial (``cut_short_library``), but its vector-ISA check's failed silently, and every
    later compile of the study then broke with C++ errors ("'at::vec' has not been declared").
    A library written in the last ``SETTLED_S`` seconds is left alone: another worker on the
    same study may be writing it now (a linker writes its output in well under a second).
    ``replaced_at``: when this run stopped the worker that this one replaces (a hung trial's,
    killed); what that worker wrote until a moment before is checked too.
    """
    if not sys.platform.startswith("linux"):  # ELF only; elsewhere a trial meets it (cut_short_library)
        return []
    written_before = time.time() - SETTLED_S
    if replaced_at is not None:
        written_before = max(written_before, replaced_at - REPLACED_MARGIN_S)
    removed = []
    for folder, _, names in os.walk(cache_dir):  # os.walk skips a folder removed meanwhile
        for path in (Path(folder) / name for name in names if name.endswith(".so")):
            try:
                stat = path.stat()
                if stat.st_mtime >= written_before or _whole_elf(path, stat.st_size):
                    continue
                path.unlink()
            except OSError:
                continue
            removed.append(path)
    return removed


def _whole_elf(path: Path, size: int) -> bool:
    """An ELF file whose section header table, written last by the linker, lies inside it."""
    with path.open("rb") as f:
        head = f.read(64)
    if len(head) < 52 or head[:4] != b"\x7fELF":
        return False
    order = "<" if head[5] == 1 else ">"
    if head[4] == 2 and len(head) < 64:
        return False
    # e_shoff, then e_shentsize and e_shnum: 64-bit at 0x28 and 0x3A, 32-bit at 0x20 and 0x2E.
    offset_format, offset_at, table_at = ("Q", 0x28, 0x3A) if head[4] == 2 else ("I", 0x20, 0x2E)
    (offset,) = struct.unpack_from(order + offset_format, head, offset_at)
    entry, count = struct.unpack_from(order + "HH", head, table_at)
    return offset + entry * count <= size
