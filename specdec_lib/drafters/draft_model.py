"""The classic drafter (Leviathan et al. 2023; Chen et al. 2023): a small model on the target's tokenizer.

It keeps its own KV cache across rounds, so each round costs one small forward per drafted token:

    round r, sequence = [... committed ..., last]       cache holds a prefix of it (say all but 1 or 2 tokens)
    forward 1: the tokens the cache lacks  -> logits -> d_1
    forward i: d_{i-1}                     -> logits -> d_i        (i = 2 .. k)
    accept(n): crop the cache to n - 1 tokens (drop the rejected drafts; the last committed token, the target's
               correction or bonus, is not in the cache yet and is fed at the next round)

``d_k`` itself is never fed during drafting: the next round feeds it (when accepted) with the bonus token.
"""

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..errors import ConfigError, InputError
from ..modeling import cache_length, check_input_ids, context_length, crop_cache, forward_with_cache, new_cache
from ..models import ModelPair
from ..sampling import SamplingConfig, logits_to_probs, sample_token
from ..vocab import require_same_tokenizer, require_vocab_covers
from .base import Draft, Drafter


class DraftModelDrafter(Drafter):
    """Draft with a small causal LM that shares the target's tokenizer.

    ``DraftModelDrafter(model)`` trusts that ``model`` reads the target's token ids. Pass both tokenizers
    (``draft_tokenizer=``, ``target_tokenizer=``), or build it with `for_pair`, to have that checked: the
    tokenizers must agree on token strings (`require_same_tokenizer`) and the model's embedding table must
    cover the target tokenizer's ids. The model may use another dtype than the target (logits are float32),
    but must sit on the target's device.
    """

    name = "draft-model"

    def __init__(
        self,
        model: PreTrainedModel,
        *,
        draft_tokenizer: PreTrainedTokenizerBase | None = None,
        target_tokenizer: PreTrainedTokenizerBase | None = None,
        cache_kind: str = "dynamic",
    ) -> None:
        if (draft_tokenizer is None) != (target_tokenizer is None):
            raise ConfigError(
                "Pass both draft_tokenizer and target_tokenizer to have the pair checked, or neither."
            )
        if target_tokenizer is not None:
            require_same_tokenizer(target_tokenizer, draft_tokenizer)
            require_vocab_covers(model, target_tokenizer, role="draft")
        self.model = model
        self.vocab_size = model.get_input_embeddings().num_embeddings  # ids the draft model can read
        self.max_positions = context_length(model)
        self.cache_kind = cache_kind  # "dynamic" or "preallocated" (see `new_cache`)
        self._cache = self._new_cache()
        self._cached_ids = torch.empty(1, 0, dtype=torch.long, device=model.device)  # [1, C]: tokens in the cache

    @classmethod
    def for_pair(cls, pair: ModelPair) -> "DraftModelDrafter":
        """The drafter for ``pair.draft``, after checking it against ``pair.target_tokenizer`` (see the class)."""
        return cls(pair.draft, draft_tokenizer=pair.draft_tokenizer, target_tokenizer=pair.target_tokenizer)

    def _new_cache(self):
        if self.cache_kind == "dynamic":
            return new_cache(self.model)
        if self.cache_kind == "preallocated" and getattr(self, "_cache", None) is not None and hasattr(self._cache, "length"):
            crop_cache(self._cache, 0)  # reuse the storage allocated once: rollback to 0 is a pointer move
            return self._cache
        return new_cache(self.model, self.cache_kind)

    @property
    def cache(self):
        """The draft model's KV cache (read-only use: memory accounting, tests)."""
        return self._cache

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return self.model.device

    def begin(self, input_ids: torch.Tensor) -> None:
        """Start a new generation: an empty cache (the prompt is read by the first `propose`)."""
        check_input_ids(input_ids, self.model)
        self._cache = self._new_cache()
        self._cached_ids = input_ids[:, :0].to(self.model.device)

    def _sync_cache(self, sequence: torch.Tensor) -> None:
        """Crop the cache to the longest prefix it shares with ``sequence``, keeping >= 1 token to feed.

        Normally a no-op (`accept` already cropped); it makes the drafter correct even if a caller forgot
        `accept` or reused the drafter on another sequence without `begin`.
        """
        cached = self._cached_ids.shape[1]
        limit = min(cached, sequence.shape[1] - 1)
        mismatch = (self._cached_ids[0, :limit] != sequence[0, :limit]).nonzero()
        keep = int(mismatch[0, 0]) if mismatch.numel() else limit
        if keep < cached:
            crop_cache(self._cache, keep)
            self._cached_ids = self._cached_ids[:, :keep]

    @torch.inference_mode()
    def propose(
        self, sequence: torch.Tensor, k: int, sampling: SamplingConfig, generator: torch.Generator | None
    ) -> Draft:
        """Up to ``k`` tokens continuing ``sequence: LongTensor[1, L]``: argmax (greedy, one-hot ``probs``) or
        drawn from ``logits_to_probs(logits, sampling)`` with ``generator`` (those rows are ``probs``).

        Fewer than ``k`` only when the draft model's context would overflow (then possibly 0).
        """
        sequence = sequence.to(self.model.device)
        self._sync_cache(sequence)
        pending = sequence[:, self._cached_ids.shape[1] :]  # [1, P], P >= 1: what the cache lacks
        if int(pending.max()) >= self.vocab_size:
            raise InputError(
                f"The sequence contains token id {int(pending.max())}, outside the draft model's vocabulary of "
                f"{self.vocab_size}. The draft model must cover every id the target can produce."
            )
        # feeding the pending tokens then k - 1 drafts uses positions up to L + k - 2 < max_positions
        k = max(0, min(k, self.max_positions - sequence.shape[1] + 1))
        tokens: list[torch.Tensor] = []  # k' x LongTensor[] (scalars)
        rows: list[torch.Tensor] = []  # k' x FloatTensor[V]
        step_input = pending
        for _ in range(k):
            logits = forward_with_cache(self.model, step_input, self._cache, logits_to_keep=1)  # [1, 1, V]
            probs = logits_to_probs(logits[0, -1], sampling)  # [V] the q this token is drawn from
            token = probs.argmax() if sampling.is_greedy else sample_token(probs, generator)  # LongTensor[]
            tokens.append(token)
            rows.append(probs)
            step_input = token.view(1, 1)
        if not tokens:
            return Draft.empty(self.model.device)
        drafted = torch.stack(tokens)  # [k']
        self._cached_ids = torch.cat([sequence, drafted[:-1].view(1, -1)], dim=1)  # the cache: sequence + d_1..d_{k'-1}
        return Draft(tokens=drafted, probs=torch.stack(rows), forwards=len(tokens))

    def accept(self, sequence_length: int) -> None:
        """Crop the cache to ``sequence_length - 1`` tokens: everything before the target's last token."""
        keep = min(self._cached_ids.shape[1], max(sequence_length - 1, 0))
        if keep < cache_length(self._cache):
            crop_cache(self._cache, keep)
        self._cached_ids = self._cached_ids[:, :keep]
