"""npugraph_ex's top-level ``CompilerConfig``, as torch-npu 2.14.0 builds it (docs/npu_api.md,
"Compiling with npugraph_ex"): a fresh config per compile, every key of ``options`` set on
it, an unknown key ``ValueError("Invalid option ...")``, and each value checked by its
option class when it is set.

The option classes, as read: a choice (``OptionValue``) accepts any value equal to one of
its choices, so ``0``/``1`` pass for ``[True, False]``; its ``value`` is then ``str(v)`` for
anything but a bool or None. ``as_dict`` tests ``.value`` for ``super_kernel_optimize`` and
``disable_static_kernel_compile_cache``, so ``0`` (the string ``'0'``) turns them *on*; it
tests the option itself (``bool(0)``) for ``static_kernel_compile``, so ``0`` is off there.
``local`` below is that dict: what the compile and the first forward read.

The old key set (``is_legacy``) has another class, ``_NpuGraphExConfig``: its own allowed
keys (no static-kernel cache switch, no ``mode``) and no value checks here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

INT64_MAX = 2**63 - 1
OPTIMIZE = "super_kernel_optimize_options"
DEBUG = "super_kernel_debug_options"
_B = (True, False)

# key -> (kind, default, argument): "choice" (choices), "int" ((low, high)), "intlist",
# "dict", "callable", "dir" (an existing directory), "any" (a plain attribute)
SPEC: dict[str, tuple[str, Any, Any]] = {
    "force_eager": ("choice", False, _B), "use_graph_pool": ("any", None, None),
    "reuse_graph_pool_in_same_fx": ("choice", True, _B), "capture_limit": ("int", 64, (1, INT64_MAX)),
    "clone_input": ("choice", True, _B), "clone_output": ("choice", False, _B),
    "disable_static_kernel_compile_cache": ("choice", False, _B), "static_kernel_compile": ("choice", False, _B),
    "frozen_parameter": ("choice", False, _B), "remove_noop_ops": ("choice", True, _B),
    "remove_cat_ops": ("choice", True, _B), "inplace_pass": ("choice", True, _B),
    "input_inplace_pass": ("choice", True, _B), "pattern_fusion_pass": ("choice", True, _B),
    "post_grad_custom_pre_pass": ("callable", None, None), "post_grad_custom_post_pass": ("callable", None, None),
    "dump_tensor_data": ("choice", False, _B), "data_dump_stage": ("choice", "optimized", ("original", "optimized")),
    "data_dump_dir": ("dir", "./", None), "_vllm_aclnn_static_kernel_sym_index": ("int", 0, (0, INT64_MAX)),
    "_vllm_aclnn_static_kernel_sym_range": ("intlist", None, None), "super_kernel_optimize": ("choice", False, _B),
    OPTIMIZE: ("dict", None, None), DEBUG: ("dict", None, None), "deadlock_check": ("choice", False, _B),
    "capture_error_mode": ("choice", "global", ("global", "thread_local", "relaxed")),
    "mode": ("choice", "npugraph_ex", ("npugraph_ex",)), "force_recapture": ("choice", False, _B),
    "unsafe_skip_npugraph_capture_validation": ("choice", False, _B),
    "record_statistics_debug_info": ("choice", False, _B),
}
#: 2.10.0.post2's ``_NpuGraphExConfig.ALLOWED_OPTIONS`` (the old key set).
LEGACY_KEYS = frozenset(SPEC) - {"disable_static_kernel_compile_cache", "capture_error_mode", "mode",
                                 "force_recapture", "unsafe_skip_npugraph_capture_validation",
                                 "record_statistics_debug_info"}


def _checked(key: str, value: Any) -> Any:
    kind, _, arg = SPEC[key]
    if kind == "choice" and value not in arg:
        raise ValueError(f"Value {value!r} (type: {type(value)}) not in optional list {list(arg)!r}")
    if kind == "int":
        if not isinstance(value, int):
            raise ValueError(f"Please set integer type, but got {type(value)}")
        if not arg[0] <= value <= arg[1]:
            raise ValueError(f"Please set value in [{arg[0]}, {arg[1]}], {value} is out of range.")
    if kind == "intlist":
        if value is not None and not isinstance(value, (list, tuple)):
            raise TypeError(f"the set value must be None or list, got {type(value)}")
        if not all(isinstance(v, int) for v in value or []):
            raise TypeError("the set value must be int list")
        return [] if value is None else value
    if kind == "dict" and value is not None and not isinstance(value, dict):
        raise TypeError(f"value must be dict or None, got {type(value)}")
    if kind == "callable" and value is not None and not isinstance(value, Callable):  # type: ignore[arg-type]
        raise TypeError(f"value must be Callable or None, got {type(value)}")
    if kind == "dir" and (value is None or not os.path.isdir(value)):
        raise FileNotFoundError(f"Please set legal dir path, {value} is not found or is not a file directory!")
    return value


def _value(key: str, raw: Any) -> Any:
    """``OptionValue.value``: ``str(v)`` unless a bool or None (choices and int ranges)."""
    if SPEC[key][0] in ("choice", "int") and raw is not None and not isinstance(raw, bool):
        return str(raw)
    return raw


class CompilerConfig:
    """A fresh config per compile; ``setattr`` of an unknown key raises ValueError."""

    def __init__(self, options: dict[str, Any] | None = None, legacy: bool = False) -> None:
        object.__setattr__(self, "_legacy", legacy)
        for key, (_, default, _) in SPEC.items():
            object.__setattr__(self, key, default)
        for key, value in (options or {}).items():
            setattr(self, key, value)

    def __setattr__(self, key: str, value: Any) -> None:
        allowed = LEGACY_KEYS if self._legacy else frozenset(SPEC)
        if key not in allowed:
            raise ValueError(f"Invalid option {key!r}. Supported attributes are: {sorted(allowed)}")
        object.__setattr__(self, key, value if self._legacy else _checked(key, value))

    def as_dict(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in SPEC}

    @property
    def local(self) -> dict[str, Any]:
        """``CompilerConfig.as_dict()``'s local options, the keys the static compile reads."""
        out: dict[str, Any] = {}
        if self.static_kernel_compile:  # the option itself: bool(0) is False
            out["static_kernel_compile"] = _value("static_kernel_compile", self.static_kernel_compile)
        for key in ("disable_static_kernel_compile_cache", "super_kernel_optimize"):
            if _value(key, getattr(self, key)):  # '.value': '0' is truthy
                out[key] = _value(key, getattr(self, key))
        if "super_kernel_optimize" in out:
            for key in (OPTIMIZE, DEBUG):
                if getattr(self, key) is not None:
                    out[key] = getattr(self, key)
        return out
