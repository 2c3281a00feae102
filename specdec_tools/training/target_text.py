"""Training text written by the target itself, for distilling the draft on the target's own trajectories.

A draft is rewarded (accepted) when it picks what the *target* picks next **on the target's own text**: in greedy
speculative decoding every context the draft sees is a prompt followed by the target's greedy continuation. Corpus
windows are not such text (a small target loops, repeats names and closes brackets in its own way), so a draft
distilled on corpus windows learns the target's distribution in places decoding never visits. Distilling on
continuations the target wrote itself (sequence-level knowledge distillation, Kim & Rush 2016; DistillSpec, Zhou et
al. 2024, distils drafts on model-generated text for the same reason) puts the training signal where acceptance is
measured. The KL loss of `model_training` still compares full distributions, so sampling's α = Σ min(p, q) is
trained too, not only the greedy argmax.

Draft B, on another tokenizer, cannot be distilled token by token (its ids mean nothing to the target); it learns
the same text re-tokenised (`retokenize_stream`), which is sequence-level distillation in its plainest form.

The continuations are greedy, from random windows of the training split, and generated in batches with the
library's batched baseline (`specdec_lib.decoders.batched_autoregressive_generate`: each row's tokens are what the
target writes for that prompt alone). The result is one token stream (EOS between sequences) that
`model_training.sample_windows` cuts windows from, like the corpus stream.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel

from specdec_lib.decoders import batched_autoregressive_generate
from .model_training import sample_windows
from .tokenizer_training import tokenize_texts


@dataclass(frozen=True)
class TargetTextSpec:
    """How much target-written text to generate, and how many steps each draft trains on it."""

    sequences: int
    prompt_tokens: int
    new_tokens: int
    batch_size: int
    steps: int


def target_text_stream(target: PreTrainedModel, tokens: torch.Tensor, *, sequences: int, prompt_tokens: int,
                       new_tokens: int, batch_size: int, seed: int) -> torch.Tensor:
    """A 1-D token stream of ``sequences`` texts, each a random ``prompt_tokens`` window of ``tokens`` (the
    tokenised training split, 1-D) followed by the target's greedy continuation of ``new_tokens`` tokens, with
    the target's EOS after each text (as between files in the corpus stream).

    Returns LongTensor[sequences * (prompt_tokens + new_tokens + 1)]. Reproducible for a given seed and corpus.
    The continuation never stops early: an EOS the target writes is kept and generation goes on, as the corpus
    stream goes on into the next file.
    """
    if min(sequences, prompt_tokens, new_tokens, batch_size) < 1:
        raise ValueError(f"sequences, prompt_tokens, new_tokens and batch_size must be >= 1, got {sequences}, "
                         f"{prompt_tokens}, {new_tokens} and {batch_size}")
    eos = target.config.eos_token_id
    generator = torch.Generator().manual_seed(seed)
    texts = []
    for start in tqdm(range(0, sequences, batch_size), desc="target text", mininterval=5):
        prompts = sample_windows(tokens, min(batch_size, sequences - start), prompt_tokens, generator)  # [B, P]
        result = batched_autoregressive_generate(target, list(prompts), max_new_tokens=new_tokens, eos_token_id=None)
        for prompt, continuation in zip(prompts.tolist(), result.tokens):
            texts.append(torch.tensor(prompt + continuation + [eos], dtype=torch.long))
    return torch.cat(texts)


def retokenize_stream(stream: torch.Tensor, tokenizer, other_tokenizer) -> torch.Tensor:
    """The same text in another tokenizer: ``stream`` (1-D ids of ``tokenizer``, EOS-separated) cut at its EOS
    ids, each piece decoded to text and encoded by ``other_tokenizer``, with its EOS after each piece (as
    `tokenize_texts` builds the corpus stream). Returns a 1-D int32 tensor of ``other_tokenizer``'s ids."""
    eos = tokenizer.eos_token_id
    pieces, piece = [], []
    for token in stream.tolist():
        if token == eos:
            pieces.append(piece)
            piece = []
        else:
            piece.append(token)
    pieces.append(piece)
    texts = [tokenizer.decode(ids) for ids in pieces if ids]
    return tokenize_texts(other_tokenizer, texts)
