"""How an earlier study's plans map onto a new graph, or why they cannot (no compile)."""

from __future__ import annotations

from typing import Any

import optuna
import pytest

from sktune.capabilities import Capabilities
from sktune.errors import SktuneError
from sktune.graph.opgraph import Op
from sktune.space.search_space import SearchSpace, build_space
from sktune.tuning.records import StudyAttr
from sktune.tuning.warm_start import completed, mapping_for, unit_signature
from sktune.pipe.workload import Workload

LAYER = [("layer_norm", "norm"), ("linear", "up"), ("relu", ""), ("linear", "down"), ("add", "")]


def ops(layers: int, layer: list[tuple[str, str]] = LAYER) -> list[dict[str, Any]]:
    out = []
    for i in range(layers):
        for target, sub in layer:
            out.append({"target": target, "module": f"layers.{i}" + (f".{sub}" if sub else "")})
    return out


def describe(graph_ops: list[dict[str, Any]], sha: str = "new", backend: str = "inductor") -> Workload:
    return Workload(tuple(Op(k, f"op{k}", o["target"], o["module"], "", "") for k, o in enumerate(graph_ops)),
                    tuple(range(len(graph_ops) - 1)), Capabilities(), {"backend": backend}, sha, [])


def space_of(graph_ops: list[dict[str, Any]]) -> SearchSpace:
    n = len(graph_ops)
    return build_space([o["target"] for o in graph_ops], [o["module"] for o in graph_ops], list(range(n - 1)),
                       Capabilities(), unsafe=frozenset())


def earlier(graph_ops: list[dict[str, Any]], sha: str = "old", backend: str = "inductor") -> optuna.Study:
    study = optuna.create_study(study_name="earlier")
    study.set_user_attr(StudyAttr.BACKEND, backend)
    study.set_user_attr(StudyAttr.OPS, graph_ops)
    study.set_user_attr(StudyAttr.MODEL_SHA256, sha)
    study.set_user_attr(StudyAttr.SPACE, space_of(graph_ops).signature())
    return study


def test_the_same_model_and_space_keep_the_op_indices() -> None:
    graph = ops(2)
    assert mapping_for(earlier(graph, sha="same"), describe(graph, sha="same"), space_of(graph)).startswith(
        "same model")
    assert mapping_for(earlier(graph), describe(graph), space_of(graph)).startswith("changed model, same ops")


def test_more_layers_of_the_same_layer_re_stamp_its_pattern() -> None:
    assert unit_signature(ops(2)) == unit_signature(ops(3)) == tuple((t, f".{s}" if s else "") for t, s in LAYER)
    mapping = mapping_for(earlier(ops(2)), describe(ops(3)), space_of(ops(3)))
    assert "re-stamped over 3 layers" in mapping


@pytest.mark.parametrize(("old", "new", "backend", "message"), [
    (ops(2), ops(3), "npu", "tuned backend npu, not inductor"),
    (ops(2), ops(3, LAYER[:2] + [("gelu", "")] + LAYER[3:]), "inductor",
     "the repeated layer changed since study 'earlier' (5 ops per layer then, 5 now; first difference at op 2"),
    (ops(2), [{"target": "relu", "module": ""}] * 4, "inductor", "tuned another graph (10 ops, this one has 4)"),
])
def test_plans_that_cannot_map_are_refused_with_the_reason(old: list, new: list, backend: str, message: str) -> None:
    with pytest.raises(SktuneError, match=message.replace("(", "\\(").replace(")", "\\)")):
        mapping_for(earlier(old, backend=backend), describe(new), space_of(new))


def test_what_only_the_new_space_asks_keeps_the_earlier_plan() -> None:
    space = space_of(ops(3))
    params = {k: v[0] for k, v in space.domains().items() if not k.endswith(".own")}
    filled = completed(space, params)
    assert {k: filled[k] for k in params} == params
    assert all(filled[k] is False for k in filled if k not in params)
    with pytest.raises(SktuneError, match="does not decide"):
        completed(space, {})
