"""Three MoE layers written the way Ascend serving code is: torch_npu's fused ops for the
gating, the experts and the quantised shared expert. Needs ``torch_npu`` (on this project's
machines the emulated one: ``PYTHONPATH=tests/npu_emulator``; every number it produces is
emulated).

Per layer: ``npu_add_rms_norm`` (``npu_rms_norm`` in the first layer, as serving code
norms before any residual exists, so the last two layers repeat op for op and the
per-layer placement has a unit to stamp), a router linear,
``npu_moe_gating_top_k_softmax`` (top 2 of 4 experts), tokens sorted by expert (``argsort``,
an AI CPU op on Ascend) with per-expert counts as ``group_list``, two
``npu_grouped_matmul`` calls around ``npu_swiglu`` (the routed experts, groups along M), the
outputs put back in token order and weighted, and a shared expert quantised per token:
``npu_dynamic_quant`` then ``npu_quant_matmul`` against int8 weights. Small (16 tokens,
width 64) so that a whole quick study runs in seconds.

Why it is interesting for SuperKernel: GroupedMatmul is the op users name in dcci options;
the sort ends a SuperKernel unless ``task_breaker_bypass`` lets fusion pass it; the gathers
(``index_select``) that route tokens read indices as scalars from global memory.
"""

from __future__ import annotations

import torch
import torch_npu
from torch import nn

TOKENS, DIM, HIDDEN, EXPERTS, TOP_K, LAYERS = 16, 64, 64, 4, 2, 3
EPS = 1e-6


class SharedExpert(nn.Module):
    """An int8 expert: activations quantised per token, int8 weights with per-channel scales."""

    def __init__(self) -> None:
        super().__init__()
        w = torch.randn(DIM, HIDDEN) * 0.1
        scale = w.abs().amax(0) / 127.0
        self.register_buffer("weight", torch.round(w / scale).clamp(-127, 127).to(torch.int8))
        self.register_buffer("scale", scale)
        self.down = nn.Linear(HIDDEN, DIM, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, token_scale = torch_npu.npu_dynamic_quant(x)
        h = torch_npu.npu_quant_matmul(q, self.weight, self.scale, pertoken_scale=token_scale,
                                       output_dtype=torch.bfloat16)
        return self.down(torch.nn.functional.silu(h.float()))


class MoE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.router = nn.Linear(DIM, EXPERTS, bias=False)
        self.w_gate_up = nn.Parameter(torch.randn(EXPERTS, DIM, 2 * HIDDEN) * 0.1)  # [E, K, N]
        self.w_down = nn.Parameter(torch.randn(EXPERTS, HIDDEN, DIM) * 0.1)
        self.shared = SharedExpert()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights, experts, _ = torch_npu.npu_moe_gating_top_k_softmax(self.router(x), None, k=TOP_K)
        flat = experts.flatten()
        order = torch.argsort(flat, stable=True)  # routed rows (token * TOP_K + slot), by expert
        counts = (flat.unsqueeze(-1) == torch.arange(EXPERTS, dtype=flat.dtype)).sum(0)
        group_list = torch.cumsum(counts, 0).to(torch.int64)
        rows = torch.index_select(x, 0, order // TOP_K)
        h = torch_npu.npu_grouped_matmul([rows], [self.w_gate_up], group_list=group_list, split_item=2,
                                         group_type=0, group_list_type=0)[0]
        y = torch_npu.npu_grouped_matmul([torch_npu.npu_swiglu(h)], [self.w_down], group_list=group_list,
                                         split_item=2, group_type=0, group_list_type=0)[0]
        routed = torch.index_select(y, 0, torch.argsort(order)).view(TOKENS, TOP_K, DIM)
        return (routed * weights.unsqueeze(-1)).sum(1) + self.shared(x)


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.Parameter(torch.linspace(0.5, 1.5, DIM))
        self.moe = MoE()

    def forward(self, residual: torch.Tensor, delta: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        if delta is None:
            normed, _ = torch_npu.npu_rms_norm(residual, self.norm, EPS)
        else:
            normed, _, residual = torch_npu.npu_add_rms_norm(residual, delta, self.norm, EPS)
        return residual, self.moe(normed)


class MoEStack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.final_norm = nn.Parameter(torch.ones(DIM))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual, delta = x, None
        for layer in self.layers:
            residual, delta = layer(residual, delta)
        return torch_npu.npu_add_rms_norm(residual, delta, self.final_norm, EPS)[0]


def build_model() -> nn.Module:
    torch.manual_seed(0)
    return MoEStack().eval()


def example_inputs(seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(TOKENS, DIM, generator=g),)
