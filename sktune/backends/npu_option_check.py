"""Validate SuperKernel / npugraph_ex options and scope names against the schema in
``npu_option_schema``, before any compile: torch-npu checks the two SuperKernel dicts only at
the first forward (after warm-up, static compile and capture) and the CANN runtime never
fails on a bad value (it logs a warning and uses the default), so every error is raised
here, naming where the rule was read (tags listed in ``npu_option_schema``).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn

from sktune.backends.npu_option_schema import (
    DEBUG,
    FULL_KEY_SET,
    FULL_SET_MIN,
    MOVED_KEYS,
    NPUGRAPH_EX_KEYS,
    OPTIMIZE,
    SCHEMA,
    SPECS,
    KeySet,
    KeySpec,
    NpuOptionError,
)


def _fail(msg: str) -> NoReturn:
    raise NpuOptionError(msg)


def _check_int(label: str, spec: KeySpec, value: Any) -> None:
    if isinstance(value, bool):
        why = ("torch-npu lets a bool through, but the static-kernel compile writes it as the string "
               f"'{value}' ([W:static])" if spec.section != "npugraph_ex" else "npugraph_ex wants a plain int")
        _fail(f"{label} must be {spec.allowed()}, got bool {value!r}: {why}; write {int(value)}")
    if not isinstance(value, int):
        hint = " (write it without quotes)" if isinstance(value, str) and value.strip().isdigit() else ""
        _fail(f"{label} must be {spec.allowed()}, got {type(value).__name__} {value!r}{hint}")
    assert spec.low is not None and spec.high is not None
    if spec.low <= value <= spec.high:
        return
    if spec.section != "npugraph_ex" and not -(2**31) <= value < 2**31:
        why = "torch-npu cannot pass it: pybind11 fails to convert it to a C int at the first forward ([W:so])"
    elif spec.runtime_falls_back:
        why = (f"the runtime would not fail: it logs a warning and silently uses the default {spec.default}"
               " ([CANN] NumberOptOption::SetValue)" + (" after wrapping it to a large uint32" if value < 0 else ""))
    elif spec.section == "npugraph_ex":
        why = "npugraph_ex raises ValueError at compile time ([W:config] IntRangeValue)"
    else:
        why = (f"CANN accepts any uint32 here unchecked, so bits beyond the documented ones would reach "
               f"the fusion pass; only {spec.low}..{spec.high} have a meaning")
    _fail(f"{label} = {value} is outside {spec.low}..{spec.high} (default {spec.default}): {why}")


_REGEX_OPS = set("+?[](){}|^$\\")
_PATTERN_CHARS = re.compile(r"[A-Za-z0-9_.*-]+")
_MATCHER = ("the runtime matcher knows only '.' (any character) and 'x*' (zero or more x), matches the "
            "whole kernel symbol name case-sensitively, and treats everything else literally ([CANN] MatchRegex)")


def check_dcci_pattern(label: str, pattern: str) -> None:
    """Reject a kernel-name pattern the runtime would never match or would refuse.

    [CANN] ``IsValidRegexPattern``/``MatchRegex``: trimmed, non-empty, only letters, digits,
    ``_ - . *``, and no leading ``*`` (logged, then matches nothing).
    """
    fix = "; write e.g. '.*GroupedMatmul.*'"
    if not pattern.strip():
        _fail(f"{label} is an empty pattern: it matches no kernel{fix}")
    if pattern != pattern.strip():
        _fail(f"{label} = {pattern!r} has surrounding whitespace; kernel symbol names have none{fix}")
    for ch in pattern:
        if ch in _REGEX_OPS:
            _fail(f"{label} = {pattern!r} uses the regular-expression operator {ch!r}: {_MATCHER}{fix}")
        if not _PATTERN_CHARS.fullmatch(ch):
            _fail(f"{label} = {pattern!r} contains {ch!r}: the runtime accepts only letters, digits, '_', '-', "
                  f"'.', '*' in a pattern and ignores the whole pattern otherwise{fix}")
    if pattern.startswith("*"):
        _fail(f"{label} = {pattern!r} starts with '*': the runtime rejects it and it matches nothing "
              f"('*' repeats the character before it){fix}")
    if "**" in pattern:
        _fail(f"{label} = {pattern!r} contains '**': '*' must follow a character or '.'{fix}")


def dcci_pattern_matches(pattern: str, name: str) -> bool:
    """What the runtime decides for ``pattern`` on kernel symbol ``name`` ([CANN] ``MatchRegex``)."""
    p = pattern.strip()
    if not p or p[0] == "*" or not _PATTERN_CHARS.fullmatch(p):
        return False
    m, n = len(name), len(p)
    ok = [[False] * (n + 1) for _ in range(m + 1)]
    ok[0][0] = True
    for i in range(m + 1):
        for j in range(1, n + 1):
            if p[j - 1] == "*":
                ok[i][j] = j >= 2 and (ok[i][j - 2] or (i > 0 and p[j - 2] in (".", name[i - 1]) and ok[i - 1][j]))
            else:
                ok[i][j] = i > 0 and p[j - 1] in (".", name[i - 1]) and ok[i - 1][j - 1]
    return ok[m][n]


_TOKEN = re.compile(r"[A-Za-z0-9_.-]+")
_VALUE_TOKEN = re.compile(r"[A-Za-z0-9_./-]+")


def _check_extend(label: str, value: str) -> None:
    """[CANN] ``ParseAndValidateExtendOptionValue``: any flaw makes the runtime ignore the whole string."""
    why = "the runtime would log a warning and ignore the whole string"
    if len(value) > 1024:
        _fail(f"{label} is {len(value)} characters, over 1024: {why}")
    if not value.strip():
        _fail(f"{label} is empty: {why}; omit the key instead")
    seen: set[str] = set()
    for pair in (p.strip() for p in value.strip().split(":")):
        key, eq, vals = pair.partition("=")
        if not eq or not key or not vals or "=" in vals:
            _fail(f"{label}: {pair!r} is not 'key=value[,value...]' (pairs are separated by ':'): {why}")
        key = key.strip()
        if not _TOKEN.fullmatch(key) or key in seen:
            _fail(f"{label}: key {key!r} is invalid or repeated (letters, digits, '_', '-', '.'): {why}")
        seen.add(key)
        for v in (v.strip() for v in vals.split(",")):
            if not _VALUE_TOKEN.fullmatch(v):
                _fail(f"{label}: value {v!r} of {key!r} is invalid (letters, digits, '_', '-', '.', '/'): {why}")


def _check_value(label: str, spec: KeySpec, value: Any) -> None:
    if spec.kind == "int":
        _check_int(label, spec, value)
    elif spec.kind == "str":
        if not isinstance(value, str):
            _fail(f"{label} must be {spec.allowed()}, got {type(value).__name__} {value!r}")
        _check_extend(label, value)
    elif spec.kind == "list[str]":
        if isinstance(value, (str, tuple, set, frozenset)):
            fixed = [value] if isinstance(value, str) else sorted(value) if isinstance(value, (set, frozenset)) \
                else list(value)
            _fail(f"{label} must be {spec.allowed()}, got {type(value).__name__} {value!r}: torch-npu's "
                  f"_validate_options accepts only a list ([W:validate]); write {fixed!r}")
        if not isinstance(value, list):
            _fail(f"{label} must be {spec.allowed()}, got {type(value).__name__} {value!r}")
        if not value:
            _fail(f"{label} is an empty list: the runtime ignores it with a warning; omit the key instead")
        for i, pattern in enumerate(value):
            if not isinstance(pattern, str):
                _fail(f"{label}[{i}] must be a str kernel-name pattern, got {type(pattern).__name__} {pattern!r}")
            check_dcci_pattern(f"{label}[{i}]", pattern)


def _unknown(section: str, key: Any, known: Iterable[str], key_set: KeySet) -> None:
    known = sorted(known)
    if not isinstance(key, str):
        _fail(f"{section} keys must be str, got {type(key).__name__} {key!r}; known keys: {', '.join(known)}")
    if (section, key) in SPECS and key_set.name == "legacy":
        _fail(f"{section} key {key!r} is not accepted by torch-npu {key_set.version or ''} (old SuperKernel key "
              f"set: {', '.join(known)}); it needs {FULL_SET_MIN}")
    if key in MOVED_KEYS and key_set.name == "full":
        _fail(f"{section} key {key!r} is from the old key set; since torch-npu 2.11 write {MOVED_KEYS[key]}")
    other = DEBUG if section == OPTIMIZE else OPTIMIZE
    if key in key_set.keys(other):
        _fail(f"{key!r} belongs in {other}, not {section}")
    close = difflib.get_close_matches(key, known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    _fail(f"unknown {section} key {key!r}{hint} Known keys: {', '.join(known)}")


def _check_section(section: str, options: Any, key_set: KeySet) -> None:
    if options is None:
        return
    if not isinstance(options, dict):
        _fail(f"{section} must be a dict or None, got {type(options).__name__} ([W:validate])")
    for key, value in options.items():
        if key not in key_set.keys(section):
            _unknown(section, key, key_set.keys(section), key_set)
        spec = SPECS[(section, key)]
        label = f"{section}[{key!r}]"
        if spec.kind != "dict":
            _check_value(label, spec, value)
            continue
        if not isinstance(value, dict):
            _fail(f"{label} must be a dict with int keys task_breaker_bypass, value_breaker_bypass, "
                  f"event_breaker_bypass, got {type(value).__name__}")
        subs = {s.name.split(".", 1)[1]: s for s in SCHEMA if s.name.startswith(f"{key}.")}
        for sub, sub_value in value.items():
            if sub not in subs:
                close = difflib.get_close_matches(str(sub), sorted(subs), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                _fail(f"unknown key {sub!r} in {label}{hint} Known keys: {', '.join(sorted(subs))}")
            _check_value(f"{label}[{sub!r}]", subs[sub], sub_value)


def validate_options(optimize_options: dict[str, Any] | None, debug_options: dict[str, Any] | None = None,
                     *, key_set: KeySet = FULL_KEY_SET) -> None:
    """Raise ``NpuOptionError`` for anything torch-npu or CANN would reject or silently drop.

    Keys and Python types: [W:validate] (``isinstance`` checks; a tuple is rejected, a bool
    passes there but is rejected here, see ``_check_int``). Int ranges and defaults: [CANN]
    ``DEFAULT_OPTION_FACTORIES`` / ``GetValidatedUintValue`` (the wheel checks none). Patterns:
    ``check_dcci_pattern``. ``opt_extend`` / ``debug_extend``: [CANN]
    ``ParseAndValidateExtendOptionValue``. ``key_set`` from ``check_torch_npu_version``.
    """
    _check_section(OPTIMIZE, optimize_options, key_set)
    _check_section(DEBUG, debug_options, key_set)


def validate_compile_options(options: Mapping[str, Any], *, key_set: KeySet = FULL_KEY_SET) -> None:
    """Check an npugraph_ex ``options`` dict: top-level keys ([W:config]) and both SuperKernel dicts.

    Bool keys must be real bools: ``OptionValue`` accepts 0/1 but ``value`` turns 0 into the
    string ``'0'``, and ``as_dict`` tests ``if self.super_kernel_optimize.value:``, so 0
    would switch SuperKernel *on*.
    """
    known = key_set.top_level_keys
    for key, value in options.items():
        if key not in known:
            close = difflib.get_close_matches(str(key), sorted(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            where = "" if key not in NPUGRAPH_EX_KEYS else f" in torch-npu {key_set.version or 'of the old key set'}"
            _fail(f"unknown npugraph_ex option {key!r}{where}{hint} (npugraph_ex raises ValueError "
                  "'Invalid option')")
        spec = SPECS.get(("npugraph_ex", key))
        if spec is None:
            continue
        label = f"npugraph_ex option {key!r}"
        if spec.kind == "bool" and not isinstance(value, bool):
            _fail(f"{label} must be {spec.allowed()}, got {type(value).__name__} {value!r}: torch-npu stores "
                  f"0/1 as the string '0'/'1', which is truthy ([W:config] OptionValue.value)")
        elif spec.kind == "int":
            _check_int(label, spec, value)
        elif spec.kind == "dict|None" and value is not None and not isinstance(value, dict):
            _fail(f"{label} must be {spec.allowed()}, got {type(value).__name__}")
    validate_options(options.get(OPTIMIZE), options.get(DEBUG), key_set=key_set)


RESERVED_SCOPE_NAME = "default_sk_scope_name"
# Distinct scope names sktune allows (the npu backend's ``max_scopes``): CANN's cap is 64,
# 256 or 1024 by version, and 64 is the one every version honours. The one place to change it.
MAX_DISTINCT_SCOPES = 64


def validate_scope_names(names: Iterable[str | None], max_distinct: int = MAX_DISTINCT_SCOPES) -> None:
    """Reject scope names npugraph_ex or CANN would refuse, truncate or stop fusing.

    - ``None`` is allowed (never fuse) and not counted; CANN encodes it as the name
      ``default_sk_scope_name`` ([CANN] sk_node.cpp ``IsScopeKernel``), so that name is reserved.
    - Empty or blank: RuntimeError at run time ([W:scope]).
    - At most 255 bytes of UTF-8: CANN copies the name into a 256-byte buffer and writes
      the NUL at byte 255, so a longer (or long non-ASCII) name is silently truncated and
      two names sharing 255 bytes merge.
    - Distinct names: past the limit a scope is not fused (``EXCEED_SCOPE_MAX``), not an
      error. The limit depends on CANN: ``MAX_SCOPE_NUM`` is 64 in some sources, 1024 in
      others, and the aclskScopeBegin docs say 256. 64 is the only value every version
      honours, hence the default.
    """
    if max_distinct < 1:
        _fail(f"max_distinct must be >= 1, got {max_distinct}")
    distinct: dict[str, None] = {}
    for name in names:
        if name is None:
            continue
        if not isinstance(name, str):
            _fail(f"scope name must be a str or None, got {type(name).__name__} {name!r}")
        if not name.strip():
            _fail(f"scope name {name!r} is empty or blank: torch-npu raises 'scope_name should be None or a "
                  "non-empty string' at run time; use None to mean 'never fuse'")
        if "\x00" in name:
            _fail(f"scope name {name!r} contains a NUL character: the C side would cut it there")
        if name == RESERVED_SCOPE_NAME:
            _fail(f"scope name {name!r} is reserved: CANN treats it as the None scope (never fuse)")
        if len(name) > 255:
            _fail(f"scope name {name[:40]!r}... is {len(name)} characters, over 255: CANN would truncate it")
        size = len(name.encode("utf-8"))
        if size > 255:
            _fail(f"scope name {name[:40]!r}... is {len(name)} characters but {size} bytes in UTF-8 (non-ASCII), "
                  "over 255 bytes (256 with the terminating NUL): CANN would truncate it")
        distinct[name] = None
    if len(distinct) > max_distinct:
        _fail(f"{len(distinct)} distinct scope names, over the limit of {max_distinct}: past it CANN stops fusing "
              "scopes (EXCEED_SCOPE_MAX) without an error. The limit is 64, 256 or 1024 depending on the CANN "
              "version; 64 is safe everywhere. Merge scopes or raise max_distinct for your CANN")


__all__ = [
    "MAX_DISTINCT_SCOPES", "RESERVED_SCOPE_NAME", "check_dcci_pattern", "dcci_pattern_matches",
    "validate_compile_options", "validate_options", "validate_scope_names",
]
