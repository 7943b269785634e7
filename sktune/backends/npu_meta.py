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


def check_effective_options(requested: dict[str, Any], work_path: Path) -> EffectiveOptions:
    """Raise ``NpuOptionError`` when a recognised dump shows other options than requested
    (CANN clamps an out-of-range value to its default); otherwise say what was found."""
    found = read_effective_options(work_path)
    if found.used is None:
        return found
    used, differ = found.used, []
    for key, want in requested.items():
        if key not in used:  # a dump may leave out what it did not set: nothing to compare
            continue
        have = used[key]
        if isinstance(want, dict) and isinstance(have, dict):
            differ += [f"{key}.{k}: requested {v!r}, used {have.get(k)!r}" for k, v in want.items() if have.get(k) != v]
        elif have != want:
            differ.append(f"{key}: requested {want!r}, used {have!r}")
    if differ:
        raise NpuOptionError(
            "CANN ran other SuperKernel options than requested (" + "; ".join(differ) + f"; from {found.path}): "
            "an out-of-range value is clamped to its default")
    return found


__all__ = ["FAIL_REASONS", "RECOGNISED_FORMS", "EffectiveOptions", "check_effective_options", "meta_files",
           "read_effective_options"]
