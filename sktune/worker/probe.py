"""The per-op exactness probe: each op type compiled alone on real inputs, compared bitwise.

"Alone" means: only that op's span compiled, everything else eager, judged at the model's
outputs. All spans are compiled side by side in one graph (graph/side_by_side.py: one
compile instead of one per op, 20 s instead of 91 s on a 24-layer stack), falling back to
one compile per span if that fails.

Runs in the worker, once per op type and input signature; answers are cached in a JSON
file shared by studies (key: backend, torch version, the CPU's vector capability, op type,
input shapes/dtypes, constant arguments), so a second study of the same model probes
nothing. The capability is in the key because exactness follows vector width (an op exact
with AVX-512 may not be with AVX2: docs/measured.md, "Exact forms"), and a cache can move
between machines or be read under another ``ATEN_CPU_CAPABILITY``.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import fx

from sktune.graph.side_by_side import eager_with, node_values, side_by_side, span_nodes
from sktune.host_cpu import cache_tag, vector_facts
from sktune.load import draw_inputs
from sktune.plan import Plan, Scope
from sktune.verify import bitwise_equal, compare_outputs, flatten_outputs

log = logging.getLogger(__name__)

# Each op is judged on at least this many input sets: the shape's own, then more seeds of the
# model's example_inputs. A fused tanh 1 ULP off at 0.6 % of its elements slipped past 3 sets
# of 128 values (about one time in ten), was called exact, and a "bitwise" best then differed
# on 6 seeds of 30; 8 sets of the same size miss it about once in 500.
PROBE_INPUT_SETS = 8


def _describe_arg(a: Any) -> Any:
    if isinstance(a, fx.Node):
        value = a.meta.get("example_value")
        if isinstance(value, torch.Tensor):
            return [list(value.shape), str(value.dtype)]
        return "node"
    if isinstance(a, (list, tuple)):
        return [_describe_arg(x) for x in a]
    return repr(a)


def probe_key(backend: str, target: str, node: fx.Node, exact_options: dict[str, Any] | None = None) -> str:
    """The cache key of one probe: the op, its inputs, and the exact options it is tried with
    (a new exact option asks every op again)."""
    inputs = json.dumps([_describe_arg(a) for a in node.args] + [[k, _describe_arg(v)] for k, v in node.kwargs.items()])
    exact = json.dumps(exact_options or {}, sort_keys=True)
    # Inductor's vector ISA follows ATen's capability on x86 but not always (its own simdlen
    # setting, ARM): exactness depends on both (docs/measured.md, "Exact forms"). And it
    # compiles with -march=native: the host's tag (its instruction sets) keys the rest, as it
    # keys the Inductor cache, so two CPUs of one capability never share answers.
    cpu = vector_facts()
    return (f"{backend}|torch {torch.__version__}|cpu {cpu['cpu_capability']}|isa {cpu['vec_isa']}|"
            f"host {cache_tag()}|{target}|{inputs}|exact {exact}|sets {PROBE_INPUT_SETS}")


def isolating_span(i: int, n_ops: int, legal: set[int]) -> tuple[int, int]:
    """The smallest legal region containing op ``i`` (a tuple op takes its getitems along)."""
    first, last = i, i
    while first > 0 and first - 1 not in legal:
        first -= 1
    while last < n_ops - 1 and last not in legal:
        last += 1
    return first, last


def probe_exactness(runner: Any, cache_file: Path | None, exact_options: dict[str, Any],
                    shape: str | None = None) -> dict[str, dict[str, Any]]:
    """``{op type: {"alone": bitwise?, "exact_options": bitwise with them? (None: not tried), "op": i}}``,
    at ``shape`` (None: the model's heaviest or only shape).

    Every instance with its own input signature is probed (a mean over a 128-wide hidden
    state and one over a 32-wide head can differ); an op type is exact only if each is,
    and "op" names the first instance that is not."""
    cache = _load(cache_file)
    graph = runner.shape(shape).graph
    nodes = graph.op_nodes
    legal = set(graph.boundaries)
    n_ops = len(graph.ops)
    keys = [probe_key(runner.backend.name, op.target, nodes[i], exact_options) for i, op in enumerate(graph.ops)]
    todo: dict[str, tuple[int, int]] = {}  # first instance of each unanswered key → its span
    for i, key in enumerate(keys):
        if key not in cache and key not in todo:
            todo[key] = isolating_span(i, n_ops, legal)
    if todo:
        cache.update(_probe_spans(runner, shape, todo, exact_options))
    out: dict[str, dict[str, Any]] = {}
    seen: set[str] = set()
    for i, (op, key) in enumerate(zip(graph.ops, keys)):
        if key not in seen:
            seen.add(key)
            out[op.target] = _both(out.get(op.target), {**cache[key], "op": i})
    _save(cache_file, cache)
    return out


def _probe_spans(runner: Any, shape: str | None, spans: dict[str, tuple[int, int]],
                 exact_options: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{key: {"alone": ..., "exact_options": ...}}`` for each span: side by side, or one
    compile per span if the side-by-side compile fails."""
    try:
        return side_by_side_answers(runner, shape, spans, exact_options)
    except Exception as exc:  # noqa: BLE001 - any compiler failure: the slow way still answers
        log.warning("probing %d ops side by side failed (%s: %s); probing them one by one",
                    len(spans), type(exc).__name__, exc)
    return one_by_one_answers(runner, shape, spans, exact_options)


def side_by_side_answers(runner: Any, shape: str | None, spans: dict[str, tuple[int, int]],
                         exact_options: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """All spans in one compile, and one more with the exact options for those that differ."""
    alone = _exact_side_by_side(runner, shape, spans, {})
    fixed: dict[str, bool] = {}
    if exact_options and not all(alone.values()):
        fixed = _exact_side_by_side(runner, shape, {k: s for k, s in spans.items() if not alone[k]},
                                    dict(exact_options))
    return {k: {"alone": alone[k], "exact_options": fixed.get(k)} for k in spans}


def one_by_one_answers(runner: Any, shape: str | None, spans: dict[str, tuple[int, int]],
                       exact_options: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each span compiled alone inside the whole graph, judged by the model's outputs."""
    at = runner.shape(shape)

    def exact(plan: Plan) -> bool:  # on the probe's input sets, as the side-by-side answers are
        compiled = runner.backend.compile(at.graph, plan)
        return all(not compare_outputs(references(), flatten_outputs(compiled(*args)))
                   for args, references in probe_sets(runner, at))

    answers = {}
    for key, span in spans.items():
        scopes = [Scope(*span, "probe")]
        alone = exact(Plan.make(scopes, {}))
        fixed = None
        if not alone and exact_options:
            fixed = exact(Plan.make(scopes, dict(exact_options)))
        answers[key] = {"alone": alone, "exact_options": fixed}
    return answers


def _exact_side_by_side(runner: Any, shape: str | None, spans: dict[str, tuple[int, int]],
                        options: dict[str, Any]) -> dict[str, bool]:
    """Whether each span compiled alone keeps the model's outputs bitwise on every input
    set, all spans compiled as one graph (graph/side_by_side.py)."""
    at = runner.shape(shape)
    gm, keys = at.graph.gm, list(spans)
    keep = span_nodes(gm, list(spans.values()))
    lifted = side_by_side(gm, [spans[k] for k in keys], node_values(gm, at.args[0], keep),
                          [op.target for op in at.graph.ops])
    whole = Plan.make([Scope(0, len(lifted.graph.ops) - 1, "probe")], options)
    compiled = runner.backend.compile(lifted.graph, whole)
    exact = dict.fromkeys(keys, True)
    for args, references in probe_sets(runner, at):
        seen = node_values(gm, args, keep)  # one set's values at a time: a deep model's are large
        got = iter(flatten_outputs(compiled(*lifted.args_from(seen))))
        for key, outputs in zip(keys, lifted.outputs):
            fused = {node: next(got) for node in outputs}
            if not exact[key] or all(bitwise_equal(seen[n], v) for n, v in fused.items()):
                continue
            # The op differs; whether the user sees it is whether the model's outputs do.
            exact[key] = not compare_outputs(references(), flatten_outputs(eager_with(gm, args, fused)))
    return exact


def probe_sets(runner: Any, at: Any) -> Iterator[tuple[list[torch.Tensor], Callable[[], list[torch.Tensor]]]]:
    """The input sets the probe judges on (``PROBE_INPUT_SETS``): each one's graph arguments and
    its unfused outputs (computed when asked: only where a fused op differs). The shape's own
    sets first, then more seeds of the model's ``example_inputs``, drawn one at a time."""
    for args, references in zip(at.args, at.references):
        yield args, lambda references=references: references
    for seed in range(len(at.args), PROBE_INPUT_SETS):
        drawn = tuple(t.to(runner.backend.device) for t in draw_inputs(runner.source, seed, at.name))
        args = at.graph.args_for(drawn)
        yield args, lambda args=args: flatten_outputs(at.reference_fn(*args))


def _both(before: dict[str, Any] | None, this: dict[str, Any]) -> dict[str, Any]:
    """One op type's answer over two of its instances: exact only where both are."""
    if before is None:
        return this
    alone = bool(before["alone"] and this["alone"])
    fixed = None if alone else all(bool(a["alone"] or a["exact_options"]) for a in (before, this))
    first_inexact = before if not before["alone"] or this["alone"] else this
    return {"alone": alone, "exact_options": fixed, "op": first_inexact["op"]}


def across_shapes(answers: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """One answer per op type for a plan that must be exact at every shape: exact alone only
    if it is at each shape; fixed by the exact options only if each shape is exact alone or fixed."""
    first = answers[0]
    if len(answers) == 1:
        return first
    out: dict[str, dict[str, Any]] = {}
    for target, answer in first.items():
        combined = functools.reduce(_both, [a[target] for a in answers if target in a], None)
        out[target] = {**combined, "op": answer["op"]}
    return out


def _load(path: Path | None) -> dict[str, Any]:
    if path is None or not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        log.warning("ignoring unreadable probe cache %s", path)
        return {}


def _save(path: Path | None, cache: dict[str, Any]) -> None:
    """Atomically (several workers may probe at once; the last writer wins, all answers agree)."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".probe-")
    with os.fdopen(fd, "w") as f:
        json.dump(cache, f, indent=0, sort_keys=True)
    os.replace(tmp, path)
