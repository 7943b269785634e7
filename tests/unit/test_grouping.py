"""Tests for sktune.graph.grouping.

All indices are 0-based: the seed's figures number ops from 1, so the seed's ``opK``
is index ``K - 1`` here (op1..op9 -> 0..8).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sktune.graph.grouping import contiguous_runs, group_ops, regions
from sktune.plan import Scope


# --- the seed's four figures (docs/superkernel.md) ----------------------------------

def test_seed_case1_partial_overlap() -> None:
    # sk1 = op1..op4, sk2 = op3..op7, 9 ops; op8, op9 unmarked -> unfused.
    scopes = [Scope(0, 3, "sk1"), Scope(2, 6, "sk2")]
    assert group_ops(9, scopes) == [(0, 1), (2, 3), (4, 5, 6)]


def test_seed_case2_nested_inner_wins() -> None:
    # sk1 = op1..op8, sk2 = op3..op5 inside it.
    scopes = [Scope(0, 7, "sk1"), Scope(2, 4, "sk2")]
    assert group_ops(8, scopes) == [(0, 1, 5, 6, 7), (2, 3, 4)]


def test_seed_case3_none_beats_named_and_unmarked_unfused() -> None:
    # None on op3..op5 inside sk1 = op1..op8; op9 unmarked -> unfused.
    scopes = [Scope(0, 7, "sk1"), Scope(2, 4, None)]
    assert group_ops(9, scopes) == [(0, 1, 5, 6, 7)]


def test_seed_case4_only_none_marks() -> None:
    # Only None on op3..op5: every other op is one group.
    assert group_ops(9, [Scope(2, 4, None)]) == [(0, 1, 5, 6, 7, 8)]


# --- further cases -------------------------------------------------------------------

def test_no_scopes_one_group_of_all() -> None:
    assert group_ops(5, []) == [(0, 1, 2, 3, 4)]
    assert group_ops(0, []) == []


def test_repeated_name_is_one_group_two_regions() -> None:
    scopes = [Scope(0, 1, "a"), Scope(4, 6, "a")]
    assert group_ops(8, scopes) == [(0, 1, 4, 5, 6)]
    assert regions(8, scopes) == [(0, 1), (4, 6)]


def test_regions_split_noncontiguous_groups() -> None:
    scopes = [Scope(0, 7, "sk1"), Scope(2, 4, "sk2")]
    assert regions(8, scopes) == [(0, 1), (2, 4), (5, 7)]


def test_contiguous_runs() -> None:
    assert contiguous_runs([]) == []
    assert contiguous_runs([3]) == [(3, 3)]
    assert contiguous_runs([0, 1, 2, 5, 7, 8]) == [(0, 2), (5, 5), (7, 8)]


def test_out_of_range_scope_raises() -> None:
    with pytest.raises(ValueError, match="only 4 ops"):
        group_ops(4, [Scope(1, 4, "a")])
    with pytest.raises(ValueError):
        regions(4, [Scope(4, 4, None)])


# --- properties ------------------------------------------------------------------------

@st.composite
def programs(draw: st.DrawFn) -> tuple[int, list[Scope]]:
    n_ops = draw(st.integers(min_value=1, max_value=40))
    ranges = st.tuples(st.integers(0, n_ops - 1), st.integers(0, n_ops - 1)).map(sorted)
    names = st.sampled_from([None, "a", "b", "c"])
    raw = draw(st.lists(st.tuples(ranges, names), max_size=6))
    return n_ops, [Scope(lo, hi, name) for (lo, hi), name in raw]


def _none_covered(scopes: list[Scope]) -> set[int]:
    return {op for s in scopes if s.name is None for op in range(s.first_op, s.last_op + 1)}


@settings(max_examples=300)
@given(programs())
def test_property_groups_well_formed(prog: tuple[int, list[Scope]]) -> None:
    n_ops, scopes = prog
    groups = group_ops(n_ops, scopes)
    seen = [op for g in groups for op in g]
    assert len(seen) == len(set(seen))  # each op in at most one group (disjoint)
    assert all(0 <= op < n_ops for op in seen)
    assert all(list(g) == sorted(g) and g for g in groups)
    assert [g[0] for g in groups] == sorted(g[0] for g in groups)
    assert not set(seen) & _none_covered(scopes)


@settings(max_examples=300)
@given(programs())
def test_property_regions_avoid_none_ops(prog: tuple[int, list[Scope]]) -> None:
    n_ops, scopes = prog
    never = _none_covered(scopes)
    regs = regions(n_ops, scopes)
    for lo, hi in regs:
        assert not any(lo <= op <= hi for op in never)
    flat = [op for lo, hi in regs for op in range(lo, hi + 1)]
    assert sorted(flat) == sorted(op for g in group_ops(n_ops, scopes) for op in g)


@settings(max_examples=300)
@given(programs())
def test_property_no_named_scopes_one_group(prog: tuple[int, list[Scope]]) -> None:
    n_ops, scopes = prog
    unnamed = [s for s in scopes if s.name is None]
    free = tuple(op for op in range(n_ops) if op not in _none_covered(unnamed))
    assert group_ops(n_ops, unnamed) == ([free] if free else [])
