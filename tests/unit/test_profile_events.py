"""Step profiles from the profiler's recorded events (measure/raw_events.py)."""

from __future__ import annotations

import torch

from sktune.measure.op_profile import profile_ops
from sktune.measure.profile import profile_steps
from sktune.measure.raw_events import RawEvent, outermost


def test_outermost_keeps_the_callers_and_drops_what_they_call() -> None:
    events = [RawEvent("aten::linear", 0, 10, 1), RawEvent("aten::addmm", 1, 9, 1), RawEvent("step", 0, 30, 1),
              RawEvent("aten::mul", 12, 14, 1), RawEvent("aten::mul", 13, 20, 2)]  # other thread: its own
    ordered = sorted(events, key=lambda e: (e.start_us, -e.end_us))
    kept = outermost(ordered, lambda name: name.startswith("aten::"))
    assert [(e.name, e.thread) for e in kept] == [("aten::linear", 1), ("aten::mul", 1), ("aten::mul", 2)]


def test_step_profile_counts_each_steps_calls_once() -> None:
    a, b = torch.randn(64, 64), torch.randn(64, 64)

    def step() -> None:
        for _ in range(3):
            torch.nn.functional.linear(torch.relu(a), b)  # linear calls addmm/mm inside: not counted again

    profile = profile_steps(step, steps=4, warmup=1)
    assert profile.steps == 4
    assert 0 < profile.busy_us <= profile.step_us
    counts = {k["name"]: k["count"] for k in profile.top_kernels}
    assert counts["aten::linear"] == 3 and counts["aten::relu"] == 3
    assert not any(name in counts for name in ("aten::addmm", "aten::mm", "aten::t"))


def test_op_profile_gives_every_op_a_span_and_a_gap_within_it() -> None:
    gm = torch.fx.symbolic_trace(lambda x: torch.relu(x) * 2 + 1)
    result = profile_ops(gm, [torch.randn(32, 32)], steps=3)
    assert len(result.span_us) == 3
    assert all(0 < gap <= span for span, gap in zip(result.span_us, result.gap_us))
