"""Which ops SuperKernel fuses together, given a plan's scopes (pure, no torch).

Rules (docs/superkernel.md, "How ops are grouped when scopes overlap"); op indices are
0-based positions in the op list:

* An op's *mark set* is the set of names of the named scopes covering it. When two
  covering scopes are nested (one range strictly contains the other) the outer one is
  dropped for that op, so the inner scope wins; partial overlap keeps both names.
  Scopes with the same name are one scope (a name may open/close more than once), so
  the group key is the set of names, not the individual ranges.
* ``None`` scopes win over everything: an op they cover is never fused.
* If any named scope exists, an op with an empty mark set is not fused. If none exists
  (no scopes, or only ``None`` scopes) every op outside ``None`` ranges is one group,
  because SuperKernel then treats the whole graph as one candidate group.
* Ops with the same mark set form one group even when they are not contiguous.

Realisation decision: SuperKernel fuses *consecutive* tasks, so a backend realises a
group as one fused region per maximal contiguous run of its ops (``regions``). A group
such as {1, 2, 6, 7, 8} therefore becomes two SuperKernels, 1..2 and 6..8.
"""

from __future__ import annotations

from collections.abc import Sequence

from sktune.plan import Scope


def _validate(n_ops: int, scopes: Sequence[Scope]) -> None:
    """Fail early: a scope past the op list means the plan was made for another graph."""
    if n_ops < 0:
        raise ValueError(f"n_ops must be >= 0, got {n_ops}")
    for s in scopes:
        if s.last_op >= n_ops:
            raise ValueError(
                f"scope {s.name!r} covers ops {s.first_op}..{s.last_op}, "
                f"but the graph has only {n_ops} ops (valid indices 0..{n_ops - 1})"
            )


def _mark_set(op: int, named: Sequence[Scope]) -> frozenset[str]:
    """Names of the innermost covering scopes: a scope strictly containing another
    covering scope is dropped for this op (inner wins); partial overlaps keep both."""
    covering = [s for s in named if s.covers(op)]
    kept = [
        s for s in covering
        if not any(s.contains(t) and not t.contains(s) for t in covering)
    ]
    return frozenset(s.name for s in kept if s.name is not None)


def group_ops(n_ops: int, scopes: Sequence[Scope]) -> list[tuple[int, ...]]:
    """Fusion groups as sorted tuples of op indices, ordered by first op.

    Unfused ops (under a ``None`` scope, or unmarked while named scopes exist) appear in
    no group. Raises ``ValueError`` if a scope reaches past ``n_ops - 1``.
    """
    _validate(n_ops, scopes)
    never = {op for s in scopes if s.name is None for op in range(s.first_op, s.last_op + 1)}
    named = [s for s in scopes if s.name is not None]
    free = [op for op in range(n_ops) if op not in never]
    if not named:
        return [tuple(free)] if free else []
    by_marks: dict[frozenset[str], list[int]] = {}
    for op in free:
        marks = _mark_set(op, named)
        if marks:
            by_marks.setdefault(marks, []).append(op)
    return sorted((tuple(ops) for ops in by_marks.values()), key=lambda g: g[0])


def contiguous_runs(group: Sequence[int]) -> list[tuple[int, int]]:
    """Maximal runs ``(first, last)``, inclusive, of the (sorted, deduplicated) ops."""
    runs: list[tuple[int, int]] = []
    for op in sorted(set(group)):
        if runs and runs[-1][1] == op - 1:
            runs[-1] = (runs[-1][0], op)
        else:
            runs.append((op, op))
    return runs


def regions(n_ops: int, scopes: Sequence[Scope]) -> list[tuple[int, int]]:
    """Fused regions a backend builds: one per contiguous run of each group, sorted.

    SuperKernel fuses consecutive tasks, so a non-contiguous group is split here.
    """
    return sorted(run for g in group_ops(n_ops, scopes) for run in contiguous_runs(g))
