"""What every sktune child process (the trial worker, its compile helper) does first."""

from __future__ import annotations

import os
import sys


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
