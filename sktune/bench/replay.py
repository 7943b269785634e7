"""Replay saved exhaustive measurements to compare search strategies, trial for trial.

A replayed trial looks its plan up in the table instead of compiling and timing it, so
20 seeds × 3 strategies cost seconds. Strategies:

* ``sktune``: what ``sktune run`` does — anchors and profile-guided seeds first, then
  sktune's sampler; plans the exactness probe calls hopeless are skipped without a
  measurement (they do not count as trials, as in a real run).
* ``sktune-sampler``: the same without the starting points (what the sampler and the
  probe's skipping do on their own).
* ``tpe``: Optuna's default TPE on the same parameters, no seeds.
* ``random``: Optuna's random sampler on the same parameters.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import optuna

from sktune.bench.exhaustive import space_for
from sktune.space.plan import Plan
from sktune.tuning.budget import ANCHOR_ATTR
from sktune.tuning.study import exactness_from_description, make_sampler, starting_points

STRATEGIES = ("sktune", "sktune-sampler", "tpe", "random")
CHECKPOINTS = (10, 30, 60)


@dataclass(frozen=True)
class Run:
    """One strategy, one seed: the best exact ratio after each measured trial."""

    strategy: str
    seed: int
    best_so_far: tuple[float, ...]  # inf until the first exact trial

    def trials_to(self, target: float) -> int | None:
        """Measured trials until the best exact ratio is ≤ ``target`` (None: never)."""
        return next((k + 1 for k, b in enumerate(self.best_so_far) if b <= target), None)

    def best_after(self, k: int) -> float:
        return self.best_so_far[min(k, len(self.best_so_far)) - 1]


def exhaustive_best(measurements: dict[str, dict[str, Any]]) -> float:
    return min(m["ratio"] for m in measurements.values() if m["bitwise"] and m["ratio"] is not None)


def replay(data: dict[str, Any], strategy: str, seed: int, max_trials: int) -> Run:
    description, measurements = data["description"], data["measurements"]
    space = space_for(description, data["max_cuts"], data["options"])
    targets = [o["target"] for o in description["ops"]]
    exactness = exactness_from_description(description)
    ours = strategy in ("sktune", "sktune-sampler")
    if ours:
        sampler: optuna.samplers.BaseSampler = make_sampler(seed)
    elif strategy == "tpe":
        sampler = optuna.samplers.TPESampler(seed=seed)
    elif strategy == "random":
        sampler = optuna.samplers.RandomSampler(seed=seed)
    else:
        raise ValueError(f"unknown strategy {strategy!r}; known: {', '.join(STRATEGIES)}")
    study = optuna.create_study(direction="minimize", sampler=sampler)
    if strategy == "sktune":
        for name, params in starting_points(space, description):
            study.enqueue_trial(params, user_attrs={ANCHOR_ATTR: name})
    best, history, skips = math.inf, [], 0
    while len(history) < max_trials and skips < 10_000:
        trial = study.ask()
        plan: Plan = space.suggest(trial)
        if (ours and ANCHOR_ATTR not in trial.user_attrs
                and exactness.hopeless(plan, targets, space.exact_options)):
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            skips += 1
            continue
        m = measurements[plan.dumps()]
        if m["ratio"] is None:  # did not compile: a failed trial
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            trial.set_constraint("bitwise", 0.0 if m["bitwise"] else 1.0)
            study.tell(trial, m["ratio"])
            if m["bitwise"]:
                best = min(best, m["ratio"])
        history.append(best)
    return Run(strategy, seed, tuple(history))


def summarize(runs: Sequence[Run], best: float, tolerance: float = 0.02) -> dict[str, dict[str, Any]]:
    """Per strategy: median trials to within ``tolerance`` of the exhaustive best, best after k trials."""
    out: dict[str, dict[str, Any]] = {}
    for strategy in dict.fromkeys(r.strategy for r in runs):
        mine = [r for r in runs if r.strategy == strategy]
        reached = [r.trials_to(best * (1 + tolerance)) for r in mine]
        limit = len(mine[0].best_so_far)
        # Seeds that never got there count as "more than the limit" (the median stays honest).
        as_numbers = [t if t is not None else limit + 1 for t in reached]
        row: dict[str, Any] = {
            "seeds": len(mine),
            "trials_to_target_median": statistics.median(as_numbers),
            "trials_to_target": reached,
            "never_reached": sum(t is None for t in reached),
        }
        for k in CHECKPOINTS:
            ratios = [r.best_after(k) for r in mine]
            row[f"best_after_{k}_median"] = statistics.median(ratios)
            row[f"gap_after_{k}_median_pct"] = statistics.median((x / best - 1) * 100 for x in ratios)
        out[strategy] = row
    return out
