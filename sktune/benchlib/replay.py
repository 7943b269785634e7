"""Replay saved exhaustive measurements to compare search strategies, trial for trial.

A replayed trial runs through sktune's own objective and loop (``tuning/objective.py``,
``tuning/loop.py``: the same skipping, pruning, budget, patience and constraint); only
the worker differs: it looks the plan up in the table instead of compiling and timing
it, so 20 seeds × 4 strategies cost seconds. As in a real run, a trial whose plan the
study has measured already takes that outcome without asking the worker
(``tuning/reuse.py``): the worker counts the compiles and measurements it was asked
for, which is what a device would have spent. Strategies:

* ``sktune``: what ``sktune run`` does — anchors and profile-guided seeds first, then
  sktune's sampler; plans the exactness probe calls hopeless are skipped without a
  measurement (they do not count as trials, as in a real run).
* ``sktune-sampler``: the same without the starting points (what the sampler and the
  probe's skipping do on their own).
* ``tpe``: Optuna's default TPE on the same parameters, no seeds, no probe skipping.
* ``random``: Optuna's random sampler on the same parameters, no seeds, no probe skipping.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import optuna

from sktune.benchlib.exhaustive import space_for
from sktune.capabilities import Capabilities, OptionSpec
from sktune.measure.stats import PairedTiming
from sktune.plan import Plan
from sktune.tuning.budget import EFFORTS, ClearlyWorsePruner, Effort
from sktune.tuning.loop import search
from sktune.tuning.objective import ObjectiveRules, make_objective
from sktune.pipe.protocol import TimingUpdate, TrialRequest, TrialResult, WorkerFailure
from sktune.tuning.attrs import TrialAttr
from sktune.tuning.records import feasible_ratios, skipped
from sktune.tuning.sampler import attach_space, hopeless_filter, make_sampler
from sktune.tuning.space_setup import starting_points
from sktune.pipe.workload import Workload

STRATEGIES = ("sktune", "sktune-sampler", "tpe", "random")
CHECKPOINTS = (10, 30, 60)


@dataclass(frozen=True)
class Run:
    """One strategy, one seed: after each trial that was not skipped, the best exact ratio
    and how many compiles and measurements the worker had made so far (a trial that
    reused an earlier one's plan made neither: tuning/reuse.py)."""

    strategy: str
    seed: int
    best_so_far: tuple[float, ...]  # inf until the first exact trial
    max_trials: int  # the budget (a run that stopped early for lack of gains has fewer entries)
    compiles: tuple[int, ...] = ()  # cumulative, one per entry of best_so_far
    measurements: tuple[int, ...] = ()  # cumulative: compiles that gave a timing

    def trials_to(self, target: float) -> int | None:
        """Trials (not skipped) until the best exact ratio is ≤ ``target`` (None: never)."""
        return next((k + 1 for k, b in enumerate(self.best_so_far) if b <= target), None)

    def compiles_to(self, target: float) -> int | None:
        k = self.trials_to(target)
        return None if k is None else self.compiles[k - 1]

    def measurements_to(self, target: float) -> int | None:
        k = self.trials_to(target)
        return None if k is None else self.measurements[k - 1]

    def best_after(self, k: int) -> float:
        return self.best_so_far[min(k, len(self.best_so_far)) - 1]


def exhaustive_best(measurements: dict[str, dict[str, Any]]) -> float:
    return min(m["ratio"] for m in measurements.values() if m["bitwise"] and m["ratio"] is not None)


class TableWorker:
    """A ``TrialWorker`` that answers from a table of measured plans (plan JSON → measurement).

    The table's ratio is the candidate's time over the unfused baseline's of the same run;
    the baseline is reported as 1, so only ratios mean anything. More timing steps return
    the same measurement: the table holds one.
    """

    def __init__(self, measurements: dict[str, dict[str, Any]]) -> None:
        self.measurements = measurements
        self._last: PairedTiming | None = None
        self.compiles = self.timed = 0  # what a device would have done: the benchmark's cost

    def run(self, request: TrialRequest, timeout: float) -> TrialResult | WorkerFailure:
        m = self.measurements[request.plan.dumps()]
        self.compiles += 1
        if m["ratio"] is None:  # did not compile: a failed trial
            return WorkerFailure("error", m.get("error") or "did not compile")
        self.timed += 1
        lo, hi = m.get("ratio_ci") or (m["ratio"], m["ratio"])
        self._last = PairedTiming(1.0, m["ratio"], m["ratio"], (lo, hi), 1)
        # Tables record whether a plan was bitwise (and, since the one objective, how many outputs differed).
        n_mismatches = 0 if m["bitwise"] else int(m.get("mismatches") or 1)
        return TrialResult(bool(m["bitwise"]), tuple({"replayed": True} for _ in range(n_mismatches)), self._last,
                           (), (), float(m.get("compile_s") or 0.0), 0.0, 0.0, {})

    def more(self, n_batches: int, timeout: float) -> TimingUpdate | WorkerFailure:
        assert self._last is not None
        return TimingUpdate(self._last, 0.0)

    def bisect(self, plan: Plan, max_runs: int, timeout: float) -> dict[str, Any] | WorkerFailure:
        return WorkerFailure("error", "a table cannot bisect")


def _sampler(strategy: str, seed: int) -> optuna.samplers.BaseSampler:
    if strategy in ("sktune", "sktune-sampler"):
        return make_sampler(seed)
    if strategy == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    if strategy == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise ValueError(f"unknown strategy {strategy!r}; known: {', '.join(STRATEGIES)}")


def replay(data: dict[str, Any], strategy: str, seed: int, max_trials: int, patience: int | None = None) -> Run:
    """One strategy, one seed, through the real objective and loop with a ``TableWorker``.

    ``patience`` None: never stop early, so that every strategy gets ``max_trials``.
    """
    workload = table_workload(data)
    space = space_for(workload, data["max_cuts"], data["options"])
    sampler = _sampler(strategy, seed)
    study = optuna.create_study(direction="minimize", sampler=sampler, pruner=ClearlyWorsePruner())
    if strategy == "sktune":
        for name, params in starting_points(space, workload):
            study.enqueue_trial(params, user_attrs={TrialAttr.ANCHOR: name})
    chunks = EFFORTS["default"].chunks
    ours = strategy in ("sktune", "sktune-sampler")
    worker = TableWorker(data["measurements"])
    exactness = workload.exact() if ours else None
    objective = make_objective(space, worker, ObjectiveRules(chunks, math.inf), workload.targets, exactness)
    if exactness is not None:  # as resume.prepare does for sktune run
        attach_space(study, space, hopeless_filter(space, workload.targets, exactness))
    history: list[tuple[float, int, int]] = []

    def best_so_far(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if not skipped(trial):  # skipped trials cost nothing, as in a real run
            history.append((min(feasible_ratios(study), default=math.inf), worker.compiles, worker.timed))

    search(study, objective, Effort(max_trials, chunks, patience, confirm_top=0), callbacks=[best_so_far])
    best, compiles, timed = zip(*history) if history else ((), (), ())
    return Run(strategy, seed, tuple(best), max_trials, tuple(compiles), tuple(timed))


def table_workload(data: dict[str, Any]) -> Workload:
    """The workload a table of measurements was measured on (``benchlib/exhaustive.save``)."""
    return Workload.from_json(with_capabilities(data["description"]))


def with_capabilities(description: dict[str, Any]) -> dict[str, Any]:
    """A description saved before backends declared one capabilities object (tables
    measured then keep working): its loose keys gathered into one."""
    if "options" in (description.get("capabilities") or {}):
        return description
    old = description.get("capabilities") or {}
    options = tuple(OptionSpec.from_json(o) for o in description["options"])
    names = {o.name for o in options}
    capabilities = Capabilities(
        options=options, fallback_candidates=tuple(description["fallback_candidates"]),
        unsafe_op_types=frozenset(description["unsafe_op_types"]),
        unfusable_op_types=frozenset(description.get("unfusable_op_types") or ()),
        probes_exactness=bool(description.get("exactness")),
        fallback_option=old.get("fallback_option", "fallback_ops"), unmarked_plans=bool(old.get("unmarked_plans")),
        anchor_set=old.get("anchor_set", "compiler"),
        fuse_all_variants=tuple(n for n in ("emulate_precision_casts",) if n in names),
    )
    return {**description, "capabilities": capabilities.to_json()}


def summarize(runs: Sequence[Run], best: float, tolerance: float = 0.02) -> dict[str, dict[str, Any]]:
    """Per strategy: median trials, compiles and measurements to within ``tolerance`` of the
    exhaustive best, best after k trials."""
    out: dict[str, dict[str, Any]] = {}
    target = best * (1 + tolerance)
    for strategy in dict.fromkeys(r.strategy for r in runs):
        mine = [r for r in runs if r.strategy == strategy]
        reached = [r.trials_to(target) for r in mine]
        limit = mine[0].max_trials
        row: dict[str, Any] = {
            "seeds": len(mine),
            "trials_to_target_median": _median(reached, limit),
            "compiles_to_target_median": _median([r.compiles_to(target) for r in mine], limit),
            "measurements_to_target_median": _median([r.measurements_to(target) for r in mine], limit),
            "trials_to_target": reached,
            "never_reached": sum(t is None for t in reached),
        }
        for k in CHECKPOINTS:
            ratios = [r.best_after(k) for r in mine]
            row[f"best_after_{k}_median"] = statistics.median(ratios)
            row[f"gap_after_{k}_median_pct"] = statistics.median((x / best - 1) * 100 for x in ratios)
        out[strategy] = row
    return out


def _median(counts: Sequence[int | None], limit: int) -> float:
    """Median over seeds; a seed that never got there counts as "more than the budget"
    (``limit + 1``), so the median stays honest."""
    return statistics.median(c if c is not None else limit + 1 for c in counts)
