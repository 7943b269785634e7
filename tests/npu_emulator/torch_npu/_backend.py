"""The emulated ``npugraph_ex`` torch.compile backend, and the separate ``npugraphs``.

Like torch-npu: a fresh ``CompilerConfig`` per compile (unknown key or bad value: raised
at once), AOT tracing (inference, no extra decompositions), ``_valid_graph`` pairing of
the markers after AOT, and at the first forward the static-kernel compile (``_static``)
and the SuperKernel dicts' check. The run executes the post-AOT aten graph on the CPU and
puts the plan's tasks on the emulated device.

``npugraphs`` is torch-npu's other backend (its ``cudagraphs``): AOT plus NPU-graph
capture and replay, no SuperKernel, no static kernels, and it takes no options.

Emulator-only seam: ``CompiledGraph.emulated_static_compile``, the EMULATED seconds of the
first forward's static compile (a real host has no such attribute: sktune times it).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx
from torch._functorch.aot_autograd import aot_module_simplified

from torch_npu import _device, _meta, _static
from torch_npu._config import CompilerConfig
from torch_npu._grouping import BEGIN, END, Plan, events_of, pair_markers, reference_plan, superkernel_plan
from torch_npu._kernels import Kernel
from torch_npu._ops import check_scope_name
from torch_npu._options import DEBUG, OPTIMIZE, SkOptions, is_legacy, validate_sk_options


def _version() -> str:
    import torch_npu

    return str(torch_npu.__version__)


def corrupt(value: Any) -> Any:
    """Stale scalars (a stale index read): element 0 lands about 12 % off, by flipping the
    third-highest mantissa bit; integers +1. Large enough to survive downstream rounding."""
    if isinstance(value, (tuple, list)) and value:
        return type(value)([corrupt(value[0]), *value[1:]])
    if not isinstance(value, torch.Tensor) or value.numel() == 0:
        return value
    out = value.clone()
    idx = (0,) * out.dim()
    if out.is_floating_point():
        ints = out.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[out.element_size()])
        mantissa = {torch.float16: 10, torch.bfloat16: 7, torch.float32: 23, torch.float64: 52}.get(out.dtype, 7)
        ints[idx] = ints[idx] ^ (1 << (mantissa - 3))
    elif out.dtype == torch.bool:
        out[idx] = ~out[idx]
    else:
        out[idx] = out[idx] + 1
    return out


class _Runner(fx.Interpreter):
    """Runs the post-AOT graph eagerly; markers are checked, not run; faulty ops corrupt."""

    def __init__(self, gm: fx.GraphModule, corrupted: frozenset[str]) -> None:
        super().__init__(gm)
        self.corrupted = corrupted

    def run_node(self, n: fx.Node) -> Any:
        if n.op == "call_function" and str(n.target) in (BEGIN, END):
            check_scope_name(n.args[0] if n.args else n.kwargs.get("scope_name"))
            return None
        out = super().run_node(n)
        return corrupt(out) if n.name in self.corrupted else out


class GraphState:
    """One compiled graph: its kernels, and the plan fixed at the first forward."""

    def __init__(self, gm: fx.GraphModule, config: CompilerConfig) -> None:
        self.gm = gm
        self.config = config
        self.events = events_of(gm)
        self.ranges = pair_markers(self.events)  # npugraph_ex's _valid_graph, after AOT
        self.sk_options: SkOptions | None = None
        self.static: _static.StaticCompile | None = None  # the first forward's static compile
        self._plan: Plan | None = None
        self._ran = False

    @property
    def kernels(self) -> list[Kernel]:
        return [e for e in self.events if isinstance(e, Kernel)]

    @property
    def sk_on(self) -> bool:
        # as_dict's '.value': super_kernel_optimize=0 arrives as '0', which is truthy (_config)
        return bool(self.config.local.get("super_kernel_optimize")) and not self.config.force_eager

    @property
    def static_kernels(self) -> bool:
        return bool(self.config.local.get("static_kernel_compile"))

    def plan(self) -> Plan:
        """Validate the SuperKernel dicts (RuntimeError) and fix what runs; once per compile."""
        if self._plan is not None:
            return self._plan
        op_state = "static" if self.static_kernels else "dynamic"
        if not self.sk_on:
            self._plan = reference_plan(self.events, op_state)
            return self._plan
        opts = validate_sk_options(getattr(self.config, OPTIMIZE), getattr(self.config, DEBUG), _version())
        self.sk_options = opts
        self._plan = superkernel_plan(self.events, self.ranges, opts, op_state)
        return self._plan

    def run(self, *args: Any) -> Any:
        if not self._ran and self.static_kernels:  # after warm-up, before capture (acl_graph compile)
            self.static = _static.compile_static(self.kernels, self.config.local, _version())
        plan = self.plan()
        if not self._ran:
            self._ran = True
            if self.sk_on and self.sk_options is not None:
                if _meta.kernel_meta_on():
                    _meta.write_sk_meta(plan, self.sk_options)
                stuck = plan.hang
                if stuck is not None:
                    if self.sk_options.debug_flag("debug_op_exec_trace") or \
                            self.sk_options.debug_flag("debug_cross_core_sync_check"):
                        _meta.write_hang_trace(stuck)
                    _meta.hang_forever()
        with torch.no_grad():
            out = _Runner(self.gm, plan.corrupt).run(*args)
        _device.launch(plan.tasks)
        return out


class CompiledGraph:
    """What the backend returns: call it with the flat arguments; introspection for tests."""

    def __init__(self, fn: Any, state: GraphState) -> None:
        self._fn = fn
        self.state = state

    def __call__(self, *args: Any) -> Any:
        return self._fn(*args)

    @property
    def config(self) -> CompilerConfig:
        return self.state.config

    @property
    def aot_graph(self) -> fx.GraphModule:
        return self.state.gm

    @property
    def kernels(self) -> list[Kernel]:
        return self.state.kernels

    @property
    def plan(self) -> Plan:
        return self.state.plan()

    @property
    def superkernels(self) -> list[tuple[str, list[int]]]:
        """(scope, kernel indices) of every SuperKernel, in launch order."""
        return [(sk.scope, [k.index for k in sk.kernels]) for sk in self.plan.superkernels]

    @property
    def effective_options(self) -> dict[str, Any] | None:
        self.plan  # noqa: B018  (validates and fixes the options)
        return None if self.state.sk_options is None else dict(self.state.sk_options.optimize)

    @property
    def emulated_static_compile(self) -> dict[str, Any] | None:
        """EMULATED seconds of the first forward's static compile (None before it, or
        without static kernels). Emulator only: on a host sktune times compile + first forward."""
        return None if self.state.static is None else self.state.static.to_json()

    @property
    def hangs(self) -> bool:
        """Whether the first forward would hang (the real path does hang)."""
        return self.plan.hang is not None


def npugraph_ex(gm: fx.GraphModule, example_inputs: list[Any], options: dict[str, Any] | None = None,
                **_: Any) -> CompiledGraph:
    """``lookup_backend("npugraph_ex")(gm, example_inputs, options=...)``."""
    return _aot(gm, example_inputs, CompilerConfig(options, legacy=is_legacy(_version())))


def npugraphs(gm: fx.GraphModule, example_inputs: list[Any], **_: Any) -> CompiledGraph:
    """``lookup_backend("npugraphs")``: capture and replay, every op its own task; the real
    entry point drops its keyword arguments, ``options`` included."""
    return _aot(gm, example_inputs, CompilerConfig())


def _aot(gm: fx.GraphModule, example_inputs: list[Any], config: CompilerConfig) -> CompiledGraph:
    states: list[GraphState] = []

    def forward_compiler(aot_gm: fx.GraphModule, _inputs: list[Any]) -> Any:
        states.append(GraphState(aot_gm, config))
        return states[-1].run

    with torch.no_grad():
        fn = aot_module_simplified(gm, example_inputs, fw_compiler=forward_compiler)
    return CompiledGraph(fn, states[-1])


def register() -> None:
    """Register the backend names, replacing any stand-in: the emulator is THE definition."""
    from torch._dynamo.backends import registry

    for name, fn in (("npugraph_ex", npugraph_ex), ("npugraphs", npugraphs)):
        registry._COMPILER_FNS.pop(name, None)
        registry.register_backend(fn, name=name)
