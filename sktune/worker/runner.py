"""Runs trials: applies, verifies and measures plans on the model that start-up loaded
(``startup.py``: the captured graph, the input sets and the reference outputs).

Lives in the worker process (``serve.py``); tests may use it in-process.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from sktune.backends import get_backend
from sktune.backends.compile_helper import CompileHelper, HelperSpec
from sktune.graph.aliasing import kernelless_ops
from sktune.graph.digest import graph_digests
from sktune.graph.grouping import group_ops, regions
from sktune.measure.heap import steady_heap
from sktune.measure.op_profile import OpProfile, profile_ops
from sktune.measure.stats import PairedTiming, paired_timing
from sktune.plan import Plan, Scope
from sktune.worker.probe import across_shapes, probe_exactness
from sktune.pipe.protocol import (BisectRequest, BisectResult, ConfirmRequest, ConfirmResult, ProfileRequest,
                                    ProfileResult, StaticCompile, ThroughCompileRequest, ThroughCompileResult,
                                    TimingUpdate, TrialRequest, TrialResult)
from sktune.pipe.verify_shapes import VerifyOnlyShapes, VerifyRequest, VerifyResult
from sktune.worker.startup import RunnerConfig, ShapeSet, load_model, open_model, signature
from sktune.worker.verify_only import VerifyOnly
from sktune.pipe.workload import ServedShape, Workload
from sktune.verify import compare_outputs, flatten_outputs

log = logging.getLogger(__name__)


class TrialRunner:
    """Loads and captures the model once, then applies, verifies and measures plans."""

    def __init__(self, config: RunnerConfig) -> None:
        self.config = config
        self.heap = steady_heap()  # before the model allocates: eager's speed must not depend on history
        if not log.isEnabledFor(logging.DEBUG):
            logging.getLogger("torch").setLevel(logging.ERROR)  # Inductor's warnings would tear the progress bar
        torch.set_num_threads(config.threads)
        torch.set_grad_enabled(False)
        opened = open_model(config)  # the model file's mistakes first: a backend's imports take seconds
        self.backend = get_backend(config.backend, for_trials=True)
        loaded = load_model(config, self.backend, opened)
        self.source, self.weights, self.shape_sets = loaded.source, loaded.weights, loaded.shape_sets
        self.model = loaded.model  # the eager model, as a user calls it (``through_compile``)
        self.capture_reused = loaded.capture_reused
        self.startup_s: dict[str, float] = dict(loaded.startup_s)  # where worker start-up time went
        primary = self.shape(None)
        self.graph, self.inputs, self.args = primary.graph, primary.inputs, primary.args
        self.reference_fn, self.references = primary.reference_fn, primary.references
        # Captured at start-up; each one's references are computed when a plan is first verified there.
        self.verify_only = VerifyOnly(loaded.verify_names, self.source, loaded.model, self.backend, config, primary)
        self.left_out = loaded.left_out
        clock = time.perf_counter()
        self.backend.observe(lambda: self.reference_fn(*self.args[0]))
        self.kernelless = kernelless_ops(self.graph.gm, self.args[0])
        self.startup_s["reference"] += time.perf_counter() - clock
        self.op_profile: OpProfile | None = None  # None: the study's own is used (config.space_inputs)
        if config.space_inputs:
            clock = time.perf_counter()
            self.op_profile = profile_ops(self.graph.gm, self.args[0])
            self.startup_s["op_profile"] = time.perf_counter() - clock
        clock = time.perf_counter()
        # Started once the op profile is taken (nothing else may run beside a timing) and the
        # captured graphs are saved (the helper loads them instead of capturing again).
        self.helper = self._start_helper() if config.compile_helper else None
        if self.helper is not None and config.prefetch_fuse_all:
            self.backend.prefetch(self.graph, self.backend.fuse_all_plan(self.graph))
        self.startup_s["helper"] = time.perf_counter() - clock
        clock = time.perf_counter()
        self.capabilities = self.backend.capabilities(self.graph)
        self.exactness: dict[str, Any] = {}
        self.exactness_by_shape: dict[str, Any] = {}
        if config.probe_cache is not None and config.space_inputs and self.capabilities.probes_exactness:
            # Per shape: an op can be exact at one size and not at another (vector tails); the
            # cache, keyed by input shapes, answers repeated shapes without a compile.
            exact = self.capabilities.exact_options
            by_shape = {name: probe_exactness(self, Path(config.probe_cache), exact, name) for name in self.shape_sets}
            self.exactness = across_shapes(list(by_shape.values()))
            self.exactness_by_shape = {name: a for name, a in by_shape.items() if name is not None}
        self.startup_s["probe"] = time.perf_counter() - clock
        self._current: tuple[Any, ShapeSet, list[float], list[float]] | None = None  # candidate being measured

    def _start_helper(self) -> CompileHelper | None:
        if not self.backend.shares_compiles or (os.cpu_count() or 1) < 2:
            return None
        spec = HelperSpec(self.config.model_path, self.config.backend, tuple(self.shape_sets),
                          self.config.capture_cache)
        helper = CompileHelper(spec, {name: s.graph for name, s in self.shape_sets.items()})
        self.backend.helper = helper
        return helper

    def shape(self, name: str | None) -> ShapeSet:
        """The named shape (None: the heaviest, which the plain requests use)."""
        if name is None:
            return next(iter(self.shape_sets.values()))
        if name not in self.shape_sets:
            raise ValueError(f"unknown shape {name!r} (known: {', '.join(map(str, self.shape_sets))})")
        return self.shape_sets[name]

    def describe(self) -> Workload:
        """What the tuner's main process needs: ops, cuts, what the backend can tune."""
        return Workload(
            ops=self.graph.ops, boundaries=self.graph.boundaries, capabilities=self.capabilities,
            environment={**self.backend.environment(), "threads": str(self.config.threads),
                         "backend": self.backend.name, "heap": self.heap},
            model_sha256=self.source.sha256, input_shapes=signature(self.inputs[0]),
            kernelless=tuple(self.kernelless), op_profile=self.op_profile, exactness=self.exactness,
            startup_s=self.startup_s, exactness_by_shape=self.exactness_by_shape,
            startup_static=self.backend.startup_static_compile(),
            # Heaviest first; empty for a model without input_shapes().
            shapes={name: ServedShape(s.weight, signature(s.inputs[0]))
                    for name, s in self.shape_sets.items() if name is not None},
            digests=graph_digests(self.graph), verify_shapes=self.verify_only.names, left_out_shapes=self.left_out,
        )

    def run(self, request: TrialRequest) -> TrialResult:
        """Apply, verify on every input set, then time against the baseline (interleaved).

        Only ``request.n_batches`` pairs are timed when it is set (``more`` extends the
        measurement of the same candidate).
        """
        plan, shape = request.plan, self.shape(request.shape)
        n_batches = self.config.n_batches if request.n_batches is None else request.n_batches
        n_ops = len(self.graph.ops)
        started = time.perf_counter()
        self.backend.compile_counts()  # forget what earlier compiles (the probe, a bisect) did
        candidate = self.backend.compile(shape.graph, plan)  # one graph per shape, as npugraph_ex captures
        compiled = time.perf_counter()
        compile_counts = self.backend.compile_counts()
        mismatches = []
        for k, args in enumerate(shape.args):
            found = compare_outputs(shape.references[k], flatten_outputs(candidate(*args)))
            mismatches += [{"input_set": k, **m.to_json()} for m in found]
        verified = time.perf_counter()
        static = StaticCompile.from_json(self.backend.static_compile_seconds())  # the first call has run
        self._current = (candidate, shape, [], [])
        timing, observed = self._measure(n_batches)
        measured = time.perf_counter()
        observed.update(compile_counts)
        observed.update(self.backend.fusion_facts(plan, observed))
        return TrialResult(
            bitwise=not mismatches, mismatches=tuple(mismatches[:20]), timing=timing,
            groups=tuple(group_ops(n_ops, plan.scopes)), regions=tuple(regions(n_ops, plan.scopes)),
            compile_s=compiled - started, verify_s=verified - compiled, measure_s=measured - verified,
            observed=observed, static_compile=static,
        )

    def more(self, n_batches: int) -> TimingUpdate:
        """Time ``n_batches`` more pairs of the last candidate; the timing covers all its pairs."""
        if self._current is None:
            raise RuntimeError("no candidate to measure: send run first")
        started = time.perf_counter()
        timing, _ = self._measure(n_batches)
        return TimingUpdate(timing, time.perf_counter() - started)

    def _time_batches(self, candidate: Any, n_batches: int,
                      shape: ShapeSet) -> tuple[list[float], list[float], dict[str, Any]]:
        """``n_batches`` interleaved pairs of the shape's baseline and ``candidate`` on input set 0."""
        args0, reference_fn = shape.args[0], shape.reference_fn
        return self._time_pairs(lambda: reference_fn(*args0), lambda: candidate(*args0), n_batches)

    def _time_pairs(self, baseline: Callable[[], Any], candidate: Callable[[], Any],
                    n_batches: int) -> tuple[list[float], list[float], dict[str, Any]]:
        if self.helper is not None:
            self.helper.settle()  # nothing may compile beside a timing
        return self.backend.time_batches(baseline, candidate, n_batches=n_batches,
                                         batch_target_s=self.config.batch_target_s)

    def _measure(self, n_batches: int) -> tuple[PairedTiming, dict[str, Any]]:
        assert self._current is not None
        candidate, shape, base, cand = self._current
        b, c, observed = self._time_batches(candidate, n_batches, shape)
        base += b
        cand += c
        return paired_timing(base, cand), observed

    def confirm(self, request: ConfirmRequest) -> ConfirmResult:
        """Re-time several plans in one interleaved round: every candidate's pairs are spread
        over the same stretch of time, so a quiet or busy minute favours none of them."""
        shape = self.shape(request.shape)
        compiled = [self.backend.compile(shape.graph, plan) for plan in request.plans]
        # Verified as compiled now: a forward per input set, next to minutes of timing.
        mismatches = tuple(sum(len(compare_outputs(ref, flatten_outputs(c(*args))))  # outputs that differ
                               for ref, args in zip(shape.references, shape.args)) for c in compiled)
        args0, reference_fn = shape.args[0], shape.reference_fn
        pairs = [(lambda: reference_fn(*args0), lambda c=c: c(*args0)) for c in compiled]
        return ConfirmResult(self._interleaved_rounds(pairs, request.rounds, request.n_batches), mismatches)

    def _interleaved_rounds(self, pairs: list[tuple[Callable[[], Any], Callable[[], Any]]], rounds: int,
                            n_batches: int) -> tuple[PairedTiming, ...]:
        """Each (baseline, candidate) pair timed ``n_batches`` pairs per round; the order rotates
        from round to round, so that none always goes first."""
        samples: list[tuple[list[float], list[float]]] = [([], []) for _ in pairs]
        for r in range(rounds):
            order = list(range(len(pairs)))
            for k in order[r % len(order):] + order[:r % len(order)]:
                b, c, _ = self._time_pairs(*pairs[k], n_batches)
                samples[k][0].extend(b)
                samples[k][1].extend(c)
        return tuple(paired_timing(b, c) for b, c in samples)

    def through_compile(self, request: ThroughCompileRequest) -> ThroughCompileResult:
        """Time the plan through ``sktune.apply``, as the export runs it: against the eager model,
        and against the plan called directly as the trials call it (what the call through
        ``torch.compile`` adds, paired), interleaved, at the heaviest shape."""
        from sktune._apply import apply

        shape = self.shape(None)
        direct = self.backend.compile(shape.graph, request.plan)
        inputs, args = shape.inputs[0], shape.args[0]
        try:
            applied = apply(self.model, request.plan, self.backend.name)
            started = time.perf_counter()
            first = applied(*inputs)  # Dynamo captures, the backend compiles
            compile_s = time.perf_counter() - started
            outputs = [first, *(applied(*more) for more in shape.inputs[1:])]
            # Against the eager model's outputs, in the user's structure: the captured graph returns a
            # tensor returned twice once, and no input returned as it is (its references hold fewer).
            mismatches = sum(m.count for more, out in zip(shape.inputs, outputs)
                             for m in compare_outputs(flatten_outputs(self.model(*more)), flatten_outputs(out)))
            pairs = [(lambda: self.model(*inputs), lambda: applied(*inputs)),  # the speedup a user sees
                     (lambda: direct(*args), lambda: applied(*inputs))]  # what the call adds to the table's
            over_eager, over_direct = self._interleaved_rounds(pairs, request.rounds, request.n_batches)
        finally:  # the worker's later compiles start as before, also after a failure: no Dynamo cache of this model
            torch._dynamo.reset()
        return ThroughCompileResult(over_eager, over_direct, mismatches, compile_s)

    def verify_shapes(self) -> VerifyOnlyShapes:
        """The model's verify-only shapes (``verify_shapes()``), in its order."""
        return VerifyOnlyShapes(self.verify_only.names)

    def verify(self, request: VerifyRequest) -> VerifyResult:
        """Compile the plan at a verify-only shape and compare it bitwise there; no timing."""
        return self.verify_only.verify(request.plan, request.shape)

    def mismatches(self, plan: Plan, shape: str | None = None) -> int:
        """How many outputs differ from the reference, over all input sets of ``shape``."""
        at = self.shape(shape)
        candidate = self.backend.compile(at.graph, plan)
        return sum(len(compare_outputs(ref, flatten_outputs(candidate(*args))))
                   for ref, args in zip(at.references, at.args))

    def bisect(self, request: BisectRequest) -> BisectResult:
        """The smallest op range that still breaks bitwise equality, found by halving.

        Data dump is off under SuperKernel, so re-verifying halves is how a culprit is found.
        First each fused region alone, then halves of the failing region at legal cuts,
        within ``max_runs`` compile+verify runs.
        """
        plan, budget = request.plan, request.max_runs
        options = plan.option_dict
        legal = set(self.graph.boundaries)
        runs = 0

        def fails(first: int, last: int) -> bool:
            nonlocal runs
            runs += 1
            return self.mismatches(Plan.make([Scope(first, last, "bisect")], options)) > 0

        found: tuple[int, int] | None = None
        for first, last in regions(len(self.graph.ops), plan.scopes):
            if runs >= budget:
                break
            if fails(first, last):
                found = (first, last)
                break
        while found is not None and runs + 2 <= budget:
            first, last = found
            cuts = [c for c in legal if first <= c < last]
            if not cuts:
                break
            mid = min(cuts, key=lambda c: abs(c - (first + last) / 2))
            if fails(first, mid):
                found = (first, mid)
            elif fails(mid + 1, last):
                found = (mid + 1, last)
            else:
                break  # neither half fails alone: the range itself is the smallest
        if found is None:
            return BisectResult(None, runs)
        targets = [op.target for op in self.graph.ops[found[0]:found[1] + 1]]
        by_op = self.backend.kernel_types_by_op(self.kernelless)  # the device's op types (npu: dcci patterns)
        kernel_types = (None if by_op is None
                        else tuple(sorted({t for t in by_op[found[0]:found[1] + 1] if t is not None})))
        return BisectResult(found, runs, tuple(sorted(set(targets))), kernel_types)

    def profile(self, request: ProfileRequest) -> ProfileResult:
        """Busy time and gap of the baseline (plan ``None``) or of a plan, kernels named; at the
        heaviest shape, named in the profile's ``shape`` where the model has several."""
        args0 = self.args[0]
        if request.plan is None:
            fn = self.reference_fn
        else:
            backend = get_backend(self.config.backend, profile_kernels=True, for_trials=True)
            backend.helper = self.helper  # it compiles some of the profiling build's regions too
            fn = backend.compile(self.graph, request.plan)
        profile = self.backend.profile_step(lambda: fn(*args0))
        heaviest = next(iter(self.shape_sets))
        return ProfileResult(profile if heaviest is None else {**profile, "shape": heaviest})


__all__ = ["RunnerConfig", "TrialRunner"]
