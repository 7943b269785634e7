import pytest

from sktune.graph.grouping import group_ops
from sktune.plan import Plan, Scope
from sktune.space.layout import candidate_cuts
from dataclasses import replace

from sktune.capabilities import Capabilities, OptionSpec
from sktune.space.search_space import EAGER, FUSE, build_space

TARGETS = ["pow", "mean", "add", "rsqrt", "mul", "linear", "chunk", "getitem", "getitem", "mul", "softmax", "add"]
MODULES = ["norm"] * 5 + ["proj"] + [""] * 6
BOUNDARIES = [0, 1, 2, 3, 4, 5, 8, 9, 10]  # no cut inside chunk..getitem
OPTIONS = (
    OptionSpec("emulate_precision_casts", (False, True), False, exact_choice=True),
    OptionSpec("pattern_matcher", (True, False), True, exact_choice=False),
    OptionSpec("max_fusion_size", (16, 64), 64),
)
INDUCTOR_LIKE = Capabilities(options=OPTIONS, fallback_candidates=("mean", "softmax"),
                             unsafe_op_types=frozenset({"mean", "softmax"}), fallback_option="fallback_ops",
                             fuse_all_variants=("emulate_precision_casts",))
NPU_LIKE = Capabilities(options=OPTIONS, fallback_candidates=("mean",))  # no fallback option


@pytest.fixture
def space():
    return build_space(TARGETS, MODULES, BOUNDARIES, INDUCTOR_LIKE)


def test_cuts_are_legal_and_surround_unsafe_ops(space) -> None:
    assert set(space.cuts) <= set(BOUNDARIES)
    for unsafe_index in (1, 10):
        assert unsafe_index - 1 in space.cuts and unsafe_index in space.cuts
    assert space.unsafe_blocks.count(True) == 2


def test_candidate_cuts_respect_cap() -> None:
    targets = ["mean", "add"] * 50
    cuts = candidate_cuts(targets, [""] * 100, list(range(99)), frozenset({"mean"}), max_cuts=8)
    assert 4 <= len(cuts) <= 8
    for cut in cuts:  # each kept cut is one side of an isolated mean
        assert targets[cut] == "mean" or targets[cut + 1] == "mean"


def test_unfused_is_an_explicit_none_scope(space) -> None:
    plan = space.decode(space.params_for([False] * len(space.blocks)))
    assert plan.scopes == (Scope(0, len(TARGETS) - 1, None),)
    assert group_ops(len(TARGETS), plan.scopes) == []


def test_fuse_all_is_one_scope_and_cuts_split(space) -> None:
    n_blocks = len(space.blocks)
    plan = space.decode(space.params_for([True] * n_blocks))
    assert plan.scopes == (Scope(0, len(TARGETS) - 1, "sk0"),)
    split = space.decode(space.params_for([True] * n_blocks, split_all=True))
    assert len(split.scopes) == n_blocks
    assert [s.first_op for s in split.scopes] == [b[0] for b in space.blocks]


def test_eager_block_breaks_scope(space) -> None:
    params = space.params_for([True] * len(space.blocks))
    params["block:1"] = EAGER
    plan = space.decode(params)
    first, second = plan.scopes
    assert first.last_op == space.blocks[0][1] and second.first_op == space.blocks[2][0]
    assert params["block:0"] == FUSE


def test_options_and_fallbacks_reach_plan(space) -> None:
    params = space.params_for([True] * len(space.blocks), fallbacks=["softmax"], emulate_precision_casts=True)
    options = space.decode(params).option_dict
    assert options == {"emulate_precision_casts": True, "pattern_matcher": True, "max_fusion_size": 64,
                       "fallback_ops": ["softmax"]}


def test_anchors_unique_and_cover_required(space) -> None:
    anchors = dict(space.anchors())
    assert {"unfused", "fuse-all", "fuse-all+emulate_precision_casts", "fuse-all+fallbacks", "safe-runs"} <= set(anchors)
    plans = [space.decode(p) for p in anchors.values()]
    assert len(set(plans)) == len(plans)
    exact = space.decode(anchors["fuse-all+fallbacks+exact-options"]).option_dict
    assert exact == {"emulate_precision_casts": True, "pattern_matcher": False, "max_fusion_size": 64,
                     "fallback_ops": ["mean", "softmax"]}
    safe = space.decode(anchors["safe-runs"])
    fused = {i for g in group_ops(len(TARGETS), safe.scopes) for i in g}
    assert 1 not in fused and 10 not in fused and 0 in fused


def test_plan_json_roundtrip_and_hash() -> None:
    plan = Plan.make([Scope(0, 3, "a"), Scope(4, 5, None)], {"fallback_ops": ["mean"], "x": 1})
    again = Plan.loads(plan.dumps())
    assert again == plan and hash(again) == hash(plan)
    with pytest.raises(ValueError, match="schema version"):
        Plan.from_json({**plan.to_json(), "schema_version": 99})


class _FixedTrial:
    def __init__(self, params):
        self.params = params

    def suggest_categorical(self, name, choices):
        assert self.params[name] in choices
        return self.params[name]


def test_suggest_matches_decode(space) -> None:
    params = space.params_for([True, False] * (len(space.blocks) // 2) + [True] * (len(space.blocks) % 2))
    assert space.suggest(_FixedTrial(params)) == space.decode(params)


def test_check_plan_rejects_illegal_cuts_and_out_of_range() -> None:
    from sktune.errors import PlanError
    from sktune.plan import check_plan

    check_plan(Plan.make([Scope(0, 5, "a"), Scope(9, 11, None)]), 12, BOUNDARIES)
    with pytest.raises(PlanError, match="separate a tuple-producing op"):
        check_plan(Plan.make([Scope(0, 6, "a")]), 12, BOUNDARIES)  # cut between chunk and getitem
    with pytest.raises(PlanError, match="graph has 12 ops"):
        check_plan(Plan.make([Scope(0, 12, "a")]), 12, BOUNDARIES)


def test_cuts_also_go_next_to_ops_the_backend_never_fuses() -> None:
    targets = ["add", "mul", "linear", "add", "mul", "sub", "linear", "mul", "add", "div"]
    cuts = candidate_cuts(targets, [""] * 10, list(range(9)), frozenset(), max_cuts=4,
                          barriers=frozenset({"linear"}))
    assert cuts and all(targets[c] == "linear" or targets[c + 1] == "linear" for c in cuts)
    assert candidate_cuts(targets, [""] * 10, list(range(9)), frozenset(), max_cuts=4) == []


def test_decoded_plans_carry_only_the_backends_options(space) -> None:
    from sktune.errors import PlanError

    assert "fallback_ops" in space.decode(space.params_for([True] * len(space.blocks))).option_dict
    npu_like = build_space(TARGETS, MODULES, BOUNDARIES, NPU_LIKE)
    plan = npu_like.decode(npu_like.params_for([True] * len(npu_like.blocks)))
    assert "fallback_ops" not in plan.option_dict and npu_like.fallbacks == ()
    assert not any(k.startswith("fallback:") for k in npu_like.domains())
    with pytest.raises(PlanError, match="not in the backend's option space"):
        npu_like.check_options(Plan.make([], {"fallback_ops": ["mean"]}))
    with pytest.raises(PlanError, match="outside its domain"):
        space.check_options(Plan.make([], {"max_fusion_size": 7, "fallback_ops": []}))
    with pytest.raises(PlanError, match="not among the backend's fallbacks"):
        space.check_options(Plan.make([], {"fallback_ops": ["gelu"]}))


def test_no_scope_made_only_of_kernelless_ops() -> None:
    # op 1 is a no-op cast (``.to(float32)`` of a float32 tensor): alone, an empty scope.
    targets, modules, kernelless = ["mul", "to", "add", "mul"], ["a", "b", "c", "d"], [False, True, False, False]
    space = build_space(targets, modules, [0, 1, 2], replace(INDUCTOR_LIKE, fallback_candidates=(),
                                                                       unsafe_op_types=frozenset()),
                        kernelless=kernelless)
    assert space.blocks == [(0, 0), (1, 1), (2, 2), (3, 3)]
    plan = space.decode(space.params_for([False, True, False, False]))
    assert plan.scopes == (Scope(0, 3, None),), "nothing left to fuse: explicitly unfused"
    split = space.decode(space.params_for([True] * 4, split_all=True))
    assert split.scopes == (Scope(0, 0, "sk0"), Scope(2, 2, "sk1"), Scope(3, 3, "sk2"))
    assert space.decode(space.params_for([True] * 4)).scopes == (Scope(0, 3, "sk0"),)


def test_unmarked_choice_decodes_to_no_scopes() -> None:
    from sktune.space.search_space import NO_SCOPES

    space = build_space(TARGETS, MODULES, BOUNDARIES, replace(NPU_LIKE, fallback_candidates=(), unmarked_plans=True))
    assert list(space.domains())[0] == NO_SCOPES
    params = space.params_for([False] * len(space.blocks))
    assert space.decode({**params, NO_SCOPES: True}).scopes == ()
    assert space.decode(params).scopes == (Scope(0, len(TARGETS) - 1, None),)
