"""A two-layer transformers ``LlamaModel`` with random weights (no hub download).

It imports transformers as a user's model file would, so with the emulated Ascend on the
path transformers takes its torch_npu branches (``is_torch_npu_available()`` is true; the
SDPA mask becomes a bool mask, ``npu_fusion_attention`` is imported). It also runs on a
plain CPU install (inductor backend), so it doubles as a held-out model.
"""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaModel

VOCAB = 128
HIDDEN = 64
LAYERS = 2
HEADS = 4
KV_HEADS = 2  # grouped-query attention, as Llama 3 has
SEQ = 16
BATCH = 1


class TinyLlama(torch.nn.Module):
    """Returns ``last_hidden_state``: sktune's model contract wants tensors, not ModelOutput."""

    def __init__(self, attn_implementation: str = "sdpa") -> None:
        super().__init__()
        config = LlamaConfig(
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            intermediate_size=2 * HIDDEN,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            num_key_value_heads=KV_HEADS,
            max_position_embeddings=64,
            use_cache=False,  # one static graph: no cache object in the forward
            attn_implementation=attn_implementation,
        )
        self.model = LlamaModel(config)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, use_cache=False).last_hidden_state


def build_model() -> torch.nn.Module:
    torch.manual_seed(0)  # the random weights are the same in every process
    return TinyLlama()


def example_inputs(seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, VOCAB, (BATCH, SEQ), generator=g),)
