"""The captured graph saved on disk, so a restarted or extra worker skips Dynamo.

Capturing a 1,000-op model takes seconds (Dynamo traces every op); rebuilding the same
FX graph from a saved node list takes milliseconds. The file is keyed by everything the
capture depends on: the model file, the source of every module class in the model,
parameter names and metadata, the input signature and the torch version. Anything that
cannot be saved faithfully (a call target that does not resolve back to itself, a
placeholder that is neither an input nor a model tensor) is not saved: the next start
captures again. A loaded graph must also reproduce the model's own outputs bit for bit
before it is used, so a stale file costs one recapture, never a wrong graph.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import logging
import os
import pickle
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import fx
from torch.fx.node import _get_qualified_name

from sktune.graph.capture import capture
from sktune.graph.model_tensors import model_tensors, tensor_identity
from sktune.graph.opgraph import Op, OpGraph

log = logging.getLogger(__name__)

FORMAT = 3  # bump when the saved layout or what it records changes (2: module_of skips globals; 3: cuts at slices)


@dataclass(frozen=True)
class _Ref:
    """A reference to an earlier node, by name, inside saved arguments."""

    name: str


def capture_cached(model: torch.nn.Module, inputs: Sequence[torch.Tensor], cache_dir: Path | None,
                   model_sha256: str) -> tuple[OpGraph, bool]:
    """``capture(model, inputs)``, from ``cache_dir`` when an equal capture was saved; True if it was."""
    if cache_dir is None:
        return capture(model, inputs), False
    path = cache_dir / f"{_key(model, inputs, model_sha256)}.pkl"
    graph = _load(path, model, inputs)
    if graph is not None and graph.ops:  # one without ops (saved by an older sktune) is refused by capture
        return graph, True
    graph = capture(model, inputs)
    _save(path, graph, model)
    return graph, False


def _key(model: torch.nn.Module, inputs: Sequence[torch.Tensor], model_sha256: str) -> str:
    digest = hashlib.sha256(f"format {FORMAT}|torch {torch.__version__}|model {model_sha256}".encode())
    for cls in sorted({type(m) for m in model.modules()}, key=lambda c: f"{c.__module__}.{c.__qualname__}"):
        try:
            source = inspect.getsource(cls)
        except (OSError, TypeError):  # built-in torch modules: their code is the torch version's
            source = f"{cls.__module__}.{cls.__qualname__}"
        digest.update(source.encode())
    for name, t in [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]:
        digest.update(f"{name}{tuple(t.shape)}{t.dtype}{t.device}".encode())
    for t in inputs:
        digest.update(f"in{tuple(t.shape)}{t.stride()}{t.dtype}{t.device}".encode())
    return digest.hexdigest()[:32]


def _resolve(qualname: str) -> Any:
    """The object a qualified name such as ``torch.nn.functional.linear`` names."""
    parts = qualname.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(qualname)


def _save(path: Path, graph: OpGraph, model: torch.nn.Module) -> None:
    tensors = model_tensors(model)
    sources: list[tuple[str, int | str]] = []
    for arg, position in zip(graph.flat_args, graph.input_positions):
        if position is not None:
            sources.append(("input", position))
        elif tensor_identity(arg) in tensors:
            sources.append(("model", tensors[tensor_identity(arg)]))
        else:
            log.debug("capture not cached: a graph argument is neither an input nor a model tensor")
            return
    nodes = []
    for node in graph.gm.graph.nodes:
        target: Any = node.target
        if node.op in ("call_module", "get_attr"):
            log.debug("capture not cached: %s node %s reads module state", node.op, node.name)
            return
        if node.op == "call_function":
            target = _get_qualified_name(node.target)
            try:
                same = _resolve(target) is node.target
            except (ImportError, AttributeError):
                same = False
            if not same:
                log.debug("capture not cached: call target %s does not resolve back to itself", target)
                return
        value = node.meta.get("example_value")
        meta = (tuple(value.shape), value.dtype) if isinstance(value, torch.Tensor) else None
        nodes.append((node.op, node.name, target, _refs(node.args), _refs(node.kwargs), meta))
    payload = {"sources": sources, "nodes": nodes, "ops": [op.to_json() for op in graph.ops],
               "boundaries": list(graph.boundaries)}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            pickle.dump(payload, f)
        os.replace(tmp, path)  # atomic: a concurrent worker reads the old file or the new one
    except (OSError, pickle.PicklingError, TypeError, AttributeError) as exc:
        log.debug("capture not cached: %s", exc)


def _load(path: Path, model: torch.nn.Module, inputs: Sequence[torch.Tensor]) -> OpGraph | None:
    if not path.is_file():
        return None
    try:
        with path.open("rb") as f:
            payload = pickle.load(f)
        graph = _rebuild(payload, model, inputs)
    except Exception as exc:  # an unreadable or foreign file is a cache miss, not an error
        log.warning("ignoring unreadable captured-graph cache %s: %s", path, exc)
        return None
    args = graph.args_for(tuple(inputs))
    with torch.no_grad():
        expected = model(*inputs)
        got = graph.gm(*args)
    if not _same_outputs(expected, got, args):
        log.warning("captured-graph cache %s does not reproduce the model; capturing again", path)
        return None
    return graph


def _rebuild(payload: dict[str, Any], model: torch.nn.Module, inputs: Sequence[torch.Tensor]) -> OpGraph:
    state = {**dict(model.named_parameters(remove_duplicate=False)), **dict(model.named_buffers(remove_duplicate=False))}
    flat_args: list[torch.Tensor] = []
    for kind, where in payload["sources"]:
        if kind == "input":
            flat_args.append(inputs[int(where)])
        else:
            flat_args.append(state[str(where)] if where in state else _resolve_attribute(model, str(where)))
    graph = fx.Graph()
    env: dict[str, fx.Node] = {}
    for op, name, target, args, kwargs, meta in payload["nodes"]:
        if op == "call_function":
            target = _resolve(target)
        node = graph.create_node(op, target, _unrefs(args, env), _unrefs(kwargs, env), name=name)
        if meta is not None:  # the shapes the exactness probe keys on; no data
            node.meta["example_value"] = torch.empty(meta[0], dtype=meta[1], device="meta")
        env[name] = node
    gm = fx.GraphModule(torch.nn.Module(), graph)
    ops = tuple(Op(**o) for o in payload["ops"])
    positions = tuple(int(w) if k == "input" else None for k, w in payload["sources"])
    return OpGraph(gm, tuple(t.detach() for t in flat_args), positions, ops, tuple(payload["boundaries"]))


def _resolve_attribute(model: torch.nn.Module, path: str) -> torch.Tensor:
    obj: Any = model
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _refs(value: Any) -> Any:
    if isinstance(value, fx.Node):
        return _Ref(value.name)
    if isinstance(value, (list, tuple)):
        return type(value)(_refs(v) for v in value)
    if isinstance(value, dict):
        return {k: _refs(v) for k, v in value.items()}
    if isinstance(value, slice):
        return slice(_refs(value.start), _refs(value.stop), _refs(value.step))
    return value


def _unrefs(value: Any, env: dict[str, fx.Node]) -> Any:
    if isinstance(value, _Ref):
        return env[value.name]
    if isinstance(value, (list, tuple)):
        return type(value)(_unrefs(v, env) for v in value)
    if isinstance(value, dict):
        return {k: _unrefs(v, env) for k, v in value.items()}
    if isinstance(value, slice):
        return slice(_unrefs(value.start, env), _unrefs(value.stop, env), _unrefs(value.step, env))
    return value


def _same_outputs(expected: Any, got: Any, args: Sequence[torch.Tensor]) -> bool:
    """The graph gives the model's outputs: each distinct tensor once, leaving out those that
    are the graph's arguments (an input or a parameter returned as it is). Dynamo's graph
    returns no argument and no tensor twice: the user's call gets them from Dynamo's own code."""
    from sktune.verify import compare_outputs, flatten_outputs

    try:
        flat_expected, flat_got = flatten_outputs(expected), flatten_outputs(got)
    except TypeError:  # not tensors: not the model's graph
        return False
    passed = {tensor_identity(t) for t in args}
    seen: set[tuple[Any, ...]] = set()
    computed = []
    for t in flat_expected:
        key = tensor_identity(t)
        if key not in passed and key not in seen:
            computed.append(t)
        seen.add(key)
    for candidate in (flat_expected, computed):
        if len(candidate) == len(flat_got) and not compare_outputs(candidate, flat_got):
            return True
    return False
