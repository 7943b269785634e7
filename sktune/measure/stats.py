"""Statistics for interleaved (A B A B ...) timing batches.

Batches are compared by their medians, which shrug off the occasional batch
hit by a context switch or clock change.  The confidence interval comes from
a *paired* bootstrap: batch ``i`` of the baseline and batch ``i`` of the
candidate ran back to back under the same machine conditions, so they are
resampled together and slow drifts (thermal, frequency) cancel in the ratio.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["PairedTiming", "paired_timing"]


@dataclass(frozen=True)
class PairedTiming:
    """Baseline vs candidate timing; all times are seconds per call."""

    baseline_s: float
    candidate_s: float
    ratio: float
    ratio_ci: tuple[float, float]
    n_batches: int

    @property
    def speedup(self) -> float:
        """``baseline_s / candidate_s`` (>1 = candidate is faster)."""
        return self.baseline_s / self.candidate_s

    @property
    def speedup_ci(self) -> tuple[float, float]:
        lo, hi = self.ratio_ci
        return (1.0 / hi, 1.0 / lo)

    @property
    def faster(self) -> bool:
        """Candidate is faster with 95% confidence (whole ratio interval below 1)."""
        return self.ratio_ci[1] < 1.0

    def to_json(self) -> dict[str, Any]:
        return {
            "baseline_s": self.baseline_s,
            "candidate_s": self.candidate_s,
            "ratio": self.ratio,
            "ratio_ci": list(self.ratio_ci),
            "n_batches": self.n_batches,
            "speedup": self.speedup,
            "speedup_ci": list(self.speedup_ci),
            "faster": self.faster,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "PairedTiming":
        lo, hi = data["ratio_ci"]
        return cls(float(data["baseline_s"]), float(data["candidate_s"]), float(data["ratio"]),
                   (float(lo), float(hi)), int(data["n_batches"]))


def _as_times(name: str, values: Sequence[float]) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.size and not (np.all(np.isfinite(arr)) and np.all(arr > 0)):
        raise ValueError(f"{name} must be finite and positive (seconds per call)")
    return arr


def paired_timing(
    baseline_batch_means: Sequence[float],
    candidate_batch_means: Sequence[float],
    n_boot: int = 2000,
    seed: int = 0,
) -> PairedTiming:
    """Median per-call times, their ratio, and a paired-bootstrap 95% CI of the ratio.

    Deterministic for a given ``seed``.  Raises ``ValueError`` for empty or
    unequal-length inputs, non-positive times, or ``n_boot < 1``.
    """
    base = _as_times("baseline_batch_means", baseline_batch_means)
    cand = _as_times("candidate_batch_means", candidate_batch_means)
    if base.size == 0 or cand.size == 0:
        raise ValueError("need at least one batch on each side")
    if base.size != cand.size:
        raise ValueError(f"paired timing needs equal batch counts, got {base.size} baseline and {cand.size} candidate")
    if n_boot < 1:
        raise ValueError(f"n_boot must be at least 1, got {n_boot}")

    baseline_s = float(np.median(base))
    candidate_s = float(np.median(cand))
    n = base.size

    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_boot, n))  # same indices for both sides: paired
    ratios = np.median(cand[idx], axis=1) / np.median(base[idx], axis=1)
    lo, hi = np.percentile(ratios, [2.5, 97.5])

    return PairedTiming(
        baseline_s=baseline_s,
        candidate_s=candidate_s,
        ratio=candidate_s / baseline_s,
        ratio_ci=(float(lo), float(hi)),
        n_batches=int(n),
    )
