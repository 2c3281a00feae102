"""Measure the trained family: per-forward cost, draft/target cost ratio c, greedy agreement.

These are the numbers the model cards report and the course builds on:

- **per-forward cost**: median seconds of one cached forward of one new token after a
  64-token context (what a decoding step costs), and of a block of k tokens (what a
  verification of k drafted tokens costs).
- **c** = cost(draft forward) / cost(target forward), the ratio in Leviathan et al.'s
  speed-up formula.
- **greedy agreement α**: along the target's own greedy continuation of a prompt, the
  share of positions where the draft's argmax equals the target's. This is the
  per-token acceptance probability of greedy speculative decoding (the α of the
  theory); the measured acceptance rate of a run with draft length γ follows from it.
- **distinct 4-gram share** of the target's continuations: tiny models loop, and a
  looping target inflates acceptance, so the cards show how much it loops.
"""
from __future__ import annotations

import statistics
import time

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..baseline import autoregressive_generate
from ..devices import synchronize
from ..modeling import forward_with_cache
from ..kv_cache import crop_cache, new_cache
from ..trace import GenerationResult


@torch.inference_mode()
def forward_cost(model: PreTrainedModel, context_ids: torch.Tensor, block: int = 1, repeats: int = 60) -> float:
    """Median seconds of one cached forward of ``block`` new tokens after ``context_ids: [1, T]``.

    The cache is rolled back after every timed forward so each one sees the same context.
    """
    cache = new_cache(model)
    forward_with_cache(model, context_ids, cache, logits_to_keep=1)
    length = context_ids.shape[1]
    new = context_ids[:, -1:].repeat(1, block)  # any valid tokens: cost does not depend on their values
    times = []
    for i in range(repeats + 5):
        synchronize(model.device)
        start = time.perf_counter()
        forward_with_cache(model, new, cache, logits_to_keep=block)
        synchronize(model.device)
        elapsed = time.perf_counter() - start
        crop_cache(cache, length)
        if i >= 5:  # the first calls warm up allocators and kernels
            times.append(elapsed)
    return statistics.median(times)


def greedy_continuations(target: PreTrainedModel, prompts: list[torch.Tensor], new_tokens: int = 48) -> list[GenerationResult]:
    """The target's own greedy continuation of each prompt [1, T]: what every draft is compared against.

    Computed once and shared by every draft being measured (the target is the expensive model)."""
    return [autoregressive_generate(target, prompt, max_new_tokens=new_tokens) for prompt in prompts]


@torch.inference_mode()
def greedy_agreement(draft: PreTrainedModel, continuations: list[GenerationResult]) -> dict:
    """α: share of the target's greedy next tokens that the draft's argmax matches.

    ``continuations`` come from `greedy_continuations`; the draft reads each prompt + continuation in one
    forward, and at every continuation position its argmax is compared with the token the target chose there.
    Returns ``{"alpha", "per_prompt", "positions", "distinct_4gram_share"}`` (the last describes the target's
    continuations: 1.0 means they never repeat a 4-gram).
    """
    matches = positions = 0
    per_prompt = []
    for result in continuations:
        sequence, start = result.sequence, result.prompt_length
        draft_logits = forward_with_cache(draft, sequence[:, :-1], None)[0]  # [T + N - 1, V]
        draft_choice = draft_logits[start - 1 :].argmax(-1)  # [N]: the draft's guess for each new token
        hit = (draft_choice == sequence[0, start:]).sum().item()
        n = sequence.shape[1] - start
        matches, positions = matches + hit, positions + n
        per_prompt.append(round(hit / n, 3))
    return {
        "alpha": round(matches / positions, 4),
        "per_prompt": per_prompt,
        "positions": positions,
        "distinct_4gram_share": distinct_4gram_share(continuations),
    }


def distinct_4gram_share(continuations: list[GenerationResult]) -> float:
    """Distinct 4-grams / all 4-grams of the new tokens, counted per continuation and pooled: 1.0 = no repeats."""
    distinct = total = 0
    for result in continuations:
        tokens = result.new_token_list
        grams = [tuple(tokens[i : i + 4]) for i in range(max(0, len(tokens) - 3))]
        distinct, total = distinct + len(set(grams)), total + len(grams)
    return round(distinct / max(1, total), 4)


def encode_prompts(tokenizer: PreTrainedTokenizerBase, texts: list[str], device: torch.device) -> list[torch.Tensor]:
    """Each text as LongTensor[1, T] on ``device``."""
    return [tokenizer(text, return_tensors="pt").input_ids.to(device) for text in texts]
