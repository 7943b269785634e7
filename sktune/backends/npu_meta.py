"""CANN's SuperKernel metadata under one trial's work path, and the effective-options check.

Nothing in the torch-npu wheels (2.10.0.post2 to 2.14.0) names ``sk_meta``, a kernel-meta
switch or an options dump: CANN writes them. Its public SuperKernel tooling reads
``sk_meta/<pid>/model_<id>/`` (``sk_fused_nodes.log``, ``sk_fusion_fail_reasons.log``, ...),
older notes a flat ``sk_meta/``; sktune searches both (docs/npu_api.md, "Profiler").

Whether CANN dumps the options it really used, and in what form, is unconfirmed. sktune
compares only a dump in a form it recognises (``RECOGNISED_FORMS``); an absent or
unrecognised dump never fails a trial: the trial reports it, and the study warns once
(``tuning/trial_notes.py``) and says ``"effective_options_checked": false``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sktune.backends.npu_option_schema import OPTIMIZE, NpuOptionError

SK_META = "sk_meta"
OPTIONS_DUMP = "sk_options.json"
FAIL_REASONS = "sk_fusion_fail_reasons.log"
#: The dumps sktune compares, in words (the README and the study's warning quote it).
RECOGNISED_FORMS = (f"{SK_META}/{OPTIONS_DUMP} or {SK_META}/<pid>/model_<id>/{OPTIONS_DUMP} under the trial's "
                    f"work path, holding a JSON object whose {OPTIMIZE!r} is an object of option values")
Status = Literal["checked", "absent", "unrecognised"]


def meta_files(work_path: Path, name: str) -> list[Path]:
    """``name`` in ``sk_meta/`` and in every ``sk_meta/<pid>/model_<id>/``, oldest first."""
    base = work_path / SK_META
    found = [base / name, *base.glob(f"*/model_*/{name}")]
    return sorted((p for p in found if p.is_file()), key=lambda p: (p.stat().st_mtime_ns, str(p)))


@dataclass(frozen=True)
class EffectiveOptions:
    """What the work path says about the options CANN used: ``used`` only when ``checked``."""

    status: Status
    path: Path | None = None
    used: dict[str, Any] | None = None
    why: str = ""


def read_effective_options(work_path: Path) -> EffectiveOptions:
    """The newest options dump under ``work_path``, if it is in a recognised form."""
    dumps = meta_files(work_path, OPTIONS_DUMP)
    if not dumps:
        return EffectiveOptions("absent", why=f"no {OPTIONS_DUMP} under {work_path / SK_META}")
    path = dumps[-1]
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return EffectiveOptions("unrecognised", path, why=f"{path}: not JSON ({exc})")
    used = data.get(OPTIMIZE) if isinstance(data, dict) else None
    if not isinstance(used, dict) or not all(isinstance(k, str) for k in used):
        return EffectiveOptions("unrecognised", path, why=f"{path}: no {OPTIMIZE!r} object")
    return EffectiveOptions("checked", path, used)


def compare_options(requested: dict[str, Any], used: dict[str, Any]) -> tuple[list[str], list[tuple[str, bool]], int]:
    """(keys requested and not in the dump, (difference, of an int?) seen, keys compared);
    nested maps key by key."""
    missing: list[str] = []
    differ: list[tuple[str, bool]] = []
    compared = 0
    for key, want in requested.items():
        if isinstance(want, dict) and isinstance(used.get(key), dict):
            sub_missing, sub_differ, n = compare_options(want, used[key])
            missing += [f"{key}.{k}" for k in sub_missing]
            differ += [(f"{key}.{d}", is_int) for d, is_int in sub_differ]
            compared += n
        elif key not in used:
            missing.append(key)
        else:
            compared += 1
            if used[key] != want:
                clampable = isinstance(want, int) and not isinstance(want, bool)  # a bool is no range to clamp
                differ.append((f"{key}: requested {want!r}, used {used[key]!r}", clampable))
    return missing, differ, compared


def difference_cause(differ: list[tuple[str, bool]]) -> str:
    """Only an int is clamped (to its default); a pattern list that differs was rewritten or dropped."""
    ints = {is_int for _, is_int in differ}
    return ("an out-of-range int is clamped to its default" if ints == {True} else
            "a pattern list CANN rewrote or did not take up" if ints == {False} else
            "ints clamped and pattern lists rewritten")


def check_effective_options(requested: dict[str, Any], work_path: Path) -> EffectiveOptions:
    """Raise ``NpuOptionError`` when a recognised dump shows other options than requested;
    otherwise say what was found. A key the dump leaves out is not compared: a dump may list
    only what it set (``sktune doctor`` shows which keys a host's dump holds)."""
    found = read_effective_options(work_path)
    if found.used is None:
        return found
    _, differ, _ = compare_options(requested, found.used)
    if differ:
        raise NpuOptionError(
            "CANN ran other SuperKernel options than requested (" + "; ".join(text for text, _ in differ)
            + f"; from {found.path}): {difference_cause(differ)}")
    return found


__all__ = ["FAIL_REASONS", "RECOGNISED_FORMS", "EffectiveOptions", "check_effective_options", "compare_options",
           "difference_cause", "meta_files", "read_effective_options"]
