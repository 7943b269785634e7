import torch


def build_model():
    raise RuntimeError("weights not found")


def example_inputs(seed: int = 0):
    return (torch.randn(4, 4),)
