"""Load the user's model file: ``build_model()`` and ``example_inputs(seed)``.

The model file is user code and is executed on purpose, like a test file.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from sktune.errors import ModelFileError

CONTRACT = (
    "A model file must define:\n"
    "    def build_model() -> torch.nn.Module: ...\n"
    "    def example_inputs(seed: int = 0) -> tuple[torch.Tensor, ...]: ..."
)


@dataclass(frozen=True)
class ModelSource:
    """The two functions of a model file, and where they came from."""

    path: Path
    build_model: Callable[[], torch.nn.Module]
    example_inputs: Callable[[int], tuple[torch.Tensor, ...]]

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()


def load_model_file(path: str | Path) -> ModelSource:
    """Import ``path`` as a module and check it defines the contract's two functions."""
    path = Path(path).resolve()
    if not path.is_file():
        raise ModelFileError(f"model file not found: {path}")
    module_name = f"sktune_user_model_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ModelFileError(f"cannot import {path} as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look modules up here
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))  # let the model file import its neighbours
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise ModelFileError(f"{path}:{exc.lineno}: syntax error: {exc.msg}") from exc
    except Exception as exc:
        raise ModelFileError(f"importing {path} raised {type(exc).__name__}: {exc}") from exc
    missing = [name for name in ("build_model", "example_inputs") if not callable(getattr(module, name, None))]
    if missing:
        raise ModelFileError(f"{path} does not define {' and '.join(missing)}.\n{CONTRACT}")
    return ModelSource(path=path, build_model=module.build_model, example_inputs=module.example_inputs)


def build(source: ModelSource) -> torch.nn.Module:
    """Call ``build_model()``, in eval mode, with a clear error when it misbehaves."""
    try:
        model = source.build_model()
    except Exception as exc:
        raise ModelFileError(f"build_model() in {source.path} raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(model, torch.nn.Module):
        raise ModelFileError(
            f"build_model() in {source.path} returned {type(model).__name__}, not a torch.nn.Module.\n{CONTRACT}"
        )
    return model.eval()


def draw_inputs(source: ModelSource, seed: int) -> tuple[torch.Tensor, ...]:
    """Call ``example_inputs(seed)`` and check it returns a tuple of tensors."""
    try:
        inputs = source.example_inputs(seed)
    except Exception as exc:
        raise ModelFileError(f"example_inputs({seed}) in {source.path} raised {type(exc).__name__}: {exc}") from exc
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if not isinstance(inputs, (tuple, list)) or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise ModelFileError(
            f"example_inputs({seed}) in {source.path} must return a tuple of tensors, "
            f"got {type(inputs).__name__}.\n{CONTRACT}"
        )
    return tuple(inputs)
