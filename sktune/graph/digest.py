"""What a captured graph computes, as two digests a resumed study compares: its code and its weights.

The model file's hash misses what the model file imports (a module of the user's project,
edited between two runs) and the weights it loads (a checkpoint, replaced). Either changes
what every trial of a study was measured and verified on, yet the graph's op list can stay
the same. So a study also records:

- ``code``: every node of the captured graph with its target and arguments, constants
  included (an edited ``eps`` or scale changes it; Dynamo inlined the imported code);
- ``weights``: the values of the model tensors the graph reads (parameters, buffers,
  plain tensor attributes). A tensor of up to ``FULL_ELEMENTS`` elements is hashed whole,
  a larger one at most ``FULL_ELEMENTS`` elements spaced over all of it, so that a model of
  billions of parameters on a device is not copied to the host: a replaced checkpoint
  changes them, a single edited element of a large tensor may not. ``build_model`` must
  give the same weights on every run (seeded, or loaded), or every resume is refused.
"""

from __future__ import annotations

import hashlib

import torch
from torch import fx
from torch.fx.node import _get_qualified_name

from sktune.graph.opgraph import OpGraph

FULL_ELEMENTS = 1 << 20


def graph_digests(graph: OpGraph) -> dict[str, str]:
    """``{"code_sha256": ..., "weights_sha256": ...}`` of ``graph`` (see the module's docstring)."""
    return {"code_sha256": code_digest(graph.gm), "weights_sha256": weights_digest(graph)}


def code_digest(gm: fx.GraphModule) -> str:
    digest = hashlib.sha256()
    for node in gm.graph.nodes:
        target = _get_qualified_name(node.target) if callable(node.target) else str(node.target)
        # A Node's repr is its name: arguments name the nodes they read, not their memory.
        digest.update(repr((node.op, node.name, target, node.args, node.kwargs)).encode())
    return digest.hexdigest()


def weights_digest(graph: OpGraph) -> str:
    digest = hashlib.sha256()
    for k, (arg, position) in enumerate(zip(graph.flat_args, graph.input_positions)):
        if position is None:  # a model tensor, not a user input
            digest.update(f"{k}{tuple(arg.shape)}{arg.dtype}".encode())
            digest.update(_sampled_bytes(arg))
    return digest.hexdigest()


def _sampled_bytes(t: torch.Tensor) -> bytes:
    try:
        flat = t.detach().reshape(-1)
        if flat.numel() > FULL_ELEMENTS:
            flat = flat[::-(-flat.numel() // FULL_ELEMENTS)]  # spaced over the whole tensor
        # Raw bits, whatever the dtype (bool, complex and float8 included).
        return flat.cpu().contiguous().view(torch.uint8).numpy().tobytes()
    except (RuntimeError, TypeError):  # a tensor without plain storage (sparse, quantized): its layout only
        return f"{t.layout}".encode()
