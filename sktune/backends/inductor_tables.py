"""Inductor's process-global tables, edited for one compile and restored after.

Fallbacks and eager-order forms both work by editing Inductor's decomposition tables
and its lowerings (passing ``compile_fx`` a decomposition table of our own would put
unpicklable ops into its cache key and turn the FX-graph cache off). Both must leave the
next compile exactly as they found it: the backend contract (``backends/_base.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def tables_restored() -> Iterator[list[dict[Any, Any]]]:
    """Yield the decomposition tables to edit; restore them and the lowering tables after."""
    from torch._inductor import decomposition, lowering

    # select_decomp_table() hands out a cached copy (fast_random_decomps): edit both.
    tables = [decomposition.decompositions, decomposition.fast_random_decomps()]
    saved_tables = [dict(t) for t in tables]
    # make_fallback touches three process-global tables; restore all of them.
    saved_lowerings = dict(lowering.lowerings)
    saved_fallbacks = set(lowering.fallbacks)
    saved_realized = set(lowering.needs_realized_inputs)
    try:
        yield tables
    finally:
        for table, saved in zip(tables, saved_tables):
            table.clear()
            table.update(saved)
        lowering.lowerings.clear()
        lowering.lowerings.update(saved_lowerings)
        lowering.fallbacks.clear()
        lowering.fallbacks.update(saved_fallbacks)
        lowering.needs_realized_inputs.clear()
        lowering.needs_realized_inputs.update(saved_realized)
