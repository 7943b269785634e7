"""``torch.npu`` of the emulator: one always-available device; tensors stay on the CPU."""

from __future__ import annotations

from typing import Any

import torch

# As in torch-npu, the memory and random functions are torch.npu's own; transformers calls
# them (seeding, memory tracking) once it finds torch_npu (README, "The emulated Ascend").
from torch_npu.npu import memory, random
from torch_npu.npu.memory import *  # noqa: F403
from torch_npu.npu.random import *  # noqa: F403

DEVICE_NAME = "Ascend910B (emulated)"


def is_available() -> bool:
    return True


def device_count() -> int:
    return 1


def current_device() -> int:
    return 0


def set_device(device: Any) -> None:
    """Accepted and ignored: there is one emulated device."""


def synchronize(device: Any = None) -> None:
    """Nothing to wait for: the emulated device runs synchronously on the CPU."""


def get_device_name(device: Any = None) -> str:
    return DEVICE_NAME


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) bytes, as torch-npu returns them: all of the emulated memory is free."""
    return memory.TOTAL_BYTES, memory.TOTAL_BYTES


def is_bf16_supported(including_emulation: bool = False) -> bool:
    return True  # the CPU computes bfloat16; transformers asks before choosing bf16


def super_kernel_scope_begin(scope_name: str | None = None) -> None:
    """Open a SuperKernel scope (None: never fuse the ops inside). The name is passed as
    torch-npu 2.14.0 passes it, always, so Dynamo records ``(None,)`` (docs/npu_api.md,
    "Scope marker ops")."""
    return torch.ops.npu.super_kernel_scope_begin(scope_name)


def super_kernel_scope_end(scope_name: str | None = None) -> None:
    """Close the first open scope of that name."""
    return torch.ops.npu.super_kernel_scope_end(scope_name)
