"""Two identical layers (norm, up, relu, down, residual): a graph with a repeated unit,
for the warm-start tests; ``stack_deeper.py`` is the same model with three layers."""

import torch

LAYERS = 2


class Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(32)
        self.up = torch.nn.Linear(32, 64)
        self.down = torch.nn.Linear(64, 32)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(self.norm(x))) * 0.5)


class Stack(torch.nn.Module):
    def __init__(self, layers: int) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(Layer() for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def build_model(layers: int = LAYERS):
    torch.manual_seed(0)
    return Stack(layers)


def example_inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(4, 32, generator=g),)
