"""The backend contract: turn a Plan into a runnable model, and say what it can tune.

Rules every backend keeps:
- ``compile(graph, plan)`` returns a callable taking the graph's flat arguments
  (``OpGraph.args_for``) and returning the flat outputs, exactly as ``graph.gm`` does.
  It fuses exactly ``grouping.regions(len(graph.ops), plan.scopes)``.
- ``reference(graph)`` is the unfused run that candidates must reproduce bit for bit.
- ``option_space(graph)`` lists only options that can matter on this device; a plan's
  options are exactly these (plus ``fallback_option`` where the backend has fallbacks):
  one backend's options never reach another.
- Compiling must not leak global state into the next compile (same plan, same result).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from sktune.capabilities import Capabilities, OptionSpec
from sktune.graph.opgraph import OpGraph
from sktune.measure.timer import calibrate_calls_per_batch, interleaved_batches
from sktune.plan import Plan

CompiledModel = Callable[..., Sequence[torch.Tensor]]


@dataclass(frozen=True)
class ExportSnippet:
    """What ``sktune export`` writes for the best plan on a backend (report/export.py puts
    the header, the plan literal and, where the scopes go into the user's source, the patch
    step around it)."""

    versions: str  # after "torch X" in the header: e.g. ", 1 thread(s)"
    usage: str  # after "Use it as it was tuned: model.eval(), calls under torch.no_grad()"
    before_plan: tuple[str, ...]  # comments, imports and settings before ``PLAN = ...``
    # The compile call once the plan's scope markers are in the user's source (npu); None:
    # the snippet ends with ``sktune.apply(model, PLAN, backend=...)`` instead.
    compile_after_source_edit: str | None = None


class Backend(ABC):
    """Applies plans with one real compiler. See the module docstring for the rules."""

    name: str = ""
    fallback_option: str | None = None  # plan option listing op types run as precompiled kernels
    unmarked_plans: bool = False  # a plan without scopes means "the compiler decides", not "fuse all"
    anchor_set: str = "compiler"  # which anchors to enqueue: "compiler" (fuse-all variants) or "superkernel"
    fuse_all_variants: tuple[str, ...] = ()  # options whose exact choice gets a fuse-all anchor of its own
    max_scopes: int | None = None  # distinct scope names a plan may have (None: no limit)

    def __init__(self, profile_kernels: bool = False, for_trials: bool = False) -> None:
        # Compile so that the profiler can name each generated kernel (may cost a recompile).
        self.profile_kernels = profile_kernels
        # Compiles are trials: measured against other configurations, so no cache may hand
        # back another configuration's kernels, and what the compiler really did is checked.
        self.for_trials = for_trials

    @abstractmethod
    def option_space(self, graph: OpGraph) -> list[OptionSpec]:
        """Options worth searching for this graph on this device."""

    @abstractmethod
    def unsafe_op_types(self) -> frozenset[str]:
        """Op types known to break bitwise equality when fused on this backend."""

    def unfusable_op_types(self) -> frozenset[str]:
        """Op types the compiler runs as separate kernels whatever the scope (cheap places to cut)."""
        return frozenset()

    @abstractmethod
    def fallback_candidates(self, graph: OpGraph) -> list[str]:
        """Op types in ``graph`` that can stay inside a region as their precompiled kernel."""

    @abstractmethod
    def compile(self, graph: OpGraph, plan: Plan) -> CompiledModel:
        """The model with the plan applied, called with the graph's flat arguments."""

    def fuse_all_plan(self, graph: OpGraph) -> Plan:
        """The fuse-all yardstick's plan: one scope over the whole graph, every option at its
        default except where the yardstick takes its own value (``OptionSpec.fuse_all_choice``).
        The same plan the search space's fuse-all anchor (``FUSE_ALL``) decodes to with its overrides."""
        from sktune.plan import Scope
        from sktune.space.search_space import FUSE_ALL

        options = {o.name: o.default if o.fuse_all_choice is None else o.fuse_all_choice
                   for o in self.option_space(graph)}
        return Plan.make([Scope(0, len(graph.ops) - 1, FUSE_ALL)], options)

    device: str = "cpu"  # where the runner puts the model and its inputs
    default_bisect_runs: int = 0  # compile+verify runs spent locating a mismatch, per infeasible trial

    def compile_counts(self) -> dict[str, int]:
        """What the compiles since the last call did (e.g. regions compiled vs reused); default: nothing."""
        return {}

    def static_compile_seconds(self) -> dict[str, Any] | None:
        """The last candidate's static-kernel compile, once its first call ran: ``seconds``,
        ``uncached_s`` (every kernel compiled; None unless known) and ``emulated``. None for
        a backend without one."""
        return None

    def synchronize(self) -> None:
        """Wait for queued device work; timers call it at both ends of a batch."""

    def profile_step(self, fn: Callable[[], object]) -> dict[str, Any]:
        """Busy time and gap of one step of ``fn`` (torch.profiler on the host by default)."""
        from sktune.measure.profile import profile_steps

        return profile_steps(fn).to_json()

    def time_batches(self, baseline: Callable[[], object], candidate: Callable[[], object], *,
                     n_batches: int, batch_target_s: float) -> tuple[list[float], list[float], dict[str, Any]]:
        """Per-call batch means (s) of baseline and candidate in one run (A B A B ...); host clock
        by default. Also returns backend-specific facts about the candidate run (e.g. which
        fusion really happened). Batches of several calls combine: a measurement may be
        extended by calling again and concatenating."""
        sync = self.synchronize
        calls = calibrate_calls_per_batch(baseline, batch_target_s, sync=sync)
        base, cand = interleaved_batches(baseline, candidate, calls_per_batch=calls, n_batches=n_batches, sync=sync)
        return base, cand, {}

    probes_exactness: bool = False  # compiling one op alone is cheap enough to probe each op type

    def observe(self, reference: Callable[[], object]) -> None:
        """Look at the baseline once before the search (e.g. profile it); default: nothing."""

    def kernel_types_by_op(self, kernelless: Sequence[bool]) -> list[str | None] | None:
        """The device op type of each graph op (None: it launches no kernel), as the baseline
        seen by ``observe`` ran them; None when the backend cannot tell (default)."""
        return None

    # -- what the generic code asks instead of testing a backend's name -------------
    # A second process may compile some of its regions (backends/compile_helper.py); the
    # runner then sets ``helper``, which ``compile`` and ``prefetch`` use.
    shares_compiles: bool = False
    helper: Any = None
    # The plan option whose costly choice compiles whole regions (minutes on a deep model):
    # the refinement leaves it out where it would cost more than a few trials (tuning/refine.py).
    whole_region_option: str | None = None
    # What the tuner's summary and the CLI ask of the class (no instance: no device needed).
    capture_limit: int | None = None  # shapes one graph is captured at before it runs unfused (None: no limit)
    checks_effective_options: bool = False  # each trial compares the options the compiler used with the plan's
    scope_markers_under: str | None = None  # the compile call that honours scope markers in the user's source
    has_doctor: bool = False  # ``sktune doctor`` checks this backend's assumptions about its host
    # The device profiler whose times the trials are timed by (None: a clock; profiles only explain).
    device_profiler: str | None = None

    def prefetch(self, graph: OpGraph, plan: Plan) -> int:
        """Hand ``plan``'s regions to the compile helper ahead of time; how many (default: none)."""
        return 0

    def fusion_facts(self, plan: Plan, observed: dict[str, Any]) -> dict[str, Any]:
        """What really fused, read from a timed run's ``observed`` facts, to add to them
        (npu: which scopes became SuperKernels); default: nothing."""
        return {}

    @classmethod
    def option_changes_plan(cls, option: str, spans: Sequence[tuple[int, int]], unit_starts: Sequence[int],
                            legal: set[int]) -> bool:
        """Whether setting plan option ``option`` can change how a plan with these regions
        runs (``unit_starts``: where repeated units start; ``legal``: the graph's legal cuts).
        By default an option matters wherever there is a region."""
        return bool(spans)

    @classmethod
    def export_snippet(cls, plan: Plan, environment: dict[str, Any], threads: int,
                       shapes: int = 1) -> ExportSnippet:
        """The paste-ready form of ``plan`` (``sktune export``); by default ``sktune.apply``,
        which inserts the plan into the captured graph for any backend."""
        return ExportSnippet(f", {threads} thread(s)", f", torch.set_num_threads({threads}).",
                             ("import sktune", ""))

    def check_plan_options(self, graph: OpGraph, options: dict[str, Any]) -> None:
        """Refuse a plan's options that this backend cannot run on ``graph`` (``PlanError``):
        ``sktune.apply`` asks before compiling a tuned plan."""
        self.capabilities(graph).check_options(options)

    def diagnostic_plan(self, plan: Plan) -> Plan | None:
        """A variant of ``plan`` that explains a hang when rerun, or None."""
        return None

    def capabilities(self, graph: OpGraph) -> Capabilities:
        """What the search needs to know about this backend for ``graph``, as one object."""
        options = tuple(self.option_space(graph))
        names = {o.name for o in options}
        return Capabilities(
            options=options,
            fallback_candidates=tuple(self.fallback_candidates(graph)) if self.fallback_option else (),
            unsafe_op_types=self.unsafe_op_types(), unfusable_op_types=self.unfusable_op_types(),
            probes_exactness=self.probes_exactness, fallback_option=self.fallback_option,
            unmarked_plans=self.unmarked_plans, anchor_set=self.anchor_set,
            fuse_all_variants=tuple(v for v in self.fuse_all_variants if v in names),
            max_scopes=self.max_scopes,
        )

    def reference(self, graph: OpGraph) -> CompiledModel:
        """The unfused run; by default the captured graph executed eagerly."""
        return graph.gm

    def startup_static_compile(self) -> dict[str, Any] | None:
        """The static-kernel compiles of the references so far, where the start-up's wall time
        does not hold them (an emulated device states them); None elsewhere."""
        return None

    def environment(self) -> dict[str, str]:
        """Versions and device facts recorded with every study."""
        return {"torch": torch.__version__}
