"""Which neighbour of the best trial to measure first: a small model from the study's own trials.

Each complete trial is one row: its parameters one-hot (every key of the space, a
first/last unit's unsuggested keys read from the shared ones), its log time ratio the
target. A ridge fit on those rows predicts each candidate neighbour's ratio, and its uncertainty;
candidates are measured most promising first, by the lower bound (issue 24: spend
measurements on the most promising of many candidates). With few rows the ridge term
keeps every weight near zero and the order near the seeded random tie-break, so the model
cannot do worse than chance by much.
Inexact trials count too: their time says what a move costs, whatever their exactness.
Each fused region of the decoded plan is a feature of its own too (by its op span): the
block and cut keys say which ops a region holds only jointly, so a fit on them alone blamed
a block for the region it had been fused into. On transpose_mix every fusing starting
point fuses the gate with its mixer and is 2.6-3.2x slower than unfused; the fit then
ranked the gate fused on its own (the best plan's missing region) seventh (docs/measured.md,
"Regions in the fit").

Which kind of move comes first (``move_group``): a region layout never measured that the
fit, optimistically, expects to beat the best trial; then, once per layout, the centre's
own option and fallback moves (the centre: the best trial, or one tied with it); then the
other unmeasured layouts; last, layouts measured before with other options. Trying every
structural neighbour of a new best before any option cost six or seven pruned trials
around the best layouts of shared_gate and transpose_mix, where options decided the last
2 % (docs/measured.md, "Options once per layout"); trying options before every unpromising
layout, each time, let option noise walk the best along one layout.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence

import numpy as np
from optuna.trial import FrozenTrial, TrialState

from sktune.space.neighbours import Neighbour, full_params
from sktune.plan import Plan, Scope
from sktune.space.search_space import SearchSpace
from sktune.tuning.attrs import TrialAttr

RIDGE = 1.0  # weight decay of the fit, in units of one trial's squared error
# Ranked by a lower confidence bound (prediction minus KAPPA standard errors), as a
# Bayesian linear model would be: with a plain prediction, a cut no trial has set had no
# weight at all and lost to moves the fit already knew to be mediocre (exact_sum_cut: the
# winning cut came third; docs/measured.md, "Off-anchor spaces").
KAPPA = 1.0


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


Layout = tuple[Scope, ...]


def with_regions(params: dict, plan: Plan) -> dict:
    """``params`` plus one key per fused region of ``plan`` (a never-fuse range is no region)."""
    return {**params, **{f"region:{s.first_op}-{s.last_op}": True for s in plan.scopes if s.name is not None}}


def trial_plan(space: SearchSpace, trial: FrozenTrial) -> Plan:
    """A trial's plan: the one it recorded, else its parameters decoded (every key: ``full_params``)."""
    plan = trial.user_attrs.get(TrialAttr.PLAN)
    return Plan.from_json(plan) if plan is not None else space.decode(full_params(space, trial.params))


def trial_features(space: SearchSpace, trial: FrozenTrial) -> dict:
    """A trial's parameters (every key: ``full_params``) and the regions of its plan."""
    return with_regions(full_params(space, trial.params), trial_plan(space, trial))


def move_group(layout: Layout, hopeful: bool, layout_counts: Mapping[Layout, int], centre: Layout | None) -> int:
    """0: a layout never measured that may beat the best; 1: the centre's own option moves while
    its layout has one measurement; 2: another unmeasured layout; 3: a layout measured before."""
    if layout not in layout_counts:
        return 0 if hopeful else 2
    return 1 if layout == centre and layout_counts[layout] <= 1 else 3


def rank(space: SearchSpace, candidates: Sequence[Neighbour], trials: Sequence[FrozenTrial],
         rng: random.Random, layout_counts: Mapping[Layout, int] | None = None,
         centre: Layout | None = None, incumbent: float | None = None) -> list[Neighbour]:
    """``candidates`` (neighbours of the plan whose layout is ``centre``), most promising first by
    the fit on ``trials`` (``observed_ratio``), in the groups of ``move_group``; ``layout_counts``:
    how many measured trials each region layout has; ``incumbent``: the best exact ratio."""
    counts: Mapping[Layout, int] = layout_counts or {}
    order = list(candidates)
    rng.shuffle(order)  # ties (and an empty model) in seeded random order
    rows = [(trial_features(space, t), math.log(r)) for t in trials if t.params and (r := observed_ratio(t))]
    if len(rows) < 2:
        return sorted(order, key=lambda c: move_group(c.plan.scopes, True, counts, centre))
    # One column per (key, value) measured or proposed: a value no trial has measured (a cut
    # never set) keeps its prior, so its uncertainty shows instead of vanishing.
    values = {(k, repr(v)) for params, _ in rows for k, v in params.items()}
    proposed = {id(c): with_regions(c.params, c.plan) for c in order}
    values |= {(k, repr(v)) for c in order for k, v in proposed[id(c)].items()}
    columns = {kv: j for j, kv in enumerate(sorted(values))}

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
    a_inv = np.linalg.inv(x.T @ x + RIDGE * np.eye(len(columns)))
    weights = a_inv @ x.T @ (y - mean)
    residual = y - mean - x @ weights
    sigma = math.sqrt(max(float(residual @ residual) / max(len(rows) - 1, 1), 1e-4))

    def optimistic(params: dict) -> float:
        """The fit's prediction minus ``KAPPA`` standard errors: an untried value is worth a look."""
        f = features(params)
        return float(f @ weights) - KAPPA * sigma * math.sqrt(float(f @ a_inv @ f))

    predicted = {id(c): optimistic(proposed[id(c)]) for c in order}
    # A region layout never measured comes before one measured with other options: the
    # model knows the latter, and an option alone moves a ratio less than a cut does
    # (docs/measured.md, "A space whose best is no starting point"). An unmeasured layout
    # that even the optimistic fit does not expect to beat the best waits for the centre's
    # options (module docstring).
    bar = math.inf if incumbent is None or incumbent <= 0 else math.log(incumbent) - mean
    return sorted(order, key=lambda c: (move_group(c.plan.scopes, predicted[id(c)] < bar, counts, centre),
                                        predicted[id(c)]))
