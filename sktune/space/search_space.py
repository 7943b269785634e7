"""The search space: plan ⇄ Optuna parameters, and the anchor plans enqueued first.

The op list is cut into *blocks* at candidate boundaries (``space/layout.py``). Each
block is fused or left eager; adjacent fused blocks share one scope unless the cut
between them is on. One parameter may decide many blocks: in a graph of repeated
units, ``rep.block:3`` decides block 3 of every unit (stamping). Backend options and
per-op-type fallbacks are parameters too, where the backend has them: a plan's options
are the backend's own (``fallback_option`` is None for a backend without fallbacks), and
every decoded plan is checked against the declared domains before it leaves this module.
A backend's cap on distinct scope names holds by construction: past it, decoded scopes
reuse names (``space/scope_cap.py``), so the space proposes nothing the backend refuses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sktune.capabilities import Capabilities, OptionSpec
from sktune.graph.structure import Repeats, differing_ends, find_repeats
from sktune.space.layout import MAX_CUTS, Layout, flat_layout, stamped_layout
from sktune.plan import Plan, Scope
from sktune.space.scope_cap import over_cap, reuse_names

FUSE_ALL = "fuse-all"  # the fuse-all yardstick's anchor: the compiler's own whole-graph fusion
UNFUSED = "unfused"  # the anchor that fuses nothing: the baseline measured as a candidate

FUSE, EAGER = "fuse", "eager"
NO_SCOPES = "no_scopes"  # no markers at all: the compiler picks what to fuse (npu's default)
SHARED = "rep"  # key prefix of the pattern shared by all repeated units


class SuggestsParams(Protocol):
    """The part of ``optuna.Trial`` the space needs (keeps this module Optuna-free)."""

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any: ...


@dataclass(frozen=True)
class SearchSpace:
    """Everything needed to turn parameters into a plan for one captured graph."""

    n_ops: int
    layout: Layout
    unsafe_blocks: tuple[bool, ...]  # block j contains an op known to break bitwise equality
    fallbacks: tuple[str, ...]  # op types that may run as precompiled kernels inside regions
    options: tuple[OptionSpec, ...]
    repeats: Repeats | None = None
    fallback_option: str | None = None  # the plan option naming fallbacks; None: none
    unmarked_choice: bool = False  # "no scopes" differs from "one scope over everything" (npu)
    kernelless: tuple[bool, ...] = ()  # op i launches no kernel (a view, a no-op cast): never a scope alone
    fuse_all_variants: tuple[str, ...] = ()  # options whose exact choice gets a fuse-all anchor of its own
    max_scopes: int | None = None  # distinct scope names the backend allows (None: no limit)

    @property
    def cuts(self) -> tuple[int, ...]:
        return self.layout.cuts

    @property
    def blocks(self) -> list[tuple[int, int]]:
        starts = [0] + [c + 1 for c in self.cuts]
        ends = list(self.cuts) + [self.n_ops - 1]
        return list(zip(starts, ends))

    def signature(self) -> dict[str, Any]:
        """What must not change when a study resumes."""
        return {
            "n_ops": self.n_ops,
            "cuts": list(self.cuts),
            "block_keys": list(self.layout.block_keys),
            "cut_keys": list(self.layout.cut_keys),
            "fallbacks": list(self.fallbacks),
            "options": {o.name: list(o.choices) for o in self.options},
            # The cap changes what parameters decode to; absent where there is none, so
            # studies of uncapped backends resume as before.
            **({"max_scopes": self.max_scopes} if self.max_scopes is not None else {}),
        }

    # -- parameters → plan ------------------------------------------------------
    def _resolve(self, key: str, own: dict[str, bool]) -> str:
        """``first.block:2`` reads ``rep.block:2`` unless the first unit has its own pattern."""
        prefix, _, rest = key.partition(".")
        if prefix in self.layout.variants and not own.get(prefix):
            return f"{SHARED}.{rest}"
        return key

    def domains(self) -> dict[str, list[Any]]:
        """Every parameter the space may suggest, with its choices (own-pattern keys included)."""
        domains: dict[str, list[Any]] = {NO_SCOPES: [False, True]} if self.unmarked_choice else {}
        domains.update({f"{p}.own": [False, True] for p in self.layout.variants})
        for key in self.layout.block_keys:
            domains.setdefault(key, [FUSE, EAGER])
        for key in self.layout.cut_keys:
            domains.setdefault(key, [False, True])
        domains.update({f"fallback:{op}": [False, True] for op in self.fallbacks})
        domains.update({o.name: list(o.sampled_choices) for o in self.options})
        return domains

    def suggest(self, trial: SuggestsParams) -> Plan:
        """Suggest the parameters in ``domains`` order; a first/last unit's own keys only
        when its ``.own`` switch is on, the shared ``rep.`` keys otherwise."""
        domains = self.domains()
        params: dict[str, Any] = {}
        own = {p: trial.suggest_categorical(f"{p}.own", domains[f"{p}.own"]) for p in self.layout.variants}
        params.update({f"{p}.own": v for p, v in own.items()})
        for key in domains:
            name = self._resolve(key, own) if not key.endswith(".own") and key != NO_SCOPES else key
            if name not in params:
                params[name] = trial.suggest_categorical(name, domains[key])  # a variant has its shared key's choices
        return self.decode(params)

    def decode(self, params: dict[str, Any]) -> Plan:
        own = {p: bool(params.get(f"{p}.own")) for p in self.layout.variants}
        fused = [params[self._resolve(k, own)] == FUSE for k in self.layout.block_keys]
        split = [bool(params[self._resolve(k, own)]) for k in self.layout.cut_keys]
        scopes: list[Scope] = []
        run_start: int | None = None
        blocks = self.blocks
        for j, (first, _) in enumerate(blocks):
            split_before = j > 0 and split[j - 1]
            if run_start is not None and (not fused[j] or split_before):
                scopes.append(Scope(run_start, blocks[j - 1][1], f"sk{len(scopes)}"))
                run_start = None
            if fused[j] and run_start is None:
                run_start = first
        if run_start is not None:
            scopes.append(Scope(run_start, blocks[-1][1], f"sk{len(scopes)}"))
        scopes = reuse_names(self._without_empty(scopes), self.max_scopes)
        if not scopes:  # nothing fused: say so explicitly, or "no scopes" would mean fuse all
            scopes = [Scope(0, self.n_ops - 1, None)]
        if self.unmarked_choice and params.get(NO_SCOPES):
            scopes = []
        options: dict[str, Any] = {o.name: params[o.name] for o in self.options}
        if self.fallback_option is not None:
            options[self.fallback_option] = sorted(op for op in self.fallbacks if params[f"fallback:{op}"])
        plan = Plan.make(scopes, options)
        self.check_options(plan)
        return plan

    def _without_empty(self, scopes: list[Scope]) -> list[Scope]:
        """Named scopes minus those whose every op launches no kernel: after tracing such a
        scope holds nothing (its begin directly meets its end), an empty fusion."""
        if not self.kernelless:
            return scopes
        kept = [s for s in scopes if not all(self.kernelless[s.first_op:s.last_op + 1])]
        return [Scope(s.first_op, s.last_op, f"sk{k}") for k, s in enumerate(kept)]

    @property
    def capabilities(self) -> Capabilities:
        """What this space searches, as the backend's capabilities (narrowed to the space)."""
        return Capabilities(options=self.options, fallback_candidates=self.fallbacks,
                            fallback_option=self.fallback_option, unmarked_plans=self.unmarked_choice,
                            fuse_all_variants=self.fuse_all_variants, max_scopes=self.max_scopes)

    def over_cap(self, plan: Plan) -> str | None:
        """Why ``plan`` has more distinct scope names than the backend allows, or None.
        A decoded plan never has; one that arrives another way may."""
        return over_cap(plan.scopes, self.max_scopes)

    def check_options(self, plan: Plan) -> None:
        """Refuse a plan whose options are not this backend's declared ones (key or value)."""
        self.capabilities.check_options(plan.option_dict)

    # -- anchors ----------------------------------------------------------------
    def params_for(self, fuse: Sequence[bool], *, split_all: bool = False, split: Sequence[bool] | None = None,
                   fallbacks: Sequence[str] = (), **options: Any) -> dict[str, Any]:
        """Parameters for a per-block fuse pattern (stamped keys take their block's value).

        ``split`` gives every cut's value (default: all ``split_all``); own patterns off.
        """
        params: dict[str, Any] = {NO_SCOPES: False} if self.unmarked_choice else {}
        params.update({f"{p}.own": False for p in self.layout.variants})
        own: dict[str, bool] = {}
        for key, f in zip(self.layout.block_keys, fuse):
            params.setdefault(self._resolve(key, own), FUSE if f else EAGER)
        cuts = split if split is not None else [split_all] * len(self.cuts)
        for key, s in zip(self.layout.cut_keys, cuts):
            params.setdefault(self._resolve(key, own), bool(s))
        params.update({f"fallback:{op}": op in fallbacks for op in self.fallbacks})
        params.update({o.name: options.get(o.name, o.default) for o in self.options})
        return params

    def unit_edges(self) -> list[bool]:
        """Per cut: True at the edges between repeated units (and the prefix/suffix), False
        inside a unit or inside the prefix/suffix: split there for one scope per unit."""
        return [not key.startswith(("rep.cut", "first.cut", "last.cut", "pre.cut", "post.cut"))
                for key in self.layout.cut_keys]

    @property
    def fuse_all_overrides(self) -> dict[str, Any]:
        """Options the fuse-all yardstick takes outside the sampled domain: the compiler's own
        whole-graph fusion, however costly to compile (the objective applies them)."""
        return {o.name: o.fuse_all_choice for o in self.options if o.fuse_all_choice is not None}

    def with_options(self, plan: Plan, overrides: dict[str, Any]) -> Plan:
        """``plan`` with some options set outside the sampled domain (still within the backend's)."""
        if not overrides:
            return plan
        changed = Plan.make(plan.scopes, {**plan.option_dict, **overrides})
        self.check_options(changed)
        return changed

    @property
    def exact_options(self) -> dict[str, Any]:
        """Every option at the value known to keep eager numerics (``Capabilities.exact_options``)."""
        return self.capabilities.exact_options

    def anchors(self) -> list[tuple[str, dict[str, Any]]]:
        """Named anchor parameter sets, without duplicates, in the order to enqueue them."""
        n = len(self.blocks)
        everything, nothing = [True] * n, [False] * n
        safe = [not unsafe for unsafe in self.unsafe_blocks]
        exact = self.exact_options
        variants = [(f"fuse-all+{name}", self.params_for(everything, **{name: exact[name]}))
                    for name in self.fuse_all_variants if name in exact]
        candidates = [
            (UNFUSED, self.params_for(nothing)),
            (FUSE_ALL, self.params_for(everything)),  # its option overrides: fuse_all_overrides
            *variants,
            ("fuse-all+fallbacks", self.params_for(everything, fallbacks=self.fallbacks)),
            ("fuse-all+fallbacks+exact-options", self.params_for(everything, fallbacks=self.fallbacks, **exact)),
            ("safe-runs", self.params_for(safe)),  # one scope per run of safe blocks
            ("safe-runs+exact-options", self.params_for(safe, **exact)),
        ]
        return unique_by_plan(self, candidates)


def unique_by_plan(space: SearchSpace, candidates: Sequence[tuple[str, dict[str, Any]]],
                   seen: set[Plan] | None = None) -> list[tuple[str, dict[str, Any]]]:
    """``candidates`` without those whose plan is already in ``seen`` (updated in place)."""
    seen = set() if seen is None else seen
    unique = []
    for name, params in candidates:
        plan = space.decode(params)
        if plan not in seen:
            seen.add(plan)
            unique.append((name, params))
    return unique


def build_space(
    targets: Sequence[str], modules: Sequence[str], boundaries: Sequence[int], capabilities: Capabilities, *,
    unsafe: frozenset[str] | None = None, max_cuts: int = MAX_CUTS, span_us: Sequence[float] | None = None,
    stamp: bool = True, kernelless: Sequence[bool] = (),
) -> SearchSpace:
    """The space for one graph and one backend: stamped over repeated units when there are any.

    ``unsafe`` (the exactness probe's answer) replaces the backend's static list of unsafe
    op types. ``span_us`` (the baseline's per-op times) lets the first / last unit have a
    pattern of their own when they take measurably longer or shorter than the others.
    """
    unsafe = capabilities.unsafe_op_types if unsafe is None else unsafe
    barriers = capabilities.unfusable_op_types
    # A backend without fallbacks gets no fallback parameters.
    fallbacks = capabilities.fallback_candidates if capabilities.fallback_option is not None else ()
    repeats = find_repeats(targets, modules) if stamp else None
    layout = None
    if repeats is not None:
        own_ends = (False, False)
        if span_us is not None and len(span_us) == len(targets):
            own_ends = differing_ends([sum(span_us[f:l + 1]) for f, l in repeats.units])
        layout = stamped_layout(targets, modules, boundaries, unsafe, repeats, own_ends, barriers)
    if layout is None:
        repeats = None
        layout = flat_layout(targets, modules, boundaries, unsafe, max_cuts, barriers)
    starts = [0] + [c + 1 for c in layout.cuts]
    ends = list(layout.cuts) + [len(targets) - 1]
    unsafe_blocks = tuple(any(t in unsafe for t in targets[s:e + 1]) for s, e in zip(starts, ends))
    return SearchSpace(len(targets), layout, unsafe_blocks, tuple(fallbacks), capabilities.options, repeats,
                       capabilities.fallback_option, capabilities.unmarked_plans, tuple(kernelless),
                       capabilities.fuse_all_variants, max_scopes=capabilities.max_scopes)
