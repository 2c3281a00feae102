"""Speculative decoding at its barest: greedy, one row, a draft model, plain transformers. Read this first.

Everything else in the library is this loop with more drafters, sampling, batches, trees, checks and a trace
(`specdec_lib.core.engine.generate` is the same round, for every decoder). Each round:

    draft      the draft model proposes k <= gamma tokens, one forward each (its first forward also reads what
               its cache lacks: the whole prompt in the first round)
    verify     ONE target forward over what its cache lacks (the prompt in the first round, the last token after
               it) and the k drafts; its last k + 1 rows of logits say what the target alone would have chosen
               after each prefix
    decide     keep the drafts while they equal the target's argmax, then add the target's own token (the fix at
               the first mismatch, or a bonus token after k matches): n + 1 tokens for one target forward
    roll back  crop both KV caches to the tokens that were kept (the target's to all but the last)

The output is exactly the target's greedy output: every kept token is the target's argmax after the tokens before
it. The benchmark times this loop beside the library's ("ours / lean", `specdec_lib.bench.methods`): what the
library's checks, trace and generality cost above the bare algorithm.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, PreTrainedModel

from .forward import forward_keywords, unwrap_compiled


@torch.inference_mode()
def lean_generate(target: PreTrainedModel, draft: PreTrainedModel, input_ids: torch.Tensor, *, gamma: int,
                  max_new_tokens: int, eos_token_id: int | None = None) -> list[int]:
    """The new token ids after ``input_ids: LongTensor[1, T]``, decoded greedily by speculative decoding (module
    docstring): ``gamma`` drafts a round at most, fewer in the last rounds so as to stop at exactly
    ``max_new_tokens``; an ``eos_token_id`` anywhere in a round ends generation right after it (None: never).
    No input checks, no trace. The cache keyword of a forward is read by `forward_keywords` (``cache`` in
    transformers 5.24, ``past_key_values`` before)."""
    t_cache, d_cache = DynamicCache(config=target.config), DynamicCache(config=draft.config)
    keyword = {id(model): forward_keywords(type(unwrap_compiled(model))).cache for model in (target, draft)}

    def argmax(model, cache, ids: list[int], keep: int) -> list[int]:  # the argmax of the last `keep` positions
        logits = model(input_ids=torch.tensor([ids], device=input_ids.device), use_cache=True, logits_to_keep=keep,
                       **{keyword[id(model)]: cache}).logits
        return logits[0].argmax(-1).tolist()

    def keep(cache, n: int) -> None:  # the first n tokens (crop takes how many to remove, as a negative number)
        if cache.get_seq_length() > n:
            cache.crop(n - cache.get_seq_length())

    prompt = input_ids.shape[1]
    seq = input_ids[0].tolist()
    while len(seq) - prompt < max_new_tokens and (len(seq) == prompt or seq[-1] != eos_token_id):
        k = min(gamma, max_new_tokens - (len(seq) - prompt) - 1)  # k drafts + the target's token must fit
        drafts, step = [], seq[d_cache.get_seq_length():]
        for _ in range(k):
            drafts += argmax(draft, d_cache, step, 1)
            step = drafts[-1:]
        choice = argmax(target, t_cache, seq[t_cache.get_seq_length():] + drafts, k + 1)  # [k + 1]
        n = 0
        while n < k and drafts[n] == choice[n]:
            n += 1
        new = drafts[:n] + choice[n : n + 1]
        seq += new[: new.index(eos_token_id) + 1] if eos_token_id in new else new
        keep(t_cache, len(seq) - 1)  # the target's cache: every kept token but the last (read next round)
        keep(d_cache, len(seq) - 1)  # the draft's: the drafts it kept, no more
    return seq[prompt:]
