"""Per-call times of several callables, their batches interleaved so that drift on a shared
machine hits all of them alike (the benchmarks that compare ways of calling a model)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def interleaved_seconds(candidates: dict[str, Callable[[], Any]], rounds: int, calls: int,
                        warmup: int = 3) -> dict[str, list[float]]:
    """Seconds per call of each candidate, one sample per round of ``calls`` calls."""
    for fn in candidates.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(rounds):
        for name, fn in candidates.items():
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            times[name].append((time.perf_counter() - start) / calls)
    return times
