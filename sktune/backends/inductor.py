"""The ``inductor`` backend: each fused region is compiled by PyTorch Inductor.

Everything outside the plan's regions stays eager, inline in the top-level FX graph.
Regions are compiled with ``compile_fx`` (no Dynamo guards per call) and called directly.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx

from sktune.backends._base import Backend, CompiledModel, ExportSnippet
from sktune.backends.compile_helper import CompileHelper, helper_share
from sktune.backends.eager_order import EAGER_ORDER_TYPES, eager_order_installed
from sktune.backends.inductor_tables import (
    FALLBACK_ATEN,
    NO_ASSERTS,
    SIZE_DEPENDENT,
    cacheable,
    fallbacks_installed,
    static_shapes,
)
from sktune.backends.region_cache import RegionCache, region_key
from sktune.capabilities import OptionSpec
from sktune.graph.cut_regions import Cut, cut_regions, lift
from sktune.graph.grouping import regions
from sktune.graph.opgraph import OpGraph
from sktune.graph.side_by_side import node_values
from sktune.graph.structure import find_repeats, stitched, unit_starts
from sktune.host_cpu import cpu_name, vector_facts
from sktune.plan import Plan, check_plan

aten = torch.ops.aten

# Measured on CPU (docs/measured.md, "Which fused ops are bitwise on CPU"): fused
# versions of these differ from eager by 1-5 ULP (matmul only at some sizes: the probe's).
UNSAFE_OP_TYPES = frozenset(FALLBACK_ATEN) - SIZE_DEPENDENT

# Lowered to extern kernels (BLAS, oneDNN) on CPU: Inductor fuses nothing into them by
# default, so a region edge next to one costs a call but splits no generated kernel.
EXTERN_OP_TYPES = frozenset({"linear", "matmul", "mm", "bmm", "addmm", "baddbmm", "conv1d", "conv2d", "conv3d"})

FALLBACK_OPTION = "fallback_ops"
STITCH_OPTION = "stitch_units"  # a plan option of the backend, not an Inductor config key
EAGER_ORDER_OPTION = "eager_order"  # idem: sum/mean/softmax/pow in eager's order (eager_order.py)
PLAN_ONLY_OPTIONS = (FALLBACK_OPTION, STITCH_OPTION, EAGER_ORDER_OPTION)
OPTIONS = (
    OptionSpec("emulate_precision_casts", (False, True), False, True,
               "round intermediates to the source dtype like eager does; makes bf16 fusion bitwise",
               exact_choice=True),
    OptionSpec(EAGER_ORDER_OPTION, (False, True), False, True,
               "sum, mean and softmax over the last dim added up in eager's order: bitwise and still fused",
               exact_choice=True),
    # A region over 24 identical layers compiles as one 24-layer graph (~40 s); stitched,
    # it compiles one layer and calls it 24 times (a cut at each layer edge, ~4 µs a call).
    # docs/measured.md "Compile cost". The fuse-all yardstick stays one whole graph.
    OptionSpec(STITCH_OPTION, (True, False), True, False,
               "compile a region that spans repeated layers layer by layer: one compile per distinct layer",
               fuse_all_choice=False, costly_choices=(False,)),
    # Each region's C++ wrapper is a C++ compile against torch's headers: 5-8 s per distinct region.
    OptionSpec("cpp_wrapper", (False, True), False, False, "C++ wrapper instead of Python around kernels",
               costly_choices=(True,)),
    OptionSpec("max_fusion_size", (16, 64, 256), 64, False, "largest number of nodes fused into one kernel"),
    OptionSpec("aggressive_fusion", (False, True), False, True, "fuse nodes without shared memory access"),
    OptionSpec("epilogue_fusion", (True, False), True, True, "fuse pointwise epilogues into templates"),
    OptionSpec("pattern_matcher", (True, False), True, True,
               "graph rewrites such as mm + add → addmm (changes rounding: the add enters the GEMM accumulator)",
               exact_choice=False),
    OptionSpec("layout_optimization", (True, False), True, True, "channels-last for convolutions"),
)


class _Region:
    """A compiled region as an FX call target (FX needs a name; Inductor returns a bare
    function); ``fn`` is set once the region is compiled or found compiled."""

    def __init__(self, fn: Any, name: str) -> None:
        self.fn = fn
        self.__name__ = name

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)


class InductorBackend(Backend):
    fallback_option = FALLBACK_OPTION
    name = "inductor"
    probes_exactness = True
    fuse_all_variants = ("emulate_precision_casts",)  # makes bf16 fusion bitwise: worth its own anchor
    shares_compiles = True  # regions are separate compiles: a helper process can take some
    whole_region_option = STITCH_OPTION  # its costly choice (False) compiles a 24-layer region whole

    def __init__(self, profile_kernels: bool = False, for_trials: bool = False) -> None:
        super().__init__(profile_kernels=profile_kernels, for_trials=for_trials)
        self.regions = RegionCache()  # lives as long as the worker: trials share identical regions
        self.helper: CompileHelper | None = None  # a second process compiling some regions (the runner's)
        self._helper_s = 0.0  # what the helper spent on the regions loaded since compile_counts
        # Per captured graph: (first op, last op, configuration) → region_key.
        self._span_keys: weakref.WeakKeyDictionary[fx.GraphModule, dict[tuple[int, int, str], str | None]] = \
            weakref.WeakKeyDictionary()

    @classmethod
    def option_changes_plan(cls, option: str, spans: Sequence[tuple[int, int]], unit_starts: Sequence[int],
                            legal: set[int]) -> bool:
        """Stitching changes a plan only where a region spans a unit edge it may cut at: the
        rule ``compile`` applies (``structure.stitched``)."""
        if option == STITCH_OPTION:
            return stitched(spans, unit_starts, legal) != list(spans)
        return super().option_changes_plan(option, spans, unit_starts, legal)

    @classmethod
    def export_snippet(cls, plan: Plan, environment: dict[str, Any], threads: int,
                       shapes: int = 1) -> ExportSnippet:
        default = super().export_snippet(plan, environment, threads, shapes)
        # Exactness follows vector width: name the CPU it was verified on (host_cpu.py).
        where = (f"# Verified bitwise on {environment['cpu']} ({environment['cpu_capability']} vectors); on a CPU "
                 "with other vectors, verify it again: sktune run there.",) if "cpu_capability" in environment else ()
        return ExportSnippet(default.versions, default.usage, (
            *where,
            "# sktune.apply returns torch.compile(model, backend=<the plan's Inductor regions>, fullgraph=True, "
            "dynamic=False):",
            "# each fused group is one Inductor-compiled region, everything else runs eagerly.",
            # The trials call the captured graph directly; torch.compile's Dynamo checks its
            # guards on every call, a fixed cost the table's times do not hold (docs/measured.md).
            "# The speedup above calls the captured graph directly. Through torch.compile every call also pays",
            "# Dynamo's fixed cost (its frame hook and guards: tens to hundreds of microseconds, more on a loaded",
            "# machine; the study times it, above). Time the model as you will call it elsewhere:",
            "# benchmarks/call_overhead.py MODEL.py --plan EXPORT.json in sktune's repository (docs/measured.md).",
            *default.before_plan))

    def environment(self) -> dict[str, str]:
        # Compiled code and its exactness follow the CPU and its vector ISA (host_cpu.py).
        return {**super().environment(), "cpu": cpu_name(), **vector_facts()}

    def compile_counts(self) -> dict[str, float]:
        """Regions compiled and reused since the last call; with a helper, also the seconds
        its regions cost it (``helper_compile_s``: the worker only waited and loaded them)."""
        counts: dict[str, float] = dict(self.regions.take_counts())
        if self._helper_s:
            counts["helper_compile_s"] = self._helper_s
        self._helper_s = 0.0
        return counts

    def option_space(self, graph: OpGraph) -> list[OptionSpec]:
        has_conv = any(op.target.startswith("conv") for op in graph.ops)
        has_units = bool(_unit_starts(graph))
        # layout_optimization only touches convolutions, stitching only repeated layers,
        # precision casts only bf16/fp16 values: searching them elsewhere is noise (and an
        # anchor's compile).
        return [o for o in OPTIONS if (o.name != "layout_optimization" or has_conv)
                and (o.name != STITCH_OPTION or has_units)
                and (o.name != "emulate_precision_casts" or _has_low_precision(graph))]

    def unsafe_op_types(self) -> frozenset[str]:
        return UNSAFE_OP_TYPES

    def unfusable_op_types(self) -> frozenset[str]:
        return EXTERN_OP_TYPES

    def fallback_candidates(self, graph: OpGraph) -> list[str]:
        return sorted({op.target for op in graph.ops if op.target in FALLBACK_ATEN})

    def config_patches(self, plan: Plan) -> dict[str, Any]:
        options = plan.option_dict
        known = {o.name for o in OPTIONS}
        unknown = set(options) - known - {FALLBACK_OPTION}  # the other plan-only options are in OPTIONS
        if unknown:
            raise ValueError(f"unknown inductor option(s) {sorted(unknown)}; "
                             f"known: {sorted(known | {FALLBACK_OPTION})}")
        patches = {**NO_ASSERTS, **{k: v for k, v in options.items() if k not in PLAN_ONLY_OPTIONS}}
        fallbacks = tuple(sorted(options.get(FALLBACK_OPTION, [])))
        from sktune.backends.fallback_key import FallbackKey

        patches["post_grad_custom_pre_pass"] = FallbackKey(fallbacks, _eager_order_ops(options, fallbacks))
        if self.profile_kernels:
            patches["cpp.enable_kernel_profile"] = True
        return patches

    def compile(self, graph: OpGraph, plan: Plan) -> CompiledModel:
        gm, jobs = self._region_jobs(graph, plan)
        if not jobs:
            return gm
        self._hand_over(graph, plan, jobs)
        helper = self.helper
        # What the helper compiles (handed over now or prefetched). The worker compiles its
        # own regions first: waiting in graph order would leave it idle while the helper
        # compiles a region that comes earlier.
        awaited = {j.key for j in jobs if helper is not None and helper.has_pending(j.key)}
        for job in sorted(jobs, key=lambda j: j.key in awaited):
            if helper is not None and job.key not in self.regions:
                if job.key in awaited:
                    helper.wait(job.key)  # no-op if it came while waiting for another; then loads from the cache
                # Delivered now or before (a prefetched region that a timing waited for): loaded here.
                self._helper_s += helper.compile_s.get(job.key, 0.0)
            job.node.target.fn = self.regions.get_or_compile(job.key, job.compile)
        return gm

    def precompile(self, graph: OpGraph, plan: Plan, keys: set[str]) -> Iterator[str]:
        """Compile the plan's regions with these keys (into the on-disk caches), yielding each
        key when done: the compile helper's side of ``compile``."""
        for job in self._region_jobs(graph, plan)[1]:
            if job.key in keys:
                keys.discard(job.key)
                self.regions.get_or_compile(job.key, job.compile)
                yield job.key

    def prefetch(self, graph: OpGraph, plan: Plan) -> int:
        """Hand every region of ``plan`` not compiled yet to the compile helper, to compile
        while the worker does something else (the start-up probe); ``compile`` then waits
        for them. The number of regions handed over (0: no helper serves this graph)."""
        if self.helper is None or not self.helper.serves(graph):
            return 0
        return len(self._hand_over(graph, plan, self._region_jobs(graph, plan)[1], everything=True))

    def _hand_over(self, graph: OpGraph, plan: Plan, jobs: list[_RegionJob], everything: bool = False) -> set[str]:
        """About half the work of the regions this plan compiles anew (``everything``: all
        of it) goes to the compile helper, if one serves this graph
        (backends/compile_helper.py); the keys handed over."""
        if self.helper is None or not self.helper.serves(graph):
            return set()
        sizes = {j.key: j.ops for j in jobs if j.key is not None
                 and j.key not in self.regions and not self.helper.has_pending(j.key)}
        handed = set(sizes) if everything else helper_share(sizes)
        if handed and not self.helper.send(graph, plan, handed, self.profile_kernels):
            return set()
        return handed

    def _region_jobs(self, graph: OpGraph, plan: Plan) -> tuple[fx.GraphModule, list[_RegionJob]]:
        """The graph with the plan's regions cut out as calls (graph/cut_regions.py), and how to
        compile each. A region's key is remembered by span and configuration: the graph and
        its inputs never change in a worker, so a known region is not lifted out again."""
        from torch._inductor.compile_fx import compile_fx

        check_plan(plan, len(graph.ops), graph.boundaries)
        spans = regions(len(graph.ops), plan.scopes)
        if not spans:
            return graph.gm, []
        if plan.option_dict.get(STITCH_OPTION):  # absent (plans from before the option): whole regions
            spans = stitched(spans, _unit_starts(graph), set(graph.boundaries))
        fallbacks = tuple(sorted(plan.option_dict.get(FALLBACK_OPTION, [])))
        unknown = [f for f in fallbacks if f not in FALLBACK_ATEN]
        if unknown:
            raise ValueError(f"no fallback known for op type(s) {unknown}; known: {sorted(FALLBACK_ATEN)}")
        patches = self.config_patches(plan)
        config = _config_key(patches, fallbacks)
        eager_order = _eager_order_ops(plan.option_dict, fallbacks)
        gm, cuts = cut_regions(graph.gm, spans, lambda k: _Region(None, f"sk_region_{k}"))
        keys = self._span_keys.setdefault(graph.gm, {})
        values: dict[fx.Node, Any] = {}

        def lifted(cut: Cut) -> tuple[fx.GraphModule, list[Any]]:
            if not values:  # one eager run gives every region's real arguments
                values.update(node_values(graph.gm, graph.flat_args, {a for c in cuts for a in c.inputs}))
            return lift(graph.gm, cut), [values[a] for a in cut.inputs]

        jobs = []
        for cut in cuts:
            span = (cut.first, cut.last, config)
            if span not in keys:
                keys[span] = region_key(*lifted(cut), config)

            def compile_region(cut: Cut = cut) -> Any:
                sub, args = lifted(cut)
                with fallbacks_installed(fallbacks), eager_order_installed(eager_order), cacheable(), \
                        static_shapes(args):
                    return compile_fx(sub, args, config_patches=patches)

            jobs.append(_RegionJob(cut.call, keys[span], compile_region, cut.last - cut.first + 1))
        return gm, jobs


@dataclass(frozen=True)
class _RegionJob:
    node: fx.Node  # the region's call in the plan's graph
    key: str  # region_cache.region_key: identical regions share it
    compile: Callable[[], Any]
    ops: int  # how many ops it holds: its compile cost grows with them


def _eager_order_ops(options: dict[str, Any], fallbacks: tuple[str, ...]) -> tuple[str, ...]:
    """Op types to compile in eager's order: all that can be, unless the plan falls back on them."""
    if not options.get(EAGER_ORDER_OPTION):
        return ()
    return tuple(t for t in EAGER_ORDER_TYPES if t not in fallbacks)


_UNIT_STARTS: "weakref.WeakKeyDictionary[fx.GraphModule, tuple[int, ...]]" = weakref.WeakKeyDictionary()


def _unit_starts(graph: OpGraph) -> tuple[int, ...]:
    """``structure.unit_starts`` of ``graph``'s repeated units (the search space's), once per graph."""
    if graph.gm not in _UNIT_STARTS:
        repeats = find_repeats([o.target for o in graph.ops], [o.module for o in graph.ops])
        _UNIT_STARTS[graph.gm] = unit_starts(repeats, len(graph.ops))
    return _UNIT_STARTS[graph.gm]


def _has_low_precision(graph: OpGraph) -> bool:
    """Whether any input or op value of the graph is bf16 or fp16."""
    low = (torch.bfloat16, torch.float16)
    values = [n.meta.get("example_value") for n in graph.gm.graph.nodes] + list(graph.flat_args)
    return any(isinstance(v, torch.Tensor) and v.dtype in low for v in values)


def _config_key(patches: dict[str, Any], fallbacks: tuple[str, ...]) -> str:
    """Everything besides the graph that decides what a region compiles to."""
    named = {k: v.uuid() if hasattr(v, "uuid") else v for k, v in sorted(patches.items())}
    return f"torch {torch.__version__} patches {named!r} fallbacks {fallbacks!r}"
