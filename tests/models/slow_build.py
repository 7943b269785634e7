"""A model whose build takes a minute: a run interrupted during its start-up (tests/cli)."""
import time

import torch


def build_model():
    time.sleep(60)
    return torch.nn.Tanh()


def example_inputs(seed: int = 0):
    return (torch.randn(4, 4, generator=torch.Generator().manual_seed(seed)),)
