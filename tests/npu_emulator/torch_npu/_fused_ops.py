"""torch_npu's fused ops, defined under the ``npu`` namespace as torch-npu 2.14.0 defines them.

The schemas are copied verbatim from the torch-npu 2.14.0 wheel's op_plugin native
functions (the same signatures its op_plugin meta registrations implement): names,
argument names, defaults and return arity. Each op gets a CPU (and PrivateUse1) impl, the
deterministic references in ``_fused_math``, ``_fused_gmm`` and ``_fused_attention``, and
a fake impl so Dynamo and AOT keep it as one ``torch.ops.npu.<op>.default`` node, as on a
real host. The fake impl runs the reference itself on fake tensors (shapes then agree by
construction), except for ``npu_grouped_matmul``, whose reference reads ``group_list``'s
values. ``register()`` also returns the op packets the package exposes as
``torch_npu.npu_rms_norm`` and so on (torch-npu sets ``torch_npu.X = torch.ops.npu.X``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

from torch_npu import _fused_attention as attn
from torch_npu import _fused_gmm as gmm
from torch_npu import _fused_math as fm

#: op (with overload) -> schema, verbatim from the torch-npu 2.14.0 wheel
SCHEMAS: dict[str, str] = {
    "npu_rms_norm": "npu_rms_norm(Tensor self, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor)",
    "npu_add_rms_norm": "npu_add_rms_norm(Tensor x1, Tensor x2, Tensor gamma, float epsilon=1e-06) "
                        "-> (Tensor, Tensor, Tensor)",
    "npu_rotary_mul": "npu_rotary_mul(Tensor self, Tensor r1, Tensor r2, str rotary_mode='half', "
                      "Tensor? rotate=None) -> Tensor",
    "npu_swiglu": "npu_swiglu(Tensor self, int dim=-1) -> Tensor",
    "npu_fusion_attention": (
        "npu_fusion_attention(Tensor query, Tensor key, Tensor value, int head_num, str input_layout, "
        "Tensor? pse=None, Tensor? padding_mask=None, Tensor? atten_mask=None, float scale=1., "
        "float keep_prob=1., int pre_tockens=2147483647, int next_tockens=2147483647, int inner_precise=0, "
        "int[]? prefix=None, int[]? actual_seq_qlen=None, int[]? actual_seq_kvlen=None, int sparse_mode=0, "
        "bool gen_mask_parallel=True, bool sync=False, str softmax_layout=\"\", Tensor? sink=None, "
        "Tensor? dropout_mask=None, int seed=0, int offset=0) -> (Tensor, Tensor, Tensor, Tensor, int, int, int)"),
    "npu_incre_flash_attention": (
        "npu_incre_flash_attention(Tensor query, Tensor key, Tensor value, *, Tensor? padding_mask=None, "
        "Tensor? atten_mask=None, Tensor? pse_shift=None, SymInt[]? actual_seq_lengths=None, "
        "Tensor? antiquant_scale=None, Tensor? antiquant_offset=None, Tensor? block_table=None, "
        "Tensor? dequant_scale1=None, Tensor? quant_scale1=None, Tensor? dequant_scale2=None, "
        "Tensor? quant_scale2=None, Tensor? quant_offset2=None, Tensor? kv_padding_size=None, int num_heads=1, "
        "float scale_value=1.0, str input_layout=\"BSH\", int num_key_value_heads=0, int block_size=0, "
        "int inner_precise=1) -> Tensor"),
    "npu_fused_infer_attention_score": (
        "npu_fused_infer_attention_score(Tensor query, Tensor key, Tensor value, *, Tensor? pse_shift=None, "
        "Tensor? atten_mask=None, SymInt[]? actual_seq_lengths=None, SymInt[]? actual_seq_lengths_kv=None, "
        "Tensor? dequant_scale1=None, Tensor? quant_scale1=None, Tensor? dequant_scale2=None, "
        "Tensor? quant_scale2=None, Tensor? quant_offset2=None, Tensor? antiquant_scale=None, "
        "Tensor? antiquant_offset=None, Tensor? key_antiquant_scale=None, Tensor? key_antiquant_offset=None, "
        "Tensor? value_antiquant_scale=None, Tensor? value_antiquant_offset=None, Tensor? block_table=None, "
        "Tensor? query_padding_size=None, Tensor? kv_padding_size=None, Tensor? key_shared_prefix=None, "
        "Tensor? value_shared_prefix=None, SymInt[]? actual_shared_prefix_len=None, Tensor? query_rope=None, "
        "Tensor? key_rope=None, Tensor? key_rope_antiquant_scale=None, int num_heads=1, float scale=1.0, "
        "int pre_tokens=2147483647, int next_tokens=2147483647, str input_layout=\"BSH\", "
        "int num_key_value_heads=0, int sparse_mode=0, int inner_precise=0, int block_size=0, "
        "int antiquant_mode=0, int key_antiquant_mode=0, int value_antiquant_mode=0, "
        "bool softmax_lse_flag=False) -> (Tensor, Tensor)"),
    "npu_moe_gating_top_k_softmax": "npu_moe_gating_top_k_softmax(Tensor x, Tensor? finished=None, int k=1) "
                                    "-> (Tensor, Tensor, Tensor)",
    "npu_grouped_matmul": (
        "npu_grouped_matmul(Tensor[] x, Tensor[] weight, *, Tensor[]? bias=None, Tensor[]? scale=None, "
        "Tensor[]? offset=None, Tensor[]? antiquant_scale=None, Tensor[]? antiquant_offset=None, "
        "Tensor[]? per_token_scale=None, Tensor? group_list=None, Tensor[]? activation_input=None, "
        "Tensor[]? activation_quant_scale=None, Tensor[]? activation_quant_offset=None, int? split_item=0, "
        "int? group_type=None, int? group_list_type=0, int? act_type=0, int[]? tuning_config=None, "
        "int? output_dtype=None, int? x_dtype=None, int? weight_dtype=None, int? scale_dtype=None, "
        "int? per_token_scale_dtype=None) -> Tensor[]"),
    "npu_grouped_matmul.List": (
        "npu_grouped_matmul.List(Tensor[] x, Tensor[] weight, *, Tensor[]? bias=None, Tensor[]? scale=None, "
        "Tensor[]? offset=None, Tensor[]? antiquant_scale=None, Tensor[]? antiquant_offset=None, "
        "Tensor[]? per_token_scale=None, int[]? group_list=None, Tensor[]? activation_input=None, "
        "Tensor[]? activation_quant_scale=None, Tensor[]? activation_quant_offset=None, int? split_item=0, "
        "int? group_type=None, int? group_list_type=0, int? act_type=0, ScalarType? output_dtype=None) "
        "-> Tensor[]"),
    "npu_dynamic_quant": "npu_dynamic_quant(Tensor input, *, Tensor? smooth_scales=None, Tensor? group_index=None, "
                         "int? dst_type=None, str quant_mode=\"pertoken\", float dst_type_max=0.0) -> (Tensor, Tensor)",
    "npu_quant_matmul": (
        "npu_quant_matmul(Tensor x1, Tensor x2, Tensor scale, *, Tensor? offset=None, "
        "Tensor? pertoken_scale=None, Tensor? bias=None, int? output_dtype=None, int? x1_dtype=None, "
        "int? x2_dtype=None, int? pertoken_scale_dtype=None, int? scale_dtype=None, int[]? group_sizes=None, "
        "Tensor? y_scale=None) -> Tensor"),
}
#: the op names torch_npu exposes as module-level functions
NAMES = tuple(dict.fromkeys(name.split(".")[0] for name in SCHEMAS))
DISPATCH_KEYS = ("CPU", "PrivateUse1")
_LIBS: list[torch.library.Library] = []  # kept alive: a dropped Library deregisters its ops


def _dtype_code(value: Any) -> int | None:
    """The ``.List`` overload's ScalarType arrives as a torch.dtype: its ScalarType number."""
    if isinstance(value, torch.dtype):
        return {v: k for k, v in fm.DTYPE_ENUM.items()}.get(value, -1)
    return value


def _gmm(x: list[torch.Tensor], weight: list[torch.Tensor], *, tuning_config: list[int] | None = None,
         output_dtype: Any = None, **kwargs: Any) -> list[torch.Tensor]:
    # tuning_config is a performance hint: no effect on the result.
    return gmm.grouped_matmul(x, weight, output_dtype=_dtype_code(output_dtype), **kwargs)


def _gmm_fake(x: list[torch.Tensor], weight: list[torch.Tensor], *, group_list: Any = None, split_item: Any = 0,
              group_type: Any = None, output_dtype: Any = None, **_: Any) -> list[torch.Tensor]:
    return gmm.grouped_matmul_shapes(x, weight, group_list, split_item, group_type, _dtype_code(output_dtype))


#: op -> (eager CPU reference, fake impl)
IMPLS: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "npu_rms_norm": (fm.rms_norm, fm.rms_norm),
    "npu_add_rms_norm": (fm.add_rms_norm, fm.add_rms_norm),
    "npu_rotary_mul": (fm.rotary_mul, fm.rotary_mul),
    "npu_swiglu": (fm.swiglu, fm.swiglu),
    "npu_fusion_attention": (attn.fusion_attention, attn.fusion_attention),
    "npu_incre_flash_attention": (attn.incre_flash_attention, attn.incre_flash_attention),
    "npu_fused_infer_attention_score": (attn.fused_infer_attention_score, attn.fused_infer_attention_score),
    "npu_moe_gating_top_k_softmax": (fm.moe_gating_top_k_softmax, fm.moe_gating_top_k_softmax),
    "npu_grouped_matmul": (_gmm, _gmm_fake),
    "npu_grouped_matmul.List": (_gmm, _gmm_fake),
    "npu_dynamic_quant": (fm.dynamic_quant, fm.dynamic_quant),
    "npu_quant_matmul": (fm.quant_matmul, fm.quant_matmul),
}


def register() -> dict[str, Any]:
    """Define the ops (once per process) with their impls; the op packets, by name."""
    if not _LIBS:
        lib = torch.library.Library("npu", "FRAGMENT")
        _LIBS.append(lib)
        for op, schema in SCHEMAS.items():
            if torch._C._dispatch_has_kernel(f"npu::{op}"):
                warnings.warn(f"npu::{op} was already defined elsewhere; the emulator leaves it", stacklevel=2)
                continue
            lib.define(schema)
            eager, fake = IMPLS[op]
            for key in DISPATCH_KEYS:
                lib.impl(op, eager, key)
            torch.library.register_fake(f"npu::{op}", fake, lib=lib)
    return {name: getattr(torch.ops.npu, name) for name in NAMES}
