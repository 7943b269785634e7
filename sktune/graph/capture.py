"""Capture a model's forward once as one FX graph (Dynamo, fullgraph)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import fx

from sktune.errors import CaptureError
from sktune.graph.boundaries import legal_boundaries, tuple_spans
from sktune.graph.opgraph import Op, OpGraph, op_nodes

_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
_ROOT = re.compile(r"^L\['[^']*'\]")


def op_type(node: fx.Node, gm: fx.GraphModule) -> str:
    """A short, stable op-type name: ``linear``, ``mean``, ``mul``, ``getitem``...

    An op of a library other than aten keeps its namespace (``npu.npu_rms_norm`` for
    ``torch.ops.npu.npu_rms_norm``, as torch_npu's fused ops appear in a Dynamo graph), so
    the op list and the report say whose op it is."""
    if node.op == "call_module":
        return type(gm.get_submodule(str(node.target))).__name__
    if node.op == "call_method":
        return str(node.target)
    qualified = _library_op(node.target)
    if qualified is not None and not qualified.startswith("aten::"):
        return qualified.replace("::", ".")
    return getattr(node.target, "__name__", str(node.target)).lstrip("_")


def _library_op(target: object) -> str | None:
    """``ns::name`` of a ``torch.ops`` op packet or overload; None for anything else."""
    if isinstance(target, torch._ops.OpOverloadPacket):
        return target._qualified_op_name
    if isinstance(target, torch._ops.OpOverload):
        return f"{target.namespace}::{target._opname}"
    return None


def module_of(node: fx.Node) -> tuple[str, str]:
    """(module path, module class name) of the innermost module of the model that ran ``node``.

    A module the model calls but does not own (a global, e.g. transformers' hub kernels
    wrapping ``apply_rotary_pos_emb``: ``G['...'].apply_rotary_pos_emb``) is skipped: its
    ops belong to the layer that called it. Naming them after it split every Llama layer
    into two runs, so no repeated unit was found and nothing was stitched."""
    stack = list((node.meta.get("nn_module_stack") or {}).values())
    if not stack:
        return "", ""
    owned = [(path, cls) for path, cls in stack if _ROOT.match(str(path))]
    path, cls = (owned or stack)[-1]
    path = _ROOT.sub("", str(path)).lstrip(".")
    path = re.sub(r"\._modules\['([^']+)'\]", r".\1", path).lstrip(".")
    return path, getattr(cls, "__name__", str(cls))


def source_of(node: fx.Node) -> str:
    """``file:line`` of the innermost frame of the node's stack trace."""
    frames = _FRAME.findall(node.meta.get("stack_trace") or "")
    if not frames:
        return ""
    file, line, _ = frames[-1]
    return f"{file}:{line}"


def capture(model: torch.nn.Module, inputs: Sequence[torch.Tensor]) -> OpGraph:
    """Trace ``model(*inputs)`` into one FX graph; a graph break is an error naming where."""
    captured: list[tuple[fx.GraphModule, list[torch.Tensor]]] = []

    def backend(gm: fx.GraphModule, example_inputs: list[torch.Tensor]):  # type: ignore[no-untyped-def]
        captured.append((gm, list(example_inputs)))
        return gm.forward

    torch._dynamo.reset()
    try:
        with torch.no_grad():
            torch.compile(model, backend=backend, fullgraph=True, dynamic=False)(*inputs)
    # A branch on a tensor's value (`.item()`) is a UserError ("could not guard on
    # data-dependent expression") in this torch, not Unsupported: a graph break all the same.
    # Other UserErrors (invalid input, constraint violations) are the forward's own failure.
    except (torch._dynamo.exc.Unsupported, torch._dynamo.exc.UserError) as exc:
        if isinstance(exc, torch._dynamo.exc.UserError) and not _data_dependent(exc):
            raise CaptureError(f"capturing the forward failed: {type(exc).__name__}: {_short(exc)}") from exc
        frame = getattr(exc, "innermost_user_frame_summary", None)
        in_torch = frame is not None and _in_torch(frame.filename)
        where = f" at {frame.filename}:{frame.lineno} ({frame.line})" if frame is not None and not in_torch else ""
        if _data_dependent(exc):  # sktune's hint says it all; Dynamo's (torch._check, guard_or_false) misleads here
            raise CaptureError(f"the forward cannot be captured as one graph (graph break{where})"
                               f"{_DATA_DEPENDENT_HINT} (--debug shows Dynamo's message)") from exc
        raise CaptureError(f"the forward cannot be captured as one graph (graph break{where}):\n"
                           f"{_short(exc, user_frame=not in_torch)}") from exc
    except Exception as exc:  # the user's forward itself failed while being traced
        raise CaptureError(f"capturing the forward failed: {type(exc).__name__}: {_short(exc)}") from exc
    finally:
        torch._dynamo.reset()
    graph = opgraph_from(*captured[0], inputs) if len(captured) == 1 else None
    if not captured or (graph is not None and not graph.ops):  # Dynamo hands no graph, or one without ops
        raise CaptureError("the forward runs no tensor operations (it returns its inputs or constants): "
                           "there is nothing to fuse")
    if graph is None:
        raise CaptureError(f"expected one captured graph, got {len(captured)}")
    return graph


def opgraph_from(gm: fx.GraphModule, flat_args: Sequence[torch.Tensor],
                 inputs: Sequence[torch.Tensor] | None = None) -> OpGraph:
    """The OpGraph of a graph Dynamo captured: its ops (type, module, source) and legal cuts.

    ``flat_args`` are the graph's example arguments as Dynamo passed them to the backend;
    ``inputs`` are the user's inputs, to tell which placeholders they feed (without them
    every placeholder counts as a parameter, which is all a compiler needs).
    """
    by_id = {id(t): i for i, t in enumerate(inputs or ())}
    positions = tuple(by_id.get(id(t)) for t in flat_args)
    nodes = op_nodes(gm)
    ops = []
    for i, node in enumerate(nodes):
        module, module_type = module_of(node)
        ops.append(Op(i, node.name, op_type(node, gm), module, module_type, source_of(node)))
    boundaries = legal_boundaries(len(nodes), tuple_spans(nodes))
    return OpGraph(gm, tuple(t.detach() for t in flat_args), positions, tuple(ops), tuple(boundaries))


def _data_dependent(exc: Exception) -> bool:
    """A branch on a tensor's value: Dynamo's dynamic control flow, or its data-dependent guard."""
    return (getattr(exc, "error_type", None) == torch._dynamo.exc.UserErrorType.DYNAMIC_CONTROL_FLOW
            or "data-dependent" in str(exc).lower())


_DATA_DEPENDENT_HINT = ("; it branches on a tensor's value (e.g. `.item()`), which a compiled graph cannot:"
                        " use torch.where, or move the decision out of forward()")


_DEVELOPER_LINES = ("Developer debug context", "Set TORCHDYNAMO_VERBOSE", "Please report an issue to PyTorch")


def _in_torch(filename: str) -> bool:
    """A frame in PyTorch's own files: a forward wrapped in ``torch.compiler.disable`` breaks
    the graph in Dynamo's wrapper, which is no place in the user's code."""
    return Path(filename).resolve().is_relative_to(Path(torch.__file__).resolve().parent)


def _short(exc: BaseException, max_lines: int = 12, user_frame: bool = True) -> str:
    """The first lines of a Dynamo message: the reason and the user frame it names, without
    the lines meant for PyTorch's developers. ``user_frame=False``: the frame Dynamo names is
    PyTorch's own, so its "from user code" block is dropped."""
    text = str(exc) if user_frame else str(exc).split("from user code:")[0]
    lines = [line for line in text.splitlines()
             if line.strip() and not any(d in line for d in _DEVELOPER_LINES)]
    return "\n".join(lines[:max_lines])
