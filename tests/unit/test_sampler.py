"""sktune's sampler (issue 24): one-move neighbours of a plan, the local search around the
best exact trial inside Optuna's loop, its seeded determinism, and the start-up that the
starting points replace. Scripted objectives: no compile, no worker."""

from __future__ import annotations

import math
import time
from dataclasses import replace

import optuna
import pytest

from sktune.space.neighbours import full_params, neighbours
from sktune.plan import Plan
from sktune.space.search_space import NO_SCOPES, SearchSpace, build_space
from sktune.tuning.attrs import StudyAttr, TrialAttr
from sktune.tuning.sampler import TIE, SktuneSampler, attach_space
from tests.unit.test_space import BOUNDARIES, INDUCTOR_LIKE, MODULES, NPU_LIKE, TARGETS


@pytest.fixture
def space() -> SearchSpace:
    return build_space(TARGETS, MODULES, BOUNDARIES, INDUCTOR_LIKE)


def one_move(space: SearchSpace, changed: set[str]) -> bool:
    """A block with the cuts on its two sides, one cut, two adjacent cuts, one option or fallback."""
    blocks, cuts = space.layout.block_keys, space.layout.cut_keys
    if len(changed) == 1:
        return True
    if changed <= set(cuts) and len(changed) == 2:
        a, b = sorted(changed, key=cuts.index)
        return cuts.index(b) == cuts.index(a) + 1
    fused = [k for k in changed if k in blocks]
    if len(fused) != 1:
        return False
    j = blocks.index(fused[0])
    return changed - {fused[0]} <= {cuts[k] for k in (j - 1, j) if 0 <= k < len(cuts)}


@pytest.mark.parametrize("start", ["fuse-all", "unfused", "safe-runs+exact-options"])
def test_neighbours_are_distinct_plans_of_the_space_one_move_away(space: SearchSpace, start: str) -> None:
    params = dict(space.anchors())[start]
    origin = space.decode(params)
    found = neighbours(space, params)
    assert found
    plans = [n.plan for n in found]
    assert origin not in plans and len(set(plans)) == len(plans)
    full = full_params(space, params)
    for n in found:
        assert set(n.params) == set(space.domains())
        assert space.decode(n.params) == n.plan  # the same parameters always decode to the same plan
        changed = {k for k in full if full[k] != n.params[k]}
        assert one_move(space, changed), (n.move, changed)


def test_neighbours_leave_out_the_plans_excluded() -> None:
    space = build_space(TARGETS, MODULES, BOUNDARIES, replace(NPU_LIKE, fallback_candidates=(), unmarked_plans=True))
    params = space.params_for([True] * len(space.blocks))
    everything = neighbours(space, params)
    assert any(n.params[NO_SCOPES] for n in everything)  # "no scopes" is one move
    fewer = neighbours(space, params, exclude=[everything[0].plan])
    assert [n.plan for n in fewer] == [n.plan for n in everything[1:]]


def run(space: SearchSpace, seed: int, n_trials: int, anchors: bool = True) -> optuna.Study:
    sampler = SktuneSampler(seed=seed)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    attach_space(study, space)
    if anchors:
        for name, params in space.anchors():
            study.enqueue_trial(params, user_attrs={TrialAttr.ANCHOR: name})

    def objective(trial: optuna.Trial) -> float:
        plan = space.suggest(trial)
        trial.set_user_attr(TrialAttr.PLAN, plan.to_json())
        trial.set_constraint("bitwise", 0.0)
        named = [s for s in plan.scopes if s.name]
        return 1.0 - 0.1 * len(named) - 0.01 * (plan.option_dict.get("max_fusion_size") == 16)

    study.optimize(objective, n_trials=n_trials)
    return study


def test_local_search_proposes_untried_neighbours_of_the_best_and_is_seeded(space: SearchSpace) -> None:
    study = run(space, seed=3, n_trials=len(space.anchors()) + 12)
    sampled = [t for t in study.trials if TrialAttr.ANCHOR not in t.user_attrs]
    # Start-up is the anchors: the first sampled trial already searches locally.
    assert sampled[0].user_attrs[TrialAttr.PROPOSED].startswith("local: ")
    plans = [Plan.from_json(t.user_attrs[TrialAttr.PLAN]) for t in study.trials]
    for k, t in enumerate(study.trials):
        if str(t.user_attrs.get(TrialAttr.PROPOSED, "")).startswith("local: "):
            assert plans[k] not in plans[:k]  # never a plan measured before
            best = min(study.trials[:k], key=lambda u: u.value)
            centres = [u for u in study.trials[:k] if u.value <= best.value * (1 + TIE)]  # the best or a tie
            assert any(plans[k] in {n.plan for n in neighbours(space, u.params)} for u in centres)
    assert min(t.value for t in sampled) < min(t.value for t in study.trials if t not in sampled)
    again = run(space, seed=3, n_trials=len(space.anchors()) + 12)
    assert [t.params for t in again.trials] == [t.params for t in study.trials]


def test_start_up_is_random_only_without_starting_points(space: SearchSpace) -> None:
    study = run(space, seed=0, n_trials=3, anchors=False)
    assert [t.user_attrs[TrialAttr.PROPOSED] for t in study.trials][:1] == ["random"]
    assert all(str(t.user_attrs[TrialAttr.PROPOSED]).startswith("local: ") for t in study.trials[1:])


def test_no_scopes_is_rare_at_random_start_up() -> None:
    space = build_space(TARGETS, MODULES, BOUNDARIES, replace(NPU_LIKE, fallback_candidates=(), unmarked_plans=True))
    study = optuna.create_study(sampler=SktuneSampler(seed=1, n_startup_trials=1000))  # no space: start-up only
    study.optimize(lambda t: float(len(space.suggest(t).scopes)), n_trials=60)
    share = sum(t.params[NO_SCOPES] for t in study.trials) / len(study.trials)
    assert share < 0.25 and not math.isclose(share, 0.5)


def test_a_value_no_trial_measured_is_tried_before_one_the_fit_has_seen(space: SearchSpace) -> None:
    """The ranking is a lower confidence bound: where the fit predicts two moves alike, the
    one setting a value no trial has measured (a cut never set) is less certain, so it comes
    first; a plain prediction left the order to the random tie-break (exact_sum_cut: the
    winning cut came third)."""
    import random

    from sktune.tuning.move_model import rank

    fused = full_params(space, space.params_for([True] * len(space.blocks)))
    blocks = space.layout.block_keys
    study = optuna.create_study()
    dist = {k: optuna.distributions.CategoricalDistribution(v) for k, v in space.domains().items()}
    both_eager = {**fused, blocks[0]: "eager", blocks[1]: "eager"}
    for params in (fused, both_eager):  # the same ratio: the fit gives the eager blocks no weight
        study.add_trial(optuna.trial.create_trial(value=0.5, params=params, distributions=dist))
    candidates = [n for n in neighbours(space, fused) if n.move == f"{blocks[1]} eager" or n.move.startswith("cut:")]
    assert {n.move.startswith("cut:") for n in candidates} == {True, False}
    for seed in range(8):
        ranked = rank(space, candidates, study.trials, random.Random(seed))
        assert ranked[0].move.startswith("cut:"), [n.move for n in ranked]


def test_a_ridge_is_crossed_from_a_trial_tied_with_the_best(space: SearchSpace) -> None:
    """Every neighbour of the best exact trial is tried and slower; one of them is within the
    noise of it (a tie, within ``TIE``). The next proposal is then an untried neighbour of
    that tie (exact_sum_cut: a cut, then eager_order), not TPE at once; a neighbour clearly
    slower is no centre."""
    sampler = SktuneSampler(seed=0)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    attach_space(study, space)
    domains = {k: optuna.distributions.CategoricalDistribution(v) for k, v in space.domains().items()}

    def add(params: dict, value: float) -> None:
        params = full_params(space, params)
        study.add_trial(optuna.trial.create_trial(
            params=params, distributions={k: domains[k] for k in params}, value=value, constraints={"bitwise": 0.0},
            user_attrs={TrialAttr.PLAN: space.decode(params).to_json()}))

    best = dict(space.anchors())["fuse-all"]
    around = neighbours(space, best)
    add(best, 1.0)
    tied, *others = around
    add(tied.params, 1.0 + TIE / 2)
    for n in others:
        add(n.params, 1.0 + 4 * TIE)
    tried = {space.decode(full_params(space, best)).dumps(), *(n.plan.dumps() for n in around)}
    proposal = sampler._local_move(study)
    assert proposal is not None and proposal.plan.dumps() not in tried
    assert proposal.plan in {n.plan for n in neighbours(space, tied.params)}
    # The same study with that neighbour clearly slower: no tie, so no local move (TPE next).
    study = optuna.create_study(direction="minimize", sampler=SktuneSampler(seed=0))
    attach_space(study, space)
    add(best, 1.0)
    for n in around:
        add(n.params, 1.0 + 4 * TIE)
    assert study.sampler._local_move(study) is None


def test_the_best_layouts_options_wait_only_for_layouts_that_may_beat_it(space: SearchSpace) -> None:
    """Around a new best, option moves come before the unmeasured layouts that the fit expects
    to lose even optimistically, once per layout (transpose_mix, shared_gate: six or seven pruned
    structural trials before any option); layouts that may win still come first, and once the
    layout has two option sets its options wait for every unmeasured layout (option noise
    must not walk the best along one layout)."""
    import random
    from collections import Counter

    from sktune.tuning.move_model import rank

    fused = full_params(space, space.params_for([True] * len(space.blocks)))
    centre = space.decode(fused).scopes
    unfused = full_params(space, space.params_for([False] * len(space.blocks)))
    study = optuna.create_study()
    dist = {k: optuna.distributions.CategoricalDistribution(v) for k, v in space.domains().items()}
    for params, value in ((fused, 0.5), (unfused, 1.0)):
        study.add_trial(optuna.trial.create_trial(value=value, params=params, distributions=dist))
    candidates = neighbours(space, fused)
    options = {n.move for n in candidates if n.plan.scopes == centre}
    assert options and len(options) < len(candidates)

    def kinds(counts: Counter, incumbent: float | None) -> list[bool]:
        ranked = rank(space, candidates, study.trials, random.Random(0), counts, centre, incumbent)
        return [n.move in options for n in ranked]  # True: an option move of the centre

    once = Counter({centre: 1, space.decode(unfused).scopes: 1})
    twice = Counter({centre: 2, space.decode(unfused).scopes: 1})
    layouts_first = [False] * (len(candidates) - len(options)) + [True] * len(options)
    assert kinds(once, None) == layouts_first  # no incumbent: every unmeasured layout may win
    assert kinds(once, 1e-9) == sorted(layouts_first, reverse=True)  # none can beat it: options first
    assert kinds(twice, 1e-9) == layouts_first  # the layout has had its option try
    # The best measured: the layouts the optimistic fit expects to beat it, then the options, then the rest.
    mixed = kinds(once, 0.5)
    first_option, last_option = mixed.index(True), len(mixed) - 1 - mixed[::-1].index(True)
    assert 0 < first_option and last_option < len(mixed) - 1, mixed
    assert all(mixed[first_option:last_option + 1]), mixed


def test_a_region_measured_slow_blames_the_region_not_its_blocks(space: SearchSpace) -> None:
    """transpose_mix's history in small: every fusing start fuses blocks 3 and 4 together and
    is slow; the climb from unfused has fused blocks 4, 5 and 6 into two regions. Fusing
    block 3 on its own (a region no trial has held) must come before the moves that only
    reshape the best's own regions: a fit on block and cut keys alone blamed block 3 for the
    slow region and tried it after them (seventh of nine on transpose_mix)."""
    import random
    from collections import Counter

    from sktune.tuning.move_model import rank

    F, E = True, False

    def params(fuse: list[bool], cut_after: int | None = None) -> dict:
        split = None if cut_after is None else [j == cut_after for j in range(len(fuse) - 1)]
        return full_params(space, space.params_for(fuse, split=split))

    history = [(params([F] * 7), 2.6), (params([F] * 6 + [E]), 3.2), (params([E, E, F, F, F, E, E]), 3.1),
               (params([E] * 7), 1.0), (params([E] * 6 + [F]), 0.9), (params([E] * 5 + [F, F]), 0.5),
               (params([E] * 4 + [F, F, F], cut_after=4), 0.4)]
    study = optuna.create_study()
    dist = {k: optuna.distributions.CategoricalDistribution(v) for k, v in space.domains().items()}
    for p, value in history:
        study.add_trial(optuna.trial.create_trial(value=value, params=p, distributions=dist))
    centre = history[-1][0]
    layout = space.decode(centre).scopes
    counts = Counter(space.decode(p).scopes for p, _ in history)
    candidates = [n for n in neighbours(space, centre) if n.plan.scopes != layout]
    reshaping = {"cut:4 off", "cut cut:4 ⇄ cut:5", "block:6 eager"}
    assert reshaping <= {n.move for n in candidates}
    for seed in range(8):
        moves = [n.move for n in rank(space, candidates, study.trials, random.Random(seed), counts, layout, 0.4)]
        alone = next(k for k, m in enumerate(moves) if m.startswith("block:3 fused") and "cut:3 on" in m)
        assert all(alone < moves.index(m) for m in reshaping), moves


def test_a_new_best_within_the_noise_of_an_earlier_layout_does_not_move_the_centre(space: SearchSpace) -> None:
    """shared_gate: a cut that gained 0.4 % became the centre, and the cut that gained 30 %
    (a neighbour of the earlier best) waited six trials. A best of another layout that gains
    less than ``GAIN`` leaves the earlier trial the centre; a clear gain moves it."""
    from sktune.tuning.sampler import GAIN

    domains = {k: optuna.distributions.CategoricalDistribution(v) for k, v in space.domains().items()}
    start = dict(space.anchors())["fuse-all"]
    step = next(n for n in neighbours(space, start) if n.move.startswith("cut:"))

    def proposal_after(gain: float) -> Plan:
        study = optuna.create_study(direction="minimize", sampler=SktuneSampler(seed=0))
        attach_space(study, space)
        for params, value in ((full_params(space, start), 1.0), (step.params, 1.0 - gain)):
            study.add_trial(optuna.trial.create_trial(
                params=params, distributions={k: domains[k] for k in params}, value=value,
                constraints={"bitwise": 0.0}, user_attrs={TrialAttr.PLAN: space.decode(params).to_json()}))
        proposal = study.sampler._local_move(study)
        assert proposal is not None
        return proposal.plan

    around_start = {n.plan for n in neighbours(space, start)}
    around_step = {n.plan for n in neighbours(space, step.params)}
    assert proposal_after(GAIN / 4) in around_start
    assert proposal_after(4 * GAIN) in around_step


def test_a_trial_names_its_worker_as_optuna_creates_it(space: SearchSpace) -> None:
    """Before the objective runs: a run killed between Optuna's ask and the objective's first
    write left a RUNNING trial that named no worker, which no later run could fail."""
    from sktune.tuning.sampler import make_sampler
    from sktune.tuning.workers import worker_tag

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(sampler=make_sampler(0))
    attach_space(study, space)
    study.enqueue_trial({NO_SCOPES: True})
    for _ in range(2):  # a queued trial, then a sampled one
        trial = study.ask()
        tag = study._storage.get_trial_user_attrs(trial._trial_id)[TrialAttr.WORKER]
        assert {k: tag[k] for k in ("host", "pid")} == {k: worker_tag()[k] for k in ("host", "pid")}
        assert abs(tag["at"] - time.time()) < 60  # epoch seconds: any host's time zone reads it alike


def test_local_search_never_centres_on_a_plan_turned_down_at_a_verify_only_shape(space: SearchSpace) -> None:
    # A resumed study whose earlier finalists were found inexact at a verify-only shape: the
    # search centred on them again (their ratios are the best) and proposed their neighbours.
    study = run(space, seed=3, n_trials=len(space.anchors()) + 4)
    kept = max(study.trials, key=lambda t: t.value)  # the slowest: every faster trial is turned down
    study.set_user_attr(StudyAttr.VERIFIED, [{"trial": t.number, "shapes": {"w37": {"bitwise": False, "mismatches": 2}}}
                                             for t in study.trials if t.number != kept.number])
    move = study.sampler._local_move(study)
    assert move is not None and move.plan in {n.plan for n in neighbours(space, kept.params)}
