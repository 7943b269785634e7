"""Ten elementwise ops in a row: op k is easy to find for marker-placement tests."""

import torch


class Chain(torch.nn.Module):
    def forward(self, x):
        for k in range(10):
            x = x * 1.5 if k % 2 == 0 else x + 0.25
        return x


def build_model():
    return Chain()


def example_inputs(seed: int = 0):
    return (torch.randn(4, 8, generator=torch.Generator().manual_seed(seed)),)
