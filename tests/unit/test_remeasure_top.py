"""The search benchmark's re-measurement of a table's fastest plans: a plan that a first
round leaves unmeasured must not become the table's best on one lucky ratio."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from sktune.benchlib.exhaustive import remeasure_top
from sktune.plan import Plan, Scope
from sktune.pipe.protocol import TrialRequest


def _key(last_op: int) -> str:
    return Plan.make([Scope(0, last_op, "sk0")]).dumps()


class ScriptedRunner:
    """Answers each plan with its next scripted ratio; counts the runs per plan."""

    def __init__(self, script: dict[str, list[float]]) -> None:
        self.script = {k: list(v) for k, v in script.items()}
        self.runs: dict[str, int] = {}

    def run(self, request: TrialRequest) -> Any:
        key = request.plan.dumps()
        self.runs[key] = self.runs.get(key, 0) + 1
        ratio = self.script[key].pop(0)
        return SimpleNamespace(timing=SimpleNamespace(ratio=ratio, ratio_ci=(ratio, ratio)))


def _table(first: dict[str, float]) -> dict[str, dict[str, Any]]:
    return {k: {"ratio": r, "ratio_ci": [r, r], "bitwise": True} for k, r in first.items()}


def test_a_plan_that_rises_into_the_top_is_measured_again_too() -> None:
    a, b, c, d = (_key(n) for n in (1, 2, 3, 4))
    # a and b were lucky once; c, never re-measured by a first round of two, would be the best.
    table = _table({a: 0.20, b: 0.21, c: 0.25, d: 0.40})
    runner = ScriptedRunner({a: [0.30, 0.31], b: [0.31, 0.32], c: [0.80, 0.79], d: []})
    again = remeasure_top(runner, table, n_batches=2, top=2)
    assert runner.runs == {a: 2, b: 2, c: 2}  # c rose into the top two after a and b: measured too; d never
    assert table[c]["ratio"] == 0.79 and table[c]["ratios"] == [0.25, 0.80, 0.79]
    assert again == [a, b, c]  # fastest first, by their medians (0.30, 0.31, 0.79)
    assert "ratios" not in table[d]


def test_the_repeat_stops_at_max_plans() -> None:
    keys = [_key(n) for n in range(1, 7)]
    table = _table({k: 0.1 * (i + 1) for i, k in enumerate(keys)})
    runner = ScriptedRunner({k: [5.0, 5.0] for k in keys})  # every re-measured plan falls to the back
    again = remeasure_top(runner, table, n_batches=2, top=1, max_plans=3)
    assert len(again) == 3 and set(runner.runs) == set(keys[:3])
