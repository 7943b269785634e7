"""Returns one tensor twice and an input as it is: the captured graph's outputs are fewer
(Dynamo returns each distinct tensor once and no input), the user's call gets all three."""

import torch


class Aliased(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bias = torch.nn.Parameter(torch.linspace(-1.0, 1.0, 64))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        y = torch.relu(x + self.bias)
        return y, y, x


def build_model() -> torch.nn.Module:
    return Aliased()


def example_inputs(seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(8, 64, generator=g),)
