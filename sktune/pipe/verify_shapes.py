"""What crosses the worker pipe for the verify-only shapes (``verify_shapes()`` in the model
file): which the model declares, and a plan verified at one of them, bitwise, without timing.

Kept beside ``protocol.py`` (the trial's requests and answers), which would pass 300 lines
with them.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any

from sktune.pipe.protocol import MalformedResult
from sktune.plan import Plan

#: How a verify-only outcome's reason begins where the shape's graph cannot run the plan (its ops differ).
NOT_VERIFIABLE = "not verifiable"


def plan_decided(outcome: Mapping[str, Any]) -> bool:
    """Whether a failed verify-only outcome (``VerifyResult.to_json``) counts against the plan:
    outputs that differ, or a shape where it cannot be checked (its graph, found at start-up
    since, or its inputs or references: no plan passes there). A worker that gave no answer
    (a crash, a time-out) says nothing of the plan: it may pass another time."""
    return bool(outcome.get("mismatches")) or str(outcome.get("reason") or "").startswith(NOT_VERIFIABLE)


def verified_since(outcome: Mapping[str, Any], changed_at: str | None) -> bool:
    """Whether a verify-only outcome (stamped ``at``, ISO seconds, when it was verified) still
    holds: verified after the study's last change (``changed_at``; None: no change)."""
    return changed_at is None or str(outcome.get("at") or "") >= changed_at


def turns_down(outcome: Mapping[str, Any], changed_at: str | None) -> bool:
    """Whether a verify-only outcome turns its plan down: the plan's own doing, found since the
    study's last change (before it, on the model as it was, it may pass now)."""
    return plan_decided(outcome) and verified_since(outcome, changed_at)


@dataclass(frozen=True)
class VerifyOnlyShapes:
    """The model's verify-only shapes (``verify_shapes()`` in the model file), in its order."""

    names: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"names": list(self.names)}

    @classmethod
    def from_json(cls, data: Any) -> "VerifyOnlyShapes":
        if not isinstance(data, dict) or not isinstance(data.get("names"), list):
            raise MalformedResult("malformed verify-only shapes from the worker")
        return cls(tuple(str(n) for n in data["names"]))


@dataclass(frozen=True)
class VerifyRequest:
    """Compile ``plan`` at the verify-only shape ``shape`` and compare it bit for bit with that
    shape's unfused run on each of its input sets. Nothing is timed."""

    plan: Plan
    shape: str

    def to_json(self) -> dict[str, Any]:
        return {"plan": self.plan.to_json(), "shape": self.shape}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "VerifyRequest":
        return cls(Plan.from_json(data["plan"]), str(data["shape"]))


@dataclass(frozen=True)
class VerifyResult:
    """One plan at one verify-only shape: how many outputs differed over its input sets, or
    (``reason``) why it could not be verified there, e.g. the shape's graph has other ops, so
    the plan cannot mean the same. Not verifiable counts as a failure, never as a pass."""

    shape: str
    mismatches: int
    reason: str | None = None
    input_shapes: list[list[Any]] | None = None  # the user inputs' [shape, dtype] there (None: not drawn)
    seconds: float = 0.0  # compile and compare (and, the first time, capture and references)
    static_compile: dict[str, Any] | None = None  # emulated only: the static compiles it stands for

    @property
    def bitwise(self) -> bool:
        return self.reason is None and self.mismatches == 0

    def to_json(self) -> dict[str, Any]:
        return {"shape": self.shape, "bitwise": self.bitwise, "mismatches": self.mismatches, "reason": self.reason,
                "input_shapes": self.input_shapes, "seconds": self.seconds,
                **({"static_compile": self.static_compile} if self.static_compile else {})}

    @classmethod
    def from_json(cls, data: Any) -> "VerifyResult":
        if not isinstance(data, dict) or "shape" not in data or "mismatches" not in data:
            raise MalformedResult("malformed verification from the worker")
        return cls(str(data["shape"]), int(data["mismatches"]), data.get("reason"), data.get("input_shapes"),
                   float(data.get("seconds") or 0.0), data.get("static_compile"))
