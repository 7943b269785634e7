"""``torch.npu``'s random-number functions, as torch-npu 2.14.0 names them (its ``torch_npu.npu.random``).

The emulated device's tensors live on the CPU (``SKTUNE_NPU_DEVICE=cpu``), so its random
ops draw from the CPU's default generator: that is the generator these functions seed and
read. On an Ascend host the NPU generator is separate from the CPU's.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

__all__ = ["get_rng_state", "get_rng_state_all", "set_rng_state", "set_rng_state_all", "manual_seed",
           "manual_seed_all", "seed", "seed_all", "initial_seed"]


def get_rng_state(device: Any = "npu") -> torch.Tensor:
    return torch.get_rng_state()


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state()]  # one emulated device


def set_rng_state(new_state: torch.Tensor, device: Any = "npu") -> None:
    torch.set_rng_state(new_state)


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    for state in new_states:
        set_rng_state(state)


def manual_seed(seed: int) -> None:
    torch.manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    torch.manual_seed(int(seed))  # transformers.set_seed calls this when it finds torch_npu


def seed() -> None:
    torch.seed()


def seed_all() -> None:
    torch.seed()


def initial_seed() -> int:
    return torch.initial_seed()
