"""Load the emulated Ascend NPU (tests/npu_emulator/torch_npu): a test-only stand-in.

Every number it produces is emulated; see ``torch_npu.__doc__`` for its behaviour model.
Subprocesses get it with ``PYTHONPATH=EMULATOR_PATH``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

EMULATOR_PATH = str(Path(__file__).resolve().parent / "npu_emulator")


def load_emulator() -> ModuleType:
    """Import the emulator as the top-level package ``torch_npu`` (once) and return it.

    Loaded from its file, so nothing is added to ``sys.path``: only the name ``torch_npu``
    resolves to it, as it would to the real package on an Ascend host.
    """
    if "torch_npu" in sys.modules:
        return sys.modules["torch_npu"]
    package = Path(EMULATOR_PATH) / "torch_npu"
    spec = importlib.util.spec_from_file_location("torch_npu", package / "__init__.py",
                                                  submodule_search_locations=[str(package)])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["torch_npu"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["torch_npu"]
        raise
    return module
