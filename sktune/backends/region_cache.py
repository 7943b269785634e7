"""Compiled regions reused by structure: a repeated unit compiles once per configuration.

A plan stamped across 24 identical layers has 24 regions that differ only in node names
and in which parameters they read (parameters are region inputs). Inductor's own FX-graph
cache already shares their generated kernels, but every region still pays AOTAutograd's
trace (~1 s per 127-op layer, docs/measured.md "Compile cost"). Keyed by structure, input
metadata and configuration, one compiled region serves them all, within a plan and
across the trials of a study.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import fx
from torch.fx.node import _get_qualified_name


def region_key(gm: fx.GraphModule, args: Sequence[Any], config: str) -> str | None:
    """A key equal for two regions exactly when one compiled function computes both.

    Nodes are named by position, placeholders by the metadata of the tensor they receive
    (shape, stride, offset, dtype, device), call targets by qualified name. None for a
    region that reads state other than its inputs (``get_attr``, submodules): its result
    depends on values the key cannot see.
    """
    position: dict[fx.Node, int] = {}
    parts = [config]
    placeholders = iter(args)
    for i, node in enumerate(gm.graph.nodes):
        position[node] = i
        if node.op in ("get_attr", "call_module"):
            return None
        if node.op == "placeholder":
            parts.append("in " + _describe_value(next(placeholders, None)))
            continue
        target = node.target if isinstance(node.target, str) else _get_qualified_name(node.target)
        parts.append(f"{node.op} {target} {_describe_arg(node.args, position)} {_describe_arg(node.kwargs, position)}")
    return "\n".join(parts)


def _describe_value(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return (f"tensor{tuple(value.shape)} stride{value.stride()} +{value.storage_offset()} "
                f"{value.dtype} {value.device} grad={value.requires_grad}")
    return f"{type(value).__name__} {value!r}"


def _describe_arg(arg: Any, position: dict[fx.Node, int]) -> str:
    if isinstance(arg, fx.Node):
        return f"%{position[arg]}"
    if isinstance(arg, (list, tuple)):
        inner = ", ".join(_describe_arg(a, position) for a in arg)
        return f"[{inner}]" if isinstance(arg, list) else f"({inner})"
    if isinstance(arg, dict):
        return "{" + ", ".join(f"{k}: {_describe_arg(v, position)}" for k, v in arg.items()) + "}"
    if isinstance(arg, slice):
        return f"slice({_describe_arg((arg.start, arg.stop, arg.step), position)})"
    return repr(arg)


class RegionCache:
    """The most recently used compiled regions, by ``region_key``; counts hits for the trial record."""

    def __init__(self, max_entries: int = 512) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[str, Callable[..., Any]] = OrderedDict()
        self.compiled = 0  # regions compiled since the last ``take_counts``
        self.reused = 0

    def __contains__(self, key: str | None) -> bool:
        return key is not None and key in self._entries

    def get_or_compile(self, key: str | None, compile_region: Callable[[], Callable[..., Any]]) -> Callable[..., Any]:
        if key in self:
            self._entries.move_to_end(key)
            self.reused += 1
            return self._entries[key]
        fn = compile_region()
        self.compiled += 1
        if key is not None:
            self._entries[key] = fn
            if len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return fn

    def take_counts(self) -> dict[str, int]:
        """Regions compiled and reused since the last call (one trial's compile)."""
        counts = {"regions_compiled": self.compiled, "regions_reused": self.reused}
        self.compiled = self.reused = 0
        return counts
