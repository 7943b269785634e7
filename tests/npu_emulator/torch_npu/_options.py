"""npugraph_ex options: the two SuperKernel dicts (the top-level ``CompilerConfig`` is in
``_config``).

Written from docs/npu_api.md (torch-npu 2.14.0 key tables, CANN clamping). Top-level
keys are checked when the backend is called (ValueError); the SuperKernel dicts only at
the first forward (RuntimeError, keys and Python types only). Out-of-range ints are
clamped to the default with a warning, like CANN.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from typing import Any

OPTIMIZE = "super_kernel_optimize_options"
DEBUG = "super_kernel_debug_options"
AGGRESSIVE = "aggressive_opt_strategies"

INT, STR, LIST = "int", "str", "list[str]"
# key -> (kind, default, lo, hi); lo/hi None: no range
_FULL_OPT: dict[str, tuple[str, Any, int | None, int | None]] = {
    "preload_code": (INT, 1, 0, 2), "split_mode": (INT, 4, 1, 4), "stream_fusion": (INT, 1, 0, 1),
    "constant_codegen": (INT, 0, 0, 1), "auto_op_parallel": (INT, 0, 0, 1), "early_start": (INT, 0, 0, 1),
    "opt_extend": (STR, "", None, None), "dcci_before_kernel_start": (LIST, [], None, None),
    "dcci_after_kernel_end": (LIST, [], None, None), "dcci_disable_on_kernel": (LIST, [], None, None),
    "ubuf_lock_ignore_kernel": (LIST, [], None, None),
}
_AGGRESSIVE: dict[str, tuple[int, int, int]] = {
    "task_breaker_bypass": (0, 0, 1), "value_breaker_bypass": (0, 0, 3), "event_breaker_bypass": (0, 0, 1)}
_FULL_DEBUG: dict[str, tuple[str, Any, int | None, int | None]] = {
    "debug_sync_all": (INT, 0, 0, 1), "debug_op_exec_trace": (INT, 0, 0, 1),
    "debug_cross_core_sync_check": (INT, 0, 0, 1), "debug_per_op_max_core_num": (INT, 0, None, None),
    "debug_extend": (STR, "", None, None),
}
_LEGACY_OPT = {k: _FULL_OPT[k] for k in ("preload_code", "split_mode", "stream_fusion")}
_LEGACY_DEBUG: dict[str, tuple[str, Any, int | None, int | None]] = {
    "debug_sync_all": (INT, 0, 0, 1), "debug_dcci_disable_on_kernel": (LIST, [], None, None)}


def version_tuple(version: str) -> tuple[int, int, int]:
    """``"2.10.0.post2"`` -> (2, 10, 0)."""
    nums = [int(m) for m in re.findall(r"\d+", version.split("+")[0])[:3]]
    return tuple((nums + [0, 0, 0])[:3])  # type: ignore[return-value]


def post_of(version: str) -> int:
    """``"2.10.0.post4"`` -> 4; 0 without a post release."""
    m = re.search(r"post(\d+)", version)
    return int(m.group(1)) if m else 0


def is_legacy(version: str) -> bool:
    """The old key set: below 2.11.0 except 2.10.0.post4+ (the other backports are ignored:
    emulator simplification)."""
    release = version_tuple(version)
    return release < (2, 11, 0) and not (release == (2, 10, 0) and post_of(version) >= 4)


@dataclass
class SkOptions:
    """Effective SuperKernel options (defaults filled in, clamped) of one compile."""

    optimize: dict[str, Any]
    debug: dict[str, Any]
    legacy: bool = False
    clamped: list[str] = field(default_factory=list)
    given_dcci: tuple[str, ...] = ()  # dcci keys the user named (sktune's ``none`` strategy: none)

    def get(self, key: str) -> Any:
        return self.optimize.get(key, _FULL_OPT.get(key, (None, None))[1])

    def aggressive(self, key: str) -> int:
        return int(self.optimize.get(AGGRESSIVE, {}).get(key, 0))

    def dcci(self, key: str) -> list[str]:
        if self.legacy and key == "dcci_disable_on_kernel":
            return list(self.debug.get("debug_dcci_disable_on_kernel", []))
        return list(self.optimize.get(key, []))

    def debug_flag(self, key: str) -> int:
        return int(self.debug.get(key, 0))


def _fail(section: str, msg: str) -> None:
    raise RuntimeError(f"{section}: {msg}")


def _check(section: str, key: str, value: Any, spec: tuple[str, Any, int | None, int | None],
           clamped: list[str]) -> Any:
    kind, default, lo, hi = spec
    if kind == INT:
        if not isinstance(value, int):
            _fail(section, f"the value of {key!r} must be int, got {type(value).__name__}")
        if lo is not None and hi is not None and not lo <= value <= hi:
            warnings.warn(f"{section}[{key!r}]={value} is out of range [{lo}, {hi}]; using the default {default}",
                          stacklevel=3)
            clamped.append(key)
            return default
        return int(value)
    if kind == STR:
        if not isinstance(value, str):
            _fail(section, f"the value of {key!r} must be str, got {type(value).__name__}")
        return value
    if type(value) is not list or not all(isinstance(v, str) for v in value):
        _fail(section, f"the value of {key!r} must be a list of str, got {type(value).__name__}")
    return list(value)


def _section(section: str, given: Any, table: dict[str, tuple[str, Any, int | None, int | None]],
             clamped: list[str], allow_aggressive: bool) -> dict[str, Any]:
    if given is None:
        given = {}
    if not isinstance(given, dict):
        _fail(section, f"must be a dict, got {type(given).__name__}")
    out = {k: (list(spec[1]) if spec[0] == LIST else spec[1]) for k, spec in table.items()}
    if allow_aggressive:
        out[AGGRESSIVE] = {k: v[0] for k, v in _AGGRESSIVE.items()}
    for key, value in given.items():
        if allow_aggressive and key == AGGRESSIVE:
            if not isinstance(value, dict):
                _fail(section, f"the value of {AGGRESSIVE!r} must be dict, got {type(value).__name__}")
            for sub, sub_value in value.items():
                if sub not in _AGGRESSIVE:
                    _fail(section, f"unknown key {sub!r} in {AGGRESSIVE!r}")
                out[AGGRESSIVE][sub] = _check(section, f"{AGGRESSIVE}.{sub}", sub_value,
                                              (INT, *_AGGRESSIVE[sub]), clamped)
        elif key in table:
            out[key] = _check(section, key, value, table[key], clamped)
        else:
            _fail(section, f"unknown key {key!r}; valid keys: {', '.join(sorted(table))}")
    return out


def validate_sk_options(optimize: Any, debug: Any, version: str) -> SkOptions:
    """Check both dicts like ``NPUGraph._validate_options`` (RuntimeError), then clamp like CANN."""
    legacy = is_legacy(version)
    clamped: list[str] = []
    opt = _section(OPTIMIZE, optimize, _LEGACY_OPT if legacy else _FULL_OPT, clamped, not legacy)
    dbg = _section(DEBUG, debug, _LEGACY_DEBUG if legacy else _FULL_DEBUG, clamped, False)
    given = tuple(k for k in (optimize or {}) if k.startswith("dcci_"))
    given += tuple(k for k in (debug or {}) if k == "debug_dcci_disable_on_kernel")
    return SkOptions(opt, dbg, legacy, clamped, given)


def compile_pattern(pattern: str) -> re.Pattern[str] | None:
    """A dcci pattern: only ``.`` (any char) and ``x*``, whole name, case-sensitive.

    A pattern starting with ``*`` (or with ``**``) is rejected with a warning (None)."""
    if not pattern or pattern.startswith("*") or "**" in pattern:
        warnings.warn(f"dcci pattern {pattern!r} is invalid and ignored", stacklevel=2)
        return None
    return re.compile("".join(c if c in ".*" else re.escape(c) for c in pattern))


def any_match(patterns: list[str], names: tuple[str, ...]) -> bool:
    """Whether a pattern matches any of ``names`` completely."""
    for p in patterns:
        rx = compile_pattern(p)
        if rx is not None and any(rx.fullmatch(n) for n in names):
            return True
    return False
