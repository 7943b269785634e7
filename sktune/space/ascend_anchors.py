"""The SuperKernel placements real Ascend users run, as anchor parameter sets.

Enqueued first on the npu backend, so every study says how its best plan compares with
what a user would have written by hand (see docs/superkernel.md, "Marking scopes", and
the placements of public Ascend serving stacks):

- ``no-scopes``: SuperKernel on, no markers: CANN picks the fusible ops itself;
- ``full-model``: one scope around the whole captured model, alone and with
  ``dcci_after_kernel_end=[".*"]`` (a serving stack's whole-model capture scope);
- ``scope-per-layer``: one scope per repeated layer; what lies outside the layers (the
  embedding before the first, the head after the last, any ops between two) unscoped;
- ``scope-per-mlp``: one scope around each MLP / MoE block (older serving placements).

All run with the runtime's default options except where the name says otherwise. The
first two placements also run with the options that trade nothing for speed switched on
(``+speed-options``: ``early_start``, ``auto_op_parallel``, and ``task_breaker_bypass``
where the space has it, i.e. where an AI CPU op would end a SuperKernel): one joint guess
instead of one option at a time. These come first, right after ``unfused``: they are the
likely fastest, and where one is inexact only for a missing flush at a gather, the repair
queued from its bisected mismatch (``tuning/dcci_seed.py``) runs next and the slower
placements' mismatches need no repair of their own.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from sktune.space.search_space import NO_SCOPES, UNFUSED, SearchSpace

FULL_MODEL = "full-model"  # one scope over everything: the superkernel set's fuse-everything anchor

Anchor = tuple[str, dict[str, Any]]
# A whole module-path segment: ``mlp``, ``block_sparse_moe``, ``shared_expert``, ``ffn2``; not a
# norm named after its MLP (``post_mlp_norm``, ``pre_feedforward_layernorm``).
_MLP = re.compile(r"(\w+_)?(mlp|moe|experts?|ffn|feed_?forward|dispatch|combine)\d*", re.IGNORECASE)


def _defaults(space: SearchSpace) -> dict[str, Any]:
    """Every option at the runtime's default (what a user gets without setting it)."""
    return {o.name: o.default for o in space.options}


def mlp_instance(module: str) -> str | None:
    """``layers.3.mlp`` for ``layers.3.mlp.up_proj``; None outside any MLP/MoE module."""
    parts = module.split(".")
    for k, part in enumerate(parts):
        if _MLP.fullmatch(part):
            return ".".join(parts[:k + 1])
    return None


def superkernel_anchors(space: SearchSpace, modules: Sequence[str]) -> list[Anchor]:
    """Named anchors in the order to enqueue them (the caller drops duplicate plans)."""
    n = len(space.blocks)
    defaults = _defaults(space)
    everything, nothing = [True] * n, [False] * n
    anchors: list[Anchor] = [(UNFUSED, space.params_for(nothing, **defaults))]
    if space.unmarked_choice:
        anchors.append(("no-scopes", {**space.params_for(everything, **defaults), NO_SCOPES: True}))
    anchors.append((FULL_MODEL, space.params_for(everything, **defaults)))
    if "dcci_strategy" in defaults:
        anchors.append((f"{FULL_MODEL}+dcci_after_kernel_end",
                        space.params_for(everything, **{**defaults, "dcci_strategy": "safe"})))
    if space.repeats is not None:  # the layers only: a serving stack leaves the embedding and the head unscoped
        layers = [any(a <= first and last <= b for a, b in space.repeats.units) for first, last in space.blocks]
        anchors.append(("scope-per-layer", space.params_for(layers, split=space.unit_edges(), **defaults)))
    per_mlp = _per_mlp(space, modules)
    if per_mlp is not None:
        fuse, split = per_mlp
        anchors.append(("scope-per-mlp", space.params_for(fuse, split=split, **defaults)))
    speed = {k: 1 for k in SPEED_OPTIONS if k in defaults}
    if not speed:
        return anchors
    base = dict(anchors)
    fast = [(f"{name}+speed-options", {**base[name], **speed})
            for name in ("no-scopes", f"{FULL_MODEL}+dcci_after_kernel_end") if name in base]
    return anchors[:1] + fast + anchors[1:]  # unfused, the likely fastest, then the rest


# Options that only change speed (docs/superkernel.md), plus the AI CPU bypass, which the
# backend offers only when the baseline ran an AI CPU op.
SPEED_OPTIONS = ("early_start", "auto_op_parallel", "aggressive_opt_strategies.task_breaker_bypass")


def _per_mlp(space: SearchSpace, modules: Sequence[str]) -> tuple[list[bool], list[bool]] | None:
    """Fuse the blocks made wholly of one MLP/MoE module; cut between two instances."""
    owners: list[str | None] = []
    for first, last in space.blocks:
        found = {mlp_instance(m) for m in modules[first:last + 1]}
        owners.append(found.pop() if len(found) == 1 else None)
    if not any(owners):
        return None
    fuse = [o is not None for o in owners]
    split = [a != b for a, b in zip(owners, owners[1:])]
    return fuse, split
