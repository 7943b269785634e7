"""SuperKernel scope markers in an FX graph: where they go (pure), and putting them there.

A scope ``first..last`` becomes ``super_kernel_scope_begin(name)`` right before op
``first`` and ``super_kernel_scope_end(name)`` right after op ``last``; a ``None`` scope
has no argument, as ``torch.npu.super_kernel_scope_begin(None)`` becomes after AOT
autograd (Dynamo records ``(None,)``; npugraph_ex reads either as ``None``). Where
several markers share a spot, scopes nest properly: outer begins first, inner ends first.
npugraph_ex pairs each end with the first open begin *of the same name*, so two scopes
with one name must not overlap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx

from sktune.errors import PlanError
from sktune.graph.opgraph import op_nodes
from sktune.plan import Scope


@dataclass(frozen=True)
class Marker:
    """``begin`` before op ``op_index`` or ``end`` after it, for scope ``name``."""

    op_index: int
    kind: str  # "begin" | "end"
    name: str | None


def marker_positions(scopes: Sequence[Scope]) -> list[Marker]:
    """Markers in graph order (ties: outer begins first, inner ends first)."""
    _check_same_name_disjoint(scopes)
    events: list[tuple[tuple[int, int, int], Marker]] = []
    for s in scopes:
        # Sort key: position (a begin at op i sits before op i, an end after it), then nesting.
        events.append(((2 * s.first_op, 0, -s.last_op), Marker(s.first_op, "begin", s.name)))
        events.append(((2 * s.last_op + 1, 1, -s.first_op), Marker(s.last_op, "end", s.name)))
    return [marker for _, marker in sorted(events, key=lambda e: e[0])]


def _check_same_name_disjoint(scopes: Sequence[Scope]) -> None:
    by_name: dict[str | None, list[Scope]] = {}
    for s in scopes:
        by_name.setdefault(s.name, []).append(s)
    for name, group in by_name.items():
        group = sorted(group)
        for a, b in zip(group, group[1:]):
            if b.first_op <= a.last_op:
                raise PlanError(
                    f"two scopes named {name!r} overlap ({a.first_op}..{a.last_op} and {b.first_op}..{b.last_op}); "
                    "npugraph_ex pairs an end with the first open begin of the same name"
                )


def insert_scope_markers(gm: fx.GraphModule, scopes: Sequence[Scope], begin: Any, end: Any) -> fx.GraphModule:
    """Insert ``begin``/``end`` call nodes into ``gm`` (in place) at the scopes' edges."""
    nodes = op_nodes(gm)
    last_after: dict[int, fx.Node] = {}
    for marker in marker_positions(scopes):
        args = () if marker.name is None else (marker.name,)
        if marker.kind == "begin":
            with gm.graph.inserting_before(nodes[marker.op_index]):
                gm.graph.call_function(begin, args)
        else:
            anchor = last_after.get(marker.op_index, nodes[marker.op_index])
            with gm.graph.inserting_after(anchor):
                last_after[marker.op_index] = gm.graph.call_function(end, args)
    gm.recompile()
    return gm


def scope_marker_ops() -> tuple[Any, Any]:
    """``torch.ops.npu.super_kernel_scope_begin/end`` as they appear in a Dynamo graph."""
    return torch.ops.npu.super_kernel_scope_begin, torch.ops.npu.super_kernel_scope_end
