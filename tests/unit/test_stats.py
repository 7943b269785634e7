"""Paired-bootstrap timing statistics and the interleaved timer."""

from __future__ import annotations

import numpy as np
import pytest

from sktune.measure.stats import PairedTiming, paired_timing
from sktune.measure.timer import calibrate_calls_per_batch, interleaved_batches


def test_identical_arrays() -> None:
    times = list(np.random.default_rng(1).uniform(1e-3, 2e-3, size=40))
    t = paired_timing(times, times)
    assert t.ratio == 1.0
    assert t.ratio_ci[0] <= 1.0 <= t.ratio_ci[1]
    assert not t.faster
    assert t.n_batches == 40


def test_candidate_twice_as_fast() -> None:
    rng = np.random.default_rng(2)
    base = 1e-3 * (1 + 0.05 * rng.standard_normal(50))
    cand = 0.5e-3 * (1 + 0.05 * rng.standard_normal(50))
    t = paired_timing(base, cand)
    assert t.ratio == pytest.approx(0.5, rel=0.05)
    lo, hi = t.ratio_ci
    assert lo <= t.ratio <= hi < 1.0
    assert t.faster
    assert t.speedup == pytest.approx(2.0, rel=0.05)
    assert t.speedup_ci == (1 / hi, 1 / lo)
    data = t.to_json()
    assert data["faster"] is True and data["n_batches"] == 50


def test_pairing_cancels_shared_drift() -> None:
    # Both sides drift 3x over the run; the candidate is always 10% faster.
    drift = np.linspace(1.0, 3.0, 30)
    t = paired_timing(1e-3 * drift, 0.9e-3 * drift)
    assert t.ratio == pytest.approx(0.9)
    assert t.ratio_ci[1] < 1.0


def test_deterministic_for_seed() -> None:
    rng = np.random.default_rng(3)
    base, cand = rng.uniform(1, 2, 20), rng.uniform(1, 2, 20)
    assert paired_timing(base, cand, seed=7) == paired_timing(base, cand, seed=7)
    assert paired_timing(base, cand, seed=7).ratio_ci != paired_timing(base, cand, seed=8).ratio_ci


@pytest.mark.parametrize(
    "base, cand",
    [([1.0, 2.0], [1.0]), ([], []), ([1.0, 0.0], [1.0, 1.0]), ([1.0, float("nan")], [1.0, 1.0])],
)
def test_invalid_inputs_raise(base: list[float], cand: list[float]) -> None:
    with pytest.raises(ValueError):
        paired_timing(base, cand)


def test_speedup_is_inverse_ratio() -> None:
    t = PairedTiming(baseline_s=2.0, candidate_s=1.0, ratio=0.5, ratio_ci=(0.4, 0.8), n_batches=3)
    assert t.speedup == 2.0 and t.speedup_ci == (1.25, 2.5) and t.faster


def test_interleaved_batches_counts_and_order() -> None:
    order: list[str] = []
    base, cand = interleaved_batches(
        lambda: order.append("a"), lambda: order.append("b"), calls_per_batch=4, n_batches=5, warmup=2
    )
    assert len(base) == len(cand) == 5
    assert all(x >= 0 for x in base + cand)
    assert order.count("a") == order.count("b") == 2 + 4 * 5
    timed = order[4:]
    firsts = [timed[i * 8] for i in range(5)]
    assert firsts == ["a", "b", "a", "b", "a"]


def test_interleaved_batches_validates() -> None:
    with pytest.raises(ValueError):
        interleaved_batches(lambda: None, lambda: None, calls_per_batch=0, n_batches=1)


def test_calibrate_calls_per_batch() -> None:
    assert calibrate_calls_per_batch(lambda: None, target_batch_s=0.01, max_calls=50) == 50
    n = calibrate_calls_per_batch(lambda: sum(range(10_000)), target_batch_s=1e-9)
    assert n == 1
