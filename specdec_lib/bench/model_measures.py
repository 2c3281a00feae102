"""Measure a model pair: per-forward cost, draft/target cost ratio c, greedy agreement, how much the target loops.

These are the numbers the model cards report; the benches and the notebooks measure them again on the machine at
hand:

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
  looping target inflates acceptance, so the cards show how much it loops (on the prompt
  sets, and on random held-out windows next to the held-out text's own share), and α is
  split into positions inside a repeated 4-gram and fresh ones (a repeat is far easier to guess).
"""
from __future__ import annotations

import statistics
import time

import torch
from transformers import PreTrainedModel

from ..decoders import autoregressive_generate
from ..core.devices import synchronize
from ..core.forward import forward_with_cache
from ..core.caches import crop_cache, new_cache
from ..core.result import GenerationResult


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


def interleaved_forward_costs(jobs: dict, *, turns: int = 5, repeats: int = 20) -> dict:
    """Median seconds of one cached forward for each job, the jobs taking turns.

    jobs: ``{name: (model, context_ids [1, T], block)}``, each timed by `forward_cost`. A shared machine speeds up
    and slows down from minute to minute: timed one after the other, a target's 8-token forward can come out cheaper
    than its one-token forward, which no model does. ``turns`` rounds of ``repeats`` forwards
    per job, the jobs in turn, let a busy moment hit all of them alike, so their *ratios* (c, verification costs)
    hold. Returns ``{name: median over the turns of each turn's median}``."""
    times: dict = {name: [] for name in jobs}
    for _ in range(turns):
        for name, (model, context_ids, block) in jobs.items():
            times[name].append(forward_cost(model, context_ids, block=block, repeats=repeats))
    return {name: statistics.median(values) for name, values in times.items()}


def greedy_continuations(target: PreTrainedModel, prompts: list[torch.Tensor], new_tokens: int = 48) -> list[GenerationResult]:
    """The target's own greedy continuation of each prompt [1, T]: what every draft is compared against.

    Computed once and shared by every draft being measured (the target is the expensive model)."""
    return [autoregressive_generate(target, prompt, max_new_tokens=new_tokens) for prompt in prompts]


@torch.inference_mode()
def greedy_agreement(draft: PreTrainedModel, continuations: list[GenerationResult]) -> dict:
    """α: share of the target's greedy next tokens that the draft's argmax matches.

    ``continuations`` come from `greedy_continuations`; the draft reads each prompt + continuation in one
    forward, and at every continuation position its argmax is compared with the token the target chose there.
    Returns ``{"alpha", "per_prompt", "positions", "distinct_4gram_share", "alpha_in_repeats", "alpha_fresh",
    "repeat_positions"}``: the share of distinct 4-grams describes the target's continuations (1.0 means they never
    repeat one); ``alpha_in_repeats`` is α at the positions inside a repeated 4-gram of the continuation
    (`repeated_ngram_mask`, ``repeat_positions`` of them), ``alpha_fresh`` α everywhere else (None where there are
    no such positions).
    """
    hits, in_repeats = [], []
    per_prompt = []
    for result in continuations:
        sequence, start = result.sequence, result.prompt_length
        draft_logits = forward_with_cache(draft, sequence[:, :-1], None)[0]  # [T + N - 1, V]
        draft_choice = draft_logits[start - 1 :].argmax(-1)  # [N]: the draft's guess for each new token
        hit = draft_choice == sequence[0, start:]  # [N]
        hits.append(hit)
        in_repeats.append(repeated_ngram_mask(sequence[:, start:], 4)[0])
        per_prompt.append(round(hit.float().mean().item(), 3))
    hit, repeat = torch.cat(hits), torch.cat(in_repeats)

    def share(selected: torch.Tensor) -> float | None:
        return round(hit[selected].float().mean().item(), 4) if selected.any() else None
    return {
        "alpha": round(hit.float().mean().item(), 4),
        "per_prompt": per_prompt,
        "positions": hit.numel(),
        "distinct_4gram_share": distinct_4gram_share(continuations),
        "alpha_in_repeats": share(repeat),
        "alpha_fresh": share(~repeat),
        "repeat_positions": int(repeat.sum()),
    }


def repeated_ngram_mask(continuations: torch.Tensor, ngram: int) -> torch.Tensor:
    """Which tokens belong to an ``ngram``-gram that already occurred earlier in the same row.

    continuations: LongTensor[B, N]. Returns BoolTensor[B, N]: True at every token of each repeated occurrence
    (all ``ngram`` tokens of it), False elsewhere (a first occurrence stays False)."""
    mask = torch.zeros(continuations.shape, dtype=torch.bool)
    for row, tokens in enumerate(continuations.tolist()):
        seen = set()
        for end in range(ngram, len(tokens) + 1):
            gram = tuple(tokens[end - ngram : end])
            if gram in seen:
                mask[row, end - ngram : end] = True
            seen.add(gram)
    return mask


def distinct_4gram_share(continuations: list[GenerationResult]) -> float:
    """Distinct 4-grams / all 4-grams of the new tokens, counted per continuation and pooled: 1.0 = no repeats."""
    return distinct_4gram_share_of_rows([result.new_token_list for result in continuations])


def distinct_4gram_share_of_rows(rows: list[list[int]]) -> float:
    """Distinct 4-grams / all 4-grams, counted per row of token ids and pooled."""
    distinct = total = 0
    for tokens in rows:
        grams = [tuple(tokens[i : i + 4]) for i in range(max(0, len(tokens) - 3))]
        distinct, total = distinct + len(set(grams)), total + len(grams)
    return round(distinct / max(1, total), 4)
