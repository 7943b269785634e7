"""A second process that compiles some of a plan's new regions while the worker compiles the rest.

Inductor compiles a region in one thread, mostly Python (tracing, lowering, code
generation: 1-2 s a region on CPU), and keeps what it compiled in on-disk caches (FX graph
and AOTAutograd) that every process with the same cache directory shares; a region found
there loads in ~0.1 s (docs/measured.md "Compile cost"). So the worker hands about half
the work of the regions a trial compiles anew to this helper (largest first, to whichever
side has less: ``helper_share``), compiles the others itself, then loads the
helper's from the cache: on a second core, multi-region compiles take less time.

The helper holds its own copy of the captured graphs (from the capture cache) and compiles
with the same backend code, so its regions have the worker's cache keys. It works only
while the worker compiles, never beside a measurement, and dies with the worker.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection, Pipe
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sktune.graph.opgraph import OpGraph
    from sktune.plan import Plan

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HelperSpec:
    """How the helper rebuilds the worker's graphs: the same model file, shapes and inputs."""

    model_path: str
    backend: str
    shapes: tuple[str | None, ...]  # None: the model's only shape
    capture_cache: str | None


class CompileHelper:
    """The worker's side: start the helper, hand it regions, wait for them."""

    def __init__(self, spec: HelperSpec, graphs: dict[str | None, OpGraph]) -> None:
        # A plain subprocess: the worker is a daemonic multiprocessing child, which may not
        # have multiprocessing children of its own.
        self._conn, child = Pipe()
        self._process = subprocess.Popen(
            [sys.executable, "-m", "sktune.backends.compile_helper", str(child.fileno()), str(os.getpid()),
             json.dumps(asdict(spec))], pass_fds=(child.fileno(),))
        child.close()
        self._shape_of = {id(graph): name for name, graph in graphs.items()}
        self._graphs = graphs  # keeps the ids above meaning these graphs
        self._pending: set[str] = set()
        self.alive = True
        self.delivered = 0  # regions the helper compiled for the worker
        self.compile_s: dict[str, float] = {}  # what each delivered region cost the helper to compile

    def serves(self, graph: OpGraph) -> bool:
        return self.alive and id(graph) in self._shape_of

    def send(self, graph: OpGraph, plan: Plan, keys: set[str], profile_kernels: bool = False) -> bool:
        """Ask for the plan's regions with these keys (compiled for the profiler if
        ``profile_kernels``: other keys); False if the helper is gone."""
        try:
            self._conn.send(("compile", self._shape_of[id(graph)], plan.to_json(), sorted(keys), profile_kernels))
        except (OSError, ValueError):
            self._gone("could not be reached")
            return False
        self._pending |= keys
        return True

    def has_pending(self, key: str | None) -> bool:
        """Whether ``key`` was handed over and is still coming."""
        return key in self._pending

    def wait(self, key: str) -> None:
        """Until the helper has compiled ``key``, given up on it, or died (the worker then
        compiles it itself, as it would without a helper)."""
        while key in self._pending and self.alive:
            try:
                kind, payload = self._conn.recv()
            except (EOFError, OSError):
                self._gone("died")
                return
            if kind == "done":
                done, seconds = payload
                self._pending.discard(done)
                self.compile_s[done] = seconds
                self.delivered += 1
            elif kind == "finished":  # the end of one request: whatever is left of it is not coming
                self._pending -= set(payload)
            elif kind == "failed":  # could not start: compile everything in the worker
                self._gone(f"failed to start: {payload}")

    def settle(self) -> None:
        """Until nothing handed over is still compiling: a timing may start (the fuse-all
        yardstick handed over at start-up can outlast a short start-up)."""
        for key in list(self._pending):
            self.wait(key)

    @property
    def pid(self) -> int:
        return self._process.pid

    def _gone(self, why: str) -> None:
        if self.alive:
            log.warning("the compile helper %s; the worker compiles every region itself", why)
        self.alive = False
        self._pending.clear()


def _serve(conn: Connection, spec: HelperSpec, parent_pid: int) -> None:
    """Helper main: rebuild the graphs, then compile what is asked until the worker is gone."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the tuner handles Ctrl-C; we end with the worker
    from sktune.child_process import die_with_parent, thread_locked_progress_bars

    die_with_parent(parent_pid)
    thread_locked_progress_bars()
    try:
        backend, graphs = _rebuild(spec)
    except Exception as exc:  # noqa: BLE001 - any failure: the worker carries on alone
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    from sktune.backends import get_backend
    from sktune.plan import Plan

    backends = {False: backend}  # by profile_kernels: the profile's compile has its own keys
    while True:
        try:
            _, *payload = conn.recv()  # ("compile", shape, plan, keys, profile_kernels): the only request
        except (EOFError, OSError):  # the worker is gone (closed, or reset on exit)
            return
        shape, plan_json, keys, profile_kernels = payload
        if profile_kernels not in backends:
            backends[profile_kernels] = get_backend(spec.backend, profile_kernels=profile_kernels, for_trials=True)
        try:
            started = time.perf_counter()
            for key in backends[profile_kernels].precompile(graphs[shape], Plan.from_json(plan_json), set(keys)):
                conn.send(("done", (key, time.perf_counter() - started)))
                started = time.perf_counter()
            conn.send(("finished", keys))
        except (BrokenPipeError, ConnectionResetError):
            return  # the worker is gone
        except Exception as exc:  # noqa: BLE001 - the worker compiles what is left itself
            log.debug("compile helper: %s: %s", type(exc).__name__, exc)
            conn.send(("finished", keys))


def _rebuild(spec: HelperSpec) -> tuple[Any, dict[str | None, OpGraph]]:
    """The worker's backend and captured graphs, rebuilt the way the runner builds them."""
    from pathlib import Path

    import torch

    from sktune.backends import get_backend
    from sktune.graph.capture_cache import capture_cached
    from sktune.load import build, draw_inputs, load_model_file

    logging.getLogger("torch").setLevel(logging.ERROR)
    torch.set_num_threads(1)
    torch.set_grad_enabled(False)
    backend = get_backend(spec.backend, for_trials=True)
    source = load_model_file(spec.model_path)
    model = build(source).to(backend.device)
    cache = None if spec.capture_cache is None else Path(spec.capture_cache)
    graphs = {}
    for name in spec.shapes:
        inputs = tuple(t.to(backend.device) for t in draw_inputs(source, 0, name))
        graphs[name] = capture_cached(model, inputs, cache, source.sha256)[0]
    return backend, graphs


if __name__ == "__main__":  # started by CompileHelper: pipe fd, worker pid, spec
    _spec = json.loads(sys.argv[3])
    _serve(Connection(int(sys.argv[1])), HelperSpec(**{**_spec, "shapes": tuple(_spec["shapes"])}), int(sys.argv[2]))


# A region's compile cost beyond its ops, in ops: tracing, code generation and a C++ build
# each cost ~0.6 s even for a tiny region, ~1-2 s for a 127-op layer (docs/measured.md
# "Compile cost"). Used only to split a plan's new regions between worker and helper.
REGION_FIXED_OPS = 50


def helper_share(sizes: dict[str, int]) -> set[str]:
    """The regions (key → ops) for the compile helper: largest first, each to whichever side
    has less work so far, the worker first. Handing over every second region in graph
    order gave one side the big repeated unit and the other only small ends."""
    worker = helper = 0
    share: set[str] = set()
    for key in sorted(sizes, key=lambda k: -sizes[k]):
        cost = sizes[key] + REGION_FIXED_OPS
        if helper < worker:
            share.add(key)
            helper += cost
        else:
            worker += cost
    return share
