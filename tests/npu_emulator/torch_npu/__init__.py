"""An EMULATED Ascend NPU for sktune's tests: a pure-Python ``torch_npu`` on the CPU.

This is NOT a claim about real NPUs. No NPU was used to write it; every time, profile
row and fusion result it produces is emulated by the deterministic model below, written
from docs/superkernel.md and docs/npu_api.md. It exists so that
``PYTHONPATH=tests/npu_emulator sktune run model.py --backend npu`` runs unchanged.

Surface: ``__version__`` (``$TORCH_NPU_EMULATOR_VERSION``, default 2.14.0; below 2.11.0
the old SuperKernel key set applies); ``SKTUNE_NPU_DEVICE`` defaults to ``cpu`` (tensors
stay on the CPU); ``import torch`` loads it, as torch's device-backend autoload loads torch-npu
on a host (the entry point in ``torch_npu-2.14.0.dist-info``; ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``
turns it off); ``torch.npu`` (= ``torch_npu.npu``: device queries, the random functions on
the CPU generator, memory queries that find nothing allocated); the marker ops
``npu::super_kernel_scope_begin/end``; the ``npugraph_ex`` backend and, apart, ``npugraphs``
(capture and replay only, as in torch-npu);
``torch_npu.profiler``; torch_npu's fused ops ``npu_rms_norm``, ``npu_add_rms_norm``,
``npu_rotary_mul``, ``npu_swiglu``, ``npu_fusion_attention``, ``npu_incre_flash_attention``,
``npu_fused_infer_attention_score``, ``npu_moe_gating_top_k_softmax``, ``npu_grouped_matmul``
(and ``.List``), ``npu_dynamic_quant``, ``npu_quant_matmul``: ``torch.ops.npu.*`` with the
torch-npu 2.14.0 schemas, exposed as ``torch_npu.<op>`` (``_fused_ops``). Their values come
from deterministic CPU references (attention: plain float32 softmax attention over BSH / BSND
/ BNSD; see each module for what raises NotImplementedError), not from Ascend kernels.

Behaviour model
- Kernels: each aten op of the post-AOT graph is one task, except view/alias ops and the
  markers. Ops map to Ascend op types (mm/addmm -> MatMulV2 on AI_CORE; mul -> Mul,
  _to_copy -> Cast, ... on AI_VECTOR_CORE). AI_CPU class: sort, topk, nonzero, unique*,
  multinomial, randperm. Gather class (reads scalars from global memory): gather, index,
  index_select, embedding, take, index_add, scatter, scatter_add. Wait-like:
  ``_c10d_functional.wait_tensor`` (a ValueWait node). torch_npu's fused ops are one task
  each: npu_rms_norm -> RmsNorm, npu_add_rms_norm -> AddRmsNorm, npu_rotary_mul -> RotaryMul,
  npu_swiglu -> SwiGlu, npu_moe_gating_top_k_softmax -> MoeGatingTopKSoftmax,
  npu_dynamic_quant -> DynamicQuant (AI_VECTOR_CORE); npu_quant_matmul -> QuantBatchMatmulV3
  (AI_CORE); npu_fusion_attention -> FlashAttentionScore, npu_incre_flash_attention ->
  IncreFlashAttention, npu_fused_infer_attention_score -> FusedInferAttentionScore,
  npu_grouped_matmul -> GroupedMatmul (MIX class: MIX_AIC, block 20 + mix block 40; a
  SuperKernel holding one is MIX_AIC).
- Op time: 2.0 µs head + (input + output bytes) / 200e3 B/µs + matmul flops (2MNK) /
  50e6 flop/µs. Flops of the fused ops: quant matmul 2MNK; grouped matmul 2K per output
  element; attention 2·Skv per query element plus 2·Skv per output element. 5.0 µs launch gap between tasks; 50 µs host gap between profiler steps.
- Reference (super_kernel_optimize False): every task separate. Markers in a run launch
  tiny kernels (sk_scope_kernel_begin, sk_placeholder_kernel, sk_scope_kernel_end)
  unless their range became a SuperKernel.
- SuperKernel on: mark set = scope names open around an op (pairing: an end closes the
  first open begin of its name). A None mark wins (never fused); if any named scope
  exists, unmarked ops are not fused; with only None marks or none at all, unmarked ops
  form one group (scope label ``none``, as real profiles name such a SuperKernel). Ops
  with the same mark set form a group, named after the innermost (latest opened) scope. A
  group becomes one SuperKernel per contiguous run of its kernels (views and markers do
  not break a run). Unfusible ops end the run and run alone: AI_CPU ops (fail reason
  DEFAULT_NODE; task_breaker_bypass=1: dropped from the scope, run alone after the
  SuperKernel, the run continues) and wait-like ops (unless value_breaker_bypass != 0;
  OP_UNSUPPORT, CANN's ValueWait reason name unknown). A one-kernel run is still a
  SuperKernel. A named scope holding no kernel makes none (OP_UNSUPPORT "empty scope").
  More than 64 distinct names: later ones are not fused (EXCEED_SCOPE_MAX). Names are cut
  to 255 UTF-8 bytes; ``default_sk_scope_name`` means None.
- SuperKernel task: ``sk_<n>_<scope>_start_<first func>_end_<last func>``, the real
  index-first form (n counts the graph's SuperKernels from 0; a kernel's function name is
  its static kernel's, ``static_kernel_<OpType>_<hash>``, the hash of the
  ``te_<OpType>_<hash>`` symbol dcci patterns match), type SuperKernel, core MIX_AIC with a matmul else
  MIX_AIV; time = 4.0 µs + sum of sub-op times, minus 1.0 µs per sub-op after the first
  with early_start=1, plus 0.4 µs per data-cache flush, plus 1.0 µs per sub-op boundary
  with debug_sync_all, plus 0.2 µs per sub-op with debug_op_exec_trace.
- Flushes per sub-op (patterns match ``te_<OpType>_<hash>`` or the kernel name; only
  ``.`` and ``x*``, whole name): one for each of dcci_before_kernel_start /
  dcci_after_kernel_end that matches; else none if dcci_disable_on_kernel matches; else
  one (the default flush after each sub-op) if any dcci key was given at all; with no dcci
  key (sktune's ``none``) no flush. preload_code, split_mode, stream_fusion,
  constant_codegen, opt_extend, ubuf_lock_ignore_kernel change nothing; auto_op_parallel
  matters only with several streams and every emulated graph is single-stream.
- Faults: a gather-class sub-op with no flush reads stale scalars (element 0 of its
  output: third-highest mantissa bit flipped, ~12 % off; integers +1). A SuperKernel holding a wait-like op
  (value_breaker_bypass != 0) hangs at the first forward, after writing a per-core plog
  under $ASCEND_PROCESS_LOG_PATH/debug/plog/ when debug_op_exec_trace=1.
- Options: unknown top-level key or bad value -> raised at compile, as torch-npu's
  ``CompilerConfig`` does (``_config``: ``super_kernel_optimize=0`` means on); the
  SuperKernel dicts are checked at the first forward (unknown key / wrong type ->
  RuntimeError); out-of-range ints are clamped to the default with a warning; with
  ``ASCEND_OP_COMPILE_SAVE_KERNEL_META=1`` the effective options go to
  ``<ASCEND_WORK_PATH or cwd>/sk_meta/<pid>/model_<n>/sk_options.json`` (an emulator form;
  plus the fail-reason and fused-node logs); without it no ``sk_meta/`` is written.
- Static kernels (``_static``): compiled at the first forward with the caches keyed as
  each release keys them (2.10.0.post4+: op hashes + SuperKernel config with the option
  and debug maps + determinism; old key set: op hashes alone, so stale). Cost: 10.0
  EMULATED seconds per kernel compiled, stated as ``emulated_static_compile`` on the
  compiled graph.
- Profiler: active steps record every emulated run on a virtual clock starting at
  1736413971000000.000 µs; kernel_details.csv and step_trace_time.csv are written in the
  real files' formats. kernel_details.csv has torch-npu 2.14.0's columns (its
  ``profiler/analysis/prof_common_func/_csv_headers.py`` and
  ``prof_view/_kernel_view_parser.py``): at Level0 (and Level_none) ``Device_id, Name,
  Type, Accelerator Core, Start Time(us), Duration(us), Wait Time(us), Block Num`` then
  ``Mix Block Num`` and the shape/dtype/format columns; at Level1/2 every op_summary column
  (the real sample's set with Device_id first, no AI Core metrics). ``Step Id`` comes
  first only when the run had profiler steps (a schedule and CPU activity); without them
  step_trace_time.csv has one row with an empty Step, as torch-npu writes it. Its ``Free``
  counts, as torch-npu's does, the idle up to the next step's first kernel (``profiler/_writer.py``).
"""

from __future__ import annotations

import os
import sys

# As torch-npu 2.14.0's own __init__: device-backend autoload off while this package loads,
# or `import torch` here would load it again through the entry point below, half-initialised.
_ORG_AUTOLOAD = os.getenv("TORCH_DEVICE_BACKEND_AUTOLOAD", "1")
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"

import torch  # noqa: E402

__version__ = os.environ.get("TORCH_NPU_EMULATOR_VERSION", "2.14.0")
EMULATED = True

os.environ.setdefault("SKTUNE_NPU_DEVICE", "cpu")

from torch_npu import _backend, _fused_ops, _ops, npu, profiler  # noqa: E402

_ops.register()
_backend.register()
# torch_npu.npu_rms_norm ... are the op packets, as torch-npu sets them (transformers does
# ``from torch_npu import npu_fusion_attention``).
globals().update(_fused_ops.register())
torch.npu = npu  # type: ignore[attr-defined]
sys.modules.setdefault("torch.npu", npu)

__all__ = ["EMULATED", "__version__", "npu", "profiler", *_fused_ops.NAMES]


def _autoload() -> None:
    """The ``torch.backends`` entry point torch-npu declares (``torch_npu = torch_npu:_autoload``,
    here in ``torch_npu-2.14.0.dist-info`` beside the package): with it on the path, ``import
    torch`` imports this package, as on a host, so a model file needs no ``import torch_npu``
    for ``torch.npu`` (docs/npu_api.md, "Installing and importing"). Importing did the work;
    as in torch-npu, this restores the switch, which subprocesses inherit."""
    os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = _ORG_AUTOLOAD


_autoload()  # `import torch_npu` first: torch skipped the autoload, so the switch is restored here
