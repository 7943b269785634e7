"""Which ops of the captured graph launch no kernel: views and no-op conversions.

An op whose every output shares storage with one of its inputs (``view``, ``transpose``,
``chunk``, ``getitem``, a ``.to(float32)`` of a float32 tensor) computes nothing. A fusion
scope made of such ops alone is empty once the graph is traced to kernels: SuperKernel
would get a begin marker directly followed by its end. Found by running the graph once on
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
        result = super().run_node(n)
        if n.op in OP_KINDS:
            inputs = set(_storages([self.env[a] for a in n.all_input_nodes]))
            outputs = _storages(result)
            self.kernelless.append(all(p in inputs for p in outputs))
        return result


def kernelless_ops(gm: fx.GraphModule, args: Sequence[torch.Tensor]) -> tuple[bool, ...]:
    """``True`` at op ``i`` when op ``i`` launches no kernel (its outputs alias its inputs)."""
    recorder = _AliasRecorder(gm)
    with torch.no_grad():
        recorder.run(*args)
    return tuple(recorder.kernelless)
