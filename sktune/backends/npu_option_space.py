"""The SuperKernel option search space: which ``super_kernel_optimize_options`` keys a
trial varies for a graph (``search_options``, including the ``dcci_strategy`` choice built
from its op types) and how a trial's parameters become a validated options dict.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from sktune.capabilities import OptionSpec
from sktune.backends.npu_option_check import validate_options
from sktune.backends.npu_option_schema import AGGRESSIVE, FULL_KEY_SET, OPTIMIZE, SPECS, KeySet, NpuOptionError

DCCI_STRATEGY = "dcci_strategy"
_OP_TYPE = re.compile(r"[A-Za-z0-9_-]+")


def search_options(op_types: Sequence[str], key_set: KeySet = FULL_KEY_SET) -> list[OptionSpec]:
    """The SuperKernel option space for a graph holding ``op_types`` (Ascend op types),
    limited to the keys ``key_set`` accepts: the old key set has none of the searched ones,
    so there only the scopes are searched."""
    optimize = key_set.keys(OPTIMIZE)
    specs = [SPECS[(OPTIMIZE, n)] for n in ("early_start", "auto_op_parallel") if n in optimize]
    if AGGRESSIVE in optimize:
        specs += [SPECS[(OPTIMIZE, f"{AGGRESSIVE}.{n}")] for n in ("task_breaker_bypass", "value_breaker_bypass")]
    out = [OptionSpec(s.name, tuple(range(s.low or 0, (s.high or 0) + 1)), s.default, s.may_change_results,
                      s.doc, s.default) for s in specs]
    if not {"dcci_after_kernel_end", "dcci_disable_on_kernel"} <= optimize:
        return out
    seen: dict[str, None] = {}
    for t in op_types:
        if not _OP_TYPE.fullmatch(t):
            raise NpuOptionError(f"op type {t!r} cannot go into a dcci pattern: only letters, digits, '_', '-' "
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
    raise NpuOptionError(f"unknown dcci strategy {strategy!r}; choose 'safe', 'none' or 'disable:<OpType>'")


def optimize_options_from_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """Turn search parameters (names from ``search_options``) into a validated options dict."""
    out: dict[str, Any] = {}
    for name, value in params.items():
        if name == DCCI_STRATEGY:
            out.update(dcci_options_for(value))
        elif name.startswith(f"{AGGRESSIVE}."):
            out.setdefault(AGGRESSIVE, {})[name.split(".", 1)[1]] = value
        else:
            out[name] = value
    validate_options(out)
    return out


__all__ = ["DCCI_STRATEGY", "dcci_options_for", "optimize_options_from_params", "search_options"]
