"""A plan's regions cut out of the captured graph as calls, a region's own graph built only on demand.

torch.fx's ``fuse_by_partitions`` builds and recompiles a submodule for every region: 1-3 s
per trial on a 24-layer stack whose ~200 regions are all but a few compiled already
(docs/measured.md "Compile cost"). Here each region becomes one call node (its inputs in
first-use order, a tuple of its outputs) in a copy of the graph; ``lift`` builds the
region's own graph when it must be keyed or compiled.
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from torch import fx

from sktune.graph.opgraph import op_nodes


@dataclass(frozen=True)
class Cut:
    """One region: where it was in the captured graph and its call in the cut graph."""

    first: int
    last: int
    nodes: tuple[fx.Node, ...]  # its ops, of the captured graph
    inputs: tuple[fx.Node, ...]  # of the captured graph, in the call's argument order
    outputs: tuple[fx.Node, ...]  # of the captured graph, in the call's tuple order
    call: fx.Node  # in the cut graph; its target is set by the caller


def cut_regions(gm: fx.GraphModule, spans: Sequence[tuple[int, int]], target: Any) -> tuple[fx.GraphModule, list[Cut]]:
    """A copy of ``gm`` where the ops of each ``(first, last)`` span are replaced by one
    ``call_function`` of ``target(span index)`` (a placeholder the caller replaces)."""
    nodes = op_nodes(gm)
    cut = copy.deepcopy(gm)
    same = dict(zip(gm.graph.nodes, cut.graph.nodes))  # a deepcopy keeps the node order
    out: list[Cut] = []
    for k, (first, last) in enumerate(spans):
        inside = nodes[first:last + 1]
        members = set(inside)
        inputs = tuple(dict.fromkeys(a for n in inside for a in n.all_input_nodes if a not in members))
        outputs = tuple(n for n in inside if any(u not in members for u in n.users))
        # After the last op: every input is defined before some op of the span, every
        # outside user of an output comes after it.
        with cut.graph.inserting_after(same[inside[-1]]):
            call = cut.graph.call_function(target(k), tuple(same[a] for a in inputs))
        inside_cut = {same[n] for n in inside}
        items = {}
        with cut.graph.inserting_after(call):
            for i, o in reversed(list(enumerate(outputs))):  # each lands right after the call
                items[o] = cut.graph.call_function(operator.getitem, (call, i))
                same[o].replace_all_uses_with(items[o], delete_user_cb=lambda u: u not in inside_cut)
        for n in reversed(inside):
            cut.graph.erase_node(same[n])
        same.update(items)  # a later region reads this one's outputs through its call
        out.append(Cut(first, last, tuple(inside), inputs, outputs, call))
    cut.recompile()
    return cut, out


def lift(gm: fx.GraphModule, region: Cut) -> fx.GraphModule:
    """The region's own graph: one placeholder per input, returning the outputs as a tuple."""
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {a: graph.placeholder(f"in{i}") for i, a in enumerate(region.inputs)}
    for n in region.nodes:
        env[n] = graph.node_copy(n, lambda a: env[a])
    graph.output(tuple(env[o] for o in region.outputs))
    return fx.GraphModule(gm, graph)  # takes along any submodule or attribute the ops read
