"""CPU reference of the emulated ``npu_grouped_matmul`` (both overloads) and its output shapes.

Supported (the rest raises NotImplementedError naming the argument):
- no grouping (``group_type`` -1, or None without ``group_list``): ``y[i] = x[i] @ weight[i]``
  (+ ``bias[i]``); ``split_item`` 0/1 returns one tensor per x, 2/3 one tensor (rows concatenated);
- ``group_type`` 0 (groups along M): x (the list concatenated along rows) is cut by
  ``group_list`` (``group_list_type`` 0: cumulative ends, 1: counts; the ``.List`` overload:
  cumulative ends); group g's rows times ``weight[g]`` (+ ``bias[g]``); rows past the last
  group are 0. ``split_item`` 2/3: one [M, N] tensor.
``weight`` is a list of [K, N] tensors or one [E, K, N] tensor. Floating point only.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from torch_npu._fused_math import dtype_of, unsupported

_OUT = (torch.float16, torch.bfloat16, torch.float32)


def _weights(weight: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    if len(weight) == 1 and weight[0].dim() == 3:
        return list(weight[0].unbind(0))
    return list(weight)


def _mode(group_list: object, group_type: int | None, split_item: int | None) -> str:
    """"plain" (no grouping) or "m" (groups along M); refuse what is not emulated."""
    if group_type in (None, -1) and group_list is None:
        return "plain"
    if group_type == 0 or (group_type is None and isinstance(group_list, list)):
        if split_item not in (2, 3):
            raise NotImplementedError(f"the emulated op does not support split_item={split_item!r} with grouping "
                                      "(per-group outputs have data-dependent shapes)")
        return "m"
    raise NotImplementedError(f"the emulated op does not support group_type={group_type!r}")


def _ends(group_list: torch.Tensor | list[int], group_list_type: int | None) -> list[int]:
    values = [int(v) for v in (group_list.tolist() if isinstance(group_list, torch.Tensor) else group_list)]
    if group_list_type in (None, 0) or isinstance(group_list, list):
        return values
    if group_list_type == 1:
        ends, total = [], 0
        for v in values:
            total += v
            ends.append(total)
        return ends
    raise NotImplementedError(f"the emulated op does not support group_list_type={group_list_type!r}")


def grouped_matmul(x: Sequence[torch.Tensor], weight: Sequence[torch.Tensor], *,
                   bias: Sequence[torch.Tensor] | None = None, group_list: torch.Tensor | list[int] | None = None,
                   split_item: int | None = 0, group_type: int | None = None, group_list_type: int | None = 0,
                   act_type: int | None = 0, output_dtype: int | None = None,
                   **quant: object) -> list[torch.Tensor]:
    """The grouped matmul; ``quant`` holds the quantisation arguments, all of which must be None."""
    unsupported(**quant)
    if act_type not in (None, 0):
        raise NotImplementedError(f"the emulated op does not support act_type={act_type!r}")
    weights = _weights(weight)
    out = dtype_of(output_dtype, x[0].dtype, _OUT, "output_dtype")
    if _mode(group_list, group_type, split_item) == "plain":
        if len(x) != len(weights):
            raise RuntimeError(f"npu_grouped_matmul: {len(x)} x but {len(weights)} weights")
        ys = [(xi.float() @ w.float() + (0 if bias is None else bias[i].float())).to(out)
              for i, (xi, w) in enumerate(zip(x, weights))]
        return ys if split_item in (0, 1) else [torch.cat(ys, dim=0)]
    xs = torch.cat(list(x), dim=0) if len(x) > 1 else x[0]
    ends = _ends(group_list, group_list_type)  # type: ignore[arg-type]
    if len(ends) != len(weights):
        raise RuntimeError(f"npu_grouped_matmul: group_list has {len(ends)} groups, weight {len(weights)}")
    y = torch.zeros(int(xs.shape[0]), int(weights[0].shape[-1]), dtype=torch.float32)
    start = 0
    for g, (end, w) in enumerate(zip(ends, weights)):
        if end > start:
            y[start:end] = xs[start:end].float() @ w.float() + (0 if bias is None else bias[g].float())
        start = max(start, end)
    return [y.to(out)]


def grouped_matmul_shapes(x: Sequence[torch.Tensor], weight: Sequence[torch.Tensor], group_list: object,
                          split_item: int | None, group_type: int | None, output_dtype: int | None
                          ) -> list[torch.Tensor]:
    """Empty outputs of the right shapes and dtype (the fake impl), on x's device."""
    weights = _weights(weight)
    out = dtype_of(output_dtype, x[0].dtype, _OUT, "output_dtype")
    n = int(weights[0].shape[-1])
    if _mode(group_list, group_type, split_item) == "plain" and split_item in (0, 1):
        return [xi.new_empty((*xi.shape[:-1], int(w.shape[-1])), dtype=out) for xi, w in zip(x, weights)]
    rows = sum(int(xi.shape[0]) for xi in x)
    return [x[0].new_empty((rows, n), dtype=out)]
