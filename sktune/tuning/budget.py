"""Spending the trial budget well: effort presets, pruning, and stopping when gains dry up."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import optuna

from sktune.pipe.protocol import CONFIRM_ROUNDS
from sktune.tuning.attrs import StudyAttr, TrialAttr
from sktune.tuning.records import (feasible_ratios, feasible_trials, heaviest_shape_ratio, is_feasible, reused,
                                   skipped, timing_of)
from sktune.tuning.workers import worker_tag

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Effort:
    """How much to spend: trials, batch pairs per measurement step, patience, finalists."""

    trials: int
    chunks: tuple[int, ...]  # batch pairs timed per step; pruning is checked between steps
    patience: int | None  # stop after this many trials in a row without a significant gain
    confirm_top: int  # finalists re-measured together at the end
    # The whole-region refinement is tried only if it costs at most this many trials'
    # compiles (tuning/refine.py); None: always.
    whole_region_cap: float | None = None
    # Rounds of 5 interleaved batch pairs in the finalists' round and in the timing through
    # sktune.apply (tuning/through_compile.py): each plan gets 5 × this many pairs.
    confirm_rounds: int = CONFIRM_ROUNDS

    @property
    def n_batches(self) -> int:
        return sum(self.chunks)


EFFORTS: dict[str, Effort] = {
    "quick": Effort(trials=15, chunks=(10, 10), patience=6, confirm_top=2, whole_region_cap=3),
    "default": Effort(trials=30, chunks=(10, 10, 10), patience=12, confirm_top=3, whole_region_cap=3),
    "thorough": Effort(trials=100, chunks=(10, 10, 10, 10, 10, 10), patience=30, confirm_top=5, confirm_rounds=10),
}


class ClearlyWorsePruner(optuna.pruners.BasePruner):
    """Prune a candidate once its ratio's interval lies wholly above the best exact ratio.

    The objective reports the *lower* end of the 95 % interval of the candidate's time
    ratio after each measurement step: if even that is slower than the best exact trial
    so far, more batches cannot make it the best.

    Several shapes: the steps are timed at the heaviest shape, and the yardstick is the best
    trial's ratio at that shape (a plan clearly slower there is dropped before the others).
    """

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        step = trial.last_step
        if step is None:
            return False
        feasible = feasible_trials(study)
        if not feasible:
            return False
        best = min(feasible, key=lambda t: t.value)  # type: ignore[arg-type, return-value]
        return trial.intermediate_values[step] > heaviest_shape_ratio(best)


class TrialBudget:
    """Stops the study after ``n`` trials of this invocation that cost something.

    Skipped trials (hopeless by the exactness probe, over the scope cap) take no compile,
    so they do not use up the budget; ``max_skips`` in a row end the search anyway.
    Reused trials (a plan the study had measured, tuning/reuse.py) take no compile either,
    but a sampler that has converged proposes nothing else: after ``free_reuses`` in a row
    without a measured trial, each further one counts as a trial, so the search still
    ends, at most ``n`` trials later (issue 24).
    """

    def __init__(self, n: int, max_skips: int = 200, free_reuses: int = 10) -> None:
        self.n, self.max_skips, self.free_reuses = n, max_skips, free_reuses
        self.spent = self.skips_in_a_row = self.reuses_in_a_row = 0

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        self.spends(trial)
        if self.exhausted:
            study.stop()

    def spends(self, trial: optuna.trial.FrozenTrial) -> bool:
        """Count ``trial`` (the next one finished); whether it used up one of the ``n``."""
        spent = self.spent
        if skipped(trial):
            self.skips_in_a_row += 1
        elif reused(trial):
            self.reuses_in_a_row += 1
            self.spent += self.reuses_in_a_row > self.free_reuses
            self.skips_in_a_row = 0
        else:
            self.spent += 1
            self.skips_in_a_row = self.reuses_in_a_row = 0
        return self.spent > spent

    @property
    def exhausted(self) -> bool:
        return self.spent >= self.n or self.skips_in_a_row >= self.max_skips


class Patience:
    """Stops the study after ``k`` finished trials in a row bring no significant gain.

    A gain is significant when a new exact trial's whole ratio interval lies below the
    best exact ratio before it (below 1.0 at first: faster than unfused). Only sampled
    trials count; the queued starting points (anchors, seeds) always run.
    """

    def __init__(self, k: int) -> None:
        self.k = k
        self.without_gain = 0
        self.stopped = False  # it stopped this run's search

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        # A reused trial cost nothing and repeats a ratio already in the study: neither a
        # gain nor a measurement spent without one.
        if skipped(trial) or reused(trial) or TrialAttr.ANCHOR in trial.user_attrs:
            return
        before = [r for r in feasible_ratios(study) if r != trial.value] or [1.0]
        timing = timing_of(trial)
        if is_feasible(trial) and timing is not None and timing.ratio_ci[1] < min(min(before), 1.0):
            self.without_gain = 0
            return
        self.without_gain += 1
        waiting = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
        if self.without_gain >= self.k and not waiting:
            log.info("stopping: %d trials in a row without a significant gain", self.without_gain)
            # Whose stop: with several workers on the study, the others' summaries must not claim it.
            study.set_user_attr(StudyAttr.STOPPED_EARLY, {"after_trial": trial.number, "patience": self.k,
                                                          "worker": worker_tag()})
            self.stopped = True
            study.stop()
