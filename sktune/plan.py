"""Plan: fusion scopes + backend options. Immutable, hashable, JSON-serialisable."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

PLAN_SCHEMA_VERSION = 1


@dataclass(frozen=True, order=True)
class Scope:
    """A range of ops ``first_op..last_op`` (inclusive, indices into the op list).

    ``name is None`` marks a never-fuse range, exactly like
    ``super_kernel_scope_begin(None)``.
    """

    first_op: int
    last_op: int
    name: str | None = None

    def __post_init__(self) -> None:
        if self.first_op < 0 or self.last_op < self.first_op:
            raise ValueError(f"scope {self.name!r}: bad op range {self.first_op}..{self.last_op}")

    def covers(self, op_index: int) -> bool:
        return self.first_op <= op_index <= self.last_op

    def contains(self, other: "Scope") -> bool:
        return self.first_op <= other.first_op and other.last_op <= self.last_op

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "first_op": self.first_op, "last_op": self.last_op}


class _FrozenDict(tuple):  # type: ignore[type-arg]
    """A dict option frozen as sorted (key, value) pairs; thaws back into a dict."""


def _freeze(value: Any) -> Any:
    """Lists become tuples and dicts _FrozenDicts, so that options stay hashable."""
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return _FrozenDict(sorted((k, _freeze(v)) for k, v in value.items()))
    return value


def _thaw(value: Any) -> Any:
    if isinstance(value, _FrozenDict):
        return {k: _thaw(v) for k, v in value}
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    return value


@dataclass(frozen=True)
class Plan:
    """Scopes + backend options; the same plan always means the same configuration."""

    scopes: tuple[Scope, ...] = ()
    options: tuple[tuple[str, Any], ...] = field(default=())

    @classmethod
    def make(cls, scopes: list[Scope] | tuple[Scope, ...], options: dict[str, Any] | None = None) -> "Plan":
        frozen = tuple(sorted((k, _freeze(v)) for k, v in (options or {}).items()))
        return cls(scopes=tuple(scopes), options=frozen)

    @property
    def option_dict(self) -> dict[str, Any]:
        return {k: _thaw(v) for k, v in self.options}

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": PLAN_SCHEMA_VERSION,
            "scopes": [s.to_json() for s in self.scopes],
            "options": self.option_dict,
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Plan":
        version = data.get("schema_version", PLAN_SCHEMA_VERSION)
        if version != PLAN_SCHEMA_VERSION:
            raise ValueError(f"plan schema version {version} is not supported (expected {PLAN_SCHEMA_VERSION})")
        scopes = [Scope(first_op=int(s["first_op"]), last_op=int(s["last_op"]), name=s.get("name")) for s in data["scopes"]]
        return cls.make(scopes, data.get("options", {}))

    @classmethod
    def loads(cls, text: str) -> "Plan":
        return cls.from_json(json.loads(text))


def check_plan(plan: Plan, n_ops: int, boundaries: Sequence[int]) -> None:
    """Reject a plan that does not fit the graph: op indices out of range, or a scope
    edge at an illegal cut (e.g. between ``chunk`` and its ``getitem``s)."""
    from sktune.errors import PlanError

    legal = set(boundaries)
    for scope in plan.scopes:
        if scope.last_op >= n_ops:
            raise PlanError(f"scope {scope.name!r} ends at op {scope.last_op}, but the graph has {n_ops} ops")
        for cut in (scope.first_op - 1, scope.last_op):
            if 0 <= cut < n_ops - 1 and cut not in legal:
                raise PlanError(
                    f"scope {scope.name!r} ({scope.first_op}..{scope.last_op}) cuts between op {cut} and {cut + 1}, "
                    "which would separate a tuple-producing op from its getitems"
                )
