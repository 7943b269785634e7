"""Plans one structural move away from a given plan, as parameter sets of the same space.

The local search (``tuning/sampler.py``) proposes these around the best exact trial
(issue 24: a best that is no starting point is usually a few moves from one). A move
changes one decision of the space: fuse or leave eager one block (grow, shrink or split a
region), set or clear one cut (split or merge a region), move a cut to the next candidate
boundary, switch one fallback, set one option to another of its values, or toggle "no
scopes". A move on a first/last unit's own key switches that unit's own pattern on,
starting from the shared one. Each neighbour is a parameter set the space decodes, so the
same parameters always give the same plan; parameter sets that decode to the start plan
or to one another are dropped (they would measure nothing new).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sktune.plan import Plan
from sktune.space.search_space import EAGER, FUSE, NO_SCOPES, SearchSpace


@dataclass(frozen=True)
class Neighbour:
    move: str  # what changed, e.g. "cut:2 on", "max_fusion_size=16"
    params: dict[str, Any]  # every key of ``space.domains()``
    plan: Plan


def full_params(space: SearchSpace, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with every key of the space: a first/last unit's own keys that were not
    suggested (its switch off) read the shared key they follow, so a move can start from them."""
    domains = space.domains()
    own = {p: bool(params.get(f"{p}.own")) for p in space.layout.variants}
    full: dict[str, Any] = {}
    for key, choices in domains.items():
        if key in params:
            full[key] = params[key]
        elif key.endswith(".own") or key == NO_SCOPES:
            full[key] = False
        else:
            full[key] = params.get(space._resolve(key, own), choices[0])
    return full


def _moves(space: SearchSpace, params: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(label, changed keys) for every one-move change of ``params`` (complete, ``full_params``)."""
    domains = space.domains()
    moves: list[tuple[str, dict[str, Any]]] = []
    if NO_SCOPES in domains:
        moves.append((f"no_scopes {'off' if params[NO_SCOPES] else 'on'}", {NO_SCOPES: not params[NO_SCOPES]}))

    def own_switch(key: str) -> dict[str, Any]:
        prefix = key.partition(".")[0]
        return {f"{prefix}.own": True} if prefix in space.layout.variants else {}

    blocks, cuts = space.layout.block_keys, space.layout.cut_keys
    for j, key in enumerate(blocks):
        if params[key] == FUSE:  # leave it eager: its region shrinks or splits in two
            moves.append((f"{key} eager", {**own_switch(key), key: EAGER}))
            continue
        # Fuse it: it joins the region on its left, on its right, both (they merge), or
        # stands alone; the cuts on either side say which (one move, not three).
        sides = [c for c in (cuts[j - 1] if j > 0 else None, cuts[j] if j < len(cuts) else None) if c]
        for values in itertools.product((False, True), repeat=len(sides)):
            change = {**own_switch(key), key: FUSE, **dict(zip(sides, values))}
            joined = "alone" if all(values) else "joined" if any(values) else "merged"
            moves.append((f"{key} fused {joined}" + "".join(f" {c} {'on' if v else 'off'}"
                                                             for c, v in zip(sides, values)), change))
    cut_keys = list(dict.fromkeys(space.layout.cut_keys))
    for key in cut_keys:
        moves.append((f"{key} {'off' if params[key] else 'on'}", {**own_switch(key), key: not params[key]}))
    for a, b in zip(cut_keys, cut_keys[1:]):  # a cut moved to the next candidate of its segment
        if a.rpartition(":")[0] == b.rpartition(":")[0] and params[a] != params[b]:
            moves.append((f"cut {a} ⇄ {b}", {**own_switch(a), a: params[b], b: params[a]}))
    for op in space.fallbacks:
        key = f"fallback:{op}"
        moves.append((f"{key} {'off' if params[key] else 'on'}", {key: not params[key]}))
    for option in space.options:
        moves += [(f"{option.name}={v}", {option.name: v}) for v in domains[option.name]
                  if v != params[option.name]]
    return moves


def neighbours(space: SearchSpace, params: dict[str, Any], exclude: Sequence[Plan] = ()) -> list[Neighbour]:
    """The distinct plans one move from ``params``'s plan, in a fixed order (the order of
    ``_moves``), without the start plan itself and without the plans in ``exclude``."""
    start = full_params(space, params)
    seen = {space.decode(start), *exclude}
    found: list[Neighbour] = []
    for move, change in _moves(space, start):
        candidate = {**start, **change}
        plan = space.decode(candidate)
        if plan not in seen:
            seen.add(plan)
            found.append(Neighbour(move, candidate, plan))
    return found
