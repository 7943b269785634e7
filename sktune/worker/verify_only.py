"""The verify-only shapes in the worker (``verify_shapes()`` in the model file).

Each is drawn, checked and captured at start-up (a shape with other ops is refused then, not
found after the search; the graph is not kept, it holds its inputs), then captured again
(from the capture cache) and given its unfused references the first time a plan is verified
there, and kept: start-up does not pay for references only the finalists are checked with.
A plan is compiled at such a shape and compared bit for bit on its input sets; nothing is
timed there. A shape that cannot be verified (its graph has other ops, so the plan cannot
mean the same; its inputs cannot be drawn; its unfused run is nondeterministic) is answered
with the reason, which the tuner counts as a failure to verify.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from sktune.backends import Backend
from sktune.errors import SktuneError
from sktune.graph.capture_cache import capture_cached
from sktune.load import ModelSource, draw_inputs
from sktune.pipe.protocol import RunnerConfig
from sktune.pipe.verify_shapes import NOT_VERIFIABLE, VerifyResult
from sktune.plan import Plan
from sktune.verify import compare_outputs, flatten_outputs
from sktune.worker.startup import ShapeSet, check_same_ops, check_same_signature, shape_set, signature


class VerifyOnly:
    """The verify-only shapes of one loaded model, prepared on first use."""

    def __init__(self, names: tuple[str, ...], source: ModelSource, model: torch.nn.Module | None,
                 backend: Backend, config: RunnerConfig, primary: ShapeSet) -> None:
        self.names = names
        self._source, self._model, self._backend, self._config, self._primary = (source, model, backend, config,
                                                                                  primary)
        # Per shape: its set, or why it cannot be verified, and its inputs' [shape, dtype] when drawn.
        self._prepared: dict[str, tuple[ShapeSet | str, list[list[object]] | None]] = {}

    def verify(self, plan: Plan, name: str) -> VerifyResult:
        """``plan`` compiled at ``name`` and compared with that shape's unfused run on each input set."""
        if name not in self.names:
            raise ValueError(f"unknown verify-only shape {name!r} (known: {', '.join(self.names) or 'none'})")
        started = time.perf_counter()
        references_before = self._backend.startup_static_compile()
        at, inputs = self._prepare(name)
        if isinstance(at, str):  # references may have compiled before the shape proved unverifiable
            return VerifyResult(name, 0, at, inputs, time.perf_counter() - started,
                                self._emulated_static(references_before, with_plan=False))
        candidate = self._backend.compile(at.graph, plan)
        mismatches = sum(len(compare_outputs(ref, flatten_outputs(candidate(*args))))
                         for ref, args in zip(at.references, at.args))
        return VerifyResult(name, mismatches, None, inputs, time.perf_counter() - started,
                            self._emulated_static(references_before))

    def _emulated_static(self, references_before: dict[str, Any] | None,
                         with_plan: bool = True) -> dict[str, Any] | None:
        """The emulated static compiles this verification stands for: the shape's references the
        first time, and the plan's (``with_plan``). A host's wall time holds them; the emulator's
        does not, so the study's estimated host time adds them (``host_time``). None where
        nothing emulated was compiled."""
        after = self._backend.startup_static_compile() or {}
        before = references_before or {}
        total = {key: float(after.get(key, 0.0)) - float(before.get(key, 0.0)) for key in ("seconds", "uncached_s")}
        candidate = self._backend.static_compile_seconds() if with_plan else None
        if candidate and candidate.get("emulated"):
            total = {key: total[key] + float(candidate[key]) for key in total}
        elif not after.get("emulated") or after == before:
            return None
        return total | {"emulated": True}

    def _prepare(self, name: str) -> tuple[ShapeSet | str, list[list[object]] | None]:
        if name not in self._prepared:
            self._prepared[name] = self._capture(name)
        return self._prepared[name]

    def _capture(self, name: str) -> tuple[ShapeSet | str, list[list[object]] | None]:
        """The shape's set, as start-up builds a tuned shape's; a user mistake there is the reason."""
        source, config, device = self._source, self._config, self._backend.device
        inputs = None
        try:
            drawn = [tuple(t.to(device) for t in draw_inputs(source, seed, name)) for seed in range(config.input_sets)]
            inputs = signature(drawn[0])
            check_same_signature(drawn, source.path, name)
            assert self._model is not None, "the loaded model was not kept"
            capture_dir = None if config.capture_cache is None else Path(config.capture_cache)
            graph, _ = capture_cached(self._model, drawn[0], capture_dir, source.sha256)  # start-up's, on disk
            check_same_ops(self._primary.graph, graph, self._primary.name, name, verify_only=True)
            return shape_set(self._backend, name, 0.0, graph, drawn), inputs
        except SktuneError as exc:  # the model file's mistake at this shape: not verifiable, say why
            return f"{NOT_VERIFIABLE}: {exc}", inputs
