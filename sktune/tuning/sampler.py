"""sktune's sampler (the search benchmark replays the same one).

Issue 24: TPE alone needed ~100 trials on a space whose best is no starting point
(docs/measured.md, "A space whose best is no starting point"), and it spent its first ten
on random plans although the anchors and seeds had already measured the obvious ones.
So the sampler, still one Optuna sampler inside Optuna's loop and storage (resume, many
workers and the dashboard work as with TPE):

* proposes a plan one structural move from the best exact trial (``space/neighbours.py``;
  a best of another region layout that gained less than ``GAIN`` over an earlier trial leaves
  that trial the centre),
  one not yet tried in the study nor hopeless by the exactness probe, most promising first
  by the study's own measurements (``tuning/move_model.py``): a local search that walks from
  the starting points towards a best none of them is;
* at a local optimum, searches the neighbours of up to two trials tied with the best
  (within ``TIE``: the noise of one measurement), which crosses a ridge of two moves each
  slower alone; then defers to multivariate TPE;
* starts with TPE at once where starting points were measured (they are its start-up
  data); only a study without them gets random start-up trials, in which "no scopes"
  is rare, not a coin toss (every other parameter is moot in a no-scope plan).

The sampler learns the space from ``attach`` (``resume.prepare``, the replay): without it,
it is TPE with random start-up. Trials queued by ``enqueue_trial`` (anchors, seeds,
refinements, warm start) keep their parameters; the sampler is not asked.
"""

from __future__ import annotations

import json
import random
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.trial import FrozenTrial, TrialState

from sktune.space.exactness import Exactness
from sktune.space.neighbours import Neighbour, full_params, neighbours
from sktune.plan import Plan
from sktune.space.search_space import NO_SCOPES, SearchSpace
from sktune.tuning.move_model import observed_ratio, rank, trial_plan
from sktune.tuning.attrs import TrialAttr
from sktune.tuning.records import FIXED, feasible_trials, is_yardstick, reused, skipped
from sktune.tuning.workers import worker_tag
from sktune.tuning.trial_writer import record_proposed, record_worker_at_ask

N_STARTUP = 10  # random trials before TPE in a study without starting points
NO_SCOPES_SHARE = 0.1  # how often a random start-up trial is a no-scope plan
TIE = 0.05  # a trial this close to the best exact one is a tie within the noise of a measurement
TIED_CENTRES = 2  # tied trials whose neighbours are searched after the best's
GAIN = 0.02  # a new best of another layout gains less than this: the earlier stays the centre (``_centre``)

PlanFilter = Callable[[Plan], str | None]  # why a plan is not worth a compile, or None


class SktuneSampler(optuna.samplers.BaseSampler):
    """Local search around the best exact trial, then TPE (module docstring)."""

    def __init__(self, seed: int | None = None, n_startup_trials: int = N_STARTUP) -> None:
        with warnings.catch_warnings():  # ``group`` is experimental; its warning would tear the progress bar
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            # Multivariate TPE: block and cut decisions interact (a cut matters only between fused blocks).
            # Its own start-up is off: ours decides when random trials are needed.
            self._tpe = optuna.samplers.TPESampler(seed=seed, n_startup_trials=1, multivariate=True, group=True)
        self._random = optuna.samplers.RandomSampler(seed=seed)
        self._rng = random.Random(seed)
        self._n_startup = n_startup_trials
        self._space: SearchSpace | None = None
        self._hopeless: PlanFilter = lambda plan: None
        self._proposals: dict[int, Neighbour] = {}  # trial number → the neighbour it measures
        self._plan_keys: dict[int, str | None] = {}  # finished trial → its plan (a finished trial does not change)

    def attach(self, space: SearchSpace, hopeless: PlanFilter | None = None) -> None:
        """The space to search locally, and the filter the objective skips plans by."""
        self._space = space
        self._hopeless = hopeless or (lambda plan: None)

    # -- one trial's mode, decided before it asks for parameters ---------------------
    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        record_worker_at_ask(study, trial, worker_tag())  # first: a kill from here on leaves a trial a resume fails
        self._tpe.before_trial(study, trial)
        if self._space is None or FIXED in trial.system_attrs:
            return
        proposal = self._local_move(study)
        if proposal is not None:
            self._proposals[trial.number] = proposal
        how = "local: " + proposal.move if proposal else "random" if self._starting(study) else "tpe"
        record_proposed(study, trial, how)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: list[float] | None) -> None:
        self._proposals.pop(trial.number, None)
        self._tpe.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self._tpe.reseed_rng()
        self._random.reseed_rng()
        self._rng.seed()

    # -- Optuna's sampling interface -------------------------------------------------
    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        proposal = self._proposals.get(trial.number)
        if proposal is not None:
            assert self._space is not None
            domains = self._space.domains()
            return {k: CategoricalDistribution(domains[k]) for k in proposal.params}
        if self._starting(study):
            return {}
        return self._tpe.infer_relative_search_space(study, trial)

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        proposal = self._proposals.get(trial.number)
        if proposal is not None:
            return {k: v for k, v in proposal.params.items() if k in search_space}
        if not search_space:
            return {}
        return self._tpe.sample_relative(study, trial, search_space)

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, name: str,
                           distribution: BaseDistribution) -> Any:
        if self._starting(study):
            if name == NO_SCOPES:
                return self._rng.random() < NO_SCOPES_SHARE
            return self._random.sample_independent(study, trial, name, distribution)
        return self._tpe.sample_independent(study, trial, name, distribution)

    # -- helpers ---------------------------------------------------------------------
    def _starting(self, study: optuna.Study) -> bool:
        """Random start-up: fewer than ``n_startup`` finished trials and none was a starting point."""
        done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
        if any(TrialAttr.ANCHOR in t.user_attrs for t in done):
            return False
        return len(done) < self._n_startup

    def _local_move(self, study: optuna.Study) -> Neighbour | None:
        """An untried, not hopeless neighbour of the best exact trial (the model's pick), or None."""
        assert self._space is not None
        trials = study.get_trials(deepcopy=False)
        # Not a plan an earlier run's finalists' round turned down at a verify-only shape (feasible_trials).
        feasible = sorted((t for t in feasible_trials(study) if t.params and not reused(t)),
                          key=lambda t: t.value)  # type: ignore[arg-type, return-value]
        tried = self._tried(trials)
        # The model reads what each cost; a yardstick's one-shape ratio is no score of this search.
        measured = [t for t in trials if not reused(t) and not skipped(t) and not is_yardstick(t)]
        if not feasible:
            return None
        # The best exact trial's neighbours; once all are tried (a local optimum), those of
        # the few trials tied with it (ratio within TIE), then TPE. A ridge, two moves each
        # slower alone and faster together (exact_sum_cut: a cut and eager_order), is
        # crossed from a tied neighbour; trying every next best's spent up to 190 trials
        # on the noise among near ties, hence the cap.
        best = float(feasible[0].value)  # type: ignore[arg-type]
        first = self._centre(feasible)
        centres = [first, *[t for t in feasible if t is not first and t.value <= best * (1 + TIE)][:TIED_CENTRES]]
        for centre in centres:
            fresh = [n for n in neighbours(self._space, centre.params)
                     if n.plan.dumps() not in tried and self._hopeless(n.plan) is None]
            if fresh:
                # Layouts with a time (a running or failed trial has told nothing yet).
                layouts = Counter(Plan.from_json(t.user_attrs[TrialAttr.PLAN]).scopes for t in measured
                                  if TrialAttr.PLAN in t.user_attrs and observed_ratio(t) is not None)
                layout = self._space.decode(full_params(self._space, centre.params)).scopes
                return rank(self._space, fresh, measured, self._rng, layouts, layout, best)[0]
        return None

    def _centre(self, feasible: list[FrozenTrial]) -> FrozenTrial:
        """The best exact trial (``feasible`` is sorted), unless an earlier trial of another
        region layout is within ``GAIN`` of it: then the earliest such trial. A structural move
        that gained less than a re-measurement's spread is no step forward; centred on it, the
        search walked along noise (shared_gate: a cut that gained 0.4 % became the centre, and
        the cut that gained 30 % waited six trials; docs/measured.md, "Regions in the fit")."""
        best = feasible[0]
        layout = self._layout(best)
        near = [t for t in feasible if t.value <= best.value * (1 + GAIN)  # type: ignore[operator]
                and self._layout(t) != layout]
        return min([best, *near], key=lambda t: t.number)

    def _layout(self, trial: FrozenTrial) -> tuple:
        """A measured trial's region layout."""
        assert self._space is not None
        return trial_plan(self._space, trial).scopes

    def _tried(self, trials: list[FrozenTrial]) -> set[str]:
        """Plans the study has run, is running, skipped or has queued: none is proposed again."""
        keys: set[str] = set()
        for t in trials:
            if is_yardstick(t):  # measured at one shape only: its plan is still open to the search
                continue
            if t.state == TrialState.WAITING:  # queued: only its parameters are known yet
                fixed = t.system_attrs.get(FIXED)
                if fixed and self._space is not None:
                    try:
                        keys.add(self._space.decode(fixed).dumps())
                    except (KeyError, ValueError):  # a partial parameter set: the objective completes it
                        pass
                continue
            if t.number not in self._plan_keys or t.state == TrialState.RUNNING:
                plan = t.user_attrs.get(TrialAttr.PLAN)
                key = json.dumps(plan, sort_keys=True) if plan is not None else None
                if t.state == TrialState.RUNNING:
                    if key:
                        keys.add(key)
                    continue
                self._plan_keys[t.number] = key
            if self._plan_keys[t.number]:
                keys.add(self._plan_keys[t.number])  # type: ignore[arg-type]
        return keys


def make_sampler(seed: int | None) -> SktuneSampler:
    return SktuneSampler(seed=seed)


def hopeless_filter(space: SearchSpace, targets: Sequence[str], exactness: Exactness) -> PlanFilter:
    """The objective's skip rule (scope cap, exactness probe) as a filter on proposals."""
    return lambda plan: space.over_cap(plan) or exactness.hopeless(plan, targets, space.exact_options,
                                                                    space.fallback_option)


def attach_space(study: optuna.Study, space: SearchSpace, hopeless: PlanFilter | None = None) -> None:
    """Give the study's sampler the space it searches, where it is sktune's."""
    if isinstance(study.sampler, SktuneSampler):
        study.sampler.attach(space, hopeless)
