"""A narrow CPU double of the Ascend surface the npu backend touches.

- ``npu::super_kernel_scope_begin/end(str? scope_name=None) -> ()`` registered with
  torch.library on CPU (side-effecting: calls are counted; the fake impl does nothing);
- a stand-in torch.compile backend named ``npugraph_ex`` that records the options and the
  marked FX graph it receives, then runs the graph eagerly.

It proves wiring (which markers go where, which options arrive), never speed: nothing
timed through it is an NPU figure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx

_LIB: torch.library.Library | None = None
CALLS: list[tuple[str, str | None]] = []


def register_marker_ops() -> None:
    """Define the two marker ops once per process (no-ops that record their calls)."""
    global _LIB
    if _LIB is not None:
        return
    _LIB = torch.library.Library("npu", "FRAGMENT")
    for kind in ("begin", "end"):
        name = f"super_kernel_scope_{kind}"
        _LIB.define(f"{name}(str? scope_name=None) -> ()", tags=(torch.Tag.pt2_compliant_tag,))

        def impl(scope_name: str | None = None, _kind: str = kind) -> None:
            CALLS.append((_kind, scope_name))

        _LIB.impl(name, impl, "CompositeExplicitAutograd")
        torch.library.register_fake(f"npu::{name}", lambda scope_name=None: None, lib=_LIB)


@dataclass
class Recorded:
    gm: fx.GraphModule
    options: dict[str, Any]


@dataclass(eq=False)  # hashable by identity: Dynamo's registry keeps backends in a set
class StandInNpugraphEx:
    """Records every compile; returns the marked graph run eagerly."""

    compiles: list[Recorded] = field(default_factory=list)

    def __call__(self, gm: fx.GraphModule, example_inputs: list[torch.Tensor], options: dict | None = None):
        self.compiles.append(Recorded(gm, dict(options or {})))
        return gm


def install() -> StandInNpugraphEx:
    """Register the marker ops and (re)register the stand-in ``npugraph_ex`` backend."""
    from torch._dynamo.backends import registry

    register_marker_ops()
    stand_in = StandInNpugraphEx()
    registry._COMPILER_FNS.pop("npugraph_ex", None)
    registry.register_backend(stand_in, name="npugraph_ex")
    return stand_in


def markers_in(gm: fx.GraphModule) -> list[tuple[str, str | None, str]]:
    """(kind, scope name, name of the next/previous op) for every marker node, in order."""
    out = []
    nodes = list(gm.graph.nodes)
    for i, node in enumerate(nodes):
        target = str(node.target)
        if "super_kernel_scope_" in target:
            kind = "begin" if target.endswith("begin") else "end"
            name = node.args[0] if node.args else None
            neighbour = nodes[i + 1] if kind == "begin" else nodes[i - 1]
            out.append((kind, name, neighbour.name))
    return out
