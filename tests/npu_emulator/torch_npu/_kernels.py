"""Post-AOT aten ops -> emulated Ascend kernels (op type, kernel name, core, time).

Every number here is emulated (see the package docstring); nothing is a claim about a
real NPU. Time model: ``2.0 µs head + bytes / 200e3 B/µs + flops / 50e6 flop/µs``.
torch_npu's fused ops (``torch.ops.npu.npu_*``) are one kernel each, with the Ascend op
type torchair's converters in the torch-npu 2.14.0 wheel name and the aclnn API it calls;
attention and grouped matmul are MIX kernels (AI_CORE + AI_VECTOR: ``MIX_AIC``).
"""

from __future__ import annotations

import hashlib
import operator
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx

HEAD_US = 2.0
BYTES_PER_US = 200e3
FLOPS_PER_US = 50e6

CUBE, VECTOR, GATHER, AICPU, WAIT, MIX = "cube", "vector", "gather", "aicpu", "wait", "mix"
_CORE = {CUBE: "AI_CORE", VECTOR: "AI_VECTOR_CORE", GATHER: "AI_VECTOR_CORE", AICPU: "AI_CPU", WAIT: "N/A",
         MIX: "MIX_AIC"}
_BLOCK = {CUBE: (20, 0), VECTOR: (40, 0), GATHER: (40, 0), AICPU: (1, 0), WAIT: (0, 0), MIX: (20, 40)}

#: aten packet name -> (Ascend op type, aclnn API name, class)
_TABLE: dict[str, tuple[str, str, str]] = {
    "mm": ("MatMulV2", "Matmul", CUBE), "addmm": ("MatMulV2", "Addmm", CUBE),
    "bmm": ("BatchMatMulV2", "BatchMatMul", CUBE), "baddbmm": ("BatchMatMulV2", "Baddbmm", CUBE),
    "convolution": ("Conv2D", "Convolution", CUBE),
    "mul": ("Mul", "Mul", VECTOR), "add": ("Add", "Add", VECTOR), "sub": ("Sub", "Sub", VECTOR),
    "div": ("RealDiv", "Div", VECTOR), "_to_copy": ("Cast", "Cast", VECTOR),
    "mean": ("ReduceMean", "Mean", VECTOR), "sum": ("ReduceSum", "ReduceSum", VECTOR),
    "amax": ("ReduceMax", "Amax", VECTOR), "_softmax": ("SoftmaxV2", "Softmax", VECTOR),
    "_log_softmax": ("LogSoftmaxV2", "LogSoftmax", VECTOR), "rsqrt": ("Rsqrt", "Rsqrt", VECTOR),
    "sqrt": ("Sqrt", "Sqrt", VECTOR), "exp": ("Exp", "Exp", VECTOR), "log": ("Log", "Log", VECTOR),
    "pow": ("Pow", "PowTensorScalar", VECTOR), "neg": ("Neg", "Neg", VECTOR), "abs": ("Abs", "Abs", VECTOR),
    "relu": ("Relu", "Relu", VECTOR), "gelu": ("Gelu", "Gelu", VECTOR), "silu": ("Swish", "Silu", VECTOR),
    "sigmoid": ("Sigmoid", "Sigmoid", VECTOR), "tanh": ("Tanh", "Tanh", VECTOR),
    "clone": ("TensorMove", "Clone", VECTOR), "copy": ("TensorMove", "InplaceCopy", VECTOR),
    "cat": ("ConcatD", "Cat", VECTOR), "where": ("SelectV2", "SWhere", VECTOR),
    "native_layer_norm": ("LayerNormV3", "LayerNorm", VECTOR), "maximum": ("Maximum", "Maximum", VECTOR),
    "minimum": ("Minimum", "Minimum", VECTOR), "ones": ("Fill", "InplaceOne", VECTOR),
    "zeros": ("Fill", "InplaceZero", VECTOR), "full": ("Fill", "InplaceFillScalar", VECTOR),
    "eq": ("Equal", "EqTensor", VECTOR), "gt": ("Greater", "GtScalar", VECTOR), "lt": ("Less", "LtScalar", VECTOR),
    "embedding": ("GatherV2", "Embedding", GATHER), "index_select": ("GatherV2", "IndexSelect", GATHER),
    "gather": ("GatherElements", "Gather", GATHER), "index": ("Index", "Index", GATHER),
    "take": ("Gather", "Take", GATHER), "index_add": ("IndexAdd", "IndexAdd", GATHER),
    "scatter": ("ScatterElements", "Scatter", GATHER), "scatter_add": ("ScatterAddWithAxis", "ScatterAdd", GATHER),
    "sort": ("Sort", "Sort", AICPU), "argsort": ("Sort", "Argsort", AICPU), "topk": ("TopKV2", "Topk", AICPU),
    "nonzero": ("NonZero", "Nonzero", AICPU), "_unique2": ("UniqueWithCountsExt2", "Unique2", AICPU),
    "unique_dim": ("UniqueWithCountsExt2", "UniqueDim", AICPU), "unique_consecutive": ("UniqueConsecutive",
                                                                                     "UniqueConsecutive", AICPU),
    "multinomial": ("Multinomial", "Multinomial", AICPU), "randperm": ("Randperm", "Randperm", AICPU),
    "wait_tensor": ("ValueWait", "ValueWait", WAIT),
    # torch_npu's fused ops
    "npu_rms_norm": ("RmsNorm", "RmsNorm", VECTOR), "npu_add_rms_norm": ("AddRmsNorm", "AddRmsNorm", VECTOR),
    "npu_rotary_mul": ("RotaryMul", "RotaryPositionEmbedding", VECTOR), "npu_swiglu": ("SwiGlu", "SwiGlu", VECTOR),
    "npu_fusion_attention": ("FlashAttentionScore", "FlashAttentionScore", MIX),
    "npu_incre_flash_attention": ("IncreFlashAttention", "IncreFlashAttentionV4", MIX),
    "npu_fused_infer_attention_score": ("FusedInferAttentionScore", "FusedInferAttentionScoreV3", MIX),
    "npu_moe_gating_top_k_softmax": ("MoeGatingTopKSoftmax", "MoeGatingTopKSoftmax", VECTOR),
    "npu_grouped_matmul": ("GroupedMatmul", "GroupedMatmulV4", MIX),
    "npu_dynamic_quant": ("DynamicQuant", "DynamicQuant", VECTOR),
    "npu_quant_matmul": ("QuantBatchMatmulV3", "QuantMatmulV5", CUBE),
}
#: view / alias ops: no device task
VIEW_OPS = frozenset({
    "view", "_unsafe_view", "reshape", "_reshape_alias", "t", "transpose", "permute", "expand", "squeeze",
    "unsqueeze", "slice", "select", "alias", "as_strided", "detach", "split", "split_with_sizes", "unbind",
    "chunk", "narrow", "diagonal", "view_as_real", "view_as_complex", "unfold", "lift_fresh_copy",
    "_assert_tensor_metadata", "sym_size", "sym_stride", "sym_numel",
})
MATMULS = frozenset({"mm", "addmm", "bmm", "baddbmm", "npu_quant_matmul"})
ATTENTIONS = frozenset({"npu_fusion_attention", "npu_incre_flash_attention", "npu_fused_infer_attention_score"})
_DTYPES = {torch.float32: "DT_FLOAT", torch.float16: "DT_FLOAT16", torch.bfloat16: "DT_BF16",
           torch.float64: "DT_DOUBLE", torch.int64: "DT_INT64", torch.int32: "DT_INT32", torch.int16: "DT_INT16",
           torch.int8: "DT_INT8", torch.uint8: "DT_UINT8", torch.bool: "DT_BOOL"}


@dataclass(frozen=True)
class Kernel:
    """One device task of the post-AOT graph (``index``: its position among the tasks)."""

    index: int
    node: str
    aten: str
    op_type: str
    name: str
    kind: str
    duration_ns: int
    in_shapes: str
    in_dtypes: str
    out_shapes: str
    out_dtypes: str

    @property
    def core(self) -> str:
        return _CORE[self.kind]

    @property
    def block_dims(self) -> tuple[int, int]:
        return _BLOCK[self.kind]

    @property
    def symbol(self) -> str:
        """The kernel symbol dcci patterns match: ``te_<OpType>_<hash>``."""
        return f"te_{self.op_type}_{hashlib.sha1(self.name.encode()).hexdigest()[:8]}"


def packet_name(target: Any) -> str:
    """``aten.mm.default`` -> ``mm``; ``_c10d_functional.wait_tensor.default`` -> ``wait_tensor``."""
    if isinstance(target, torch._ops.OpOverload):
        return target._opname
    if isinstance(target, torch._ops.OpOverloadPacket):
        return str(target).split(".")[-1]
    return getattr(target, "__name__", str(target))


def is_task(node: fx.Node) -> bool:
    """A call to a non-view aten-level op (markers, getitem and Python builtins are no tasks)."""
    if node.op != "call_function" or node.target is operator.getitem:
        return False
    if not isinstance(node.target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return False
    if str(node.target).startswith("npu.super_kernel_scope_"):
        return False
    return packet_name(node.target) not in VIEW_OPS


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def _arg_tensors(node: fx.Node) -> list[torch.Tensor]:
    """Fake tensors of the node's inputs, in argument order."""
    flat: list[fx.Node] = []
    fx.node.map_arg((node.args, node.kwargs), flat.append)
    return [t for n in flat for t in _tensors(n.meta.get("val"))]


def _shapes(ts: list[torch.Tensor]) -> str:
    return ";".join(",".join(str(int(d)) for d in t.shape) for t in ts)


def _dtypes(ts: list[torch.Tensor]) -> str:
    return ";".join(_DTYPES.get(t.dtype, f"DT_{str(t.dtype).split('.')[-1].upper()}") for t in ts)


def _nbytes(ts: list[torch.Tensor]) -> int:
    return sum(int(t.numel()) * t.element_size() for t in ts)


def _flops(name: str, ins: list[torch.Tensor], outs: list[torch.Tensor], layout: str) -> int:
    if name == "npu_grouped_matmul":  # every output element is one K-long dot product
        return 2 * int(ins[0].shape[-1]) * sum(int(t.numel()) for t in outs)
    if name in ATTENTIONS:  # q·kᵀ and p·v: 2 flops per (query element | output element) per key
        q, k, out = ins[0], ins[1], outs[0]
        skv = int(k.shape[{"BNSD": 2, "SBH": 0}.get(layout, 1)])
        return 2 * skv * (int(q.numel()) + int(out.numel()))
    if name not in MATMULS:
        return 0
    a, b = (ins[1], ins[2]) if name in ("addmm", "baddbmm") else (ins[0], ins[1])
    batch = int(a.shape[0]) if a.dim() == 3 else 1
    m, k, n = int(a.shape[-2]), int(a.shape[-1]), int(b.shape[-1])
    return 2 * batch * m * n * k


def op_time_us(name: str, ins: list[torch.Tensor], outs: list[torch.Tensor], layout: str = "BSH") -> float:
    """The emulated device time of one op, in µs (``layout``: an attention op's input_layout)."""
    flops = _flops(name, ins, outs, layout)
    return HEAD_US + (_nbytes(ins) + _nbytes(outs)) / BYTES_PER_US + flops / FLOPS_PER_US


def _layout(node: fx.Node) -> str:
    """An attention node's input_layout (npu_fusion_attention takes it as argument 4)."""
    if "input_layout" in node.kwargs:
        return str(node.kwargs["input_layout"])
    return str(node.args[4]) if len(node.args) > 4 else "BSH"


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.strip("_").split("_")) or "Op"


def kernel_for(node: fx.Node, index: int) -> Kernel:
    """The emulated kernel of a task node (shapes and dtypes from its fake ``val``)."""
    name = packet_name(node.target)
    op_type, api, kind = _TABLE.get(name, (_camel(name), _camel(name), VECTOR))
    suffix = "AiCpu" if kind == AICPU else ("Common" if kind == CUBE else "AiCore")
    kernel_name = f"aclnn{api}_{op_type}{suffix}_{op_type}"
    ins, outs = _arg_tensors(node), _tensors(node.meta.get("val"))
    duration_ns = round(1000 * op_time_us(name, ins, outs, _layout(node)))
    return Kernel(index, node.name, str(node.target), op_type, kernel_name, kind, duration_ns,
                  _shapes(ins), _dtypes(ins), _shapes(outs), _dtypes(outs))
