"""A three-layer decoder served at decode batch sizes 1, 8 and 32 (issue 26's held-out shape).

One decode step per call, as in ``decoder_serving.py`` (whose layers it reuses): one new
token per sequence attends over a KV cache of ``CONTEXT`` earlier tokens plus its own,
with a Llama-like attention (matmul → scale → softmax → matmul). The query has one row,
so on CPU Inductor lowers the scores' batched matmul to a multiply and a sum of its own
(``torch/_inductor/kernel/bmm.py``, ``tuned_bmm``), not to ATen's GEMM: the case that
needs the ``matmul`` fallback (docs/measured.md "Exact forms"). The key length is
``CONTEXT + 1`` = 33, an odd size.
"""

from __future__ import annotations

import torch
from torch import nn

from decoder_block import RMSNorm  # the model file's neighbours (sktune puts studies/ on sys.path)
from decoder_serving import CONTEXT, HEAD_DIM, HIDDEN, N_HEADS, DecoderLayer

LAYERS = 3
SHAPES = {"bs1": 0.5, "bs8": 0.3, "bs32": 0.2}  # share of decode steps served at each batch size


class Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer() for _ in range(LAYERS))
        self.norm = RMSNorm(HIDDEN)

    def forward(self, x: torch.Tensor, k_caches: torch.Tensor, v_caches: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x, k_caches[i], v_caches[i])
        return self.norm(x)


def build_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return Decoder().eval()


def input_shapes() -> dict[str, float]:
    return dict(SHAPES)


def example_inputs(seed: int = 0, shape: str | None = None) -> tuple[torch.Tensor, ...]:
    batch = int((shape or next(iter(SHAPES))).removeprefix("bs"))
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 1, HIDDEN, generator=g)
    k_caches = torch.randn(LAYERS, batch, N_HEADS, CONTEXT, HEAD_DIM, generator=g)
    v_caches = torch.randn(LAYERS, batch, N_HEADS, CONTEXT, HEAD_DIM, generator=g)
    return x, k_caches, v_caches
