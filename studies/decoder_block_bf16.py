"""The Llama-style decoder block of ``decoder_block.py``, in bfloat16.

Same architecture (RMSNorm, rotary attention with explicit matmul + causal
mask + softmax, SwiGLU MLP, residuals) with weights, rotary tables and inputs
in bf16. RMSNorm statistics and softmax are computed in fp32 and cast back,
as in real bf16 checkpoints.

Why it is interesting for fusion: on top of the fp32 block's fusion
opportunities, the bf16 <-> fp32 conversions around every norm and the
softmax are extra pointwise ops a fuser can fold away, and the reduced
precision makes numerical tolerance of reordered reductions a visible
concern when comparing fused against eager output.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch


def _load_fp32_module():
    # studies/ is not a package: load the sibling file by path so this works
    # whatever the cwd and however this file itself was loaded.
    path = Path(__file__).resolve().parent / "decoder_block.py"
    name = "_sktune_studies_decoder_block"
    cached = sys.modules.get(name)
    if cached is not None and Path(getattr(cached, "__file__", "")).resolve() == path:
        return cached
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


_base = _load_fp32_module()

DTYPE = torch.bfloat16


def build_model() -> torch.nn.Module:
    return _base.build_model_with_dtype(DTYPE)


def example_inputs(seed: int = 0) -> tuple[torch.Tensor, ...]:
    return _base.example_inputs_with_dtype(DTYPE, seed)
