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

Cost: one pass over the Python list of the sequence to find the earlier occurrences of its last token, then
at most ``max_ngram`` comparisons per occurrence: about 50 µs per round at 256 tokens of the grounded prompts and
75 µs at 512 (``tolist()`` and the draft tensor included; measured on this course's 2-core CPU while busy), against
about 25 ms for one forward of the embedded target: drafting is free next to verification.
"""

from collections.abc import Sequence

import torch

from ..core.errors import ConfigError, InputError
from ..core.sampling import SamplingConfig
from .base import Draft, Drafter

RULES = ("first", "longest-earliest", "latest")


def check_ngram_settings(min_ngram: object, max_ngram: object, rule: object) -> None:
    """Refuse n-gram sizes that are not integers with ``1 <= min_ngram <= max_ngram``, and an unknown rule."""
    for name, value in (("min_ngram", min_ngram), ("max_ngram", max_ngram)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(
                f"{name} (an n-gram length, in tokens) must be an integer >= 1, got {value!r}. "
                "Typical values: min_ngram=1, max_ngram=3."
            )
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
    transformers and vLLM, alias ``"longest-earliest"``) or ``"latest"``. ``max_continuation`` caps the draft
    below the round's ``k`` (None: ``k``, which `speculative_generate` sets to ``gamma``).

    The defaults (1, 3, "first") were chosen by target forwards saved on the embedded pair (greedy, 8 prompts of
    each prompt set, 64 new tokens, gamma 8; 1536 tokens, 1536 forwards without drafting): "first" needed 612
    target forwards, "latest" 615 (better on grounded and code prompts, worse on prose: a tie, so the standard
    rule); ``max_ngram`` 2 needed 632 and 4 needed 606 (3 is within 1% of 4); ``min_ngram=2`` needed 688: a
    1-token match is a weak guess, but a rejected draft only costs a few more positions in a forward the target
    runs anyway, while a round without a draft emits a single token.

    It runs no model (``device`` None, ``Draft.forwards`` 0) and its drafts are point masses (``probs`` None),
    so it works under greedy and sampled verification alike.
    """

    name = "prompt-lookup"
    proposes_target_ids = True  # copies of tokens already in the sequence

    def __init__(
        self, *, min_ngram: int = 1, max_ngram: int = 3, max_continuation: int | None = None, rule: str = "first"
    ) -> None:
        check_ngram_settings(min_ngram, max_ngram, rule)
        if max_continuation is not None and (
            isinstance(max_continuation, bool) or not isinstance(max_continuation, int) or max_continuation < 1
        ):
            raise ConfigError(
                f"max_continuation (the most tokens one draft copies) must be an integer >= 1 or None (no cap "
                f"below gamma), got {max_continuation!r}."
            )
        self.min_ngram = min_ngram
        self.max_ngram = max_ngram
        self.max_continuation = max_continuation
        self.rule = rule

    def propose(
        self, sequence: torch.Tensor, k: int, sampling: SamplingConfig, generator: torch.Generator | None
    ) -> Draft:
        """Up to ``min(k, max_continuation)`` tokens copied from ``sequence: LongTensor[1, L]`` (see
        `find_continuation`); an empty draft when nothing recurs. ``sampling`` and ``generator`` are unused: the
        copy is the same whatever the temperature, and verification treats it as a point mass."""
        if sequence.ndim != 2 or sequence.shape[0] != 1:
            raise InputError(
                f"PromptLookupDrafter.propose expects a LongTensor[1, L] (batch size 1), got shape "
                f"{list(sequence.shape)}."
            )
        if self.max_continuation is not None:
            k = min(k, self.max_continuation)
        tokens = find_continuation(
            sequence[0].tolist(), k, min_ngram=self.min_ngram, max_ngram=self.max_ngram, rule=self.rule
        )
        return Draft(tokens=torch.tensor(tokens, dtype=torch.long))
