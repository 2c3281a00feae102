"""Depth up-scaling: grow a trained shallow Llama into a deeper one that starts as the same function.

Why: on a CPU a tiny model's forward costs a fixed overhead plus a constant per layer, so a deep target makes
the draft cheap next to it (small c) while verifying several tokens stays cheap, as with real LLMs. Training a
deep model from scratch is slow here; growing a trained one and continuing its training (depth up-scaling, as
in SOLAR, Kim et al. 2023, or Gstack, Du et al. 2024) reuses what it learned.

The rule: old block i (1-based) becomes new block (i - 1)·k + 1, followed by k - 1 copies of itself whose two
output projections (attention ``o_proj`` and MLP ``down_proj``) are zero. A pre-norm residual block with zero
output projections is the identity (h + 0 + 0), so the grown model computes exactly the old logits, and the
hidden state after old layer i equals the one after new layer (i - 1)·k + 1. The copies start from the trained
block's other weights, so as soon as training moves their output projections they compute something useful.
"""
from __future__ import annotations

import torch
from transformers import LlamaForCausalLM

from .model_training import ModelSpec, build_model


def grown_layer_index(old_layer: int, factor: int) -> int:
    """Where the output of old layer ``old_layer`` (1-based; 0 = embeddings) appears in the grown model."""
    return 0 if old_layer == 0 else (old_layer - 1) * factor + 1


def grow_depth(base: LlamaForCausalLM, spec: ModelSpec, seed: int) -> LlamaForCausalLM:
    """A ``spec.layers``-deep model that computes exactly what ``base`` computes (float32 rounding aside).

    ``spec`` must keep the base's width, heads and vocabulary and multiply its depth by a whole factor k.
    """
    config = base.config
    old_layers = config.num_hidden_layers
    mismatched = [
        f"{field} {ours} vs the base's {theirs}"
        for field, ours, theirs in (("hidden", spec.hidden, config.hidden_size),
                                    ("intermediate", spec.intermediate, config.intermediate_size),
                                    ("heads", spec.heads, config.num_attention_heads))
        if ours != theirs
    ]
    if mismatched or spec.layers % old_layers:
        raise ValueError(
            f"Cannot grow a {old_layers}-layer model into {spec.layers} layers"
            + (f" ({', '.join(mismatched)})" if mismatched else "")
            + ": depth up-scaling keeps the width and multiplies the depth by a whole number."
        )
    factor = spec.layers // old_layers
    grown = build_model(spec, config.vocab_size, config.eos_token_id, seed)
    grown.model.embed_tokens.load_state_dict(base.model.embed_tokens.state_dict())
    grown.model.norm.load_state_dict(base.model.norm.state_dict())
    grown.lm_head.load_state_dict(base.lm_head.state_dict())  # tied to the embeddings: same tensor
    with torch.no_grad():
        for i, block in enumerate(base.model.layers):
            for copy in range(factor):
                new_block = grown.model.layers[i * factor + copy]
                new_block.load_state_dict(block.state_dict())
                if copy:  # an inserted copy starts as the identity
                    new_block.self_attn.o_proj.weight.zero_()
                    new_block.mlp.down_proj.weight.zero_()
    return grown
