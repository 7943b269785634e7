"""Repeated blocks in the op list: N identical layers that can share one cut pattern.

A *unit* is the contiguous run of ops whose module path passes through one item of a
module container (``layers.0``, ``layers.1``...: the first numbered path segment below the
root; a root ``nn.Sequential``'s own items ``0``, ``1``... where no item lies deeper).
Units of one container whose op sequences match (same op types, same module paths below
the item) are *repeats*: a fusion pattern tuned on one fits all of them.
Pure: works on op types and module paths, no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Repeats:
    """Identical units ``(first_op, last_op)``, inclusive, in graph order."""

    container: str  # module path of the container, e.g. "layers"; "" for the model itself (a root Sequential)
    units: tuple[tuple[int, int], ...]

    @property
    def length(self) -> int:
        first, last = self.units[0]
        return last - first + 1

    def covered_ops(self) -> int:
        return self.length * len(self.units)


def unit_key(module: str) -> tuple[str, str] | None:
    """``("layers", "layers.3")`` for ``layers.3.attn.q_proj``; ``("", "2")`` for ``2.gate``
    of a root ``nn.Sequential`` (only where no item lies deeper: ``0.layers.3`` is in
    ``0.layers``); None outside any numbered item."""
    parts = module.split(".")
    for k, part in enumerate(parts):
        if part.isdigit() and k > 0:
            return ".".join(parts[:k]), ".".join(parts[:k + 1])
    return ("", parts[0]) if parts[0].isdigit() else None


def find_repeats(targets: Sequence[str], modules: Sequence[str], min_units: int = 2) -> Repeats | None:
    """The family of identical consecutive units that covers the most ops, or None.

    Units must each be one contiguous run of ops (an op of layer 3 between ops of layer 4
    would make stamping ambiguous) and match op for op, module path below the item included.
    """
    runs: list[tuple[str, str, int, int]] = []  # (container, item, first, last)
    for i, module in enumerate(modules):
        key = unit_key(module)
        if key is None:
            continue
        container, item = key
        if runs and runs[-1][1] == item and runs[-1][3] == i - 1:
            runs[-1] = (container, item, runs[-1][2], i)
        else:
            runs.append((container, item, i, i))
    items = [run[1] for run in runs]
    if len(items) != len(set(items)):
        return None  # some item's ops are not contiguous

    def signature(container: str, item: str, first: int, last: int) -> tuple[tuple[str, str], ...]:
        return tuple((targets[i], modules[i][len(item):]) for i in range(first, last + 1))

    best: Repeats | None = None
    start = 0
    while start < len(runs):
        container = runs[start][0]
        sig = signature(*runs[start])
        end = start + 1
        while end < len(runs) and runs[end][0] == container and signature(*runs[end]) == sig:
            end += 1
        family = Repeats(container, tuple((r[2], r[3]) for r in runs[start:end]))
        if len(family.units) >= min_units and (best is None or family.covered_ops() > best.covered_ops()):
            best = family
        start = end
    return best


def differing_ends(unit_times: Sequence[float], tolerance: float = 0.10) -> tuple[bool, bool]:
    """(first differs, last differs): a unit's profiled time off the median unit's by > ``tolerance``.

    Only then may the first/last unit get their own cut pattern: identical layers on
    identical shapes take the same time, and a separate pattern would only add parameters.
    """
    if len(unit_times) < 3:
        return False, False
    ordered = sorted(unit_times)
    median = ordered[len(ordered) // 2]
    if median <= 0:
        return False, False
    return (abs(unit_times[0] - median) / median > tolerance,
            abs(unit_times[-1] - median) / median > tolerance)


def unit_starts(repeats: Repeats | None, n_ops: int) -> tuple[int, ...]:
    """Where the repeated units start, and where the op after the last one starts: cut
    there, every unit of a region is the same graph (stitching, ``stitched``)."""
    units = repeats.units if repeats is not None else ()
    starts = [first for first, _ in units] + ([units[-1][1] + 1] if units else [])
    return tuple(s for s in starts if 0 < s < n_ops)


def stitched(spans: Sequence[tuple[int, int]], starts: Sequence[int], legal: set[int]) -> list[tuple[int, int]]:
    """``spans`` cut before every unit start strictly inside one, where the cut is legal
    (``legal``: the graph's boundaries, a cut after op ``i`` for each ``i``). The one
    stitching rule: the backend compiles by it and the refinement asks it (via
    ``Backend.option_changes_plan``) whether stitching changes a plan."""
    out = []
    for first, last in spans:
        for start in starts:
            if first < start <= last and start - 1 in legal:
                out.append((first, start - 1))
                first = start
        out.append((first, last))
    return out
