"""Verification: which drafted tokens does the target keep, and what does it add? Pure functions, no model.

One target forward over ``[last committed token, d_1, ..., d_k]`` gives ``k + 1`` rows of logits: row i is
the target's next-token prediction after ``d_1 .. d_i`` (row 0: after the committed sequence). Comparing the
drafts with these rows decides the round, in one vocabulary used everywhere in the library (as in vLLM):

- **accepted** tokens: the longest prefix of the draft the target agrees with;
- a **recovered** (corrected) token: at the first rejected position, the target's own choice replaces the draft;
- a **bonus** token: when every draft token is accepted, row k still predicts one more token for free.

So a round always emits ``accepted + 1`` tokens (from one target forward), between 1 and ``k + 1``.
"""

import torch

from .errors import ConfigError


def verify_greedy(target_logits: torch.Tensor, draft_tokens: torch.Tensor) -> tuple[int, int]:
    """Greedy verification of ``draft_tokens: LongTensor[k]`` against ``target_logits: FloatTensor[k + 1, V]``.

    With ``t_i = argmax(target_logits[i])`` (ties to the lowest id, as in greedy decoding):

    - ``num_accepted = n`` is the largest n with ``draft_tokens[i] == t_i`` for every ``i < n``;
    - ``next_token = t_n``: the recovered token when ``n < k`` (the target's choice where the draft went
      wrong), the bonus token when ``n == k``.

    The emitted tokens ``draft_tokens[:n] + [next_token]`` are exactly what the target's own greedy decoding
    would produce, which is why greedy speculative decoding is token-identical to the target alone.
    EOS-agnostic: stopping at an end-of-sequence token is the generation loop's job. Returns Python ints.
    """
    if target_logits.ndim != 2:
        raise ConfigError(f"target_logits must have shape [k + 1, V], got {list(target_logits.shape)}.")
    if draft_tokens.ndim != 1:
        raise ConfigError(f"draft_tokens must have shape [k], got {list(draft_tokens.shape)}.")
    k = draft_tokens.shape[0]
    if target_logits.shape[0] != k + 1:
        raise ConfigError(
            f"verify_greedy needs k + 1 = {k + 1} rows of target logits for k = {k} draft tokens "
            f"(one per draft token plus one for the bonus token), got {target_logits.shape[0]}."
        )
    target_choice = target_logits.argmax(dim=-1)  # [k + 1]: t_i, the target's greedy token after d_1 .. d_i
    matches = draft_tokens.to(target_choice.device) == target_choice[:k]  # [k] bool
    num_accepted = int(matches.long().cumprod(dim=0).sum())  # length of the all-True prefix
    return num_accepted, int(target_choice[num_accepted])
