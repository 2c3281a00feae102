"""The one interface every drafter implements: propose a block of tokens, then hear what was kept.

Drafting is separated from verification (as in transformers' candidate generators): `speculative_generate`
owns the target model and the acceptance test, and talks to any drafter through three calls per generation:

    drafter.begin(input_ids, max_length=N, target_vocab_size=V)
                                                        once, before the first round: forget the last generation
    draft = drafter.propose(sequence, k, sampling, g)   each round: up to k tokens to continue `sequence`
    drafter.accept(new_length)                          each round: the committed sequence now has new_length tokens

Two optional capabilities, off by default, let a drafter read the *target's* work instead of running a model of
its own (the draft-free drafters of notebook 05):

- ``wants_target_hidden = True``: after the prefill and after each verification, before ``accept``, the loop calls
  ``drafter.observe_target(hidden)`` with the target's last hidden states (the LM head's input) at the positions
  it just committed. Medusa heads and EAGLE draft from them.
- ``shares_target_cache = True``: the loop hands the drafter the target's own KV cache
  (``attach_target_cache(cache)``, before ``begin``) and lets it run the verification forward
  (``target_forward``). Self-speculative early exit drafts with the target's first layers, writing their keys
  into that cache, then verifies by running only the remaining layers on the drafted positions.

The contract that matters most: **a drafter reports the distribution it actually drew each token from**
(``Draft.probs``). Exact speculative sampling accepts a draft token x with probability ``min(1, p(x) / q(x))``;
if q is not the real sampling distribution (say, the drafter sampled at temperature 0.7 but reported its
temperature-1 softmax, or applied top-k only when sampling), the output distribution silently stops being the
target's. Real systems have shipped this bug. A greedy drafter and a drafter with no distribution at all (prompt
lookup copies tokens from the context) report None: exact verification then treats each token as drawn from a
point mass (a one-hot row, which a greedy drafter would otherwise build for nothing). Rows of ``probs`` are over
the *target's* ids (``target_vocab_size`` of them): a draft model whose embedding table is padded beyond the
target's vocabulary gives its extra ids no mass.
"""

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache

from ..core.errors import ConfigError
from ..core.sampling import SamplingConfig


@dataclass
class Draft:
    """What a drafter proposes in one round.

    ``tokens: LongTensor[k']`` the proposed continuation, ``k' <= k`` (``k' = 0`` is allowed: nothing to propose);
    ``probs: FloatTensor[k', V] | None`` row i is the distribution over the target's V ids that ``tokens[i]`` was
    drawn from (None for a point mass: a greedy draft, or a drafter with no distribution); ``forwards`` counts the
    drafter's model forwards this round (0 for drafters without a model).
    """

    tokens: torch.Tensor  # LongTensor[k']
    probs: torch.Tensor | None = None  # FloatTensor[k', V], rows sum to 1
    forwards: int = 0

    def __len__(self) -> int:
        return self.tokens.shape[0]

    @classmethod
    def empty(cls, device: torch.device | str = "cpu") -> "Draft":
        """A draft of zero tokens (the round then degenerates into one ordinary target step)."""
        return cls(tokens=torch.empty(0, dtype=torch.long, device=device), probs=None, forwards=0)


class Drafter(ABC):
    """Base class of every drafter. Subclasses implement `propose`; `begin` and `accept` default to doing nothing.

    Attributes: ``name`` goes into the result's method string (``"speculative[<name>]"``); ``device`` is where
    the drafter computes (None for drafters that run no model, such as prompt lookup: their tokens are moved to
    the target's device). `speculative_generate` refuses a drafter on a different device from the target.
    """

    name: str = "drafter"
    device: torch.device | None = None

    def begin(
        self, input_ids: torch.Tensor, *, max_length: int | None = None, target_vocab_size: int | None = None
    ) -> None:
        """Reset all state for a new generation whose prompt is ``input_ids: LongTensor[1, T]``.

        ``max_length``: the most positions the generation will reach (prompt + max_new_tokens + gamma + 1), to size
        buffers by; ``target_vocab_size``: the width V of the target's logits, the ids ``Draft.probs`` rows cover.
        None: unknown (the drafter's own context and vocabulary)."""

    @abstractmethod
    def propose(
        self, sequence: torch.Tensor, k: int, sampling: SamplingConfig, generator: torch.Generator | None
    ) -> Draft:
        """Propose at most ``k`` tokens to follow ``sequence: LongTensor[1, L]`` (prompt + committed tokens).

        Greedy ``sampling`` means argmax tokens with ``probs=None``; otherwise draw each token from
        ``logits_to_probs(logits, sampling)`` with ``generator`` and return exactly those rows as ``probs``.
        """

    wants_target_hidden: bool = False
    shares_target_cache: bool = False
    #: True when every proposed id is one the target can read by construction (copied from the sequence, or an
    #: argmax / sample over at most the target's V logits): the loop then skips its range check of the draft ids,
    #: which costs a host synchronisation per round on a GPU. False (the default): the loop checks.
    proposes_target_ids: bool = False

    def observe_target(self, hidden: torch.Tensor) -> None:
        """(``wants_target_hidden`` drafters) ``hidden: [n, D]``: the target's last hidden states, after its final
        norm, for the n tokens it just *committed as inputs*: every prompt position after the prefill; after a
        round that kept ``a`` drafts, the last committed token and the ``a`` accepted drafts (row ``n - 1``
        produced the correction or bonus token). Called before `accept`."""
        raise NotImplementedError(f"{type(self).__name__} sets wants_target_hidden but has no observe_target().")

    def attach_target_cache(self, cache: Cache) -> None:
        """(``shares_target_cache`` drafters) The target's KV cache for this generation, before `begin`."""
        raise NotImplementedError(f"{type(self).__name__} sets shares_target_cache but has no attach_target_cache().")

    def target_forward(self, step_input: torch.Tensor, cache: Cache, logits_to_keep: int) -> torch.Tensor:
        """(``shares_target_cache`` drafters) The verification forward: float32 logits ``[1, logits_to_keep, V]``
        for ``step_input: LongTensor[1, 1 + k']`` (the last committed token and the drafts), appended to ``cache``
        in every layer, exactly what the full target forward would give."""
        raise NotImplementedError(f"{type(self).__name__} sets shares_target_cache but has no target_forward().")

    def accept(self, sequence_length: int) -> None:
        """The committed sequence now has ``sequence_length`` tokens: roll internal state (a KV cache) back so
        that it holds nothing beyond what was kept. Tokens at positions ``>= sequence_length - 1`` may differ
        from what this drafter proposed there (the last one is the target's correction or bonus token)."""


def check_draft(draft: Draft, k: int) -> None:
    """Refuse a malformed `Draft` (more than ``k`` tokens, wrong shapes or dtype) with a message for its author."""
    if not isinstance(draft, Draft):
        raise ConfigError(f"A drafter's propose() must return a Draft, got {type(draft).__name__}.")
    tokens = draft.tokens
    if not isinstance(tokens, torch.Tensor) or tokens.ndim != 1 or tokens.dtype != torch.long:
        shape = list(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__
        raise ConfigError(f"Draft.tokens must be a 1-D torch.long tensor [k'], got {shape}.")
    if tokens.shape[0] > k:
        raise ConfigError(f"The drafter proposed {tokens.shape[0]} tokens but was asked for at most k={k}.")
    if draft.probs is not None and (draft.probs.ndim != 2 or draft.probs.shape[0] != tokens.shape[0]):
        raise ConfigError(
            f"Draft.probs must have shape [k'={tokens.shape[0]}, V] (one distribution per token) or be None, "
            f"got {list(draft.probs.shape)}."
        )
    if isinstance(draft.forwards, bool) or not isinstance(draft.forwards, int) or draft.forwards < 0:
        raise ConfigError(f"Draft.forwards must be an integer >= 0, got {draft.forwards!r}.")


class WrappedDrafter(Drafter):
    """A drafter that passes every call through to ``inner`` (subclasses override the calls they watch: the
    notebooks' round recorder, the benchmark's timer). The optional capabilities pass through too, so wrapping a
    drafter that reads the target's hidden states or shares its cache changes nothing about how it runs; any
    other attribute (``cache``, ``model``) is the inner drafter's."""

    def __init__(self, inner: Drafter) -> None:
        self.inner = inner

    def __getattr__(self, attribute: str):  # only called for attributes the wrapper itself lacks
        if attribute == "inner":
            raise AttributeError(attribute)
        return getattr(self.inner, attribute)

    name = property(lambda self: getattr(self.inner, "name", type(self.inner).__name__))  # type: ignore[assignment]
    device = property(lambda self: getattr(self.inner, "device", None))  # type: ignore[assignment]
    wants_target_hidden = property(lambda self: getattr(self.inner, "wants_target_hidden", False))  # type: ignore[assignment]
    shares_target_cache = property(lambda self: getattr(self.inner, "shares_target_cache", False))  # type: ignore[assignment]
    proposes_target_ids = property(lambda self: getattr(self.inner, "proposes_target_ids", False))  # type: ignore[assignment]

    def begin(self, input_ids: torch.Tensor, **limits) -> None:
        self.inner.begin(input_ids, **limits)

    def propose(
        self, sequence: torch.Tensor, k: int, sampling: SamplingConfig, generator: torch.Generator | None
    ) -> Draft:
        return self.inner.propose(sequence, k, sampling, generator)

    def accept(self, sequence_length: int) -> None:
        self.inner.accept(sequence_length)

    def observe_target(self, hidden: torch.Tensor) -> None:
        self.inner.observe_target(hidden)

    def attach_target_cache(self, cache: Cache) -> None:
        self.inner.attach_target_cache(cache)

    def target_forward(self, step_input: torch.Tensor, cache: Cache, logits_to_keep: int) -> torch.Tensor:
        return self.inner.target_forward(step_input, cache, logits_to_keep)
