"""What one doctor check reports: a frozen record with one of four statuses.

``confirmed``: what sktune (and the emulated Ascend of its tests) assumes held here.
``differs: <what was seen>``: the check ran and saw something else; a finding, not a crash.
``could not check: <why>``: the check did not get as far as an observation.
``info``: a value read and shown, compared with nothing (never called "confirmed").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

CONFIRMED = "confirmed"
DIFFERS = "differs: "
COULD_NOT = "could not check: "
INFO = "info"
#: ``kind`` as the JSON writes it: one word each, so readers need not prefix-match statuses.
JSON_KINDS = {CONFIRMED: "confirmed", "differs": "differs", "could not check": "could_not_check", INFO: "info"}


@dataclass(frozen=True)
class CheckResult:
    """One row of ``sktune doctor``: the check's name, its status and what it saw."""

    name: str
    status: str
    detail: str = ""

    @property
    def kind(self) -> str:
        """``confirmed``, ``differs``, ``could not check`` or ``info``."""
        if self.status in (CONFIRMED, INFO):
            return self.status
        return "differs" if self.status.startswith(DIFFERS) else "could not check"

    def to_json(self) -> dict[str, str]:
        return {**asdict(self), "kind": JSON_KINDS[self.kind]}


def confirmed(name: str, detail: str) -> CheckResult:
    return CheckResult(name, CONFIRMED, detail)


def differs(name: str, seen: str, detail: str = "") -> CheckResult:
    return CheckResult(name, DIFFERS + _one_line(seen), detail)


def could_not(name: str, why: str, detail: str = "") -> CheckResult:
    return CheckResult(name, COULD_NOT + _one_line(why), detail)


def info(name: str, detail: str) -> CheckResult:
    return CheckResult(name, INFO, detail)


def from_exception(name: str, exc: BaseException) -> CheckResult:
    """An exception inside a check: its row says so, and nothing else is affected."""
    text = str(exc).strip() or "(no message)"
    return could_not(name, f"{type(exc).__name__}: {text}")


def is_valid_status(status: str) -> bool:
    """One of the four forms, with a non-empty reason after the colon."""
    if status in (CONFIRMED, INFO):
        return True
    return any(status.startswith(p) and status[len(p):].strip() for p in (DIFFERS, COULD_NOT))


@dataclass(frozen=True)
class DoctorReport:
    """Every check's row, with the device they ran on and the directory holding the run's files."""

    device: str
    emulated: bool
    checks: tuple[CheckResult, ...]
    workdir: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "emulated": self.emulated, "workdir": self.workdir,
                "checks": [c.to_json() for c in self.checks]}


def _one_line(text: str, limit: int = 600) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


__all__ = ["CONFIRMED", "COULD_NOT", "DIFFERS", "INFO", "JSON_KINDS", "CheckResult", "DoctorReport", "confirmed",
           "could_not", "differs", "from_exception", "info", "is_valid_status"]
