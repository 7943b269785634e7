import torch


class ReturnsInt(torch.nn.Module):
    def forward(self, x):
        return x * 2, 3


def build_model():
    return ReturnsInt()


def example_inputs(seed: int = 0):
    return (torch.randn(4, 4, generator=torch.Generator().manual_seed(seed)),)
