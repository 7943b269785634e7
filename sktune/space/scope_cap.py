"""The backend's cap on distinct scope names (``Capabilities.max_scopes``), kept by the space.

Past CANN's cap (64, 256 or 1024 names by version) extra scopes are silently not fused
(docs/superkernel.md, "Marking scopes"). What counts is the number of distinct *names*:
markers with one name are one scope however often it opens, and ``None`` (never fuse) is
not a name. A decoded plan over the cap therefore reuses names instead of dropping cuts:
with rule 5 of the grouping (equal mark sets form one group, realised as one SuperKernel
per contiguous run), two disjoint scopes that share a name fuse exactly what two names
would, as long as other fused ops lie between them.
"""

from __future__ import annotations

from collections.abc import Sequence

from sktune.plan import Scope


def distinct_scopes(scopes: Sequence[Scope]) -> int:
    """How many distinct scope names ``scopes`` use (``None`` ranges do not count)."""
    return len({s.name for s in scopes if s.name is not None})


def over_cap(scopes: Sequence[Scope], max_scopes: int | None) -> str | None:
    """Why a plan's scopes exceed the backend's cap, or None when they do not."""
    n = distinct_scopes(scopes)
    if max_scopes is None or n <= max_scopes:
        return None
    return (f"{n} distinct scope names, over the backend's limit of {max_scopes} "
            "(past it CANN silently leaves the extra scopes unfused)")


def reuse_names(scopes: Sequence[Scope], max_scopes: int | None) -> list[Scope]:
    """Decoded scopes renamed so that at most ``max_scopes`` names are distinct.

    ``scopes``: disjoint named ranges in op order, each holding a kernel (what
    ``SearchSpace.decode`` makes). Within the cap they are returned unchanged, so plans
    that fit keep their names. Over it, the k-th scope is named ``sk{k % max_scopes}``:
    two scopes sharing a name have ``max_scopes - 1 >= 1`` other scopes between them, so
    their runs never touch and every region stays what it was.
    """
    if over_cap(scopes, max_scopes) is None:
        return list(scopes)
    assert max_scopes is not None and max_scopes >= 2  # Capabilities refuses less
    renamed, k = [], 0
    for s in scopes:
        if s.name is not None:
            s, k = Scope(s.first_op, s.last_op, f"sk{k % max_scopes}"), k + 1
        renamed.append(s)
    return renamed
