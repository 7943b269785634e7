"""The CPU profiler's events as recorded: name, interval, thread.

``torch.profiler.profile.events()`` builds torch's Python event tree (parents, children,
aggregated times): ~10 s for the 200,000 events of 20 steps of a 3,000-op graph. The
recorded events (the profiler's own ``kineto_results``, which that tree is built from)
take ~0.5 s, and nesting, all sktune asks of the tree, follows from the intervals.

Kineto writes ``USDT:... profiler_start`` / ``profiler_stop`` lines straight to file
descriptor 2 whenever a profiler starts and stops, at any ``KINETO_LOG_LEVEL`` that still
lets its errors through (6 silences both); ``recording`` drops those two lines and passes
everything else written there on.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

# "USDT:2026-12-04 21:50:50 9258:9258 SyncActivityProfilerHandler.cpp:52] profiler_start"
_KINETO_NOISE = re.compile(rb"^USDT:\S+ \S+ \d+:\d+ \S+\.cpp:\d+\] profiler_(start|stop)\s*$")


@dataclass(frozen=True)
class RawEvent:
    name: str
    start_us: float
    end_us: float
    thread: int

    @property
    def duration_us(self) -> float:
        return self.end_us - self.start_us


def raw_events(prof: Any) -> list[RawEvent]:
    """Every event a finished ``torch.profiler.profile`` recorded, in start order."""
    recorded = prof.profiler.kineto_results.events()
    events = [RawEvent(e.name(), e.start_ns() / 1e3, (e.start_ns() + e.duration_ns()) / 1e3, e.start_thread_id())
              for e in recorded]
    return sorted(events, key=lambda e: (e.start_us, -e.end_us))


def outermost(events: Iterable[RawEvent], keep: Callable[[str], bool]) -> list[RawEvent]:
    """The kept events not nested in another kept event of the same thread (start order in)."""
    out: list[RawEvent] = []
    open_until: dict[int, float] = {}  # per thread: where the last outermost kept event ends
    for e in events:
        if keep(e.name) and e.start_us >= open_until.get(e.thread, float("-inf")):
            out.append(e)
            open_until[e.thread] = e.end_us
    return out


def by_enclosing(outer: list[RawEvent], events: Iterable[RawEvent]) -> Iterator[tuple[int, RawEvent]]:
    """``(k, e)`` for each event that starts inside ``outer[k]`` (``outer``: disjoint, in start
    order, e.g. the profiled steps or the per-op marks)."""
    starts = [o.start_us for o in outer]
    for e in events:
        k = bisect.bisect_right(starts, e.start_us) - 1
        if k >= 0 and e.start_us < outer[k].end_us:
            yield k, e


@contextlib.contextmanager
def _kineto_noise_dropped() -> Iterator[None]:
    """Run the block with fd 2 in a temporary file, then write back what it got, less
    Kineto's USDT start/stop lines. Other threads' writes in between come out late, not lost."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            kept = [line for line in sink.read().splitlines(keepends=True) if not _KINETO_NOISE.match(line)]
            if kept:
                os.write(2, b"".join(kept))


@contextlib.contextmanager
def recording() -> Iterator[Any]:
    """A started CPU ``torch.profiler.profile`` (stopped on leaving), without Kineto's
    start/stop lines on stderr."""
    from torch.profiler import ProfilerActivity, profile

    prof = profile(activities=[ProfilerActivity.CPU])
    with _kineto_noise_dropped():
        prof.start()
    try:
        yield prof
    finally:
        with _kineto_noise_dropped():
            prof.stop()
