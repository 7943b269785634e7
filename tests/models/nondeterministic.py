import torch


class Noisy(torch.nn.Module):
    def forward(self, x):
        return x + torch.rand_like(x)


def build_model():
    return Noisy()


def example_inputs(seed: int = 0):
    return (torch.randn(4, 4, generator=torch.Generator().manual_seed(seed)),)
