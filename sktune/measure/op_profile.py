"""Per-op busy time and gap of the unfused graph, from torch.profiler.

Each op of the captured graph runs under its own ``record_function`` (an FX
interpreter, so the op index is known); inside an op's span, the outermost ATen
events are busy time and the rest is the gap (dispatch, launch, Python) that fusion
removes. Interpreting adds its own overhead *between* ops, which is not counted.
Host-side only: on an async device the gap is the launch side of the story.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx
from torch.profiler import record_function

from sktune.graph.opgraph import OP_KINDS
from sktune.measure.raw_events import by_enclosing, outermost, raw_events, recording

MARK = "sktune_op:"


@dataclass(frozen=True)
class OpProfile:
    """Median per-op span and gap (µs) over the profiled steps, by op index."""

    span_us: tuple[float, ...]
    gap_us: tuple[float, ...]

    def to_json(self) -> dict[str, Any]:
        return {"span_us": list(self.span_us), "gap_us": list(self.gap_us)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "OpProfile":
        return cls(tuple(data["span_us"]), tuple(data["gap_us"]))


class _MarkingInterpreter(fx.Interpreter):
    def __init__(self, gm: fx.GraphModule) -> None:
        super().__init__(gm)
        self.index = {n: i for i, n in enumerate(n for n in gm.graph.nodes if n.op in OP_KINDS)}

    def run_node(self, n: fx.Node) -> Any:
        i = self.index.get(n)
        if i is None:
            return super().run_node(n)
        with record_function(f"{MARK}{i}"):
            return super().run_node(n)


def profile_ops(gm: fx.GraphModule, args: Sequence[torch.Tensor], steps: int = 5) -> OpProfile:
    """Span and gap of every op of ``gm`` (median over ``steps`` profiled runs)."""
    interpreter = _MarkingInterpreter(gm)
    n_ops = len(interpreter.index)
    with torch.no_grad():
        interpreter.run(*args)  # warm-up
        with recording() as prof:
            for _ in range(steps):
                interpreter.run(*args)
    spans: list[list[float]] = [[] for _ in range(n_ops)]
    gaps: list[list[float]] = [[] for _ in range(n_ops)]
    events = raw_events(prof)
    marks = [e for e in events if e.name.startswith(MARK)]
    aten = outermost(events, lambda name: name.startswith("aten::"))  # an op's own calls, not theirs
    busy = [0.0] * len(marks)
    for k, e in by_enclosing(marks, aten):
        if e.end_us <= marks[k].end_us:
            busy[k] += e.duration_us
    for mark, inside in zip(marks, busy):
        i = int(mark.name[len(MARK):])
        spans[i].append(mark.duration_us)
        gaps[i].append(max(mark.duration_us - inside, 0.0))
    median = [statistics.median(s) if s else 0.0 for s in spans]
    gap = [statistics.median(g) if g else 0.0 for g in gaps]
    return OpProfile(tuple(median), tuple(gap))
