"""A forward that writes a buffer: sktune compares outputs only, and a fused plan changed
this buffer's bits while the output stayed bitwise equal. Refused at start-up."""

import torch


class RunningMean(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("running", torch.zeros(8))

    def forward(self, x):
        self.running.copy_(x.mean(0))
        return x * 2 + 1


def build_model():
    return RunningMean()


def example_inputs(seed: int = 0):
    return (torch.randn(16, 8, generator=torch.Generator().manual_seed(seed)),)
