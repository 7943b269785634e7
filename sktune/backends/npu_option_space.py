"""The SuperKernel option search space: which ``super_kernel_optimize_options`` keys a
trial varies for a graph (``search_options``, including the ``dcci_strategy`` choice built
from its op types) and how a trial's parameters become a validated options dict.

dcci strategies (docs/superkernel.md, "Options that may change results"): ``safe`` (a flush
after every sub-op), ``none`` (no dcci key), ``disable:T`` (no flush around type T) and
``only:T1+T2`` (flush only around the gather-class types named, none elsewhere).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from sktune.capabilities import OptionSpec
from sktune.backends.npu_option_check import validate_options
from sktune.backends.npu_option_schema import AGGRESSIVE, FULL_KEY_SET, OPTIMIZE, SPECS, KeySet, NpuOptionError

DCCI_STRATEGY = "dcci_strategy"
ONLY = "only:"  # flush only around these op types: ``only:GatherV2+IndexAdd``
_OP_TYPE = re.compile(r"[A-Za-z0-9_-]+")
# Gather-class Ascend op types: their kernels read indices (scalars) from global memory, so
# they are the ones a missing flush can make read stale values (docs/superkernel.md, "Options
# that may change results"). Named by family, as CANN versions add suffixes (GatherV2, V3...).
_GATHER_CLASS = re.compile(r"(Gather|Scatter|Index|Embedding|Take)[A-Za-z0-9_-]*")


def gather_class(op_types: Sequence[str]) -> list[str]:
    """The gather-class types among ``op_types``, in their order, once each."""
    return list(dict.fromkeys(t for t in op_types if _GATHER_CLASS.fullmatch(t)))


def only_choices(op_types: Sequence[str]) -> list[str]:
    """``only:`` strategies for a graph: one per gather-class type, one with all of them
    (the space stays small: one choice per type, not every subset)."""
    types = gather_class(op_types)
    choices = [f"{ONLY}{t}" for t in types]
    if len(types) > 1:
        choices.append(ONLY + "+".join(types))
    return choices


def only_types(strategy: str) -> frozenset[str] | None:
    """The op types an ``only:`` strategy flushes around; None for any other strategy."""
    return frozenset(strategy.removeprefix(ONLY).split("+")) if strategy.startswith(ONLY) else None


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
    only = only_choices(list(seen))
    choices = ("safe", "none", *(f"disable:{t}" for t in seen), *only)
    # What each choice alone keeps exact: ``only:`` its gather types, ``none`` nothing
    # (tuning/dcci_seed.py repairs a mismatch in a gather with the choice that guards it).
    guards = (("none", ()), *((c, tuple(sorted(only_types(c) or ()))) for c in only))
    # Default "none": what the runtime does when no dcci key is given. "safe" is the value
    # known to keep results (exact_choice), as the field reports say.
    out.append(OptionSpec(DCCI_STRATEGY, choices, "none", True,
                          "safe: dcci_after_kernel_end=['.*']; none: runtime default; disable:T: "
                          "dcci_disable_on_kernel=['.*T.*']; only:T1+T2: dcci_disable_on_kernel=['.*'] and "
                          "dcci_after_kernel_end=['.*T1.*', '.*T2.*'] (all but safe can corrupt results silently)",
                          "safe", guards=guards))
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
    types = strategy.removeprefix(ONLY).split("+")
    if strategy.startswith(ONLY) and all(_OP_TYPE.fullmatch(t) for t in types):
        # A type named in dcci_after_kernel_end keeps its flush although ".*" disables it:
        # docs/superkernel.md says the before/after lists win over the disable list (the
        # emulator does so; what real CANN does is unconfirmed: README, emulator guesses).
        return {"dcci_disable_on_kernel": [".*"], "dcci_after_kernel_end": [f".*{t}.*" for t in types]}
    raise NpuOptionError(f"unknown dcci strategy {strategy!r}; choose 'safe', 'none', 'disable:<OpType>' or "
                         "'only:<OpType>[+<OpType>...]'")


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


__all__ = ["DCCI_STRATEGY", "ONLY", "dcci_options_for", "gather_class", "only_choices",
           "only_types", "optimize_options_from_params", "search_options"]
