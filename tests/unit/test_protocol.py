"""Records that cross the worker pipe and the backend boundary survive JSON unchanged, and
a malformed answer is named, not half-read."""

from __future__ import annotations

import json

import pytest

from sktune.backends.inductor import InductorBackend
from sktune.capabilities import Capabilities, OptionSpec
from sktune.measure.stats import PairedTiming
from sktune.plan import Plan, Scope
from sktune.pipe.protocol import (BisectRequest, BisectResult, ConfirmRequest, ConfirmResult, MalformedResult,
                                    ProfileRequest, ProfileResult, TimingUpdate, TrialRequest, TrialResult)


def test_trial_request_and_result_round_trip_through_json() -> None:
    request = TrialRequest(Plan.make([Scope(0, 3, "sk0")], {"fallback_ops": ["mean"]}), 10)
    assert TrialRequest.from_json(json.loads(json.dumps(request.to_json()))) == request
    result = TrialResult(False, ({"input_set": 1, "output_index": 0},), PairedTiming(2e-3, 1e-3, 0.5, (0.4, 0.6), 10),
                         ((0, 1), (3,)), ((0, 1), (3, 3)), 1.5, 0.25, 0.5, {"fusion": {"planned": ["sk0"]}})
    assert TrialResult.from_json(json.loads(json.dumps(result.to_json()))) == result
    update = TimingUpdate(PairedTiming(2e-3, 1e-3, 0.5, (0.4, 0.6), 20), 0.3)
    assert TimingUpdate.from_json(json.loads(json.dumps(update.to_json()))) == update


def test_side_commands_round_trip_and_keep_their_stored_keys() -> None:
    plan = Plan.make([Scope(0, 3, "sk0")])
    for record in (ConfirmRequest((plan, Plan.make([])), "wide"), BisectRequest(plan, 8), ProfileRequest(None),
                   ProfileRequest(plan), ConfirmResult((PairedTiming(2e-3, 1e-3, 0.5, (0.4, 0.6), 10),), (0,)),
                   ProfileResult({"step_us": 10.0, "busy_us": 8.0, "gap_us": 2.0, "steps": 5})):
        assert type(record).from_json(json.loads(json.dumps(record.to_json()))) == record
    # A bisection is stored as the trial's smallest_failing_range: the keys studies have always had.
    assert BisectResult(None, 3).to_json() == {"range": None, "runs": 3}
    found = BisectResult((2, 4), 5, ("mean",), ("GatherV2",))
    assert found.to_json() == {"range": [2, 4], "op_types": ["mean"], "runs": 5, "kernel_types": ["GatherV2"]}
    assert "kernel_types" not in BisectResult((2, 4), 5, ("mean",)).to_json()
    assert BisectResult.from_json(found.to_json()) == found
    for parse in (ConfirmResult.from_json, BisectResult.from_json, ProfileResult.from_json):
        with pytest.raises(MalformedResult):
            parse({"garbage": True})


@pytest.mark.parametrize("answer", [{"garbage": True}, None, [1, 2]])
def test_malformed_result_names_what_is_missing(answer: object) -> None:
    with pytest.raises(MalformedResult, match=r"malformed result from the worker \(missing bitwise, mismatches"):
        TrialResult.from_json(answer)


def test_capabilities_round_trip_and_refuse_an_unknown_variant() -> None:
    caps = Capabilities(options=(OptionSpec("x", (False, True), False, True, "doc", exact_choice=True),),
                        fallback_candidates=("mean",), unsafe_op_types=frozenset({"mean"}), probes_exactness=True,
                        fallback_option="fallback_ops", fuse_all_variants=("x",))
    assert Capabilities.from_json(json.loads(json.dumps(caps.to_json()))) == caps
    assert caps.narrowed(set()).options == () and caps.narrowed(set()).fuse_all_variants == ()
    with pytest.raises(ValueError, match="not options of the backend"):
        Capabilities(fuse_all_variants=("y",))
    with pytest.raises(ValueError, match="anchor_set"):
        Capabilities(anchor_set="mine")


def test_inductor_declares_its_fuse_all_variant_and_fallbacks(tmp_path) -> None:
    import torch

    from sktune.graph.capture import capture

    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Softmax(dim=-1))
    # Precision casts matter only where bf16/fp16 values are: an fp32 graph neither
    # searches the option nor compiles its fuse-all anchor.
    fp32 = InductorBackend().capabilities(capture(model, (torch.randn(2, 8),)))
    assert fp32.fuse_all_variants == () and "emulate_precision_casts" not in {o.name for o in fp32.options}
    graph = capture(model.to(torch.bfloat16), (torch.randn(2, 8, dtype=torch.bfloat16),))
    caps = InductorBackend().capabilities(graph)
    assert caps.fuse_all_variants == ("emulate_precision_casts",)
    assert caps.fallback_option == "fallback_ops" and "softmax" in caps.fallback_candidates
    assert caps.probes_exactness and "softmax" in caps.unsafe_op_types
