"""Spans of the captured graph lifted out side by side: one graph whose parts share nothing.

The exactness probe asks, for each op, whether that op compiled alone reproduces eager.
One compile per op is ~1 s on CPU (a C++ build each); the same spans placed side by side
in one graph are one compile. Each span reads its own placeholders (fed with the values
eager computed at that point) and shares no buffer with any other, so the compiler has no
reason to fuse one span with another (Inductor fuses only nodes that share memory unless
``aggressive_fusion`` is on, which the probe never turns on). A span whose outputs differ
from eager's values there is then judged where the user sees it: the model's outputs with
only that span's values replaced (``eager_with``), as if it alone had been compiled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx

from sktune.graph.opgraph import Op, OpGraph, op_nodes


@dataclass(frozen=True)
class SideBySide:
    """The lifted graph, where its placeholders come from and where each span's outputs are."""

    graph: OpGraph  # one op per copied node; every cut legal (the spans are independent)
    sources: tuple[fx.Node, ...]  # the original node whose value feeds each placeholder, in order
    outputs: tuple[tuple[fx.Node, ...], ...]  # per span: the original nodes it outputs, in output order

    def args_from(self, values: dict[fx.Node, Any]) -> list[torch.Tensor]:
        """The lifted graph's arguments from one eager run's node values."""
        return [values[n] for n in self.sources]


def side_by_side(gm: fx.GraphModule, spans: Sequence[tuple[int, int]], values: dict[fx.Node, Any],
                 targets: Sequence[str]) -> SideBySide:
    """Copy each ``(first, last)`` op span of ``gm`` into one new graph, span after span.

    ``values`` are one eager run's node values (``node_values``): tensors entering a span
    become placeholders of their own, anything else (a size, a dtype) a constant.
    ``targets`` are the op types, by op index, for the lifted graph's op list."""
    nodes = op_nodes(gm)
    graph = fx.Graph()
    sources: list[fx.Node] = []
    outputs: list[tuple[fx.Node, ...]] = []
    flat_out: list[fx.Node] = []
    lifted_targets: list[str] = []
    for first, last in spans:
        inside = nodes[first:last + 1]
        members = set(inside)
        env: dict[fx.Node, Any] = {}

        def lift(n: fx.Node) -> Any:
            if n not in env:  # an input of the span: its own placeholder, never shared
                value = values[n]
                if isinstance(value, torch.Tensor):
                    env[n] = graph.placeholder(f"in{len(sources)}")
                    sources.append(n)
                else:
                    env[n] = value
            return env[n]

        for n in inside:
            env[n] = graph.node_copy(n, lift)
        lifted_targets += targets[first:last + 1]
        out = tuple(n for n in inside if isinstance(values.get(n), torch.Tensor)
                    and any(u not in members for u in n.users))
        outputs.append(out)
        flat_out += [env[n] for n in out]
    graph.output(tuple(flat_out))
    lifted = fx.GraphModule(gm, graph)
    args = tuple(values[n] for n in sources)
    ops = tuple(Op(i, n.name, t, "", "", "") for i, (n, t) in enumerate(zip(op_nodes(lifted), lifted_targets)))
    return SideBySide(OpGraph(lifted, args, (None,) * len(args), ops, tuple(range(len(ops)))),
                      tuple(sources), tuple(outputs))


def span_nodes(gm: fx.GraphModule, spans: Sequence[tuple[int, int]]) -> set[fx.Node]:
    """The nodes ``side_by_side`` needs values of: the spans' nodes and their inputs."""
    nodes = op_nodes(gm)
    inside = {n for first, last in spans for n in nodes[first:last + 1]}
    return inside | {a for n in inside for a in n.all_input_nodes}


def node_values(gm: fx.GraphModule, args: Sequence[torch.Tensor], keep: set[fx.Node]) -> dict[fx.Node, Any]:
    """The values of the ``keep`` nodes in one eager run of ``gm`` (the others are freed as usual)."""
    kept: dict[fx.Node, Any] = {}

    class Recorder(fx.Interpreter):
        def run_node(self, n: fx.Node) -> Any:
            value = super().run_node(n)
            if n in keep:
                kept[n] = value
            return value

    with torch.no_grad():
        Recorder(gm).run(*args)
    return kept


def eager_with(gm: fx.GraphModule, args: Sequence[torch.Tensor], replaced: dict[fx.Node, Any]) -> Any:
    """``gm`` run eagerly, except that the ``replaced`` nodes take the given values: the
    model's outputs had only those nodes been computed another way."""

    class Substitute(fx.Interpreter):
        def run_node(self, n: fx.Node) -> Any:
            return replaced[n] if n in replaced else super().run_node(n)

    with torch.no_grad():
        return Substitute(gm).run(*args)
