"""Prompt lookup (n-gram) drafting: no model at all, the draft is copied from the context itself.

If the last few tokens of the sequence (prompt + generated text) already occurred earlier, the tokens that
followed them then are a good guess for what follows now: code repeats names and signatures, an edit repeats
the text it edits, a summary quotes its source. One round:

    sequence = [... a b c X Y ... a b c]          the last n tokens, "a b c", occur earlier
    match                ^                        one earlier occurrence (never the suffix itself)
    draft  = [X, Y, ...]                          up to k tokens that followed it (fewer at the end of the sequence)

The rule (which n, which occurrence), for n from ``max_ngram`` down to ``min_ngram``:

- ``"first"``: the longest n with a match, at its *first* occurrence (scanning left to right). This is
  transformers' ``PromptLookupCandidateGenerator`` rule (it has no ``min_ngram``: it goes down to 1) and also
  vLLM's ngram proposer (``_find_longest_matched_ngram_and_propose_tokens``: "the longest n-gram ... of the
  earliest position"). The two implementations differ (a window scan per n; KMP over the reversed sequence)
  but pick the same span, so ``"longest-earliest"`` names the same rule.
- ``"latest"``: the longest n with a match, at its *most recent* occurrence (generated text that repeats
  itself is often best predicted by its latest repetition).

Both count overlapping occurrences (``[5, 5, 5]`` matches its 2-gram at position 0 and drafts ``[5]``).
The draft is a point mass (``Draft.probs=None``): exact verification accepts draft x with probability p(x).
Unlike transformers, the draft is not cut at an end-of-sequence token: `speculative_generate` itself stops
right after an accepted EOS, so copying one is safe (and accepting it saves the target's forward).

Cost: one pass over the Python list of the sequence to find the earlier occurrences of its last token, then at
most ``max_ngram`` comparisons per occurrence, O(L · max_ngram) in Python with no model: next to one forward of
the target, drafting is free (the drafters bench times it, `specdec_lib.bench.drafters`).
"""

from collections.abc import Sequence

import torch

from ..core.drafting import Context, Draft, Drafter
from ..core.errors import ConfigError
from ..core.rows import PAD_ID
from ..core.sampling import SamplingConfig
from ..core.validation import check_count

RULES = ("first", "longest-earliest", "latest")


def check_ngram_settings(min_ngram: object, max_ngram: object, rule: object) -> None:
    """Refuse n-gram sizes that are not integers with ``1 <= min_ngram <= max_ngram``, and an unknown rule."""
    for name, value in (("min_ngram", min_ngram), ("max_ngram", max_ngram)):
        check_count(f"{name} (an n-gram length, in tokens)", value, minimum=1,
                    hint="Typical values: min_ngram=1, max_ngram=3.")
    if max_ngram < min_ngram:  # type: ignore[operator]
        raise ConfigError(
            f"max_ngram={max_ngram} is below min_ngram={min_ngram}: lookup tries n from max_ngram down to "
            "min_ngram. Raise max_ngram or lower min_ngram."
        )
    if rule not in RULES:
        raise ConfigError(
            f"rule must be 'first' (transformers' and vLLM's rule: the longest match, at its first occurrence; "
            f"'longest-earliest' is the same rule) or 'latest' (the longest match, at its most recent "
            f"occurrence), got {rule!r}."
        )


def find_continuation(
    tokens: Sequence[int] | torch.Tensor,
    k: int,
    *,
    min_ngram: int = 1,
    max_ngram: int = 3,
    rule: str = "first",
) -> list[int]:
    """The up to ``k`` tokens that followed an earlier occurrence of the sequence's last n tokens.

    ``tokens``: the sequence, a list of ids or a ``LongTensor[L]`` / ``[1, L]``. Tries n from ``max_ngram`` down
    to ``min_ngram`` and stops at the first n that occurs somewhere other than at the end; of its occurrences,
    ``rule="first"`` (or its other name ``"longest-earliest"``) takes the leftmost, ``"latest"`` the rightmost
    (see the module docstring). Returns ``[]`` when no n-gram in that range recurs, or ``k == 0``; fewer than
    ``k`` tokens when the occurrence is followed by fewer (the continuation stops at the end of the sequence).
    """
    check_ngram_settings(min_ngram, max_ngram, rule)
    if isinstance(tokens, torch.Tensor):
        tokens = tokens.reshape(-1).tolist()
    return _continuation(tokens, k, min_ngram, max_ngram, rule)


def _continuation(tokens: Sequence[int], k: int, min_ngram: int, max_ngram: int, rule: str) -> list[int]:
    """`find_continuation` on a list of ids with settings already checked (the drafter checks its own once)."""
    length = len(tokens)
    if k <= 0 or length < 2:
        return []
    last = tokens[-1]
    # every earlier occurrence j of the last token, and how far back it keeps matching (at most max_ngram):
    # an n-gram occurrence ending at j < L - 1 is never the suffix itself and always has a continuation
    best_n, best_end = 0, -1
    for j in range(length - 1):
        if tokens[j] != last:
            continue
        n = 1
        while n < max_ngram and n <= j and tokens[j - n] == tokens[length - 1 - n]:
            n += 1
        if n > best_n or (n == best_n and rule == "latest"):
            best_n, best_end = n, j
    if best_n < min_ngram:
        return []
    return list(tokens[best_end + 1 : best_end + 1 + k])


class PromptLookupDrafter(Drafter):
    """Draft by copying: `find_continuation` over the prompt and everything generated so far.

    ``min_ngram`` / ``max_ngram``: the n-gram lengths tried, longest first. ``rule``: ``"first"`` (the rule of
    transformers and vLLM, alias ``"longest-earliest"``) or ``"latest"``. A copy is at most the round's draft
    length ``k`` (``gamma``, shortened near the end of the generation), like every drafter's draft.

    The defaults (1, 3, "first") are transformers' rule and n-gram range: a 1-token match is a weak guess, but a
    rejected draft only costs a few more positions in a forward the target runs anyway, while a round without a
    draft emits a single token, so drafting on short matches pays (the drafters bench compares the settings).

    It runs no model (``device`` None, ``Draft.forwards`` 0) and its drafts are point masses (``probs`` None),
    so it works under greedy and sampled verification alike.
    """

    name = "prompt-lookup"
    batches = True

    def __init__(
        self, *, min_ngram: int = 1, max_ngram: int = 3, rule: str = "first"
    ) -> None:
        check_ngram_settings(min_ngram, max_ngram, rule)
        self.min_ngram = min_ngram
        self.max_ngram = max_ngram
        self.rule = rule

    def propose(self, context: Context, sampling: SamplingConfig, generator: torch.Generator | None) -> Draft:
        """Per row, up to the round's ``k`` tokens copied from its committed tokens (see
        `find_continuation`); an empty row when nothing recurs. ``sampling`` and ``generator`` are unused: the copy
        is the same whatever the temperature, and verification treats it as a point mass."""
        copies = [_continuation(context.row(b).tolist(), k, self.min_ngram, self.max_ngram, self.rule)
                  for b, k in enumerate(context.row_k)]
        tokens = torch.full((len(copies), max(map(len, copies))), PAD_ID, dtype=torch.long)
        for b, copy in enumerate(copies):
            tokens[b, : len(copy)] = torch.tensor(copy, dtype=torch.long)
        return Draft(tokens, lengths=[len(copy) for copy in copies])
