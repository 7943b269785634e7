"""Load the emulated Ascend NPU (tests/npu_emulator/torch_npu): a test-only stand-in.

Every number it produces is emulated; see ``torch_npu.__doc__`` for its behaviour model.
Subprocesses get it with ``PYTHONPATH=EMULATOR_PATH``.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

EMULATOR_PATH = str(Path(__file__).resolve().parent / "npu_emulator")


def load_emulator() -> ModuleType:
    """Put the emulator on ``sys.path`` (once) and return the imported ``torch_npu``."""
    if EMULATOR_PATH not in sys.path:
        sys.path.insert(0, EMULATOR_PATH)
    return importlib.import_module("torch_npu")
