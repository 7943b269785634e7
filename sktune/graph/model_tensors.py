"""The tensors a model holds, known by identity: a graph argument that is one of them is model
state, not a user input. The capture cache saves such an argument by its attribute path, and
``sktune.apply`` leaves them out when it tells the user's inputs among Dynamo's arguments."""

from __future__ import annotations

from typing import Any

import torch

TensorIdentity = tuple[Any, ...]


def tensor_identity(t: torch.Tensor) -> TensorIdentity:
    """What a tensor and its ``detach()`` share (graph arguments are detached copies)."""
    return (t.data_ptr(), tuple(t.shape), t.stride(), t.storage_offset(), t.dtype, t.device)


def model_tensors(model: torch.nn.Module) -> dict[TensorIdentity, str]:
    """Identity → attribute path of every tensor the model holds: parameters, buffers, plain attributes."""
    found: dict[TensorIdentity, str] = {}
    for name, t in [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]:
        found.setdefault(tensor_identity(t), name)
    for prefix, module in model.named_modules(remove_duplicate=False):
        for attr, value in vars(module).items():
            if isinstance(value, torch.Tensor):
                found.setdefault(tensor_identity(value), f"{prefix}.{attr}".lstrip("."))
    return found
