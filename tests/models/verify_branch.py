"""A verify-only shape whose forward takes another branch: no fused plan can be verified there,
so the run refuses at start-up (it was found after the search, as "not bitwise" everywhere)."""

import torch


class Branchy(torch.nn.Module):
    def forward(self, x):
        y = torch.sigmoid(x) * 2.0
        return y.relu() if x.shape[0] > 4 else y  # a shape-dependent branch: Dynamo specializes on it


def build_model():
    return Branchy()


def input_shapes():
    return {"bs1": 1.0}


def verify_shapes():
    return ["bs2", "bs8"]


def example_inputs(seed: int = 0, shape=None):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(int((shape or "bs1")[2:]), 16, generator=g),)
