"""Worker start-up: load the model file, draw the input sets, capture one graph per served
shape and take its unfused references, with the checks a user's model must pass. Verify-only
shapes are only named here: ``verify_only.py`` captures them when a plan is first verified there.

The worker side of the pipe (``tuning/supervisor.py`` starts it, ``serve.py`` is its main loop); ``runner.py`` then applies,
verifies and measures plans on what this loaded.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from sktune.backends import Backend
from sktune.errors import CaptureError, ModelFileError, NondeterministicModelError
from sktune.graph.capture_cache import capture_cached
from sktune.graph.opgraph import OpGraph
from sktune.load import ModelSource, build, draw_inputs, load_model_file, shape_weights, verify_shape_names
from sktune.pipe.protocol import RunnerConfig
from sktune.verify import bitwise_equal, compare_outputs, flatten_outputs


@dataclass
class ShapeSet:
    """One served shape: its own captured graph (shapes are static), input sets and references.

    One plan serves every shape, so every shape's graph has the same ops in the same order.
    """

    name: str | None  # None: a model without input_shapes()
    weight: float
    graph: OpGraph
    inputs: list[tuple[torch.Tensor, ...]]
    args: list[list[torch.Tensor]]
    reference_fn: Any
    references: list[list[torch.Tensor]]


@dataclass(frozen=True)
class LoadedModel:
    """What start-up loaded: the model file, each served shape (heaviest first), and where
    the time went."""

    source: ModelSource
    weights: dict[str, float]  # {}: one shape, as the model draws it
    shape_sets: dict[str | None, ShapeSet]
    capture_reused: bool  # every shape's graph came from the capture cache
    startup_s: dict[str, float]
    model: torch.nn.Module | None = None  # kept to draw the verify-only shapes' references later
    verify_names: tuple[str, ...] = ()  # verify_shapes(): captured and checked here, references on first use
    left_out: tuple[str, ...] = ()  # input_shapes() that --shapes left out: among verify_names, first


@dataclass(frozen=True)
class OpenedModel:
    """The model file, loaded, and its model, built on the CPU."""

    source: ModelSource
    model: torch.nn.Module
    seconds: float


def open_model(config: RunnerConfig) -> OpenedModel:
    """Load the model file and build its model before any backend is imported: a mistake in
    the file (syntax, a missing function, ``build_model`` raising) is reported without
    waiting for the backend's imports (Inductor's: 1.1-1.8 s beyond torch's, measured with
    ``python -X importtime``)."""
    clock = time.perf_counter()
    source = load_model_file(config.model_path)
    return OpenedModel(source, build(source), time.perf_counter() - clock)


def load_model(config: RunnerConfig, backend: Backend, opened: OpenedModel) -> LoadedModel:
    """Check and capture the opened model at every served shape, with its unfused references."""
    clock = time.perf_counter()
    startup_s: dict[str, float] = {}
    source, device = opened.source, backend.device
    model = opened.model.to(device)
    weights = shape_weights(source, config.shapes)
    # Checked, drawn and captured now; references on first use. The input_shapes() that --shapes
    # left out are served too: verified there as at verify_shapes(), never timed.
    left_out = tuple(name for name in shape_weights(source) if name not in weights) if config.shapes else ()
    verify_names = (*left_out, *verify_shape_names(source))
    # The heaviest shape first: it is measured first and prunes for the others.
    names: list[str | None] = sorted(weights, key=lambda n: -weights[n]) or [None]
    drawn = checked_inputs(source, model, names, verify_names, config.input_sets, device)
    startup_s["load"] = opened.seconds + time.perf_counter() - clock
    clock = time.perf_counter()
    capture_dir = None if config.capture_cache is None else Path(config.capture_cache)
    captured = {name: capture_cached(model, drawn[name][0], capture_dir, source.sha256) for name in names}
    graphs = {name: graph for name, (graph, _) in captured.items()}
    for name in names[1:]:
        check_same_ops(graphs[names[0]], graphs[name], names[0], name)
    # A verify-only shape with other ops can verify no fused plan: found now (a capture each,
    # cached on disk for its verification; not kept: a graph holds its inputs), not after the
    # whole search as "not bitwise" at every finalist. A shape --shapes left out may differ: it
    # was picked apart, so it is named and not verified, never refused.
    other_ops: set[str] = set()  # left out, other ops there: named by the summary, not verified
    for name in verify_names:
        graph = capture_cached(model, drawn.pop(name)[0], capture_dir, source.sha256)[0]
        try:
            check_same_ops(graphs[names[0]], graph, names[0], name, verify_only=name not in left_out)
        except CaptureError:
            if name not in left_out:
                raise
            other_ops.add(name)
    verify_names = tuple(name for name in verify_names if name not in other_ops)
    startup_s["capture"] = time.perf_counter() - clock
    clock = time.perf_counter()
    shape_sets = {name: shape_set(backend, name, weights.get(name or "", 1.0), graphs[name], drawn[name])
                  for name in names}
    startup_s["reference"] = time.perf_counter() - clock
    return LoadedModel(source, weights, shape_sets, all(reused for _, reused in captured.values()), startup_s,
                       model, verify_names, left_out)


def checked_inputs(source: ModelSource, model: torch.nn.Module, names: list[str | None],
                   verify_names: tuple[str, ...], input_sets: int,
                   device: str | torch.device = "cpu") -> dict[str | None, list[tuple[torch.Tensor, ...]]]:
    """Each shape's input sets, checked as the contract asks (the same shapes and dtypes for
    every seed; ``check_forward`` on the first shape, ``check_shape_forward`` on the others),
    before anything is captured. Each verify-only shape's are drawn and checked too: a name
    ``example_inputs`` refuses, or a forward that fails there, is a mistake to stop at now,
    not one found after the whole search (reported as "not bitwise")."""
    drawn = {name: [tuple(t.to(device) for t in draw_inputs(source, seed, name)) for seed in range(input_sets)]
             for name in names}
    for name, inputs in drawn.items():
        check_same_signature(inputs, source.path, name)
        check_new_values(inputs, source.path, name)
    check_forward(model, drawn[names[0]][0], source.path)
    for name in names[1:]:
        check_shape_forward(model, drawn[name][0], source.path, str(name))
    for name in verify_names:  # only the first set kept, to capture: the rest are drawn again on first use
        verify_inputs = [draw_inputs(source, seed, name) for seed in range(input_sets)]
        check_same_signature(verify_inputs, source.path, name)
        check_new_values(verify_inputs, source.path, name)
        drawn[name] = [tuple(t.to(device) for t in verify_inputs[0])]
        check_shape_forward(model, drawn[name][0], source.path, name)
    return drawn


def shape_set(backend: Backend, name: str | None, weight: float, graph: OpGraph,
              inputs: list[tuple[torch.Tensor, ...]]) -> ShapeSet:
    """Capture's companion: the shape's unfused references, checked to be deterministic."""
    args = [graph.args_for(i) for i in inputs]
    reference_fn = backend.reference(graph)
    references = [flatten_outputs(reference_fn(*a)) for a in args]
    for k, a in enumerate(args):
        again = compare_outputs(references[k], flatten_outputs(reference_fn(*a)))
        if again:
            at = "" if name is None else f" at shape {name!r}"
            raise NondeterministicModelError(
                f"the model is nondeterministic: two unfused runs on input set {k}{at} differ "
                f"(output {again[0].output_index}: {again[0].count} elements, max {again[0].max_ulp} ULP). "
                "Bitwise verification needs a deterministic model (no dropout in train mode, "
                "no random ops in forward, deterministic kernels)."
            )
    return ShapeSet(name, weight, graph, inputs, args, reference_fn, references)


def check_same_signature(input_sets: list[tuple[torch.Tensor, ...]], path: Path,
                         shape: str | None = None) -> None:
    first = [(tuple(t.shape), t.dtype) for t in input_sets[0]]
    at = "" if shape is None else f", shape={shape!r}"
    for seed, inputs in enumerate(input_sets[1:], start=1):
        if [(tuple(t.shape), t.dtype) for t in inputs] != first:
            raise ModelFileError(
                f"example_inputs({seed}{at}) in {path} returns other shapes or dtypes than "
                f"example_inputs(0{at}); each seed must draw new values with the same shapes and dtypes"
            )


def check_new_values(input_sets: list[tuple[torch.Tensor, ...]], path: Path, shape: str | None = None) -> None:
    """The seeds draw other values: a plan verified on identical sets was verified on one,
    yet the summary would say "verified on N input sets". Only every set the same is refused:
    small integer inputs (a token id) may repeat for one seed by chance."""
    first, rest = input_sets[0], input_sets[1:]
    # Inputs without elements are equal vacuously: check_has_elements names that mistake.
    if not rest or not any(t.numel() for t in first):
        return
    if all(bitwise_equal(a, b) for inputs in rest for a, b in zip(first, inputs)):
        at = "" if shape is None else f", shape={shape!r}"
        seeds = f"example_inputs(1{at})" if len(rest) == 1 else f"example_inputs(1{at}) to ({len(rest)}{at})"
        raise ModelFileError(
            f"{seeds} in {path} return the same values as example_inputs(0{at}): each seed must draw "
            f"new values (for example with torch.Generator().manual_seed(seed)), since plans are verified "
            f"bitwise on --input-sets {len(input_sets)} sets and identical sets verify on one. To verify on "
            "one set of fixed inputs, run with --input-sets 1")


def signature(inputs: tuple[torch.Tensor, ...]) -> list[list[Any]]:
    """The user inputs' [shape, dtype], as studies and exports record them."""
    return [[list(t.shape), str(t.dtype)] for t in inputs]


def check_same_ops(first: OpGraph, other: OpGraph, first_name: str | None, other_name: str | None,
                   verify_only: bool = False) -> None:
    """Op indices, and so plans, must mean the same at every shape: the same ops, in order.
    ``verify_only``: ``other_name`` is a verify-only shape, and the refusal says what to do."""
    try:
        _same_ops(first, other, first_name, other_name)
    except CaptureError as exc:
        if not verify_only:
            raise
        raise CaptureError(f"{exc}. {other_name!r} is a verify-only shape: drop it from verify_shapes(), or tune "
                           "it in a study of its own") from None


def _same_ops(first: OpGraph, other: OpGraph, first_name: str | None, other_name: str | None) -> None:
    for a, b in zip(first.ops, other.ops):
        if (a.target, a.module) != (b.target, b.module):
            raise CaptureError(
                f"shapes {first_name!r} and {other_name!r} capture different graphs: op {a.index} is "
                f"{a.target} ({a.module or 'top level'}{', ' + a.source if a.source else ''}) at {first_name!r} "
                f"but {b.target} ({b.module or 'top level'}{', ' + b.source if b.source else ''}) at "
                f"{other_name!r}. One plan serves every shape, so every shape must run the same ops "
                "(a shape-dependent branch in forward breaks this)")
    if len(first.ops) != len(other.ops):
        n = min(len(first.ops), len(other.ops))
        longer, name = (first, first_name) if len(first.ops) > n else (other, other_name)
        raise CaptureError(
            f"shapes {first_name!r} and {other_name!r} capture different graphs: {len(first.ops)} ops at "
            f"{first_name!r}, {len(other.ops)} at {other_name!r}; the first extra op is {longer.ops[n].target} "
            f"(op {n}, at {name!r}). One plan serves every shape, so every shape must run the same ops")


def check_forward(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], path: Path) -> None:
    """The eager forward, called twice on one input set, as the contract asks: it returns
    tensors, modifies neither its inputs nor (after the first call) the model's parameters
    and buffers, and gives the same bits both times. sktune compares outputs only and runs
    the model thousands of times, so state written in forward would be neither verified nor
    reproducible (a fused plan changed a buffer's bits while every output stayed bitwise equal)."""
    before = [t.clone() for t in inputs]
    first = _forward(model, inputs, path)
    try:
        flat = flatten_outputs(first)
    except TypeError as exc:
        raise ModelFileError(f"the forward of {path} must return tensors: {exc}") from exc
    check_has_elements(flat, path, "on example_inputs(0)")
    for k, (old, new) in enumerate(zip(before, inputs)):
        if not bitwise_equal(old, new):  # raw bits: an input holding NaN is not "modified"
            raise ModelFileError(
                f"the forward of {path} modifies its input {k} in place; sktune runs the model "
                "many times on the same inputs, so the forward must not mutate them"
            )
    # From the first call on: a cache built lazily by the first call (a rotary table, say) is
    # state set once; what the second call writes again is state kept from call to call.
    state = model_state(model)
    second = _forward(model, inputs, path)
    now = model_state(model)
    if written := [f"{kind} {name!r}" for (kind, name), seen in now.items() if state.get((kind, name)) != seen]:
        raise ModelFileError(
            f"the forward of {path} writes the model's {', '.join(written[:3])}; sktune verifies a plan by "
            "its outputs only and runs the model many times, so state kept in the model (a running "
            "statistic, a counter, a cache, a scratch buffer) would be neither verified nor the same from "
            "run to run. Pass such state as an input and return its new value; allocate scratch space "
            "inside forward")
    again = compare_outputs(flat, flatten_outputs(second))
    if again:
        raise NondeterministicModelError(
            f"the model is nondeterministic: two eager calls on the same inputs differ (output "
            f"{again[0].output_index}: {again[0].count} elements, max {again[0].max_ulp} ULP). Bitwise "
            "verification needs a deterministic model (no dropout in train mode, no random ops in forward, "
            "no Python state that forward changes, such as a call counter)")


def check_shape_forward(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], path: Path, shape: str) -> None:
    """At a shape other than the first (``check_forward`` checked the model there): the eager
    forward runs and returns elements. A failure names the shape; found here, not in capture's
    traceback or as a plan "not bitwise" at the end of the search."""
    try:
        flat = flatten_outputs(_forward(model, inputs, path))
    except ModelFileError as exc:
        raise ModelFileError(f"at shape {shape!r} (example_inputs(0, shape={shape!r})): {exc}") from exc
    except TypeError as exc:
        raise ModelFileError(f"the forward of {path} must return tensors (at shape {shape!r}): {exc}") from exc
    check_has_elements(flat, path, f"at shape {shape!r}")


def check_has_elements(flat: list[torch.Tensor], path: Path, where: str) -> None:
    """Outputs with no element are bitwise equal by construction: a verification of nothing."""
    if all(t.numel() == 0 for t in flat):
        raise ModelFileError(f"the forward of {path} returns no elements {where} (outputs of shape "
                             f"{', '.join(str(tuple(t.shape)) for t in flat[:3]) or 'none'}): sktune verifies a plan "
                             "by its outputs, so draw inputs of the sizes the model serves")


def model_state(model: torch.nn.Module) -> dict[tuple[str, str], tuple[int, int]]:
    """Each parameter's and buffer's identity and version counter, by (kind, name): an
    in-place write bumps the version, a rebinding changes the identity; read without
    copying the model's weights."""
    out = {}
    for kind, named in (("parameter", model.named_parameters()), ("buffer", model.named_buffers())):
        for name, t in named:
            try:
                out[(kind, name)] = (id(t), t._version)
            except RuntimeError:  # an inference tensor has no version counter
                out[(kind, name)] = (id(t), -1)
    return out


def _forward(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...], path: Path) -> Any:
    try:
        return model(*inputs)
    except SystemExit as exc:
        raise ModelFileError(f"the forward of {path} called sys.exit({exc.code!r})") from exc
    except Exception as exc:
        raise ModelFileError(f"the forward of {path} raised {type(exc).__name__}: {exc}"
                             f"{_forward_hint(exc, model, inputs)}") from exc


def _dtype_names(dtypes: set[torch.dtype]) -> str:
    return ", ".join(sorted(str(d).removeprefix("torch.") for d in dtypes))


def _forward_hint(exc: Exception, model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> str:
    # "takes 1 positional argument but 3 were given": a keyword-only forward (not "missing ... argument")
    if isinstance(exc, TypeError) and re.search(r"positional arguments? but \d+ (were|was) given", str(exc)):
        return " (sktune calls forward(*example_inputs(seed)): its inputs are passed by position)"
    floats = {t.dtype for t in inputs if isinstance(t, torch.Tensor) and t.is_floating_point()}
    weights = {p.dtype for p in model.parameters() if p.is_floating_point()}
    if re.search(r"dtype|scalar type", str(exc), re.IGNORECASE) and weights and floats - weights:
        return (f" (example_inputs gives {_dtype_names(floats)}; the model's parameters are {_dtype_names(weights)}: "
                "draw the inputs in the dtype the model runs in)")
    return ""
