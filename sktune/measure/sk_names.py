"""SuperKernel task names in Ascend profiles, mapped back to their scope (docs/npu_api.md,
"Profiler"). Two forms exist:

- index first (what real profiles show): ``sk_<n>_<scope>_start_<first func>_end_<last func>``,
  e.g. ``sk_0_none_start_static_kernel_GroupedMatmul_<hash>_end_clear_ops``; the scope is
  ``none`` where no scope was named, and first/last are kernel function names;
- index last (older documentation): ``sk_<scope>_start_<FirstOp>_end_<LastOp>_<n>``.

Scope and function names may hold underscores and digits, so one name can split several
ways. Without hints the index-first reading wins, and within a form the last op is what
follows the last ``_end_`` and the scope runs to the last ``_start_`` before it. A caller that
knows the plan's scope names passes them, and a split naming one of them wins.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any
from dataclasses import dataclass

NO_SCOPE = "none"  # the scope part of a SuperKernel that no named scope asked for
_INDEX_FIRST = re.compile(r"^sk_(\d+)_(.+)$", re.S)
_INDEX_LAST = re.compile(r"^sk_(.+)_(\d+)$", re.S)


@dataclass(frozen=True)
class SuperKernelName:
    """A parsed SuperKernel name: its scope, first and last op (kernel function names in
    the real form, op types in the older one) and its index."""

    scope: str
    first_op: str
    last_op: str
    index: int


def _positions(text: str, sep: str) -> list[int]:
    """Every start of ``sep`` in ``text``, last first (overlaps included)."""
    found, at = [], text.find(sep)
    while at >= 0:
        found.append(at)
        at = text.find(sep, at + 1)
    return found[::-1]


def _splits(body: str) -> list[tuple[str, str, str]]:
    """Each (scope, first, last) with ``body == f"{scope}_start_{first}_end_{last}"``, all
    non-empty; the preferred split (last ``_end_``, then last ``_start_`` before it) first."""
    out = []
    for end in _positions(body, "_end_"):
        head, last = body[:end], body[end + len("_end_"):]
        for start in _positions(head, "_start_"):
            scope, first = head[:start], head[start + len("_start_"):]
            if scope and first and last:
                out.append((scope, first, last))
    return out


def superkernel_names(name: str) -> list[SuperKernelName]:
    """Every reading of ``name``, the preferred one first: index-first splits, then index-last."""
    name = name.strip()
    out = []
    for pattern, index_group, body_group in ((_INDEX_FIRST, 1, 2), (_INDEX_LAST, 2, 1)):
        found = pattern.match(name)
        if found:
            index = int(found.group(index_group))
            splits = _splits(found.group(body_group))
            out += [SuperKernelName(scope, first, last, index) for scope, first, last in splits]
    return out


def parse_superkernel_name(name: str, scopes: Collection[str] = ()) -> SuperKernelName | None:
    """The reading of a SuperKernel name whose scope is one of ``scopes`` if any, else the
    preferred one; None for markers and other names.

    ``sk_0_none_start_static_kernel_Add_1a2b_end_clear_ops`` -> scope ``none``, 0;
    ``sk_layer_0_start_RmsNorm_end_MatMulV2_0`` (older form) -> scope ``layer_0``, 0.
    ``sk_0_layer_start_A_end_B_1`` reads as index 0, scope ``layer`` unless ``scopes`` holds
    ``0_layer`` (then index 1, last op ``B``)."""
    readings = superkernel_names(name)
    if not readings:
        return None
    return next((r for r in readings if r.scope in scopes), readings[0])


def fused_scopes(superkernels: list[dict[str, Any]], planned: Collection[str]) -> tuple[list[str], list[str]]:
    """The scopes SuperKernel rows (``{"name", "scope"}`` as the profile summary records them)
    were built for, read with the plan's scope names as hints: (named scopes, automatic), each
    sorted. ``none`` is automatic fusion unless the plan itself names a scope ``none``."""
    scopes = set()
    for row in superkernels:
        parsed = parse_superkernel_name(str(row["name"]), planned) if row.get("name") else None
        scope = parsed.scope if parsed else row.get("scope")
        if scope:
            scopes.add(scope)
    automatic = {NO_SCOPE} & scopes - set(planned)
    return sorted(scopes - automatic), sorted(automatic)
