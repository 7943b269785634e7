"""The SuperKernel / npugraph_ex option schema: every key torch-npu accepts, its type, range
and default (``KeySpec``, ``SCHEMA``, ``TOP_LEVEL_SCHEMA``), the key set each torch-npu
release accepts (``KeySet``, read from ``torch_npu.__version__`` by
``check_torch_npu_version``), and the errors for options and versions. Pure Python, no
``torch_npu`` import.
"""

# Where each rule was read, by the tag it cites here and in npu_option_check / npu_option_space:
# - ``[W:validate]`` torch-npu 2.14.0 wheel, ``torch_npu/npu/graphs.py``,
#   ``NPUGraph._validate_options`` (keys, Python types; identical key table in 2.11.0-2.13.0).
# - ``[W:scope]`` same file, ``_super_kernel_scope_begin_impl`` / ``_end_impl``.
# - ``[W:config]`` ``torch_npu/dynamo/npugraph_ex/configs/compiler_config.py``,
#   ``CompilerConfig.__init__`` / ``as_dict`` / ``_process_kwargs_options``, and
#   ``configs/_option_base.py`` ``OptionValue`` / ``IntRangeValue``.
# - ``[W:static]`` ``_acl_concrete_graph/static_kernel.py``, ``format_super_kernel_options``.
# - ``[W:so]`` ``torch_npu/lib/libtorch_npu.so``, ``AclSkOptionHelper::processInitOption``
#   (disassembled: each int key becomes ``aclskOption{type, int32}`` via pybind11's int caster).
# - ``[CANN]`` CANN ``graph-autofusion`` ``super_kernel/src/aot/sk_options_manager.cpp``
#   (``DEFAULT_OPTION_FACTORIES``, ``NumberOptOption::SetValue``, ``GetValidatedUintValue``,
#   ``MatchRegex``, ``IsValidRegexPattern``, ``ParseAndValidateExtendOptionValue``) and
#   ``sk_node.cpp`` ``IsScopeKernel``. Ranges and defaults live here, not in the wheel.

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

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


#: The nested optimize key holding the three ``*_breaker_bypass`` keys.
AGGRESSIVE = "aggressive_opt_strategies"
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
    KeySpec(OPTIMIZE, AGGRESSIVE, "dict", None, doc="opt-in deeper fusion: the three *_breaker_bypass keys"),
    _int(OPTIMIZE, f"{AGGRESSIVE}.task_breaker_bypass", 0, 0, 1,
         "1: drop a lone non-AICore task (e.g. AICPU) from the scope instead of ending it",
         may_change_results=True),
    _int(OPTIMIZE, f"{AGGRESSIVE}.value_breaker_bypass", 0, 0, 3,
         "bit0: fuse paired ValueWait after a deadlock check; bit1: fuse unpaired ValueWait",
         may_change_results=True, runtime_falls_back=False),
    _int(OPTIMIZE, f"{AGGRESSIVE}.event_breaker_bypass", 0, 0, 1, "reserved in CANN (event wait policy)",
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
#: The old key set's npugraph_ex options (2.10.0.post2 ``_NpuGraphExConfig.ALLOWED_OPTIONS``):
#: no static-kernel cache switch there (docs/npu_api.md, "Static kernels").
LEGACY_NPUGRAPH_EX_KEYS = NPUGRAPH_EX_KEYS - {
    "disable_static_kernel_compile_cache", "capture_error_mode", "mode", "force_recapture",
    "unsafe_skip_npugraph_capture_validation", "record_statistics_debug_info",
}
#: Old-key-set keys and where the full key set moved them.
MOVED_KEYS = {"debug_dcci_disable_on_kernel": f"{OPTIMIZE}['dcci_disable_on_kernel']"}


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
    def top_level_keys(self) -> frozenset[str]:
        """The npugraph_ex options this release accepts; any other raises "Invalid option"."""
        return LEGACY_NPUGRAPH_EX_KEYS if self.name == "legacy" else NPUGRAPH_EX_KEYS

    @property
    def missing(self) -> tuple[str, ...]:
        """Keys of the full set this release lacks, as ``section.key``."""
        return tuple(f"{s}.{k}" for s in (OPTIMIZE, DEBUG) for k in sorted(FULL_KEY_SET.keys(s) - self.keys(s)))


def _top(section: str, legacy: bool) -> frozenset[str]:
    return frozenset(s.name for s in SCHEMA if s.section == section and "." not in s.name
                     and (s.legacy if legacy else s.name not in MOVED_KEYS))


FULL_KEY_SET = KeySet("full", _top(OPTIMIZE, False), _top(DEBUG, False))
LEGACY_KEY_SET = KeySet("legacy", _top(OPTIMIZE, True), _top(DEBUG, True))
#: Every KeySpec (SCHEMA and TOP_LEVEL_SCHEMA) by ``(section, name)``.
SPECS = {(s.section, s.name): s for s in SCHEMA + TOP_LEVEL_SCHEMA}
#: The releases with the full key set, in words, for error messages.
FULL_SET_MIN = "torch-npu >= 2.11.0 (or the backports 2.7.1.post8+, 2.9.0.post6+, 2.10.0.post4+)"


def parse_version(text: str) -> tuple[tuple[int, int, int], int | None]:
    """``"2.10.0.post4"`` -> ``((2, 10, 0), 4)``: the release and its post number (None if none)."""
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
    release, post = parse_version(version)
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
        f"super_kernel_optimize_options); sktune's SuperKernel search needs {FULL_SET_MIN}; "
        "the oldest with any SuperKernel are 2.7.1.post4, 2.8.0.post4, 2.9.0.post2")


__all__ = [
    "AGGRESSIVE", "DEBUG", "FULL_KEY_SET", "FULL_SET_MIN", "LEGACY_KEY_SET", "LEGACY_NPUGRAPH_EX_KEYS", "MOVED_KEYS",
    "NPUGRAPH_EX_KEYS", "OPTIMIZE", "SCHEMA", "SPECS", "TOP_LEVEL_SCHEMA", "KeySet", "KeySpec", "NpuOptionError",
    "NpuVersionError", "check_torch_npu_version", "parse_version",
]
