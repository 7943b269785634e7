import torch


class Breaks(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        if y.sum().item() > 0:  # data-dependent branch: a graph break under fullgraph
            y = y + 1
        return y


def build_model():
    return Breaks()


def example_inputs(seed: int = 0):
    return (torch.randn(4, 4, generator=torch.Generator().manual_seed(seed)),)
