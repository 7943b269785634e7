"""Scope markers -> SuperKernels, written from docs/superkernel.md
("How ops are grouped when scopes overlap").

Pairing follows npugraph_ex's ``_valid_graph``: each end closes the FIRST open begin of
the same name. Grouping: an op's mark set is the names open around it; a None mark wins
(never fused); when any named scope exists, unmarked ops are not fused; with only None
marks or no marks, unmarked ops form one group (label ``none``, as real profiles name a
SuperKernel no named scope asked for). A group becomes one SuperKernel per contiguous run
of its kernels; unfusible ops end the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import fx

from torch_npu._device import Task, marker_tasks
from torch_npu._kernels import AICPU, CUBE, GATHER, MIX, WAIT, Kernel, is_task, kernel_for
from torch_npu._options import SkOptions, any_match

RESERVED = "default_sk_scope_name"
MAX_NAME_BYTES = 255
MAX_SCOPES = 64
AUTO_SCOPE = "none"  # the scope part of a SuperKernel no named scope asked for
SK_ENTRY_NS, EARLY_START_NS, FLUSH_NS, SYNC_ALL_NS, TRACE_NS = 4_000, 1_000, 400, 1_000, 200
BEGIN, END = "npu.super_kernel_scope_begin.default", "npu.super_kernel_scope_end.default"


@dataclass(frozen=True)
class Marker:
    kind: str  # begin | end
    name: str | None


@dataclass(frozen=True)
class ScopeRange:
    """A paired begin/end at event positions ``begin`` < ``end``; ``key``: normalized name."""

    name: str | None
    key: str | None
    begin: int
    end: int


def marker_name(node: fx.Node) -> str | None:
    return node.args[0] if node.args else node.kwargs.get("scope_name")


def events_of(gm: fx.GraphModule) -> list[Marker | Kernel]:
    """Markers and kernels of a post-AOT graph, in graph order."""
    events: list[Marker | Kernel] = []
    for node in gm.graph.nodes:
        target = str(node.target)
        if node.op == "call_function" and target in (BEGIN, END):
            events.append(Marker("begin" if target == BEGIN else "end", marker_name(node)))
        elif is_task(node):
            events.append(kernel_for(node, sum(isinstance(e, Kernel) for e in events)))
    return events


def normalize(name: str | None) -> str | None:
    """None and the reserved name mean None; longer names are cut to 255 bytes of UTF-8."""
    if name is None or name == RESERVED:
        return None
    return name.encode("utf-8")[:MAX_NAME_BYTES].decode("utf-8", errors="ignore")


def pair_markers(events: list[Marker | Kernel]) -> list[ScopeRange]:
    """Like ``_valid_graph``: each end closes the first open begin of its name, else RuntimeError."""
    open_: list[tuple[str | None, int]] = []
    ranges: list[ScopeRange] = []
    for pos, ev in enumerate(events):
        if not isinstance(ev, Marker):
            continue
        if ev.kind == "begin":
            open_.append((ev.name, pos))
            continue
        match = next((i for i, (name, _) in enumerate(open_) if name == ev.name), None)
        if match is None:
            raise RuntimeError(f"super_kernel_scope_end({ev.name!r}) has no matching super_kernel_scope_begin")
        name, begin = open_.pop(match)
        ranges.append(ScopeRange(name, normalize(name), begin, pos))
    if open_:
        raise RuntimeError(f"super_kernel_scope_begin({open_[0][0]!r}) is never closed by super_kernel_scope_end")
    return sorted(ranges, key=lambda r: r.begin)


def function_name(k: Kernel) -> str:
    """The static kernel's function name, ``static_kernel_<OpType>_<hash>``: the hash of the
    ``te_<OpType>_<hash>`` symbol that dcci patterns match, so both name one kernel."""
    return "static_kernel_" + k.symbol.removeprefix("te_")


@dataclass
class SuperKernel:
    scope: str
    index: int
    kernels: list[Kernel] = field(default_factory=list)
    flushes: dict[int, int] = field(default_factory=dict)  # kernel index -> flushes inserted
    duration_ns: int = 0

    @property
    def name(self) -> str:
        """Index first, then first and last kernel's function name (docs/npu_api.md, "Profiler")."""
        first, last = function_name(self.kernels[0]), function_name(self.kernels[-1])
        return f"sk_{self.index}_{self.scope}_start_{first}_end_{last}"

    @property
    def core(self) -> str:
        return "MIX_AIC" if any(k.kind in (CUBE, MIX) for k in self.kernels) else "MIX_AIV"

    def task(self, op_state: str) -> Task:
        block = (20, 40) if self.core == "MIX_AIC" else (40, 0)
        return Task(self.name, "SuperKernel", self.core, self.duration_ns, *block, op_state)


@dataclass
class Plan:
    """What one compile does on the device, per run."""

    tasks: list[Task]
    superkernels: list[SuperKernel] = field(default_factory=list)
    corrupt: frozenset[str] = frozenset()  # node names whose output is corrupted
    fail_lines: list[str] = field(default_factory=list)

    @property
    def hang(self) -> SuperKernel | None:
        """The first SuperKernel holding a wait-like op (it never finishes)."""
        return next((sk for sk in self.superkernels if any(k.kind == WAIT for k in sk.kernels)), None)


def kernel_task(k: Kernel, op_state: str) -> Task:
    return Task(k.name, k.op_type, k.core, k.duration_ns, *k.block_dims, op_state,
                k.in_shapes, k.in_dtypes, k.out_shapes, k.out_dtypes)


def reference_plan(events: list[Marker | Kernel], op_state: str) -> Plan:
    """SuperKernel off: every kernel its own task; markers launch their tiny kernels."""
    tasks: list[Task] = []
    for ev in events:
        tasks += marker_tasks(ev.kind) if isinstance(ev, Marker) else [kernel_task(ev, op_state)]
    return Plan(tasks)


def _fail(k: Kernel | None, pos: int, scope: str, reason: str, detail: str) -> str:
    op_type, func = (k.op_type, k.name) if k else ("SuperKernelScope", "sk_scope_kernel_begin")
    return (f"Node [nodeId:{k.index if k else pos}, opType:{op_type}] - KernelInfos{{funcName:{func}, "
            f"scope:{scope}}}: reason: {reason}, reasonDetail: {detail}")


def _flushes(k: Kernel, opts: SkOptions) -> int:
    names = (k.symbol, k.name)
    n = int(any_match(opts.dcci("dcci_before_kernel_start"), names))
    n += int(any_match(opts.dcci("dcci_after_kernel_end"), names))
    if n or any_match(opts.dcci("dcci_disable_on_kernel"), names):
        return n
    return 1 if opts.given_dcci else 0  # default: a flush after each sub-op; sktune's `none`: no key, no flush


def _finish(sk: SuperKernel, opts: SkOptions) -> None:
    sk.flushes = {k.index: _flushes(k, opts) for k in sk.kernels}
    total = SK_ENTRY_NS + sum(k.duration_ns for k in sk.kernels) + FLUSH_NS * sum(sk.flushes.values())
    if opts.get("early_start") == 1:
        total -= min(2_000, EARLY_START_NS) * (len(sk.kernels) - 1)
    if opts.debug_flag("debug_sync_all"):
        total += SYNC_ALL_NS * (len(sk.kernels) - 1)
    if opts.debug_flag("debug_op_exec_trace") or opts.debug_flag("debug_cross_core_sync_check"):
        total += TRACE_NS * len(sk.kernels)
    sk.duration_ns = total


def _labels(events: list[Marker | Kernel], ranges: list[ScopeRange]) -> dict[int, tuple[frozenset, str] | None]:
    """Kernel index -> (group key, SuperKernel scope label), or None when it is not to be fused."""
    any_named = any(r.key is not None for r in ranges)
    out: dict[int, tuple[frozenset, str] | None] = {}
    for pos, ev in enumerate(events):
        if not isinstance(ev, Kernel):
            continue
        around = [r for r in ranges if r.begin < pos < r.end]  # sorted by begin: innermost last
        if any(r.key is None for r in around) or (not around and any_named):
            out[ev.index] = None
        else:
            keys = [r.key for r in around]
            out[ev.index] = (frozenset(keys), keys[-1] if keys else AUTO_SCOPE)
    return out


def superkernel_plan(events: list[Marker | Kernel], ranges: list[ScopeRange], opts: SkOptions,
                     op_state: str) -> Plan:
    """SuperKernel on: group, cut into SuperKernels, time them, and list what did not fuse."""
    labels = _labels(events, ranges)
    names = list(dict.fromkeys(r.key for r in ranges if r.key is not None))
    allowed = set(names[:MAX_SCOPES])
    task_bypass = opts.aggressive("task_breaker_bypass") == 1
    value_bypass = opts.aggressive("value_breaker_bypass") != 0
    fails: list[str] = []
    sks: list[SuperKernel] = []
    current: tuple[SuperKernel, frozenset] | None = None
    for ev in events:
        if not isinstance(ev, Kernel) or labels[ev.index] is None:
            if isinstance(ev, Kernel):
                current = None
            continue
        key, label = labels[ev.index]  # type: ignore[misc]
        if label != AUTO_SCOPE and label not in allowed:
            fails.append(_fail(ev, ev.index, label, "EXCEED_SCOPE_MAX", f"more than {MAX_SCOPES} scopes"))
            current = None
            continue
        if ev.kind == AICPU:
            if not task_bypass:
                current = None
                fails.append(_fail(ev, ev.index, label, "DEFAULT_NODE",
                                   "AI_CPU task breaks the SuperKernel (task_breaker_bypass=0)"))
            continue  # dropped from the scope: runs as its own task
        if ev.kind == WAIT and not value_bypass:
            current = None
            fails.append(_fail(ev, ev.index, label, "OP_UNSUPPORT", "ValueWait task (value_breaker_bypass=0)"))
            continue
        if current is None or current[1] != key:
            current = (SuperKernel(label, len(sks)), key)  # n counts every SuperKernel of the graph
            sks.append(current[0])
        current[0].kernels.append(ev)
    for sk in sks:
        _finish(sk, opts)
    for r in ranges:
        inside = [e for e in events[r.begin + 1:r.end] if isinstance(e, Kernel)]
        if r.key is not None and not inside:
            fails.append(_fail(None, sum(isinstance(e, Kernel) for e in events[:r.begin]), r.key,
                               "OP_UNSUPPORT", "empty scope"))
    return Plan(_timeline(events, ranges, sks, op_state), sks, _corrupt(sks), fails)


def _corrupt(sks: list[SuperKernel]) -> frozenset[str]:
    """Gather-class sub-ops with no flush read stale scalars."""
    return frozenset(k.node for sk in sks for k in sk.kernels if k.kind == GATHER and sk.flushes[k.index] == 0)


def _timeline(events: list[Marker | Kernel], ranges: list[ScopeRange], sks: list[SuperKernel],
              op_state: str) -> list[Task]:
    """Tasks in launch order: a SuperKernel at its first kernel; markers of unfused ranges run."""
    owner = {k.index: sk for sk in sks for k in sk.kernels}
    fused_pos = {pos for pos, e in enumerate(events) if isinstance(e, Kernel) and e.index in owner}
    consumed = {pos for r in ranges if any(r.begin < p < r.end for p in fused_pos) for pos in (r.begin, r.end)}
    tasks: list[Task] = []
    for pos, ev in enumerate(events):
        if isinstance(ev, Marker):
            if pos not in consumed:
                tasks += marker_tasks(ev.kind)
        elif ev.index not in owner:
            tasks.append(kernel_task(ev, op_state))
        elif owner[ev.index].kernels[0] is ev:
            tasks.append(owner[ev.index].task(op_state))
    return tasks
