"""A plan as one space's parameters: the inverse of ``SearchSpace.decode``, checked by decoding.

A plan found in another space of the same graph (one shape's own space, whose cuts go
around that shape's inexact ops only: tuning/yardsticks.py) becomes a trial of this one
only if this space can express it: the same fused regions and the same options. Stamped
parameters tie repeated units together, so a plan whose units differ may not be: None.
"""

from __future__ import annotations

from typing import Any

from sktune.graph.grouping import regions
from sktune.plan import Plan
from sktune.space.search_space import SearchSpace


def params_of(space: SearchSpace, plan: Plan) -> dict[str, Any] | None:
    """Parameters of ``space`` that decode to ``plan``'s regions and options, or None."""
    fused = regions(space.n_ops, plan.scopes)
    region_of = {i: k for k, (first, last) in enumerate(fused) for i in range(first, last + 1)}
    blocks = space.blocks
    fuse = [all(i in region_of for i in range(first, last + 1)) for first, last in blocks]
    # Cut j lies between block j and block j + 1 (decode's order): on where two regions meet.
    split = [region_of.get(blocks[j][1]) != region_of.get(blocks[j + 1][0]) for j in range(len(blocks) - 1)]
    options = plan.option_dict
    fallbacks = options.get(space.fallback_option) or () if space.fallback_option else ()
    chosen = {o.name: options[o.name] for o in space.options if o.name in options}
    try:
        params = space.params_for(fuse, split=split, fallbacks=list(fallbacks), **chosen)
        decoded = space.decode(params)
    except (KeyError, ValueError):  # an option value this space does not offer
        return None
    same = regions(space.n_ops, decoded.scopes) == fused and decoded.option_dict == options
    return params if same else None
