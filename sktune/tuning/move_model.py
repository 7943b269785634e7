"""Which neighbour of the best trial to measure first: a small model from the study's own trials.

Each complete trial is one row: its parameters one-hot (every key of the space, a
first/last unit's unsuggested keys read from the shared ones), its log time ratio the
target. A ridge fit on those rows predicts each candidate neighbour's ratio; candidates are
measured most promising first (issue 24: spend measurements on the most promising of many
candidates). With few rows the ridge term keeps every weight near zero and the order
near the seeded random tie-break, so the model cannot do worse than chance by much.
Inexact trials count too: their time says what a move costs, whatever their exactness.
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection, Sequence

import numpy as np
from optuna.trial import FrozenTrial, TrialState

from sktune.space.neighbours import Neighbour, full_params
from sktune.space.plan import Scope
from sktune.space.search_space import SearchSpace

RIDGE = 1.0  # weight decay of the fit, in units of one trial's squared error


def observed_ratio(trial: FrozenTrial) -> float | None:
    """A complete trial's ratio; a pruned one's last reported value (the lower end of its
    interval: it was clearly slower, and the model must learn that), else None."""
    if trial.state == TrialState.COMPLETE:
        value = trial.value
    elif trial.state == TrialState.PRUNED and trial.intermediate_values:
        value = trial.intermediate_values[max(trial.intermediate_values)]
    else:
        return None
    return value if value is not None and math.isfinite(value) and value > 0 else None


def rank(space: SearchSpace, candidates: Sequence[Neighbour], trials: Sequence[FrozenTrial],
         rng: random.Random, seen_layouts: Collection[tuple[Scope, ...]] = ()) -> list[Neighbour]:
    """``candidates``, most promising first by the fit on ``trials`` (``observed_ratio``)."""
    order = list(candidates)
    rng.shuffle(order)  # ties (and an empty model) in seeded random order
    rows = [(full_params(space, t.params), math.log(r)) for t in trials if t.params and (r := observed_ratio(t))]
    if len(rows) < 2:
        return sorted(order, key=lambda c: c.plan.scopes in seen_layouts)
    columns = {(k, repr(v)): j for j, (k, v) in enumerate(
        sorted({(k, repr(v)) for params, _ in rows for k, v in params.items()}))}

    def features(params: dict) -> np.ndarray:
        x = np.zeros(len(columns))
        for k, v in params.items():
            j = columns.get((k, repr(v)))
            if j is not None:
                x[j] = 1.0
        return x

    x = np.stack([features(p) for p, _ in rows])
    y = np.array([r for _, r in rows])
    mean = y.mean()
    weights = np.linalg.solve(x.T @ x + RIDGE * np.eye(len(columns)), x.T @ (y - mean))
    predicted = {id(c): float(features(c.params) @ weights) for c in order}
    # A region layout never measured comes before one measured with other options: the
    # model knows the latter, and an option alone moves a ratio less than a cut does
    # (docs/measured.md, "A space whose best is no starting point").
    return sorted(order, key=lambda c: (c.plan.scopes in seen_layouts, predicted[id(c)]))
