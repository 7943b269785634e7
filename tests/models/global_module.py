"""Two identical layers that each call a module the model does not own: a global
``nn.Module`` wrapping a function, as transformers' hub kernels wrap
``apply_rotary_pos_emb``. Its ops belong to the layer that called it."""

import torch


class _Func(torch.nn.Module):
    def forward(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return x * scale + x.neg()


scale_and_shift = _Func()  # module-level: Dynamo names it G['...'], not under the model


class Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(32, 32)
        self.down = torch.nn.Linear(32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.up(x)
        h = scale_and_shift(h, torch.sigmoid(h))
        return x + self.down(torch.relu(h))


class Stack(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(Layer() for _ in range(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def build_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return Stack()


def example_inputs(seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(4, 32, generator=g),)
