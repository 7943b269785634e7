"""The search space: plan ⇄ Optuna parameters, and the anchor plans enqueued first.

The op list is cut into *blocks* at a small set of candidate boundaries (module
changes and the edges of runs of numerically unsafe ops). Each block is fused or left
eager (``block:j``); adjacent fused blocks share one scope unless ``cut:k`` splits them.
Backend options and per-op-type fallbacks are parameters too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sktune.space.plan import Plan, Scope

MAX_CUTS = 24
FUSE, EAGER = "fuse", "eager"
FALLBACK_OPTION = "fallback_ops"


class SuggestsParams(Protocol):
    """The part of ``optuna.Trial`` the space needs (keeps this module Optuna-free)."""

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any: ...


@dataclass(frozen=True)
class OptionDomain:
    name: str
    choices: tuple[Any, ...]
    default: Any
    exact_choice: Any = None  # value known to keep eager numerics (None: not known)


@dataclass(frozen=True)
class SearchSpace:
    """Everything needed to turn parameters into a plan for one captured graph."""

    n_ops: int
    cuts: tuple[int, ...]  # candidate boundaries, sorted (cut between op i and i+1)
    unsafe_blocks: tuple[bool, ...]  # block j contains an op known to break bitwise equality
    fallbacks: tuple[str, ...]  # op types that may run as precompiled kernels inside regions
    options: tuple[OptionDomain, ...]

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
            "fallbacks": list(self.fallbacks),
            "options": {o.name: list(o.choices) for o in self.options},
        }

    # -- parameters → plan ------------------------------------------------------
    def suggest(self, trial: SuggestsParams) -> Plan:
        params = {}
        for j in range(len(self.blocks)):
            params[f"block:{j}"] = trial.suggest_categorical(f"block:{j}", [FUSE, EAGER])
        for k in range(len(self.cuts)):
            params[f"cut:{k}"] = trial.suggest_categorical(f"cut:{k}", [False, True])
        for op in self.fallbacks:
            params[f"fallback:{op}"] = trial.suggest_categorical(f"fallback:{op}", [False, True])
        for o in self.options:
            params[o.name] = trial.suggest_categorical(o.name, list(o.choices))
        return self.decode(params)

    def decode(self, params: dict[str, Any]) -> Plan:
        scopes: list[Scope] = []
        run_start: int | None = None
        blocks = self.blocks
        for j, (first, last) in enumerate(blocks):
            fused = params[f"block:{j}"] == FUSE
            split_before = j > 0 and bool(params[f"cut:{j - 1}"])
            if run_start is not None and (not fused or split_before):
                scopes.append(Scope(run_start, blocks[j - 1][1], f"sk{len(scopes)}"))
                run_start = None
            if fused and run_start is None:
                run_start = first
        if run_start is not None:
            scopes.append(Scope(run_start, blocks[-1][1], f"sk{len(scopes)}"))
        if not scopes:  # nothing fused: say so explicitly, or "no scopes" would mean fuse all
            scopes = [Scope(0, self.n_ops - 1, None)]
        options: dict[str, Any] = {o.name: params[o.name] for o in self.options}
        options[FALLBACK_OPTION] = sorted(op for op in self.fallbacks if params[f"fallback:{op}"])
        return Plan.make(scopes, options)

    # -- anchors ----------------------------------------------------------------
    def params_for(self, fuse: Sequence[bool], *, split_all: bool = False,
                   fallbacks: Sequence[str] = (), **options: Any) -> dict[str, Any]:
        params: dict[str, Any] = {f"block:{j}": FUSE if f else EAGER for j, f in enumerate(fuse)}
        params.update({f"cut:{k}": split_all for k in range(len(self.cuts))})
        params.update({f"fallback:{op}": op in fallbacks for op in self.fallbacks})
        params.update({o.name: options.get(o.name, o.default) for o in self.options})
        return params

    def anchors(self) -> list[tuple[str, dict[str, Any]]]:
        """Named anchor parameter sets, without duplicates, in the order to enqueue them."""
        n = len(self.blocks)
        everything, nothing = [True] * n, [False] * n
        safe = [not unsafe for unsafe in self.unsafe_blocks]
        has_emulate = any(o.name == "emulate_precision_casts" for o in self.options)
        emulate = {"emulate_precision_casts": True} if has_emulate else {}
        # Every option at the value known to keep eager numerics (e.g. no mm+add → addmm).
        exact = {o.name: o.exact_choice for o in self.options if o.exact_choice is not None}
        candidates = [
            ("unfused", self.params_for(nothing)),
            ("fuse-all", self.params_for(everything)),
            ("fuse-all+emulate_precision_casts", self.params_for(everything, **emulate)),
            ("fuse-all+fallbacks", self.params_for(everything, fallbacks=self.fallbacks)),
            ("fuse-all+fallbacks+exact-options", self.params_for(everything, fallbacks=self.fallbacks, **exact)),
            ("safe-runs", self.params_for(safe)),  # one scope per run of safe blocks
            ("safe-runs+exact-options", self.params_for(safe, **exact)),
        ]
        seen: set[Plan] = set()
        unique = []
        for name, params in candidates:
            plan = self.decode(params)
            if plan not in seen:
                seen.add(plan)
                unique.append((name, params))
        return unique


def candidate_cuts(
    targets: Sequence[str], modules: Sequence[str], boundaries: Sequence[int],
    unsafe: frozenset[str], max_cuts: int = MAX_CUTS,
) -> list[int]:
    """Legal boundaries worth cutting at: around unsafe ops first, then module changes."""
    legal = set(boundaries)
    # The two cuts that isolate a run of unsafe ops travel together: thinning keeps or
    # drops whole isolations, never half of one.
    pairs: list[tuple[int, ...]] = []
    i = 0
    while i < len(targets):
        if targets[i] in unsafe:
            j = i
            while j + 1 < len(targets) and targets[j + 1] in unsafe:
                j += 1
            pairs.append(tuple(b for b in (i - 1, j) if b in legal))
            i = j + 1
        else:
            i += 1
    pairs = _evenly(pairs, max_cuts // 2)
    chosen = sorted({b for pair in pairs for b in pair})
    module_changes = [
        i for i in sorted(legal) if _coarse(modules[i]) != _coarse(modules[i + 1]) and i not in chosen
    ]
    room = max_cuts - len(chosen)
    if room > 0:
        chosen += _evenly(module_changes, room)
    return sorted(set(chosen))


def _coarse(module: str) -> str:
    """Two levels of the module path: ``layers.3.attn.q_proj`` → ``layers.3``... enough to cut at."""
    return ".".join(module.split(".")[:2])


def _evenly(items: Sequence[Any], k: int) -> list[Any]:
    if len(items) <= k:
        return list(items)
    step = len(items) / k
    return [items[int(i * step)] for i in range(k)]


def build_space(
    targets: Sequence[str], modules: Sequence[str], boundaries: Sequence[int], unsafe: frozenset[str],
    fallbacks: Sequence[str], options: Sequence[OptionDomain], max_cuts: int = MAX_CUTS,
) -> SearchSpace:
    cuts = candidate_cuts(targets, modules, boundaries, unsafe, max_cuts)
    starts = [0] + [c + 1 for c in cuts]
    ends = list(cuts) + [len(targets) - 1]
    unsafe_blocks = tuple(any(t in unsafe for t in targets[s:e + 1]) for s, e in zip(starts, ends))
    return SearchSpace(len(targets), tuple(cuts), unsafe_blocks, tuple(fallbacks), tuple(options))
