"""A tiny model with a wait-like op (``_c10d_functional.wait_tensor``, a ValueWait node on
Ascend): fused with ``value_breaker_bypass`` on, the emulated Ascend hangs, as real
SuperKernels can deadlock. On CPU, eagerly, the wait returns its input unchanged."""

import torch


class Waits(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(32, 32)

    def forward(self, x):
        h = torch.sigmoid(self.proj(x)) * x
        h = torch.ops._c10d_functional.wait_tensor(h * 2.0)
        return h + x


def build_model():
    torch.manual_seed(0)
    return Waits()


def example_inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(8, 32, generator=g),)
