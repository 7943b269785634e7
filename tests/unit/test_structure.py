"""Repeated units, stamped layouts, own first/last patterns, probe-hopeless plans, seeds (pure)."""

from __future__ import annotations

import pytest

from sktune.graph.grouping import regions
from sktune.graph.structure import differing_ends, find_repeats, unit_key
from sktune.space.exactness import Exactness
from sktune.plan import Plan, Scope
from sktune.capabilities import Capabilities, OptionSpec
from sktune.space.search_space import EAGER, FUSE, build_space
from sktune.space.seeds import block_gap_share, profile_seeds

LAYER = [("pow", "norm"), ("mean", "norm"), ("rsqrt", "norm"), ("mul", "norm"), ("linear", "attn.q"),
         ("softmax", "attn"), ("linear", "attn.o"), ("add", ""), ("linear", "mlp.up"), ("gelu", "mlp"),
         ("linear", "mlp.down"), ("add", "")]


def stack(n_layers: int) -> tuple[list[str], list[str]]:
    """An embedding-ish prefix, ``n_layers`` identical layers, a final norm."""
    targets, modules = ["mul", "add"], ["embed", "embed"]
    for k in range(n_layers):
        for target, sub in LAYER:
            targets.append(target)
            modules.append(f"layers.{k}" + (f".{sub}" if sub else ""))
    targets += ["mean", "mul"]
    modules += ["final_norm", "final_norm"]
    return targets, modules


def test_unit_key_takes_the_first_numbered_item() -> None:
    assert unit_key("layers.3.attn.q_proj") == ("layers", "layers.3")
    assert unit_key("model.blocks.10") == ("model.blocks", "model.blocks.10")
    assert unit_key("norm") is None and unit_key("") is None
    # A root nn.Sequential's items, unless an item lies deeper (a Sequential wrapping a decoder).
    assert unit_key("2.gate") == ("", "2") and unit_key("1") == ("", "1")
    assert unit_key("0.layers.3.attn") == ("0.layers", "0.layers.3")


def test_find_repeats_covers_identical_layers_only() -> None:
    targets, modules = stack(4)
    repeats = find_repeats(targets, modules)
    assert repeats is not None and repeats.container == "layers"
    assert repeats.units == tuple((2 + 12 * k, 13 + 12 * k) for k in range(4))
    targets[2 + 12 * 3 + 5] = "sigmoid"  # layer 3 differs: the family stops before it
    assert find_repeats(targets, modules).units == tuple((2 + 12 * k, 13 + 12 * k) for k in range(3))
    assert find_repeats(["a", "b"], ["x", "y"]) is None


def space_for(n_layers: int, span_us=None):
    targets, modules = stack(n_layers)
    capabilities = Capabilities(options=(OptionSpec("pattern_matcher", (True, False), True, exact_choice=False),),
                                fallback_candidates=("mean", "softmax"), unsafe_op_types=frozenset({"mean", "softmax"}),
                                fallback_option="fallback_ops")
    return targets, build_space(targets, modules, list(range(len(targets) - 1)), capabilities, span_us=span_us)


def test_stamped_space_has_one_pattern_for_all_layers_and_stays_small() -> None:
    targets, small = space_for(2)
    _, large = space_for(32)
    names = {n for n in large.layout.block_keys + large.layout.cut_keys}
    assert names == {n for n in small.layout.block_keys + small.layout.cut_keys}  # size-independent
    assert {"rep.edge", "edge:in", "edge:out"} <= names
    assert large.repeats is not None and len(large.repeats.units) == 32


def test_a_stamped_decision_applies_to_every_layer() -> None:
    targets, space = space_for(4)
    params = space.params_for([True] * len(space.blocks), split=[k == "rep.edge" for k in space.layout.cut_keys])
    plan = space.decode(params)
    spans = regions(len(targets), plan.scopes)
    # One region per layer (prefix and suffix merge with their neighbours: no cut there).
    assert len(spans) == 4
    units = space.repeats.units
    assert spans[1] == units[1] and spans[2] == units[2]
    # Eager mean in every layer: each layer's region splits around its mean.
    mean_block = next(j for j, (f, l) in enumerate(space.blocks) if targets[f:l + 1] == ["mean"]
                      and space.layout.block_keys[j].startswith("rep."))
    params[space.layout.block_keys[mean_block]] = EAGER
    fused = {i for f, l in regions(len(targets), space.decode(params).scopes) for i in range(f, l + 1)}
    assert all(first + 1 not in fused for first, _ in units)  # op "mean" of every layer is eager


def test_first_and_last_layers_get_own_patterns_only_when_the_profile_says_they_differ() -> None:
    targets, _ = stack(4)
    even = [1.0] * len(targets)
    _, space = space_for(4, span_us=even)
    assert space.layout.variants == ()
    slow_first = list(even)
    for i in range(2, 14):
        slow_first[i] = 2.0
    _, space = space_for(4, span_us=slow_first)
    assert space.layout.variants == ("first",)
    assert differing_ends([1.0, 1.0, 1.0, 1.5]) == (False, True)
    # With the switch on, the first layer follows its own keys; off, the shared ones.
    params = space.params_for([True] * len(space.blocks))
    first_keys = [k for k in space.layout.block_keys if k.startswith("first.")]
    assert first_keys and all(k not in params for k in first_keys)
    own = dict(params, **{"first.own": True}, **{k: EAGER for k in first_keys})
    own.update({k: False for k in space.layout.cut_keys if k.startswith("first.")})
    fused = {i for f, l in regions(len(targets), space.decode(own).scopes) for i in range(f, l + 1)}
    first_unit = space.repeats.units[0]
    assert not any(i in fused for i in range(first_unit[0], first_unit[1] + 1))
    assert space.repeats.units[1][0] in fused


def test_hopeless_plans_fuse_an_inexact_op_without_its_fallback() -> None:
    targets = ["pow", "mean", "add", "exp"]
    probe = {"pow": {"alone": True}, "mean": {"alone": False, "exact_options": False},
             "add": {"alone": True}, "exp": {"alone": False, "exact_options": True}}
    exactness = Exactness.from_probe(probe)
    exact = {"emulate_precision_casts": True}
    whole = [Scope(0, 3, "a")]
    assert "mean" in exactness.hopeless(Plan.make(whole, {"fallback_ops": []}), targets, exact, "fallback_ops")
    assert "exp" in exactness.hopeless(Plan.make(whole, {"fallback_ops": ["mean"]}), targets, exact, "fallback_ops")
    assert exactness.hopeless(Plan.make(whole, {"fallback_ops": ["mean"], "emulate_precision_casts": True}),
                              targets, exact, "fallback_ops") is None
    assert exactness.hopeless(Plan.make([Scope(2, 2, "a")], {}), targets, exact, "fallback_ops") is None  # mean stays eager


def test_seeds_fuse_high_gap_blocks_and_give_each_layer_a_scope() -> None:
    targets, space = space_for(4)
    gap = [5.0 if t in ("add", "mul", "pow", "rsqrt") else 1.0 for t in targets]
    span = [50.0 if t == "linear" else 6.0 for t in targets]
    share = block_gap_share(space, span, gap)
    assert len(share) == len(space.blocks)
    by_key = {}
    for key, s in zip(space.layout.block_keys, share):
        assert by_key.setdefault(key, s) == s  # stamped blocks share one score
    probe = {t: {"alone": t not in ("mean", "softmax"), "exact_options": False} for t in set(targets)}
    seeds = dict(profile_seeds(space, targets, span, gap, Exactness.from_probe(probe)))
    assert {"gap-top-half+probe", "probe-safe-runs", "scope-per-unit+probe"} <= set(seeds)
    per_unit = space.decode(seeds["scope-per-unit+probe"])
    assert per_unit.option_dict["fallback_ops"] == ["mean", "softmax"]
    assert per_unit.option_dict["pattern_matcher"] is False  # the exact choice
    assert len(regions(len(targets), per_unit.scopes)) >= 4
    for params in seeds.values():
        assert Exactness.from_probe(probe).hopeless(space.decode(params), targets, space.exact_options,
                                                        space.fallback_option) is None
    assert FUSE in seeds["gap-top-half+probe"].values()


@pytest.mark.parametrize("n_layers", [1, 3])
def test_suggest_covers_every_key_once(n_layers: int) -> None:
    class Recorder:
        def __init__(self) -> None:
            self.names: list[str] = []

        def suggest_categorical(self, name, choices):
            assert name not in self.names
            self.names.append(name)
            return choices[0]

    _, space = space_for(n_layers)
    recorder = Recorder()
    plan = space.suggest(recorder)
    assert plan.scopes  # decodes
    keys = set(space.layout.block_keys) | set(space.layout.cut_keys)
    assert keys <= set(recorder.names)


def test_mlp_instances_for_the_per_mlp_anchor() -> None:
    from sktune.space.ascend_anchors import mlp_instance

    assert mlp_instance("layers.3.mlp.up_proj") == "layers.3.mlp"
    assert mlp_instance("layers.0.moe.experts.1.gate") == "layers.0.moe"
    assert mlp_instance("model.layers.2.block_sparse_moe.experts.0") == "model.layers.2.block_sparse_moe"
    assert mlp_instance("layers.1.post_mlp_norm") is None
    assert mlp_instance("layers.1.pre_feedforward_layernorm") is None
    assert mlp_instance("layers.1.attn.q_proj") is None and mlp_instance("") is None
