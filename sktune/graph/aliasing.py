"""Which ops of the captured graph launch no kernel: views and no-op conversions.

An op whose every output shares storage with one of its inputs (``view``, ``transpose``,
``chunk``, ``getitem``, a ``.to(float32)`` of a float32 tensor) and that wrote nothing
(an in-place ``add_`` also returns its input, but bumps its version counter) computes
nothing. A fusion scope made of such ops alone is empty once the graph is traced to
kernels: SuperKernel would get a begin marker directly followed by its end. Found by running the graph once on
real inputs (fake tensors during capture do not say which conversions are no-ops).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import fx
from torch.utils._pytree import tree_leaves

from sktune.graph.opgraph import OP_KINDS


def _storages(value: Any) -> list[int]:
    return [t.untyped_storage().data_ptr() for t in tree_leaves(value) if isinstance(t, torch.Tensor)]


class _AliasRecorder(fx.Interpreter):
    def __init__(self, gm: fx.GraphModule) -> None:
        super().__init__(gm)
        self.kernelless: list[bool] = []

    def run_node(self, n: fx.Node) -> Any:
        if n.op not in OP_KINDS:
            return super().run_node(n)
        tensors = [t for t in tree_leaves([self.env[a] for a in n.all_input_nodes]) if isinstance(t, torch.Tensor)]
        # Inference tensors keep no version counter, and cannot be written outside inference mode.
        tracked = [t for t in tensors if not t.is_inference()]
        versions = [t._version for t in tracked]
        result = super().run_node(n)
        inputs = set(_storages(tensors))
        wrote = _mutates(n) or any(t._version != v for t, v in zip(tracked, versions))
        self.kernelless.append(not wrote and all(p in inputs for p in _storages(result)))
        return result


def _mutates(n: fx.Node) -> bool:
    """An op whose schema writes an argument (a custom op may not bump version counters)."""
    schema = getattr(n.target, "_schema", None)
    if schema is None and hasattr(n.target, "default"):  # an op packet: look at its default overload
        schema = getattr(getattr(n.target, "default", None), "_schema", None)
    return bool(schema is not None and schema.is_mutable)


def kernelless_ops(gm: fx.GraphModule, args: Sequence[torch.Tensor]) -> tuple[bool, ...]:
    """``True`` at op ``i`` when op ``i`` launches no kernel (its outputs alias its inputs)."""
    recorder = _AliasRecorder(gm)
    with torch.no_grad():
        recorder.run(*args)
    return tuple(recorder.kernelless)
