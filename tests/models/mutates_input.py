import torch


class Mutates(torch.nn.Module):
    def forward(self, x):
        x.add_(1.0)
        return x * 2


def build_model():
    return Mutates()


def example_inputs(seed: int = 0):
    return (torch.randn(4, 4, generator=torch.Generator().manual_seed(seed)),)
