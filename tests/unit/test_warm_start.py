"""How an earlier study's plans map onto a new graph, or why they cannot; a refined best keeps
its override, one plan runs once, and the summary says where each ran (no compile)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import optuna
import pytest

from sktune.capabilities import Capabilities, OptionSpec
from sktune.cli.summary_view import warm_start_lines
from sktune.errors import SktuneError
from sktune.graph.opgraph import Op
from sktune.measure.stats import PairedTiming
from sktune.plan import Plan
from sktune.space.search_space import SearchSpace, build_space
from sktune.tuning.attrs import StudyAttr, TrialAttr
from sktune.tuning.resume import StartingQueue
from sktune.tuning.summary import warm_start_outcomes
from sktune.tuning.warm_start import carried_overrides, completed, mapping_for, unit_signature, warm_plans
from sktune.pipe.workload import Workload

LAYER = [("layer_norm", "norm"), ("linear", "up"), ("relu", ""), ("linear", "down"), ("add", "")]


def ops(layers: int, layer: list[tuple[str, str]] = LAYER, container: str = "layers.") -> list[dict[str, Any]]:
    out = []
    for i in range(layers):
        for target, sub in layer:
            out.append({"target": target, "module": f"{container}{i}" + (f".{sub}" if sub else "")})
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


def test_the_same_ops_in_another_space_are_refused_for_what_they_are() -> None:
    # The same model tuned at other shapes drew other candidate cuts: it was refused as
    # "another graph (4 ops, this one has 4)". Its parameters name blocks by position, so
    # the same names would be other op ranges here: refused, with the true reason.
    graph = [{"target": "relu", "module": ""}] * 4
    old = earlier(graph, sha="same")
    old.set_user_attr(StudyAttr.SPACE, "a space with other cuts")
    with pytest.raises(SktuneError, match="tuned the same ops in another search space .* would mean other op ranges"):
        mapping_for(old, describe(graph, sha="same"), space_of(graph))


@pytest.mark.parametrize("container", ["layers.", ""])  # "": the model is an nn.Sequential of its layers
def test_more_layers_of_the_same_layer_re_stamp_its_pattern(container: str) -> None:
    two, three = ops(2, container=container), ops(3, container=container)
    assert unit_signature(two) == unit_signature(three) == tuple((t, f".{s}" if s else "") for t, s in LAYER)
    mapping = mapping_for(earlier(two), describe(three), space_of(three))
    assert "re-stamped over 3 layers" in mapping


@pytest.mark.parametrize(("old", "new", "backend", "message"), [
    (ops(2), ops(3), "npu", "tuned backend npu, not inductor"),
    (ops(2), ops(3, LAYER[:2] + [("gelu", "")] + LAYER[3:]), "inductor",
     "the repeated layer changed since study 'earlier' (5 ops per layer then, 5 now; first difference at op 2 "
     "of the layer: relu (the layer itself) then, gelu (the layer itself) now)"),
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


COSTLY = OptionSpec("cpp_wrapper", (False, True), False, costly_choices=(True,))


def scripted_study(name: str, storage: str, space: SearchSpace, workload: Workload,
                   runs: list[tuple[dict[str, Any], dict[str, Any], float]]) -> optuna.Study:
    """A finished study of ``runs`` (parameters, option overrides, time ratio), each exact."""
    study = optuna.create_study(study_name=name, storage=storage)
    study.set_user_attr(StudyAttr.BACKEND, workload.environment["backend"])
    study.set_user_attr(StudyAttr.SPACE, space.signature())
    study.set_user_attr(StudyAttr.MODEL_SHA256, workload.model_sha256)
    for params, overrides, ratio in runs:
        study.enqueue_trial(params, user_attrs={TrialAttr.OPTION_OVERRIDES: overrides} if overrides else {})
        study.optimize(lambda t, ratio=ratio: exact_trial(t, space, ratio), n_trials=1)
    return study


def exact_trial(trial: optuna.Trial, space: SearchSpace, ratio: float) -> float:
    plan = space.with_options(space.suggest(trial), trial.user_attrs.get(TrialAttr.OPTION_OVERRIDES) or {})
    trial.set_user_attr(TrialAttr.PLAN, plan.to_json())
    trial.set_user_attr(TrialAttr.TIMING, PairedTiming(1e-3, ratio * 1e-3, ratio, (ratio, ratio), 10).to_json())
    trial.set_constraint("bitwise", 0.0)
    return ratio


def test_a_refined_best_starts_with_its_override_and_one_plan_runs_once(tmp_path: Path) -> None:
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    graph = ops(2)
    workload = replace(describe(graph), capabilities=Capabilities(options=(COSTLY,)))
    space = build_space(workload.targets, workload.modules, list(workload.boundaries), workload.capabilities,
                        unsafe=frozenset())
    storage = f"sqlite:///{tmp_path}/s.db"
    fused, unfused = (space.params_for([f] * len(space.blocks)) for f in (True, False))
    split = space.params_for([k % 2 == 0 for k in range(len(space.blocks))])
    # The search's best, then the same plan refined with a C++ wrapper (faster): one plan
    # each, though both have the same parameters.
    scripted_study("earlier", storage, space, workload, [(split, {}, 0.6), (split, {"cpp_wrapper": True}, 0.5),
                                                         (unfused, {}, 1.0)])
    scripted_study("sibling", storage, space, workload, [(split, {}, 0.55), (fused, {}, 0.7)])
    warm = warm_plans(["earlier", "sibling"], storage, workload, space, "new")
    # A plan that is this study's unfused or fuse-all anchor runs as that anchor: the yardsticks
    # and the finalists' round look them up by name.
    assert [(w.anchor, w.overrides, w.same_as) for w in warm] == [
        ("warm:earlier#1", {"cpp_wrapper": True}, None), ("warm:earlier#0", {}, None),
        ("warm:earlier#2", {}, "unfused"), ("warm:sibling#0", {}, "warm:earlier#0"),
        ("warm:sibling#1", {}, "fuse-all")]

    study = optuna.create_study(study_name="new", storage=storage)
    study.set_user_attr(StudyAttr.WARM_START, [w.to_json() for w in warm])
    queue = StartingQueue([(w.anchor, w.params) for w in warm if not w.same_as],
                          {w.anchor: w.overrides for w in warm if w.overrides})
    queue.top_up(study)
    study.optimize(lambda t: exact_trial(t, space, 0.5), n_trials=1, callbacks=[queue])
    ran = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert [t.user_attrs[TrialAttr.ANCHOR] for t in ran] == ["warm:earlier#1"]
    assert Plan.from_json(ran[0].user_attrs[TrialAttr.PLAN]).option_dict["cpp_wrapper"] is True
    # The same parameters without the override are another plan: queued next.
    (waiting,) = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert waiting.user_attrs == {TrialAttr.ANCHOR: "warm:earlier#0"}
    assert waiting.system_attrs["fixed_params"] == ran[0].params
    # The summary says where each ran, that the trials ended before the next, and what each
    # of the others is the same plan as.
    outcomes = {w["anchor"]: w for w in warm_start_outcomes(study)}
    assert [outcomes[a].get("ran_as") for a in ("warm:earlier#1", "warm:earlier#0")] == [0, None]
    assert "ran_as" not in outcomes["warm:sibling#0"] and "params" not in outcomes["warm:sibling#0"]
    lines = warm_start_lines({"warm_start": list(outcomes.values())})
    assert lines[0].endswith("(same model: the same op indices, with cpp_wrapper=True) ran as trial #0")
    assert "not run yet" in lines[1]
    assert lines[2] == "warm start: trial #2 of study 'earlier' is the same plan here as unfused"
    assert lines[3] == "warm start: trial #0 of study 'sibling' is the same plan here as warm:earlier#0"


def test_an_override_this_backend_does_not_have_is_refused() -> None:
    space = space_of(ops(2))
    with pytest.raises(SktuneError, match="trial 4 of study 'earlier' sets options this search space cannot"):
        carried_overrides(space, {"cpp_wrapper": True}, "earlier", 4)


def test_a_warm_storage_is_only_read_never_created(tmp_path: Path) -> None:
    """--warm-storage sqlite:///nothere.db left a database with Optuna's tables behind."""
    from sktune.tuning.warm_start import check_warm_start_names

    missing = tmp_path / "nothere.db"
    with pytest.raises(SktuneError, match="no study named 'old': the storage file .*nothere.db does not exist"):
        check_warm_start_names(["old"], f"sqlite:///{missing}", "new")
    assert not missing.exists()
    empty = tmp_path / "empty.db"
    empty.touch()  # a file without Optuna's tables: no studies, and none created
    with pytest.raises(SktuneError, match="no study named 'old'.*studies there: none"):
        check_warm_start_names(["old"], f"sqlite:///{empty}", "new")
    assert empty.stat().st_size == 0
    with pytest.raises(SktuneError, match="a storage is a database URL that SQLAlchemy knows"):
        check_warm_start_names(["old"], "redis://localhost/0", "new")


def test_warm_storage_without_warm_start_is_refused(tmp_path: Path) -> None:
    from tests.cli.test_cli import sktune as cli

    model = Path(__file__).resolve().parents[1] / "models" / "tiny_norm.py"
    result = cli("run", str(model), "--warm-storage", f"sqlite:///{tmp_path}/w.db", cwd=tmp_path)
    assert result.returncode == 1 and "give --warm-start too" in result.stderr, result.stderr[-2000:]
    assert not (tmp_path / "w.db").exists() and not (tmp_path / "sktune.db").exists()
