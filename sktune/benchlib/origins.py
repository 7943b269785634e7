"""Where a study's good trials came from: a starting point, the refinement, a culprit
seed, or the sampler (local search, TPE, random start-up).

Issue 24 asks how often a sampled or local-search trial is the best or within 2 % of it
on a deep model; this reads the answer back from the study's own records. A reused
trial (``tuning/reuse.py``) counts under the trial whose plan it reused: that is where the
plan came from.
"""

from __future__ import annotations

from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial

from sktune.tuning.dcci_seed import DCCI_FROM_CULPRIT
from sktune.tuning.attrs import TrialAttr
from sktune.tuning.records import best_record, feasible_trials
from sktune.tuning.refine import REFINED

STARTING_POINT, REFINEMENT, CULPRIT, LOCAL, TPE, RANDOM = (
    "starting point", "refinement", "culprit seed", "local search", "tpe", "random start-up")
SAMPLED = (LOCAL, TPE, RANDOM)


def sampled(kind: str) -> bool:
    """Proposed by the sampler, or the refinement of a plan it proposed."""
    return kind.removeprefix(f"{REFINEMENT} of ") in SAMPLED


def origin(trial: FrozenTrial, by_number: dict[int, FrozenTrial]) -> str:
    """The kind of proposal that put ``trial``'s plan in the study."""
    source = trial.user_attrs.get(TrialAttr.REUSED_FROM)
    if source is not None and source in by_number and source != trial.number:
        return origin(by_number[source], by_number)
    anchor = trial.user_attrs.get(TrialAttr.ANCHOR)
    if anchor is not None:
        if anchor.startswith(REFINED):  # the searched best with one costly value: say where that came from
            base = next((t for t in by_number.values() if t.number < trial.number and t.params == trial.params
                         and not str(t.user_attrs.get(TrialAttr.ANCHOR, "")).startswith(REFINED)), None)
            return REFINEMENT if base is None else f"{REFINEMENT} of {origin(base, by_number)}"
        return CULPRIT if anchor == DCCI_FROM_CULPRIT else STARTING_POINT
    proposed = str(trial.user_attrs.get(TrialAttr.PROPOSED, ""))
    if proposed.startswith("local"):
        return LOCAL
    return TPE if proposed == "tpe" else RANDOM


@dataclass(frozen=True)
class OriginRow:
    origin: str
    trials: int
    exact: int
    within: int  # exact trials within ``tolerance`` of the smallest exact ratio the search measured
    best: bool  # the study's named best (the finalists' verdict) came from here


def origin_table(study: optuna.Study, tolerance: float = 0.02) -> list[OriginRow]:
    """One row per origin that proposed any trial, the study's best marked."""
    trials = study.get_trials(deepcopy=False)
    by_number = {t.number: t for t in trials}
    best = best_record(study)  # the study's verdict (the finalists' round, where there was one)
    exact = feasible_trials(study)
    # "Within" compares the search's own measurements: the finalists re-measured only a few.
    best_ratio = min((t.value for t in exact), default=None)  # type: ignore[type-var]
    rows = []
    kinds = [origin(t, by_number) for t in trials]
    for kind in dict.fromkeys(kinds):
        mine = [t for t, k in zip(trials, kinds) if k == kind]
        mine_exact = [t for t in exact if origin(t, by_number) == kind]
        within = [t for t in mine_exact if best_ratio is not None and t.value <= best_ratio * (1 + tolerance)]
        rows.append(OriginRow(kind, len(mine), len(mine_exact), len(within),
                              best is not None and best.number in {t.number for t in mine_exact}))
    return rows


__all__ = ["SAMPLED", "OriginRow", "origin", "origin_table", "sampled"]
