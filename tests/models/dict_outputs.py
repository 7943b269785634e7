"""Returns a dict (as a Hugging Face ModelOutput is one): compared by its values, in order."""

import torch


class DictOut(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        h = torch.relu(self.lin(x)) * 2 + 1
        return {"hidden": h, "logits": torch.tanh(h) + x}


def build_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return DictOut()


def example_inputs(seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(8, 64, generator=g),)
