"""SuperKernel options for npugraph_ex: schema, validation, version gate, search space.

Pure Python (no ``torch_npu`` import): everything here runs before any compile, because
torch-npu checks the two SuperKernel dicts only at the first forward, after warm-up,
static compile and capture, and the CANN runtime never fails on a bad value: it logs a
warning and uses the default. Each rule names where it was read:

- ``[W:validate]`` torch-npu 2.14.0 wheel, ``torch_npu/npu/graphs.py``,
  ``NPUGraph._validate_options`` (keys, Python types; identical key table in 2.11.0-2.13.0).
- ``[W:scope]`` same file, ``_super_kernel_scope_begin_impl`` / ``_end_impl``.
- ``[W:config]`` ``torch_npu/dynamo/npugraph_ex/configs/compiler_config.py``,
  ``CompilerConfig.__init__`` / ``as_dict`` / ``_process_kwargs_options``, and
  ``configs/_option_base.py`` ``OptionValue`` / ``IntRangeValue``.
- ``[W:static]`` ``_acl_concrete_graph/static_kernel.py``, ``format_super_kernel_options``.
- ``[W:so]`` ``torch_npu/lib/libtorch_npu.so``, ``AclSkOptionHelper::processInitOption``
  (disassembled: each int key becomes ``aclskOption{type, int32}`` via pybind11's int caster).
- ``[CANN]`` CANN ``graph-autofusion`` ``super_kernel/src/aot/sk_options_manager.cpp``
  (``DEFAULT_OPTION_FACTORIES``, ``NumberOptOption::SetValue``, ``GetValidatedUintValue``,
  ``MatchRegex``, ``IsValidRegexPattern``, ``ParseAndValidateExtendOptionValue``) and
  ``sk_node.cpp`` ``IsScopeKernel``. Ranges and defaults live here, not in the wheel.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NoReturn

from sktune.backends._base import OptionSpec
from sktune.errors import SktuneError

OPTIMIZE = "super_kernel_optimize_options"
DEBUG = "super_kernel_debug_options"
Kind = Literal["int", "bool", "str", "list[str]", "dict", "dict|None"]
UINT32_MAX = 2**32 - 1
INT64_MAX = 2**63 - 1


class NpuOptionError(SktuneError):
    """A SuperKernel / npugraph_ex option the runtime would reject or silently ignore."""


class NpuVersionError(SktuneError):
    """The installed torch-npu has no SuperKernel API, or not the one sktune drives."""


@dataclass(frozen=True)
class KeySpec:
    """One accepted option key. ``name`` is dotted for nested keys (``a.b``)."""

    section: str  # OPTIMIZE, DEBUG, or "npugraph_ex" (top level)
    name: str
    kind: Kind
    default: Any
    low: int | None = None
    high: int | None = None
    may_change_results: bool = False
    doc: str = ""
    source: str = "[W:validate] [CANN]"
    runtime_falls_back: bool = True  # out of range → CANN warns and uses the default
    legacy: bool = False  # also in the old key set (2.8.0.post5, 2.9.1, 2.10.0)

    def allowed(self) -> str:
        """The allowed values, in words, for error messages."""
        if self.kind == "int":
            return f"an int in {self.low}..{self.high} (default {self.default})"
        if self.kind == "bool":
            return f"True or False (default {self.default})"
        if self.kind == "list[str]":
            return "a list of str kernel-name patterns such as ['.*GroupedMatmul.*']"
        if self.kind == "str":
            return "a str 'key=v1,v2:key2=v3' (letters, digits, '_', '-', '.'; values also '/')"
        return "a dict" if self.kind == "dict" else "a dict or None"


def _int(section: str, name: str, default: int, low: int, high: int, doc: str, **kw: Any) -> KeySpec:
    return KeySpec(section, name, "int", default, low, high, doc=doc, **kw)


def _pat(section: str, name: str, doc: str, **kw: Any) -> KeySpec:
    return KeySpec(section, name, "list[str]", None, may_change_results=True, doc=doc, **kw)


_AGG = "aggressive_opt_strategies"
#: Every key torch-npu >= 2.11 accepts in the two SuperKernel dicts (+ the old debug key).
SCHEMA: tuple[KeySpec, ...] = (
    _int(OPTIMIZE, "preload_code", 1, 0, 2, "instruction-cache preload strategy", legacy=True),
    _int(OPTIMIZE, "split_mode", 4, 1, 4, "kernel split count", legacy=True),
    _int(OPTIMIZE, "stream_fusion", 1, 0, 1, "fuse tasks of several streams", legacy=True),
    _int(OPTIMIZE, "constant_codegen", 0, 0, 1, "generate code with constants folded in"),
    _int(OPTIMIZE, "auto_op_parallel", 0, 0, 1, "reorder multi-stream ops into parallel Cube/Vector pipes"),
    _int(OPTIMIZE, "early_start", 0, 0, 1, "honour SetNextTaskStart/WaitPreTaskEnd inside ops"),
    KeySpec(OPTIMIZE, "opt_extend", "str", None, doc="extension string, parsed by CANN"),
    _pat(OPTIMIZE, "dcci_before_kernel_start", "flush the data cache before matching ops, not inside them"),
    _pat(OPTIMIZE, "dcci_after_kernel_end", "flush the data cache after matching ops, not inside them"),
    _pat(OPTIMIZE, "dcci_disable_on_kernel", "no SuperKernel flush around matching ops (ops keep their own)"),
    _pat(OPTIMIZE, "ubuf_lock_ignore_kernel", "matching ops ignore the unified-buffer lock (mix-kernel split)"),
    KeySpec(OPTIMIZE, _AGG, "dict", None, doc="opt-in deeper fusion: the three *_breaker_bypass keys"),
    _int(OPTIMIZE, f"{_AGG}.task_breaker_bypass", 0, 0, 1,
         "1: drop a lone non-AICore task (e.g. AICPU) from the scope instead of ending it",
         may_change_results=True),
    _int(OPTIMIZE, f"{_AGG}.value_breaker_bypass", 0, 0, 3,
         "bit0: fuse paired ValueWait after a deadlock check; bit1: fuse unpaired ValueWait",
         may_change_results=True, runtime_falls_back=False),
    _int(OPTIMIZE, f"{_AGG}.event_breaker_bypass", 0, 0, 1, "reserved in CANN (event wait policy)",
         runtime_falls_back=False),
    _int(DEBUG, "debug_sync_all", 0, 0, 1, "SyncAll between every sub-op (isolates sync bugs)", legacy=True),
    _int(DEBUG, "debug_op_exec_trace", 0, 0, 1, "record per-core progress; the log names the hung op"),
    _int(DEBUG, "debug_cross_core_sync_check", 0, 0, 1, "check Cube/Vector cross-core sync counts"),
    _int(DEBUG, "debug_per_op_max_core_num", 0, 0, 1,
         "each op its own SuperKernel at full core count; implies debug_cross_core_sync_check"),
    KeySpec(DEBUG, "debug_extend", "str", None, doc="debug extension string, parsed by CANN"),
    KeySpec(DEBUG, "debug_dcci_disable_on_kernel", "list[str]", None, may_change_results=True,
            doc="old-key-set form of dcci_disable_on_kernel (2.8.0.post5, 2.9.1, 2.10.0 only)", legacy=True),
)

_BOOL = ("bool", False)
#: The npugraph_ex top-level keys sktune sets ([W:config] CompilerConfig.__init__).
TOP_LEVEL_SCHEMA: tuple[KeySpec, ...] = (
    KeySpec("npugraph_ex", "super_kernel_optimize", *_BOOL, doc="run SuperKernel after capture", source="[W:config]"),
    KeySpec("npugraph_ex", "static_kernel_compile", *_BOOL, doc="compile static kernels (op_compiler); "
            "SuperKernel wants them", source="[W:config]"),
    KeySpec("npugraph_ex", OPTIMIZE, "dict|None", None, doc="see SCHEMA", source="[W:config]"),
    KeySpec("npugraph_ex", DEBUG, "dict|None", None, doc="see SCHEMA", source="[W:config]"),
    KeySpec("npugraph_ex", "capture_limit", "int", 64, 1, INT64_MAX, doc="captures per graph before eager "
            "fallback", source="[W:config] IntRangeValue", runtime_falls_back=False),
    KeySpec("npugraph_ex", "force_eager", *_BOOL, doc="skip graph capture", source="[W:config]"),
    KeySpec("npugraph_ex", "frozen_parameter", *_BOOL, doc="treat parameters as constants", source="[W:config]"),
    KeySpec("npugraph_ex", "clone_input", "bool", True, doc="copy inputs into the graph pool", source="[W:config]"),
    KeySpec("npugraph_ex", "disable_static_kernel_compile_cache", *_BOOL, doc="recompile static kernels",
            source="[W:config]"),
    KeySpec("npugraph_ex", "deadlock_check", *_BOOL, doc="capture-time deadlock check", source="[W:config]"),
)
#: Every attribute of torch-npu 2.14.0's npugraph_ex CompilerConfig; others raise ValueError.
NPUGRAPH_EX_KEYS = frozenset({
    "force_eager", "use_graph_pool", "reuse_graph_pool_in_same_fx", "capture_limit", "clone_input",
    "clone_output", "disable_static_kernel_compile_cache", "static_kernel_compile", "frozen_parameter",
    "remove_noop_ops", "remove_cat_ops", "inplace_pass", "input_inplace_pass", "pattern_fusion_pass",
    "post_grad_custom_pre_pass", "post_grad_custom_post_pass", "dump_tensor_data", "data_dump_stage",
    "data_dump_dir", "_vllm_aclnn_static_kernel_sym_index", "_vllm_aclnn_static_kernel_sym_range",
    "super_kernel_optimize", OPTIMIZE, DEBUG, "deadlock_check", "capture_error_mode", "mode",
    "force_recapture", "unsafe_skip_npugraph_capture_validation", "record_statistics_debug_info",
})
_MOVED = {"debug_dcci_disable_on_kernel": f"{OPTIMIZE}['dcci_disable_on_kernel']"}


@dataclass(frozen=True)
class KeySet:
    """Which SuperKernel keys one torch-npu release accepts ([W:validate] of that release)."""

    name: Literal["full", "legacy"]
    optimize_keys: frozenset[str]
    debug_keys: frozenset[str]
    version: str | None = None

    def keys(self, section: str) -> frozenset[str]:
        return self.optimize_keys if section == OPTIMIZE else self.debug_keys

    @property
    def missing(self) -> tuple[str, ...]:
        """Keys of the full set this release lacks, as ``section.key``."""
        return tuple(f"{s}.{k}" for s in (OPTIMIZE, DEBUG) for k in sorted(FULL_KEY_SET.keys(s) - self.keys(s)))


def _top(section: str, legacy: bool) -> frozenset[str]:
    return frozenset(s.name for s in SCHEMA if s.section == section and "." not in s.name
                     and (s.legacy if legacy else s.name not in _MOVED))


FULL_KEY_SET = KeySet("full", _top(OPTIMIZE, False), _top(DEBUG, False))
LEGACY_KEY_SET = KeySet("legacy", _top(OPTIMIZE, True), _top(DEBUG, True))
_SPECS = {(s.section, s.name): s for s in SCHEMA + TOP_LEVEL_SCHEMA}
_FULL_MIN = "torch-npu >= 2.11.0 (or the backports 2.7.1.post8+, 2.9.0.post6+, 2.10.0.post4+)"


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
    if (section, key) in _SPECS and key_set.name == "legacy":
        _fail(f"{section} key {key!r} is not accepted by torch-npu {key_set.version or ''} (old SuperKernel key "
              f"set: {', '.join(known)}); it needs {_FULL_MIN}")
    if key in _MOVED and key_set.name == "full":
        _fail(f"{section} key {key!r} is from the old key set; since torch-npu 2.11 write {_MOVED[key]}")
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
        spec = _SPECS[(section, key)]
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
    for key, value in options.items():
        if key not in NPUGRAPH_EX_KEYS:
            close = difflib.get_close_matches(str(key), sorted(NPUGRAPH_EX_KEYS), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            _fail(f"unknown npugraph_ex option {key!r}{hint} (CompilerConfig raises ValueError 'Invalid option')")
        spec = _SPECS.get(("npugraph_ex", key))
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


def validate_scope_names(names: Iterable[str | None], max_distinct: int = 64) -> None:
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


def _parse_version(text: str) -> tuple[tuple[int, int, int], int | None]:
    try:
        from packaging.version import InvalidVersion, Version
    except ImportError:  # pragma: no cover - exercised through _parse_version_fallback
        return _parse_version_fallback(text)
    try:
        v = Version(text)
    except InvalidVersion:
        raise NpuVersionError(f"cannot read the torch-npu version {text!r}") from None
    rel = (tuple(v.release) + (0, 0, 0))[:3]
    return (rel[0], rel[1], rel[2]), v.post


def _parse_version_fallback(text: str) -> tuple[tuple[int, int, int], int | None]:
    m = re.fullmatch(r"\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:(?:a|b|rc)\d+)?(?:[._-]?post[._-]?(\d+))?(?:\+.*)?\s*",
                     text, flags=re.IGNORECASE)
    if m is None:
        raise NpuVersionError(f"cannot read the torch-npu version {text!r}")
    major, minor, micro, post = m.groups()
    return (int(major), int(minor or 0), int(micro or 0)), (int(post) if post is not None else None)


# Read from every torch-npu wheel on PyPI, 2.6.0.post5 ... 2.14.0 ([W:validate] per release):
# (release, first post with the old set, first post with the full set); None = never.
_SK_HISTORY: dict[tuple[int, int, int], tuple[int | None, int | None]] = {
    (2, 7, 1): (4, 8),
    (2, 8, 0): (4, None),
    (2, 9, 0): (2, 6),
    (2, 9, 1): (0, None),
    (2, 10, 0): (0, 4),
}


def check_torch_npu_version(version: str) -> KeySet:
    """The key set of ``torch_npu.__version__``, or ``NpuVersionError`` if it has no SuperKernel.

    Full set: >= 2.11.0, 2.10.0.post4+, 2.9.0.post6+, 2.7.1.post8+. Old set (optimize keys
    preload_code, split_mode, stream_fusion; debug keys debug_sync_all,
    debug_dcci_disable_on_kernel): 2.10.0, 2.10.0.post2, 2.9.1, 2.9.0.post2/4,
    2.8.0.post4/5, 2.7.1.post4/6. No SuperKernel API: 2.9.0, 2.8.0, 2.8.0.post2, 2.7.1,
    2.7.1.post2 and everything older. An unlisted release between 2.7.1 and 2.11.0 gets the
    old set (the subset every SuperKernel release accepts).
    """
    release, post = _parse_version(version)
    if release >= (2, 11, 0):
        return KeySet("full", FULL_KEY_SET.optimize_keys, FULL_KEY_SET.debug_keys, version)
    first_old, first_full = _SK_HISTORY.get(release, (0, None) if release > (2, 7, 1) else (None, None))
    n = post or 0
    if first_full is not None and n >= first_full:
        return KeySet("full", FULL_KEY_SET.optimize_keys, FULL_KEY_SET.debug_keys, version)
    if first_old is not None and n >= first_old:
        return KeySet("legacy", LEGACY_KEY_SET.optimize_keys, LEGACY_KEY_SET.debug_keys, version)
    raise NpuVersionError(
        f"torch-npu {version} has no SuperKernel API (no torch.npu.super_kernel_scope_begin, no "
        f"super_kernel_optimize_options); sktune's SuperKernel search needs {_FULL_MIN}; "
        "the oldest with any SuperKernel are 2.7.1.post4, 2.8.0.post4, 2.9.0.post2")


DCCI_STRATEGY = "dcci_strategy"
_OP_TYPE = re.compile(r"[A-Za-z0-9_-]+")


def search_options(op_types: Sequence[str], key_set: KeySet = FULL_KEY_SET) -> list[OptionSpec]:
    """The SuperKernel option space for a graph holding ``op_types`` (Ascend op types),
    limited to the keys ``key_set`` accepts: the old key set has none of the searched ones,
    so there only the scopes are searched."""
    optimize = key_set.keys(OPTIMIZE)
    specs = [_SPECS[(OPTIMIZE, n)] for n in ("early_start", "auto_op_parallel") if n in optimize]
    if _AGG in optimize:
        specs += [_SPECS[(OPTIMIZE, f"{_AGG}.{n}")] for n in ("task_breaker_bypass", "value_breaker_bypass")]
    out = [OptionSpec(s.name, tuple(range(s.low or 0, (s.high or 0) + 1)), s.default, s.may_change_results,
                      s.doc, s.default) for s in specs]
    if not {"dcci_after_kernel_end", "dcci_disable_on_kernel"} <= optimize:
        return out
    seen: dict[str, None] = {}
    for t in op_types:
        if not _OP_TYPE.fullmatch(t):
            _fail(f"op type {t!r} cannot go into a dcci pattern: only letters, digits, '_', '-' "
                  "(a '.' would match any character)")
        seen[t] = None
    choices = ("safe", "none", *(f"disable:{t}" for t in seen))
    # Default "none": what the runtime does when no dcci key is given. "safe" is the value
    # known to keep results (exact_choice), as the field reports say.
    out.append(OptionSpec(DCCI_STRATEGY, choices, "none", True,
                          "safe: dcci_after_kernel_end=['.*']; none: runtime default; disable:T: "
                          "dcci_disable_on_kernel=['.*T.*'] (can corrupt results silently)", "safe"))
    return out


def dcci_options_for(strategy: str) -> dict[str, list[str]]:
    """The ``super_kernel_optimize_options`` entries of one ``dcci_strategy`` choice."""
    if strategy == "safe":
        return {"dcci_after_kernel_end": [".*"]}
    if strategy == "none":
        return {}
    op_type = strategy.removeprefix("disable:")
    if strategy.startswith("disable:") and _OP_TYPE.fullmatch(op_type):
        return {"dcci_disable_on_kernel": [f".*{op_type}.*"]}
    _fail(f"unknown dcci strategy {strategy!r}; choose 'safe', 'none' or 'disable:<OpType>'")


def optimize_options_from_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """Turn search parameters (names from ``search_options``) into a validated options dict."""
    out: dict[str, Any] = {}
    for name, value in params.items():
        if name == DCCI_STRATEGY:
            out.update(dcci_options_for(value))
        elif name.startswith(f"{_AGG}."):
            out.setdefault(_AGG, {})[name.split(".", 1)[1]] = value
        else:
            out[name] = value
    validate_options(out)
    return out


__all__ = [
    "DCCI_STRATEGY", "DEBUG", "FULL_KEY_SET", "LEGACY_KEY_SET", "NPUGRAPH_EX_KEYS", "OPTIMIZE", "SCHEMA",
    "TOP_LEVEL_SCHEMA", "KeySet", "KeySpec", "NpuOptionError", "NpuVersionError",
    "check_dcci_pattern", "check_torch_npu_version", "dcci_options_for", "dcci_pattern_matches",
    "optimize_options_from_params", "search_options", "validate_compile_options", "validate_options",
    "validate_scope_names",
]
