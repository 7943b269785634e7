"""Interleaved wall-clock timing of a baseline and a candidate.

Timing A for a while and then B for a while confounds the comparison with any
drift in between (turbo budgets, thermal throttling, other tenants).
Alternating short batches A B B A A B ... exposes both to the same conditions,
and swapping the order on odd batches cancels "goes first"/"goes second"
effects such as cache state left behind by the other function.

The callables must block until their work is done; for asynchronous devices
pass ``sync`` (e.g. ``torch.cuda.synchronize``), which is called at both ends
of every timed batch.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

__all__ = ["calibrate_calls_per_batch", "interleaved_batches"]


def _time_batch(fn: Callable[[], object], calls: int, sync: Callable[[], None] | None) -> float:
    """Mean seconds per call over ``calls`` back-to-back calls."""
    if sync is not None:
        sync()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    if sync is not None:
        sync()
    return (time.perf_counter() - start) / calls


def interleaved_batches(
    baseline: Callable[[], object],
    candidate: Callable[[], object],
    *,
    calls_per_batch: int,
    n_batches: int,
    warmup: int = 3,
    sync: Callable[[], None] | None = None,
) -> tuple[list[float], list[float]]:
    """Per-call batch means (seconds) for baseline and candidate, ``n_batches`` each.

    Each function is first called ``warmup`` times (compilation, caches,
    allocator).  Batch ``i`` then times ``calls_per_batch`` calls of each,
    baseline first on even ``i`` and candidate first on odd ``i``.  The garbage
    collector is paused while timing so that a collection triggered by one
    function is not billed to the other.
    """
    if calls_per_batch < 1:
        raise ValueError(f"calls_per_batch must be at least 1, got {calls_per_batch}")
    if n_batches < 1:
        raise ValueError(f"n_batches must be at least 1, got {n_batches}")
    if warmup < 0:
        raise ValueError(f"warmup must be non-negative, got {warmup}")

    for _ in range(warmup):
        baseline()
        candidate()
    if sync is not None:
        sync()

    baseline_means: list[float] = []
    candidate_means: list[float] = []
    gc_was_enabled = gc.isenabled()
    gc.collect(1)  # young generations only: a full pass costs ~0.3 s in a process holding a 1,000-op graph
    gc.disable()
    try:
        for i in range(n_batches):
            if i % 2 == 0:
                baseline_means.append(_time_batch(baseline, calls_per_batch, sync))
                candidate_means.append(_time_batch(candidate, calls_per_batch, sync))
            else:
                candidate_means.append(_time_batch(candidate, calls_per_batch, sync))
                baseline_means.append(_time_batch(baseline, calls_per_batch, sync))
    finally:
        if gc_was_enabled:
            gc.enable()
    return baseline_means, candidate_means


def calibrate_calls_per_batch(
    fn: Callable[[], object],
    target_batch_s: float = 0.01,
    max_calls: int = 1000,
    *,
    sync: Callable[[], None] | None = None,
) -> int:
    """Calls per batch so that one batch of ``fn`` takes about ``target_batch_s``.

    Batches must be long compared with timer resolution and call overhead but
    short compared with machine drift; this doubles the probe size until the
    probe itself is long enough to estimate a per-call time (a tenth of the
    target), then scales.  The result is clamped to ``[1, max_calls]``.
    """
    if target_batch_s <= 0:
        raise ValueError(f"target_batch_s must be positive, got {target_batch_s}")
    if max_calls < 1:
        raise ValueError(f"max_calls must be at least 1, got {max_calls}")

    fn()  # the first call often pays one-off costs
    calls = 1
    per_call = _time_batch(fn, calls, sync)
    while per_call * calls < target_batch_s / 10 and calls < max_calls:
        calls = min(calls * 2, max_calls)
        per_call = _time_batch(fn, calls, sync)
    if per_call <= 0:
        return max_calls
    return max(1, min(max_calls, round(target_batch_s / per_call)))
