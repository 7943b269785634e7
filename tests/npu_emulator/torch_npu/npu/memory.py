"""``torch.npu``'s memory queries, as torch-npu 2.14.0 names them (its ``torch_npu.npu.memory``).

The emulated device allocates nothing (its tensors live on the CPU), so every counter is
0 and all of its memory is free. Its size, 64 GiB, is a chosen constant, not a device's.
transformers reads these for its memory tracker and its loading warm-up.
"""

from __future__ import annotations

from typing import Any

__all__ = ["empty_cache", "memory_stats", "memory_allocated", "max_memory_allocated",
           "memory_reserved", "max_memory_reserved", "reset_peak_memory_stats", "reset_max_memory_allocated"]

TOTAL_BYTES = 64 * 1024**3  # emulated


def empty_cache() -> None:
    """Nothing is cached."""


def memory_stats(device: Any = None) -> dict[str, int]:
    return {}  # torch-npu's answer before the device is initialized


def memory_allocated(device: Any = None) -> int:
    return 0


def max_memory_allocated(device: Any = None) -> int:
    return 0


def memory_reserved(device: Any = None) -> int:
    return 0


def max_memory_reserved(device: Any = None) -> int:
    return 0


def reset_peak_memory_stats(device: Any = None) -> None:
    """No peak to reset."""


def reset_max_memory_allocated(device: Any = None) -> None:
    """No peak to reset."""
