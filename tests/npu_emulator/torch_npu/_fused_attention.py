"""CPU reference of the emulated attention ops: plain scaled-dot-product attention.

``npu_fusion_attention``, ``npu_incre_flash_attention`` and ``npu_fused_infer_attention_score``
all reduce to ``softmax(q @ kᵀ * scale, masked) @ v`` in float32, per head, with grouped
key/value heads. Layouts: BSH, BSND, BNSD (and SBH for fusion attention). ``atten_mask``
is Ascend's: True (or 1) means *masked out*, the opposite of torch's SDPA; it broadcasts
to [B, N, Sq, Skv] from [Sq, Skv], [B, Sq, Skv] or [B, 1|N, Sq, Skv]. ``sparse_mode`` 2 /
3 are the causal masks aligned top-left / bottom-right (the mask argument's contents are
then not read, as the real op reads only a compressed 2048² triangle). A row with every
key masked gives 0. Anything else raises NotImplementedError naming the argument.
"""

from __future__ import annotations

from typing import Any

import torch

from torch_npu._fused_math import unsupported

_TOKENS_MAX = 2147483647
LAYOUTS = ("BSH", "BSND", "BNSD", "SBH")


def to_bnsd(t: torch.Tensor, layout: str, heads: int) -> torch.Tensor:
    """A q/k/v tensor in ``layout`` as [B, N, S, D]."""
    if layout == "BNSD":
        return t
    if layout == "BSND":
        return t.transpose(1, 2)
    if layout == "BSH":
        b, s, h = t.shape
        return t.reshape(b, s, heads, h // heads).transpose(1, 2)
    if layout == "SBH":
        s, b, h = t.shape
        return t.reshape(s, b, heads, h // heads).permute(1, 2, 0, 3)
    raise NotImplementedError(f"the emulated op does not support input_layout={layout!r}")


def from_bnsd(t: torch.Tensor, layout: str) -> torch.Tensor:
    """[B, N, S, D] back into ``layout``."""
    if layout == "BNSD":
        return t
    if layout == "BSND":
        return t.transpose(1, 2)
    b, n, s, d = t.shape
    if layout == "BSH":
        return t.transpose(1, 2).reshape(b, s, n * d)
    return t.permute(2, 0, 1, 3).reshape(s, b, n * d)  # SBH


def kv_heads(key: torch.Tensor, layout: str, q_heads: int, head_dim: int, given: int = 0) -> int:
    """The number of key/value heads: ``given`` when set, else read from key's shape."""
    if given:
        return given
    if layout in ("BSH", "SBH"):
        return int(key.shape[-1]) // head_dim if head_dim else q_heads
    return int(key.shape[2] if layout == "BSND" else key.shape[1])


def head_dim(query: torch.Tensor, layout: str, heads: int) -> int:
    return int(query.shape[-1]) // heads if layout in ("BSH", "SBH") else int(query.shape[-1])


def mask_from(atten_mask: torch.Tensor | None, sparse_mode: int, sq: int, skv: int) -> torch.Tensor | None:
    """The masked-out positions, broadcastable to [B, N, Sq, Skv] (None: nothing masked)."""
    if sparse_mode in (2, 3):
        shift = 0 if sparse_mode == 2 else skv - sq
        rows, cols = torch.arange(sq).unsqueeze(1), torch.arange(skv).unsqueeze(0)
        return cols > rows + shift
    if sparse_mode not in (0, 1):
        raise NotImplementedError(f"the emulated op does not support sparse_mode={sparse_mode!r}")
    if atten_mask is None:
        return None
    mask = atten_mask.bool()
    return mask.unsqueeze(1) if mask.dim() == 3 else mask


def length_mask(lengths: Any, batch: int, skv: int) -> torch.Tensor:
    """[B, 1, 1, Skv]: key positions at or past each batch row's actual length."""
    values = [int(v) for v in lengths]
    values = values * batch if len(values) == 1 else values
    return torch.arange(skv).view(1, 1, 1, skv) >= torch.tensor(values).view(batch, 1, 1, 1)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
           mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(out [B,N,Sq,Dv] float32, row max, row sum of exp) for BNSD q and grouped-head k, v."""
    group = int(q.shape[1]) // int(k.shape[1])
    kf = k.float().repeat_interleave(group, dim=1)
    vf = v.float().repeat_interleave(group, dim=1)
    scores = (q.float() @ kf.transpose(-1, -2)) * scale
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    row_max = scores.amax(dim=-1, keepdim=True)
    row_max = torch.where(torch.isinf(row_max), torch.zeros_like(row_max), row_max)
    e = torch.exp(scores - row_max)
    row_sum = e.sum(dim=-1, keepdim=True)
    p = e / torch.where(row_sum > 0, row_sum, torch.ones_like(row_sum))
    return p @ vf, row_max, row_sum


def _tokens_default(**tokens: int) -> None:
    for name, value in tokens.items():
        if value != _TOKENS_MAX:
            raise NotImplementedError(f"the emulated op does not support {name}={value!r}")


def fusion_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, head_num: int,
                     input_layout: str, pse: torch.Tensor | None = None, padding_mask: torch.Tensor | None = None,
                     atten_mask: torch.Tensor | None = None, scale: float = 1.0, keep_prob: float = 1.0,
                     pre_tockens: int = _TOKENS_MAX, next_tockens: int = _TOKENS_MAX, inner_precise: int = 0,
                     prefix: list[int] | None = None, actual_seq_qlen: list[int] | None = None,
                     actual_seq_kvlen: list[int] | None = None, sparse_mode: int = 0,
                     gen_mask_parallel: bool = True, sync: bool = False, softmax_layout: str = "",
                     sink: torch.Tensor | None = None, dropout_mask: torch.Tensor | None = None, seed: int = 0,
                     offset: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int, int, int]:
    """(attention_out, softmax_max, softmax_sum, softmax_out, seed, offset, numels):
    softmax_max/sum are [B, N, Sq, 8] float32 (the row value repeated, as the real op
    stores it), softmax_out is empty; seed, offset and numels are 0 (no dropout)."""
    unsupported(pse=pse, padding_mask=padding_mask, prefix=prefix, actual_seq_qlen=actual_seq_qlen,
                actual_seq_kvlen=actual_seq_kvlen, sink=sink, dropout_mask=dropout_mask)
    if keep_prob != 1.0:
        raise NotImplementedError(f"the emulated op does not support keep_prob={keep_prob!r} (dropout)")
    if softmax_layout:
        raise NotImplementedError(f"the emulated op does not support softmax_layout={softmax_layout!r}")
    if sparse_mode == 0:
        _tokens_default(pre_tockens=pre_tockens, next_tockens=next_tockens)
    d = head_dim(query, input_layout, head_num)
    q = to_bnsd(query, input_layout, head_num)
    n_kv = kv_heads(key, input_layout, head_num, d)
    k, v = to_bnsd(key, input_layout, n_kv), to_bnsd(value, input_layout, n_kv)
    out, row_max, row_sum = attend(q, k, v, scale, mask_from(atten_mask, sparse_mode, q.shape[2], k.shape[2]))
    stats = (row_max.expand(*row_max.shape[:-1], 8).contiguous(), row_sum.expand(*row_sum.shape[:-1], 8).contiguous())
    return (from_bnsd(out, input_layout).to(query.dtype), *stats, query.new_empty([0]), 0, 0, 0)


_IFA_UNSUPPORTED = ("padding_mask", "pse_shift", "antiquant_scale", "antiquant_offset", "block_table",
                    "dequant_scale1", "quant_scale1", "dequant_scale2", "quant_scale2", "quant_offset2",
                    "kv_padding_size")


def incre_flash_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *,
                          atten_mask: torch.Tensor | None = None, actual_seq_lengths: list[int] | None = None,
                          num_heads: int = 1, scale_value: float = 1.0, input_layout: str = "BSH",
                          num_key_value_heads: int = 0, block_size: int = 0, inner_precise: int = 1,
                          **rest: Any) -> torch.Tensor:
    """Decode attention of Sq query tokens over the KV cache in key/value; ``actual_seq_lengths``
    masks each batch row's cache past its length; ``atten_mask`` [B, Skv] / [B, 1, Skv] /
    [B, 1, 1, Skv] masks positions (True: masked)."""
    unsupported(**{name: rest.get(name) for name in _IFA_UNSUPPORTED})
    if input_layout == "SBH":
        raise NotImplementedError(f"the emulated op does not support input_layout={input_layout!r}")
    d = head_dim(query, input_layout, num_heads)
    q = to_bnsd(query, input_layout, num_heads)
    n_kv = kv_heads(key, input_layout, num_heads, d, num_key_value_heads)
    k, v = to_bnsd(key, input_layout, n_kv), to_bnsd(value, input_layout, n_kv)
    batch, skv = int(q.shape[0]), int(k.shape[2])
    mask = None
    if atten_mask is not None:
        mask = atten_mask.bool().reshape(batch, 1, 1, skv)
    if actual_seq_lengths is not None:
        past = length_mask(actual_seq_lengths, batch, skv)
        mask = past if mask is None else mask | past
    out, _, _ = attend(q, k, v, scale_value, mask)
    return from_bnsd(out, input_layout).to(query.dtype)


_FIAS_UNSUPPORTED = ("pse_shift", "actual_seq_lengths", "dequant_scale1", "quant_scale1", "dequant_scale2",
                     "quant_scale2", "quant_offset2", "antiquant_scale", "antiquant_offset", "key_antiquant_scale",
                     "key_antiquant_offset", "value_antiquant_scale", "value_antiquant_offset", "block_table",
                     "query_padding_size", "kv_padding_size", "key_shared_prefix", "value_shared_prefix",
                     "actual_shared_prefix_len", "query_rope", "key_rope", "key_rope_antiquant_scale")


def fused_infer_attention_score(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *,
                                atten_mask: torch.Tensor | None = None,
                                actual_seq_lengths_kv: list[int] | None = None, num_heads: int = 1,
                                scale: float = 1.0, pre_tokens: int = _TOKENS_MAX, next_tokens: int = _TOKENS_MAX,
                                input_layout: str = "BSH", num_key_value_heads: int = 0, sparse_mode: int = 0,
                                softmax_lse_flag: bool = False, **rest: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """(attention_out, softmax_lse): prefill or decode attention; softmax_lse is [B, N, Sq, 1]
    float32 with ``softmax_lse_flag``, else empty."""
    unsupported(**{name: rest.get(name) for name in _FIAS_UNSUPPORTED})
    if input_layout == "SBH":
        raise NotImplementedError(f"the emulated op does not support input_layout={input_layout!r}")
    if sparse_mode == 0:
        _tokens_default(pre_tokens=pre_tokens, next_tokens=next_tokens)
    d = head_dim(query, input_layout, num_heads)
    q = to_bnsd(query, input_layout, num_heads)
    n_kv = kv_heads(key, input_layout, num_heads, d, num_key_value_heads)
    k, v = to_bnsd(key, input_layout, n_kv), to_bnsd(value, input_layout, n_kv)
    batch, sq, skv = int(q.shape[0]), int(q.shape[2]), int(k.shape[2])
    mask = mask_from(atten_mask, sparse_mode, sq, skv)
    if actual_seq_lengths_kv is not None:
        past = length_mask(actual_seq_lengths_kv, batch, skv)
        mask = past if mask is None else mask | past
    out, row_max, row_sum = attend(q, k, v, scale, mask)
    lse = (row_max + torch.log(row_sum)) if softmax_lse_flag else query.new_empty([0], dtype=torch.float32)
    return from_bnsd(out, input_layout).to(query.dtype), lse
