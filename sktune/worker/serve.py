"""The worker process's main loop: start up once, then answer the tuner's requests.

This is the far end of the pipe that ``tuning/supervisor.py`` holds. Every request and
answer crosses it as JSON (``pipe/protocol.py``); the runner behind it never sees the
study.
"""

from __future__ import annotations

import os
import sys
import traceback
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from sktune.child_process import (cut_short_library, die_with_parent, drop_cut_short_libraries,
                                  thread_locked_progress_bars)
from sktune.errors import SktuneError
from sktune.pipe.protocol import BisectRequest, ConfirmRequest, ProfileRequest, ThroughCompileRequest, TrialRequest
from sktune.pipe.verify_shapes import VerifyRequest


def serve(conn: Connection, config: dict[str, Any], cache_dir: str | None, parent_pid: int | None = None,
          replaced_at: float | None = None) -> None:
    """Worker main: build the runner once, then answer requests until told to stop.
    ``replaced_at``: when the worker this one replaces was stopped (``drop_cut_short_libraries``)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it stops us
    if parent_pid is not None:
        die_with_parent(parent_pid)
    thread_locked_progress_bars()
    if cache_dir:  # before torch is imported: one Inductor cache per study and CPU (TuneSettings.compile_cache)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache_dir
        if removed := drop_cut_short_libraries(cache_dir, replaced_at):
            print(f"sktune: removed {len(removed)} compiled librar{'y' if len(removed) == 1 else 'ies'} that a stopped "
                  f"run left cut short in the study's compile cache {cache_dir}; they compile afresh",
                  file=sys.stderr, flush=True)
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")  # keep the profiler's own logs off the user's screen
    from sktune.worker.runner import RunnerConfig, TrialRunner

    try:
        runner = TrialRunner(RunnerConfig(**config))
        conn.send(("ok", runner.describe().to_json()))
    except SktuneError as exc:
        conn.send(("user_error", f"{exc}", traceback.format_exc()))
        return
    except Exception as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}", traceback.format_exc()))
        return
    while True:
        try:
            request = conn.recv()
        except EOFError:
            return
        command, payload = request
        if command == "stop":
            return
        try:
            if command == "run" and _maybe_inject_fault():
                conn.send(("ok", {"garbage": True}))
                continue
            handler = {
                "run": lambda p: runner.run(TrialRequest.from_json(p)).to_json(),
                "more": lambda p: runner.more(int(p["n_batches"])).to_json(),
                "confirm": lambda p: runner.confirm(ConfirmRequest.from_json(p)).to_json(),
                "through_compile": lambda p: runner.through_compile(ThroughCompileRequest.from_json(p)).to_json(),
                "profile": lambda p: runner.profile(ProfileRequest.from_json(p)).to_json(),
                "bisect": lambda p: runner.bisect(BisectRequest.from_json(p)).to_json(),
                "verify_shapes": lambda p: runner.verify_shapes().to_json(),
                "verify": lambda p: runner.verify(VerifyRequest.from_json(p)).to_json(),
            }[command]
            conn.send(("ok", handler(payload)))
        except Exception as exc:
            if (cut := cut_short_library(exc, cache_dir)) is not None and _removed(cut):  # measured again
                conn.send(("interrupted", f"the compiled library {cut.name} in the study's compile cache was cut "
                                          "short (a stopped run's compiler was writing it): removed, so the plan "
                                          "compiles afresh", traceback.format_exc()))
                continue
            conn.send(("error", f"{type(exc).__name__}: {exc}", traceback.format_exc()))


def _removed(path: Path) -> bool:
    try:
        path.unlink(missing_ok=True)
    except OSError:  # not ours to remove after all: the error as it is
        return False
    return True


def _maybe_inject_fault() -> bool:
    """Test-only fault hook, off unless ``SKTUNE_TEST_FAULT`` names faults.

    ``SKTUNE_TEST_FAULT`` = a comma list of crash | segfault | sigterm | hang | raise | garbage. The
    file named by ``SKTUNE_TEST_FAULT_MARKER`` counts the faults fired so far (across
    worker restarts): each run request fires the next one until the list is used up.
    Returns True when the answer must be garbage.
    """
    faults = [f for f in os.environ.get("SKTUNE_TEST_FAULT", "").split(",") if f]
    marker = os.environ.get("SKTUNE_TEST_FAULT_MARKER")
    if not faults or not marker:
        return False
    fired = int(open(marker).read() or 0) if os.path.exists(marker) else 0
    if fired >= len(faults):
        return False
    with open(marker, "w") as f:
        f.write(str(fired + 1))
    kind = faults[fired]
    if kind == "garbage":
        return True
    if kind == "crash":
        os._exit(3)
    if kind in ("segfault", "sigterm"):
        import signal

        os.kill(os.getpid(), signal.SIGSEGV if kind == "segfault" else signal.SIGTERM)
    if kind == "hang":
        import time

        time.sleep(10**6)
    if kind == "raise":
        raise RuntimeError("injected fault")
    return False
