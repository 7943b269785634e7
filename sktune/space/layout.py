"""Where the search may cut: candidate boundaries, and which parameter decides each.

Flat graphs get a handful of candidate cuts (edges of numerically unsafe ops first,
then module changes), each block and cut its own parameter. Graphs made of repeated
units (``graph/structure.py``) get one cut pattern *per unit type*: the cuts found
inside the first unit are stamped into every unit, and the same parameter decides the
same block of every unit (``rep.block:j``). Prefix and suffix (embedding, final norm)
are small flat segments of their own; the edges between segments are cuts too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sktune.graph.structure import Repeats, unit_key

MAX_CUTS = 24  # flat graphs
MAX_UNIT_CUTS = 16  # inside one repeated unit
MAX_END_CUTS = 4  # inside the prefix / suffix of a repeated graph


@dataclass(frozen=True)
class Layout:
    """Candidate cuts (cut k between op ``cuts[k]`` and the next) and the key of each decision."""

    cuts: tuple[int, ...]
    block_keys: tuple[str, ...]  # len(cuts) + 1 blocks
    cut_keys: tuple[str, ...]
    variants: tuple[str, ...] = ()  # key prefixes ("first", "last") that may differ from "rep"


def candidate_cuts(
    targets: Sequence[str], modules: Sequence[str], boundaries: Sequence[int],
    unsafe: frozenset[str], max_cuts: int = MAX_CUTS, barriers: frozenset[str] = frozenset(),
) -> list[int]:
    """Legal boundaries worth cutting at: around unsafe ops first, then module changes and
    the edges of ``barriers`` (ops the backend cannot fuse with their neighbours anyway, so
    a cut there costs little), taking turns."""
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
    barrier_edges = [i for i in sorted(legal) if (targets[i] in barriers or targets[i + 1] in barriers)
                     and i not in chosen and i not in module_changes]
    room = max_cuts - len(chosen)
    if room > 0:
        share = room if not barrier_edges else (room + 1) // 2
        picked = _evenly(module_changes, share)
        chosen += picked + _evenly(barrier_edges, room - len(picked))
    return sorted(set(chosen))


def flat_layout(targets: Sequence[str], modules: Sequence[str], boundaries: Sequence[int],
                unsafe: frozenset[str], max_cuts: int = MAX_CUTS, barriers: frozenset[str] = frozenset()) -> Layout:
    cuts = candidate_cuts(targets, modules, boundaries, unsafe, max_cuts, barriers)
    return Layout(tuple(cuts), tuple(f"block:{j}" for j in range(len(cuts) + 1)),
                  tuple(f"cut:{k}" for k in range(len(cuts))))


def stamped_layout(targets: Sequence[str], modules: Sequence[str], boundaries: Sequence[int],
                   unsafe: frozenset[str], repeats: Repeats,
                   own_ends: tuple[bool, bool] = (False, False),
                   barriers: frozenset[str] = frozenset()) -> Layout | None:
    """One cut pattern stamped across ``repeats``; None when the units cannot share one.

    ``own_ends``: the first / last unit get parameters of their own (``first.*`` /
    ``last.*``), used only when the ``first.own`` / ``last.own`` switch is on.
    """
    legal = set(boundaries)
    n = len(targets)
    units = repeats.units
    first0, last0 = units[0]
    # Cuts legal at the same offset in every unit: the pattern must mean the same everywhere.
    local_legal = [b - first0 for b in boundaries if first0 <= b < last0
                   and all(f + b - first0 in legal for f, _ in units)]
    item = unit_key(modules[first0])
    strip = len(item[1]) + 1 if item else 0  # module paths below the item: "attn.q_proj"
    local = candidate_cuts(targets[first0:last0 + 1], [m[strip:] for m in modules[first0:last0 + 1]],
                           local_legal, unsafe, MAX_UNIT_CUTS, barriers)
    edges = [f - 1 for f, _ in units if f > 0] + [last for _, last in units if last < n - 1]
    if any(e not in legal for e in edges):
        return None  # a tuple spans a unit edge: no clean stamping
    cuts: list[int] = []
    block_keys: list[str] = []
    cut_keys: list[str] = []

    def segment(first: int, last: int, prefix: str, local_cuts: Sequence[int]) -> None:
        """Blocks and inner cuts of ops first..last; ``local_cuts`` are offsets from ``first``."""
        for k, c in enumerate(local_cuts):
            cuts.append(first + c)
            cut_keys.append(f"{prefix}.cut:{k}")
        block_keys.extend(f"{prefix}.block:{j}" for j in range(len(local_cuts) + 1))

    def edge(key: str, at: int) -> None:
        cuts.append(at)
        cut_keys.append(key)

    def end_cuts(first: int, last: int) -> list[int]:
        inner = [b - first for b in boundaries if first <= b < last]
        return candidate_cuts(targets[first:last + 1], modules[first:last + 1], inner, unsafe, MAX_END_CUTS,
                              barriers)

    if first0 > 0:
        segment(0, first0 - 1, "pre", end_cuts(0, first0 - 1))
        edge("edge:in", first0 - 1)
    for u, (first, last) in enumerate(units):
        if u > 0:
            previous_last = units[u - 1][1]
            if first > previous_last + 1:  # glue ops between units: one block, shared decision
                edge("rep.edge", previous_last)
                segment(previous_last + 1, first - 1, "glue", [])
            edge("rep.edge", first - 1)
        prefix = "rep"
        if u == 0 and own_ends[0]:
            prefix = "first"
        elif u == len(units) - 1 and own_ends[1]:
            prefix = "last"
        segment(first, last, prefix, local)
    last_unit = units[-1][1]
    if last_unit < n - 1:
        edge("edge:out", last_unit)
        segment(last_unit + 1, n - 1, "post", end_cuts(last_unit + 1, n - 1))
    variants = tuple(p for p, own in zip(("first", "last"), own_ends) if own)
    return Layout(tuple(cuts), tuple(block_keys), tuple(cut_keys), variants)


def _coarse(module: str) -> str:
    """Two levels of the module path: ``layers.3.attn.q_proj`` → ``layers.3``... enough to cut at."""
    return ".".join(module.split(".")[:2])


def _evenly(items: Sequence[Any], k: int) -> list[Any]:
    if k <= 0:
        return []
    if len(items) <= k:
        return list(items)
    step = len(items) / k
    return [items[int(i * step)] for i in range(k)]
