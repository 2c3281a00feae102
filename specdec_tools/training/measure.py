"""How much the family loops on held-out text: the one measurement of the cards that cuts windows from the training
corpus's held-out split (`model_training.sample_windows`). The others (per-forward cost, c, greedy agreement, the
distinct 4-gram share of a continuation) are the library's, `specdec_lib.bench.model_measures`, which the notebooks
and the benches call too.
"""
from __future__ import annotations

import torch
from transformers import PreTrainedModel

from specdec_lib.bench.model_measures import distinct_4gram_share_of_rows
from specdec_lib.decoders import batched_autoregressive_generate

from .model_training import sample_windows


def heldout_distinct_4gram_shares(models: dict[str, PreTrainedModel], tokens: torch.Tensor, *, windows: int = 64,
                                  prompt_tokens: int = 64, new_tokens: int = 96, seed: int = 7) -> dict[str, float]:
    """How much each model loops on text it never trained on, next to how much that text repeats itself.

    tokens: a held-out token stream (1-D, the tokenizer all ``models`` share). ``windows`` random windows of
    ``prompt_tokens + new_tokens`` tokens are cut from it (seeded); each model continues every prompt greedily for
    ``new_tokens`` tokens (batched). Returns ``{name: share, ..., "held-out text": share}``, the last being the
    share of the windows' own next ``new_tokens`` tokens: real code repeats too, so that is the reference."""
    cut = sample_windows(tokens, windows, prompt_tokens + new_tokens, torch.Generator().manual_seed(seed))  # [W, P + N]
    shares = {}
    for name, model in models.items():
        result = batched_autoregressive_generate(model, list(cut[:, :prompt_tokens].to(model.device)),
                                                 max_new_tokens=new_tokens, eos_token_id=None)
        shares[name] = distinct_4gram_share_of_rows(result.tokens)
    shares["held-out text"] = distinct_4gram_share_of_rows(cut[:, prompt_tokens:].tolist())
    return shares
