"""Two shapes whose forward takes a different branch: op indices would mean other ops."""

import torch


class Branchy(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] > 1:  # a shape-dependent branch: Dynamo specializes on it
            return torch.relu(x) * 2.0
        return torch.tanh(x) * 2.0


def build_model():
    return Branchy()


def input_shapes():
    return {"bs1": 1.0, "bs4": 1.0}


def example_inputs(seed: int = 0, shape=None):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(4 if shape == "bs4" else 1, 8, generator=g),)
