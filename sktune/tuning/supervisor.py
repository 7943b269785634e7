"""A warm worker process that runs trials, under a watchdog.

The parent sends one request at a time over a pipe and waits at most ``timeout`` s.
A hung worker is killed, a crashed one is noticed; both are replaced and the request
is answered with a failure reason instead of taking the study down.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
import time
from dataclasses import asdict
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from sktune.errors import SktuneError
from sktune.plan import Plan
from sktune.pipe.protocol import (BisectRequest, BisectResult, ConfirmRequest, ConfirmResult, MalformedResult,
                                  ProfileRequest, ProfileResult, RunnerConfig, ThroughCompileRequest,
                                  ThroughCompileResult, TimingUpdate, TrialRequest, TrialResult, WorkerFailure)
from sktune.pipe.verify_shapes import VerifyOnlyShapes, VerifyRequest, VerifyResult
from sktune.pipe.workload import Workload
from sktune.worker.serve import serve

log = logging.getLogger(__name__)
T = TypeVar("T")


WORKER_START_TIMEOUT_S = 600.0  # a worker not started by then has failed (the run says so and stops)


class SupervisedWorker:
    """Owns one worker process; restarts it after a hang or a crash."""

    def __init__(self, config: dict[str, Any], cache_dir: str | None,
                 start_timeout: float = WORKER_START_TIMEOUT_S) -> None:
        self.config = config
        self.cache_dir = cache_dir
        self.start_timeout = start_timeout
        self.workload: Workload | None = None
        self._ctx = mp.get_context("spawn")
        self._process: Any = None
        self._conn: Connection | None = None
        self.restarts = 0
        self._stopped_at: float | None = None  # when this run last stopped its worker (a restart's predecessor)
        # The emulated static compiles of this run's verifications: no trial holds them, and the
        # study's estimated host time must (host_time.record_run).
        self.verify_static: list[dict[str, Any]] = []

    def start(self) -> Workload:
        """Start the worker and wait until the model is loaded, captured and checked."""
        parent, child = self._ctx.Pipe()
        self._process = self._ctx.Process(target=serve, daemon=True,
                                          args=(child, self.config, self.cache_dir, os.getpid(), self._stopped_at))
        self._process.start()
        child.close()
        self._conn = parent
        answer = self._receive(self.start_timeout)
        if isinstance(answer, WorkerFailure):
            self.close()
            raise SktuneError(f"the trial worker could not start ({answer.reason})")
        status, *rest = answer
        if status != "ok":
            self.close()
            message, trace = rest
            log.debug("worker traceback:\n%s", trace)  # --debug shows where in the user's code
            if status == "user_error":
                raise SktuneError(message)
            raise SktuneError(f"the trial worker failed while loading the model: {message}")
        self.workload = Workload.from_json(rest[0])
        return self.workload

    def restart_with(self, **changes: Any) -> Workload:
        """Start a fresh worker whose config has ``changes`` (e.g. to measure what it skipped)."""
        self.close()
        self.config = {**self.config, **changes}
        return self.start()

    # -- the TrialWorker protocol (typed; JSON stays on the pipe) ----------------------
    def run(self, request: TrialRequest, timeout: float) -> TrialResult | WorkerFailure:
        return self._typed("run", request.to_json(), timeout, TrialResult.from_json)

    def more(self, n_batches: int, timeout: float) -> TimingUpdate | WorkerFailure:
        return self._typed("more", {"n_batches": n_batches}, timeout, TimingUpdate.from_json)

    def bisect(self, plan: Plan, max_runs: int, timeout: float) -> BisectResult | WorkerFailure:
        return self._typed("bisect", BisectRequest(plan, max_runs).to_json(), timeout, BisectResult.from_json)

    def confirm(self, request: ConfirmRequest, timeout: float) -> ConfirmResult | WorkerFailure:
        return self._typed("confirm", request.to_json(), timeout, ConfirmResult.from_json)

    def through_compile(self, request: ThroughCompileRequest, timeout: float) -> ThroughCompileResult | WorkerFailure:
        return self._typed("through_compile", request.to_json(), timeout, ThroughCompileResult.from_json)

    def profile(self, request: ProfileRequest, timeout: float) -> ProfileResult | WorkerFailure:
        return self._typed("profile", request.to_json(), timeout, ProfileResult.from_json)

    def verify_shapes(self, timeout: float) -> VerifyOnlyShapes | WorkerFailure:
        """The model's verify-only shapes (none captured yet: the worker only names them)."""
        return self._typed("verify_shapes", None, timeout, VerifyOnlyShapes.from_json)

    def verify(self, request: VerifyRequest, timeout: float) -> VerifyResult | WorkerFailure:
        """The plan verified bitwise at one verify-only shape, untimed (the first time there, the
        worker captures that shape and takes its references too)."""
        result = self._typed("verify", request.to_json(), timeout, VerifyResult.from_json)
        if isinstance(result, VerifyResult) and result.static_compile:
            self.verify_static.append(result.static_compile)
        return result

    def _typed(self, command: str, payload: dict[str, Any] | None, timeout: float,
               parse: Callable[[Any], T]) -> T | WorkerFailure:
        """One request; its answer parsed, or a failure (a malformed answer is one too)."""
        answer = self.request(command, payload, timeout)
        if isinstance(answer, WorkerFailure):
            return answer
        try:
            return parse(answer)
        except MalformedResult as exc:  # a worker that answers nonsense is as broken as one that crashes
            return WorkerFailure("error", str(exc))

    def request(self, command: str, payload: Any, timeout: float) -> Any:
        """Send one request; its JSON answer, or a WorkerFailure after which the worker is fresh."""
        if self._process is None or not self._process.is_alive():
            self._restart()
        assert self._conn is not None
        try:
            self._conn.send((command, payload))
        except (BrokenPipeError, OSError):
            failure = self._exit_failure()
            self._restart()
            return failure
        answer = self._receive(timeout)
        if isinstance(answer, WorkerFailure):
            self._restart()
            return answer
        status, *rest = answer
        if status == "ok":
            return rest[0]
        message, trace = rest
        log.debug("worker error: %s", trace)
        if status == "interrupted":  # not the plan's doing (a library cut short): a fresh worker, the plan again
            self._restart()
            return WorkerFailure("interrupted", message, trace)
        return WorkerFailure("error", message, trace)

    def _receive(self, timeout: float) -> Any:
        assert self._conn is not None and self._process is not None
        if not self._conn.poll(timeout):
            if self._process.is_alive():
                return WorkerFailure("hang", f"no answer within {timeout:.0f} s; worker killed")
            return self._exit_failure()
        try:
            return self._conn.recv()
        except (EOFError, OSError):
            self._process.join(5)
            return self._exit_failure()

    def _exit_failure(self) -> WorkerFailure:
        """The worker is gone: a crash, unless it was stopped from outside (SIGTERM, SIGINT: a
        stop sent to the whole process group, as ``timeout`` and job schedulers send it),
        which is not the plan's failure (records.interrupted: its plan is measured again)."""
        code = self._process.exitcode if self._process is not None else None
        if code is not None and -code in (signal.SIGTERM, signal.SIGINT):
            return WorkerFailure("interrupted", f"worker stopped by signal {-code}")
        return WorkerFailure("crash", self._exit_description())

    def _exit_description(self) -> str:
        code = self._process.exitcode if self._process is not None else None
        if code is not None and code < 0:
            return f"worker killed by signal {-code}"
        return f"worker exited with code {code}"

    def _restart(self) -> None:
        self.close()
        self.restarts += 1
        log.info("restarting the trial worker (%d)", self.restarts)
        self.start()

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.send(("stop", None))
            except (BrokenPipeError, OSError):
                pass
        if self._process is not None:
            self._process.join(2)
            if self._process.is_alive():
                self._process.kill()
                self._process.join(5)
            self._stopped_at = time.time()
        if self._conn is not None:
            self._conn.close()
        self._process, self._conn = None, None

    def __enter__(self) -> "SupervisedWorker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def runner_config(**kwargs: Any) -> dict[str, Any]:
    """A RunnerConfig as a plain dict (what crosses the process boundary)."""
    return asdict(RunnerConfig(**kwargs))
