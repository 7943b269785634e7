"""Load the user's model file: ``build_model()``, ``example_inputs(seed)`` and, optionally,
``input_shapes()`` with ``example_inputs(seed, shape)`` (one plan tuned for several shapes)
and ``verify_shapes()`` (more shapes the plan is verified at, never timed or tuned at).

The model file is user code and is executed on purpose, like a test file.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import inspect
import math
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from sktune.errors import ModelFileError

CONTRACT = (
    "A model file must define:\n"
    "    def build_model() -> torch.nn.Module: ...  # the same weights on every run\n"
    "    def example_inputs(seed: int = 0) -> tuple[torch.Tensor, ...]: ...  # other values for each seed"
)
SHAPES_CONTRACT = (
    "A model served at several shapes may also define:\n"
    "    def input_shapes() -> dict[str, float]: ...  # shape name -> weight in the traffic mix\n"
    "    def example_inputs(seed: int = 0, shape: str | None = None) -> tuple[torch.Tensor, ...]: ...\n"
    "and, beside input_shapes(), shapes the best plan is only verified at (bitwise, never timed or tuned):\n"
    "    def verify_shapes() -> list[str]: ...  # more shape names example_inputs accepts"
)


@contextlib.contextmanager
def user_code(what: str) -> Iterator[None]:
    """Run a call into the model file; what it raised, or a ``sys.exit`` in it (which is no
    ``Exception``, and ended sktune with the file's exit code and no word), as one
    ``ModelFileError`` naming ``what`` (e.g. ``build_model() in PATH``)."""
    try:
        yield
    except ModelFileError:
        raise
    except SystemExit as exc:
        raise ModelFileError(f"{what} called sys.exit({exc.code!r})") from exc
    except Exception as exc:
        raise ModelFileError(f"{what} raised {type(exc).__name__}: {exc}") from exc


@dataclass(frozen=True)
class ModelSource:
    """The two functions of a model file, and where they came from."""

    path: Path
    build_model: Callable[[], torch.nn.Module]
    example_inputs: Callable[..., tuple[torch.Tensor, ...]]
    input_shapes: Callable[[], dict[str, float]] | None = None
    verify_shapes: Callable[[], list[str]] | None = None

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()


def check_model_path(path: Path) -> None:
    """A model file that exists and is a file; a folder is named as one (it read "not found")."""
    if path.is_dir():
        raise ModelFileError(f"{path} is a folder; name the model's Python file (e.g. {path / 'model.py'})")
    if not path.is_file():
        raise ModelFileError(f"model file not found: {path}")


def check_syntax(path: Path) -> None:
    """Compile the model file without running it: ``sktune run`` reports a typo at once,
    before a worker starts (seconds: it imports torch) and before the study is created."""
    try:
        compile(path.read_bytes(), str(path), "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:  # ValueError: null bytes, on some Python versions
        raise ModelFileError(syntax_error_message(exc, path)) from exc


def syntax_error_message(exc: SyntaxError | ValueError, path: Path) -> str:
    """``file:line: syntax error: ...``, naming the file at fault (the model file, or a module
    it imports); no line where Python gives none (a null byte)."""
    if not isinstance(exc, SyntaxError):
        return f"{path}: syntax error: {exc}"
    where = f"{exc.filename or path}" + (f":{exc.lineno}" if exc.lineno else "")
    return f"{where}: syntax error: {exc.msg}"


def load_model_file(path: str | Path) -> ModelSource:
    """Import ``path`` as a module and check it defines the contract's two functions."""
    path = Path(path).resolve()
    check_model_path(path)
    module_name = f"sktune_user_model_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ModelFileError(f"cannot import {path} as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look modules up here
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))  # let the model file import its neighbours
    try:
        with user_code(f"importing {path}"):
            spec.loader.exec_module(module)
    except ModelFileError as exc:
        if isinstance(exc.__cause__, SyntaxError):  # in a module the model file imports
            raise ModelFileError(syntax_error_message(exc.__cause__, path)) from exc.__cause__
        raise
    missing = [name for name in ("build_model", "example_inputs") if not hasattr(module, name)]
    if missing:
        raise ModelFileError(f"{path} does not define {' and '.join(missing)}.\n{CONTRACT}")
    if not_functions := [name for name in ("build_model", "example_inputs") if not callable(getattr(module, name))]:
        raise ModelFileError(f"{' and '.join(not_functions)} in {path} must be a function, got "
                             f"{type(getattr(module, not_functions[0])).__name__}.\n{CONTRACT}")
    check_callable_as(module.build_model, (), {}, f"build_model in {path} must take no arguments", CONTRACT)
    shapes = getattr(module, "input_shapes", None)
    if shapes is not None and not callable(shapes):
        raise ModelFileError(f"input_shapes in {path} must be a function.\n{SHAPES_CONTRACT}")
    if shapes is not None and "shape" not in inspect.signature(module.example_inputs).parameters:
        raise ModelFileError(
            f"{path} defines input_shapes() but example_inputs takes no 'shape' argument.\n{SHAPES_CONTRACT}")
    # As sktune will call it: example_inputs(seed), or example_inputs(seed, shape=NAME) beside input_shapes().
    check_callable_as(module.example_inputs, (0,), {} if shapes is None else {"shape": "a shape"},
                      f"example_inputs in {path} must take the seed (an int)"
                      + (" and the shape's name (shape=)" if shapes is not None else "")
                      + " as its only required arguments", CONTRACT if shapes is None else SHAPES_CONTRACT)
    verify = getattr(module, "verify_shapes", None)
    if verify is not None and not callable(verify):
        raise ModelFileError(f"verify_shapes in {path} must be a function.\n{SHAPES_CONTRACT}")
    if verify is not None and shapes is None:
        raise ModelFileError(f"{path} defines verify_shapes() without input_shapes(): the shapes to tune at "
                             f"must be declared too.\n{SHAPES_CONTRACT}")
    return ModelSource(path=path, build_model=module.build_model, example_inputs=module.example_inputs,
                       input_shapes=shapes, verify_shapes=verify)


def check_callable_as(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], message: str,
                      contract: str) -> None:
    """Refuse a contract function sktune cannot call as it will (a raw ``TypeError`` from
    deep inside the start-up named neither the function nor the contract)."""
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as exc:
        raise ModelFileError(f"{message} ({exc}).\n{contract}") from None
    except ValueError:  # no signature to read (a builtin): the call itself will tell
        pass


def shape_weights(source: ModelSource, only: tuple[str, ...] | None = None, flag: str = "--shapes") -> dict[str, float]:
    """The model's shapes and their weights, in its order; ``{}`` for a one-shape model.

    ``only`` picks a subset (``flag``: the option that named it); naming a shape the model
    does not have is an error.
    """
    if source.input_shapes is None:
        if only:
            raise ModelFileError(f"{flag}: {source.path} defines no input_shapes().\n{SHAPES_CONTRACT}")
        return {}
    with user_code(f"input_shapes() in {source.path}"):
        declared = source.input_shapes()
    if not isinstance(declared, dict) or not declared:
        raise ModelFileError(f"input_shapes() in {source.path} must return a non-empty dict of "
                             f"shape name -> weight, got {declared!r}.\n{SHAPES_CONTRACT}")
    weights: dict[str, float] = {}
    for name, weight in declared.items():
        if not isinstance(name, str) or not name or "," in name:
            raise ModelFileError(f"input_shapes() in {source.path}: shape name {name!r} must be a "
                                 "non-empty string without commas")
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) \
                or weight <= 0:
            raise ModelFileError(f"input_shapes() in {source.path}: the weight of {name!r} must be a "
                                 f"positive number, got {weight!r}")
        weights[name] = float(weight)
    if only:
        unknown = [name for name in only if name not in weights]
        verify_only = [name for name in unknown if name in verify_shape_names(source)]
        if verify_only:
            raise ModelFileError(f"{flag}: {', '.join(verify_only)} in verify_shapes() of {source.path}: a "
                                 f"verify-only shape is verified, never tuned at; {flag} picks among "
                                 f"input_shapes() ({', '.join(weights)})")
        if unknown:
            raise ModelFileError(f"{flag}: {', '.join(unknown)} not among the shapes of {source.path} "
                                 f"({', '.join(weights)})")
        weights = {name: w for name, w in weights.items() if name in only}
    return weights


def verify_shape_names(source: ModelSource) -> tuple[str, ...]:
    """The model's verify-only shapes (``verify_shapes()``), in its order; () when it declares none.

    Each must be a name ``example_inputs`` accepts and not one of ``input_shapes()``: those
    are tuned (and so verified) already.
    """
    if source.verify_shapes is None:
        return ()
    where = f"verify_shapes() in {source.path}"
    with user_code(where):
        declared = source.verify_shapes()
    if not isinstance(declared, (list, tuple)):
        raise ModelFileError(f"{where} must return a list of shape names, got {declared!r}.\n{SHAPES_CONTRACT}")
    tuned = shape_weights(source)
    names: list[str] = []
    for name in declared:
        if not isinstance(name, str) or not name or "," in name:
            raise ModelFileError(f"{where}: shape name {name!r} must be a non-empty string without commas")
        if name in tuned:
            raise ModelFileError(f"{where}: {name!r} is also in input_shapes(); a tuned shape is verified "
                                 "already, so list only the other shapes")
        if name in names:
            raise ModelFileError(f"{where}: {name!r} is listed twice")
        names.append(name)
    return tuple(names)


def build(source: ModelSource) -> torch.nn.Module:
    """Call ``build_model()``, in eval mode, with a clear error when it misbehaves."""
    with user_code(f"build_model() in {source.path}"):
        model = source.build_model()
    if not isinstance(model, torch.nn.Module):
        raise ModelFileError(
            f"build_model() in {source.path} returned {type(model).__name__}, not a torch.nn.Module.\n{CONTRACT}"
        )
    return model.eval()


def draw_inputs(source: ModelSource, seed: int, shape: str | None = None) -> tuple[torch.Tensor, ...]:
    """Call ``example_inputs(seed)`` (or ``(seed, shape=shape)``) and check it returns a tuple of tensors."""
    call = f"example_inputs({seed})" if shape is None else f"example_inputs({seed}, shape={shape!r})"
    with user_code(f"{call} in {source.path}"):
        inputs = source.example_inputs(seed) if shape is None else source.example_inputs(seed, shape=shape)
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if not isinstance(inputs, (tuple, list)):
        raise ModelFileError(f"{call} in {source.path} must return a tuple of tensors, "
                             f"got {type(inputs).__name__}.\n{CONTRACT}")
    others = [f"element {k} is {type(t).__name__}" for k, t in enumerate(inputs) if not isinstance(t, torch.Tensor)]
    if others:  # the forward's arguments are its graph's inputs: tensors only
        raise ModelFileError(f"{call} in {source.path} must return a tuple of tensors; {', '.join(others[:3])}. "
                             "Pass a number as a tensor, or make it an attribute of the model in build_model().\n"
                             f"{CONTRACT}")
    if not inputs:
        raise ModelFileError(f"{call} in {source.path} returned no tensors: sktune verifies each plan on "
                             "inputs drawn by example_inputs, and with none it would verify nothing.\n"
                             f"{CONTRACT}")
    return tuple(inputs)
