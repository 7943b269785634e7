"""The emulator's torch_npu fused ops: schemas as torch-npu 2.14.0 declares them, CPU semantics
against plain torch formulas, fake impls that agree with the eager shapes, and one emulated
kernel each with its Ascend op type. Every number here is the emulator's, never an NPU's.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

#: argument names, read from the torch-npu 2.14.0 wheel's op_plugin schemas (as literals, so a
#: drifting emulator schema fails here)
WHEEL_ARGS = {
    "npu_rms_norm": ["self", "gamma", "epsilon"],
    "npu_add_rms_norm": ["x1", "x2", "gamma", "epsilon"],
    "npu_rotary_mul": ["self", "r1", "r2", "rotary_mode", "rotate"],
    "npu_swiglu": ["self", "dim"],
    "npu_fusion_attention": ["query", "key", "value", "head_num", "input_layout", "pse", "padding_mask",
                             "atten_mask", "scale", "keep_prob", "pre_tockens", "next_tockens", "inner_precise",
                             "prefix", "actual_seq_qlen", "actual_seq_kvlen", "sparse_mode", "gen_mask_parallel",
                             "sync", "softmax_layout", "sink", "dropout_mask", "seed", "offset"],
    "npu_incre_flash_attention": ["query", "key", "value", "padding_mask", "atten_mask", "pse_shift",
                                  "actual_seq_lengths", "antiquant_scale", "antiquant_offset", "block_table",
                                  "dequant_scale1", "quant_scale1", "dequant_scale2", "quant_scale2",
                                  "quant_offset2", "kv_padding_size", "num_heads", "scale_value", "input_layout",
                                  "num_key_value_heads", "block_size", "inner_precise"],
    "npu_fused_infer_attention_score": [
        "query", "key", "value", "pse_shift", "atten_mask", "actual_seq_lengths", "actual_seq_lengths_kv",
        "dequant_scale1", "quant_scale1", "dequant_scale2", "quant_scale2", "quant_offset2", "antiquant_scale",
        "antiquant_offset", "key_antiquant_scale", "key_antiquant_offset", "value_antiquant_scale",
        "value_antiquant_offset", "block_table", "query_padding_size", "kv_padding_size", "key_shared_prefix",
        "value_shared_prefix", "actual_shared_prefix_len", "query_rope", "key_rope", "key_rope_antiquant_scale",
        "num_heads", "scale", "pre_tokens", "next_tokens", "input_layout", "num_key_value_heads", "sparse_mode",
        "inner_precise", "block_size", "antiquant_mode", "key_antiquant_mode", "value_antiquant_mode",
        "softmax_lse_flag"],
    "npu_moe_gating_top_k_softmax": ["x", "finished", "k"],
    "npu_grouped_matmul": ["x", "weight", "bias", "scale", "offset", "antiquant_scale", "antiquant_offset",
                           "per_token_scale", "group_list", "activation_input", "activation_quant_scale",
                           "activation_quant_offset", "split_item", "group_type", "group_list_type", "act_type",
                           "tuning_config", "output_dtype", "x_dtype", "weight_dtype", "scale_dtype",
                           "per_token_scale_dtype"],
    "npu_dynamic_quant": ["input", "smooth_scales", "group_index", "dst_type", "quant_mode", "dst_type_max"],
    "npu_quant_matmul": ["x1", "x2", "scale", "offset", "pertoken_scale", "bias", "output_dtype", "x1_dtype",
                         "x2_dtype", "pertoken_scale_dtype", "scale_dtype", "group_sizes", "y_scale"],
}
#: (defaults worth pinning, number of returns) from the same schemas
WHEEL_DEFAULTS = {
    "npu_rms_norm": ({"epsilon": 1e-06}, 2), "npu_add_rms_norm": ({"epsilon": 1e-06}, 3),
    "npu_rotary_mul": ({"rotary_mode": "half"}, 1), "npu_swiglu": ({"dim": -1}, 1),
    "npu_fusion_attention": ({"scale": 1.0, "keep_prob": 1.0, "pre_tockens": 2147483647, "sparse_mode": 0}, 7),
    "npu_incre_flash_attention": ({"num_heads": 1, "scale_value": 1.0, "input_layout": "BSH",
                                   "inner_precise": 1}, 1),
    "npu_fused_infer_attention_score": ({"num_heads": 1, "scale": 1.0, "input_layout": "BSH",
                                         "softmax_lse_flag": False}, 2),
    "npu_moe_gating_top_k_softmax": ({"k": 1}, 3), "npu_grouped_matmul": ({"split_item": 0, "group_list_type": 0}, 1),
    "npu_dynamic_quant": ({"quant_mode": "pertoken", "dst_type_max": 0.0}, 2), "npu_quant_matmul": ({}, 1),
}


@pytest.fixture(scope="module")
def tnpu():
    from tests.emulated_npu import load_emulator

    return load_emulator()


@pytest.mark.parametrize("name", sorted(WHEEL_ARGS))
def test_schema_matches_the_wheel(tnpu, name: str) -> None:
    packet = getattr(tnpu, name)
    assert packet is getattr(torch.ops.npu, name)  # torch_npu.X = torch.ops.npu.X, as the real package
    schema = packet.default._schema
    assert [a.name for a in schema.arguments] == WHEEL_ARGS[name]
    defaults, n_returns = WHEEL_DEFAULTS[name]
    by_name = {a.name: a for a in schema.arguments}
    for arg, value in defaults.items():
        assert by_name[arg].default_value == value, arg
    assert len(schema.returns) == n_returns


def test_transformers_import_form(tnpu) -> None:
    from torch_npu import npu_fusion_attention  # noqa: F401 - transformers imports it this way

    assert "npu_fusion_attention" in tnpu.__all__


def _rms(x: torch.Tensor, g: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g


def test_norms(tnpu) -> None:
    x, r, g = torch.randn(2, 3, 8), torch.randn(2, 3, 8), torch.randn(8)
    y, rstd = tnpu.npu_rms_norm(x, g, 1e-5)
    assert torch.equal(y, _rms(x, g, 1e-5)) and rstd.shape == (2, 3, 1) and rstd.dtype == torch.float32
    y2, rstd2, s = tnpu.npu_add_rms_norm(x, r, g)
    assert torch.equal(s, x + r) and torch.equal(y2, _rms(x + r, g, 1e-6)) and rstd2.shape == (2, 3, 1)
    _, rstd3 = tnpu.npu_rms_norm(x, torch.randn(3, 8))  # gamma over two dims: rstd [2, 1, 1]
    assert rstd3.shape == (2, 1, 1)


def test_rotary_and_swiglu(tnpu) -> None:
    x, cos, sin = torch.randn(2, 3, 4, 8), torch.randn(1, 3, 1, 8), torch.randn(1, 3, 1, 8)
    half = torch.cat((-x[..., 4:], x[..., :4]), -1)
    assert torch.equal(tnpu.npu_rotary_mul(x, cos, sin), cos * x + sin * half)
    pairs = torch.stack((-x[..., 1::2], x[..., ::2]), -1).flatten(-2)
    assert torch.equal(tnpu.npu_rotary_mul(x, cos, sin, "interleave"), cos * x + sin * pairs)
    h = torch.randn(3, 10)
    assert torch.equal(tnpu.npu_swiglu(h), F.silu(h[:, :5]) * h[:, 5:])
    assert tnpu.npu_swiglu(torch.randn(4, 6, 2), dim=1).shape == (4, 3, 2)


def test_moe_gating(tnpu) -> None:
    x = torch.randn(5, 8)
    y, idx, rows = tnpu.npu_moe_gating_top_k_softmax(x, None, k=2)
    top = torch.softmax(x, -1).topk(2, -1)
    assert torch.equal(y, top.values) and torch.equal(idx, top.indices.int()) and idx.dtype == torch.int32
    assert rows.tolist() == [[r, r + 5] for r in range(5)]
    finished = torch.tensor([True, False, False, False, True])
    _, idx2, _ = tnpu.npu_moe_gating_top_k_softmax(x, finished, k=2)
    assert idx2[0].tolist() == [8, 8] and torch.equal(idx2[1:4], idx[1:4])


def test_dynamic_quant_and_quant_matmul(tnpu) -> None:
    x = torch.randn(2, 4, 16)
    q, scale = tnpu.npu_dynamic_quant(x)
    ref_scale = x.abs().amax(-1) / 127.0
    assert q.dtype == torch.int8 and torch.equal(scale, ref_scale)
    assert torch.equal(q, torch.round(x / ref_scale.unsqueeze(-1)).clamp(-128, 127).to(torch.int8))
    w = torch.randint(-127, 128, (16, 8), dtype=torch.int8)
    wscale, tscale = torch.rand(8), scale.reshape(8)
    out = tnpu.npu_quant_matmul(q.reshape(8, 16), w, wscale, pertoken_scale=tscale, output_dtype=torch.bfloat16)
    acc = (q.reshape(8, 16).double() @ w.double()).float()
    assert out.dtype == torch.bfloat16 and torch.equal(out, (acc * wscale * tscale.unsqueeze(-1)).bfloat16())
    assert tnpu.npu_quant_matmul(q.reshape(8, 16), w, wscale).dtype == torch.int8


def test_grouped_matmul(tnpu) -> None:
    x, w, b = torch.randn(7, 8), torch.randn(3, 8, 4), [torch.randn(4) for _ in range(3)]
    ends = [2, 2, 6]  # group 1 is empty, row 6 belongs to no group
    expected = torch.zeros(7, 4)
    expected[0:2], expected[2:6] = x[0:2] @ w[0] + b[0], x[2:6] @ w[2] + b[2]
    (cum,) = tnpu.npu_grouped_matmul([x], [w], bias=b, group_list=torch.tensor(ends), split_item=2, group_type=0)
    (counts,) = tnpu.npu_grouped_matmul([x], list(w), bias=b, group_list=torch.tensor([2, 0, 4]), split_item=3,
                                        group_type=0, group_list_type=1)
    (as_list,) = tnpu.npu_grouped_matmul([x], [w], bias=b, group_list=ends, split_item=2)  # the .List overload
    assert torch.equal(cum, expected) and torch.equal(counts, expected) and torch.equal(as_list, expected)
    plain = tnpu.npu_grouped_matmul([x, x[:3]], [w[0], w[1]], group_type=-1)
    assert torch.equal(plain[0], x @ w[0]) and torch.equal(plain[1], x[:3] @ w[1])
    with pytest.raises(NotImplementedError, match="act_type"):
        tnpu.npu_grouped_matmul([x], [w], group_list=torch.tensor(ends), split_item=2, group_type=0, act_type=1)


def _sdpa(q, k, v, scale, masked=None):  # BNSD, Ascend mask: True = masked out
    s = (q @ k.transpose(-1, -2)) * scale
    if masked is not None:
        s = s.masked_fill(masked, float("-inf"))
    return torch.softmax(s, -1) @ v


def test_fusion_attention_layouts_and_masks(tnpu) -> None:
    q, k, v = (torch.randn(2, 4, 6, 8) for _ in range(3))
    causal = torch.ones(6, 6, dtype=torch.bool).triu(1)
    ref = _sdpa(q, k, v, 0.3, causal)
    out = tnpu.npu_fusion_attention(q, k, v, 4, "BNSD", atten_mask=causal, scale=0.3)
    assert len(out) == 7 and out[4:] == (0, 0, 0) and out[1].shape == (2, 4, 6, 8)
    torch.testing.assert_close(out[0], ref, rtol=1e-5, atol=1e-6)
    bsh = lambda t: t.transpose(1, 2).reshape(2, 6, 32)  # noqa: E731
    got = tnpu.npu_fusion_attention(bsh(q), bsh(k), bsh(v), 4, "BSH", atten_mask=torch.ones(2048, 2048).triu(1).bool(),
                                    scale=0.3, sparse_mode=2)[0]
    torch.testing.assert_close(got, bsh(ref), rtol=1e-5, atol=1e-6)
    with pytest.raises(NotImplementedError, match="input_layout='TND'"):
        tnpu.npu_fusion_attention(q[0], k[0], v[0], 4, "TND")
    with pytest.raises(NotImplementedError, match="keep_prob"):
        tnpu.npu_fusion_attention(q, k, v, 4, "BNSD", keep_prob=0.9)


def test_incre_and_fused_infer_attention_over_a_kv_cache(tnpu) -> None:
    q, k, v = torch.randn(2, 1, 4 * 8), torch.randn(2, 10, 2 * 8), torch.randn(2, 10, 2 * 8)  # BSH, GQA 4:2
    qb = q.view(2, 1, 4, 8).transpose(1, 2)
    kb, vb = (t.view(2, 10, 2, 8).transpose(1, 2).repeat_interleave(2, 1) for t in (k, v))
    past = torch.arange(10).view(1, 1, 1, 10) >= torch.tensor([7, 10]).view(2, 1, 1, 1)
    ref = _sdpa(qb, kb, vb, 1 / math.sqrt(8), past).transpose(1, 2).reshape(2, 1, 32)
    ifa = tnpu.npu_incre_flash_attention(q, k, v, num_heads=4, num_key_value_heads=2, scale_value=1 / math.sqrt(8),
                                         actual_seq_lengths=[7, 10])
    torch.testing.assert_close(ifa, ref, rtol=1e-5, atol=1e-6)
    fias, lse = tnpu.npu_fused_infer_attention_score(q, k, v, num_heads=4, num_key_value_heads=2,
                                                     scale=1 / math.sqrt(8), actual_seq_lengths_kv=[7, 10],
                                                     softmax_lse_flag=True)
    assert torch.equal(fias, ifa) and lse.shape == (2, 4, 1, 1)
    mask = past.reshape(2, 1, 10)
    assert torch.equal(tnpu.npu_incre_flash_attention(q, k, v, atten_mask=mask, num_heads=4, num_key_value_heads=2,
                                                      scale_value=1 / math.sqrt(8)), ifa)
    with pytest.raises(NotImplementedError, match="block_table"):
        tnpu.npu_incre_flash_attention(q, k, v, num_heads=4, block_table=torch.zeros(2, 1, dtype=torch.int32))


def test_capture_keeps_each_op_as_one_npu_node_with_its_kernel(tnpu) -> None:
    from torch._functorch.aot_autograd import aot_module_simplified
    from torch_npu._kernels import MIX, is_task, kernel_for

    def f(x, g, q, w):
        y, _ = tnpu.npu_rms_norm(x, g)
        a = tnpu.npu_fusion_attention(q, q, q, 4, "BNSD", scale=0.5)[0]
        m = tnpu.npu_grouped_matmul([y], [w], group_list=torch.tensor([3, 6]), split_item=2, group_type=0)[0]
        return m, a

    graphs: list[torch.fx.GraphModule] = []

    def backend(gm, example_inputs):
        def keep(g, _):
            graphs.append(g)
            return g.forward
        return aot_module_simplified(gm, example_inputs, fw_compiler=keep)

    args = (torch.randn(6, 8), torch.randn(8), torch.randn(1, 4, 5, 8), torch.randn(2, 8, 3))
    torch._dynamo.reset()
    try:
        with torch.no_grad():
            got = torch.compile(f, backend=backend, fullgraph=True)(*args)
    finally:
        torch._dynamo.reset()
    assert all(torch.equal(a, b) for a, b in zip(got, f(*args)))
    tasks = [n for n in graphs[0].graph.nodes if is_task(n) and str(n.target).startswith("npu.")]
    assert [str(n.target) for n in tasks] == ["npu.npu_rms_norm.default", "npu.npu_fusion_attention.default",
                                              "npu.npu_grouped_matmul.default"]
    kernels = [kernel_for(n, i) for i, n in enumerate(tasks)]
    assert [k.op_type for k in kernels] == ["RmsNorm", "FlashAttentionScore", "GroupedMatmul"]
    assert [k.core for k in kernels] == ["AI_VECTOR_CORE", "MIX_AIC", "MIX_AIC"] and kernels[1].kind == MIX
    # flops count: attention 2·Skv·(q + out elements), grouped matmul 2·K per output element (emulated)
    assert kernels[1].duration_ns > kernels[0].duration_ns
