"""The captured forward: an FX graph plus the op list the tuner reasons about."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import fx

OP_KINDS = ("call_function", "call_method", "call_module")


@dataclass(frozen=True)
class Op:
    """One compute node of the captured graph, with where it came from."""

    index: int
    name: str  # FX node name, unique in the graph
    target: str  # op type, e.g. "linear", "mean", "softmax", "mul"
    module: str  # module path from nn_module_stack, "" for the root module
    module_type: str  # class name of that module, "" for the root module
    source: str  # "file:line" of the user code that produced it, "" when unknown

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Op":
        return cls(int(data["index"]), data["name"], data["target"], data["module"], data["module_type"],
                   data["source"])


@dataclass(frozen=True)
class OpGraph:
    """The forward captured once: runnable graph, its flat arguments, its ops and cuts.

    ``input_positions[k]`` is the index into the user's example inputs that feeds
    placeholder ``k``, or ``None`` when that placeholder is a parameter or buffer.
    """

    gm: fx.GraphModule
    flat_args: tuple[torch.Tensor, ...]
    input_positions: tuple[int | None, ...]
    ops: tuple[Op, ...]
    boundaries: tuple[int, ...]  # i in boundaries: a cut between op i and op i+1 is legal

    @property
    def op_nodes(self) -> list[fx.Node]:
        return op_nodes(self.gm)

    def args_for(self, inputs: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
        """The graph's flat arguments with the user inputs replaced by ``inputs``."""
        return [
            self.flat_args[k] if pos is None else inputs[pos] for k, pos in enumerate(self.input_positions)
        ]

    def describe(self) -> dict[str, Any]:
        return {"ops": [op.to_json() for op in self.ops], "boundaries": list(self.boundaries)}


def op_nodes(gm: fx.GraphModule) -> list[fx.Node]:
    """The compute nodes of ``gm`` in graph order: the ops, by index."""
    return [node for node in gm.graph.nodes if node.op in OP_KINDS]
