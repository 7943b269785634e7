"""The workload crosses the pipe as JSON and comes back the same (issue 25)."""

from __future__ import annotations

from sktune.capabilities import Capabilities
from sktune.graph.opgraph import Op
from sktune.measure.op_profile import OpProfile
from sktune.pipe.workload import ServedShape, Workload


def workload() -> Workload:
    ops = tuple(Op(k, f"op{k}", t, f"layers.{k}", "Linear", f"m.py:{k}") for k, t in enumerate(["mul", "add"]))
    return Workload(ops, (0,), Capabilities(), {"backend": "inductor", "threads": "1"}, "abc", [[[4, 8], "float32"]],
                    kernelless=(False, True), op_profile=OpProfile((1.0, 2.0), (0.5, 0.5)),
                    exactness={"add": {"alone": True}}, startup_s={"load": 1.0},
                    shapes={"wide": ServedShape(2.0, [[[4, 8], "float32"]]), "narrow": ServedShape(1.0, [])},
                    verify_shapes=("w32", "w37"))


def test_the_workload_survives_its_json() -> None:
    w = workload()
    assert Workload.from_json(w.to_json()) == w
    assert w.targets == ["mul", "add"] and w.modules == ["layers.0", "layers.1"] and w.backend == "inductor"
    assert w.shape_weights == (("wide", 2.0), ("narrow", 1.0))


def test_space_inputs_as_a_study_stores_them() -> None:
    bare = workload().with_space_inputs({}, {})
    assert bare.op_profile is None and bare.exactness == {} and bare.op_profile_json() == {}
    assert Workload.from_json(bare.to_json()) == bare
