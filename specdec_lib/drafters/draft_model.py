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

from ..core.errors import ConfigError, InputError
from ..core.forward import check_input_ids
from ..loading import ModelPair
from ..core.sampling import SamplingConfig, logits_to_probs, sample_token
from ..core.vocab import require_same_tokenizer, require_vocab_covers
from .base import Draft, Drafter
from .cached_model import CachedModel
from .schedules import DraftStopRule


class DraftModelDrafter(Drafter):
    """Draft with a small causal LM that shares the target's tokenizer.

    ``DraftModelDrafter(model)`` trusts that ``model`` reads the target's token ids. Pass both tokenizers
    (``draft_tokenizer=``, ``target_tokenizer=``), or build it with `for_pair`, to have that checked: the
    tokenizers must agree on token strings (`require_same_tokenizer`) and the model's embedding table must
    cover the target tokenizer's ids. The model may use another dtype than the target (logits are float32),
    but must sit on the target's device.

    Padded embedding tables (hub pairs often differ by padding: 151936 vs 152064 rows) are fine either way: the
    draft only ever proposes ids the target has (its logits are cut to the target's ``V`` before argmax or
    sampling, so draft-only ids get no mass), and ``Draft.probs`` rows are over the target's ``V`` ids (zero-padded
    when the draft's table is the smaller one).
    """

    name = "draft-model"
    proposes_target_ids = True  # its logits are cut to the ids both models have before argmax or sampling

    def __init__(
        self,
        model: PreTrainedModel,
        *,
        draft_tokenizer: PreTrainedTokenizerBase | None = None,
        target_tokenizer: PreTrainedTokenizerBase | None = None,
        cache_kind: str = "dynamic",
        stop_rule: DraftStopRule | None = None,
    ) -> None:
        if stop_rule is not None and not callable(getattr(stop_rule, "should_stop", None)):
            raise ConfigError(
                f"stop_rule must be a DraftStopRule (e.g. ConfidenceStop(0.4)) or None, got {type(stop_rule).__name__}."
            )
        if (draft_tokenizer is None) != (target_tokenizer is None):
            raise ConfigError(
                "Pass both draft_tokenizer and target_tokenizer to have the pair checked, or neither."
            )
        if target_tokenizer is not None:
            require_same_tokenizer(target_tokenizer, draft_tokenizer)
            require_vocab_covers(model, target_tokenizer, role="draft")
        self.model = model
        self.stop_rule = stop_rule  # None: always draft k tokens; else may stop a round early (drafters.schedules)
        if stop_rule is not None:
            self.name = f"draft-model+{stop_rule.name}"
        self.vocab_size = model.get_input_embeddings().num_embeddings  # ids the draft model can read
        self.state = CachedModel(model, cache_kind)  # its cache is allocated by `begin`, sized to the generation
        self.target_vocab_size = self.vocab_size
        self._check_ids = True

    @classmethod
    def for_pair(cls, pair: ModelPair) -> "DraftModelDrafter":
        """The drafter for ``pair.draft``, after checking it against ``pair.target_tokenizer`` (see the class)."""
        return cls(pair.draft, draft_tokenizer=pair.draft_tokenizer, target_tokenizer=pair.target_tokenizer)

    @property
    def cache(self):
        """The draft model's KV cache (read-only use: memory accounting, tests)."""
        return self.state.cache

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return self.model.device

    def begin(
        self, input_ids: torch.Tensor, *, max_length: int | None = None, target_vocab_size: int | None = None
    ) -> None:
        """Start a new generation: an empty cache sized for ``max_length`` positions (the prompt is read by the
        first `propose`); drafts and their q cover the target's ``target_vocab_size`` ids (default: the draft's)."""
        check_input_ids(input_ids, self.model)
        self.state.reset(max_length)
        self.target_vocab_size = self.vocab_size if target_vocab_size is None else int(target_vocab_size)
        # ids the target produces fit the draft's table when the target's vocabulary is no larger: no check needed
        self._check_ids = target_vocab_size is None or self.target_vocab_size > self.vocab_size

    def _over_target_ids(self, probs: torch.Tensor) -> torch.Tensor:
        """``probs: [V_kept]`` over the target's ids, zero-padded to the target's V when the draft's table is smaller."""
        missing = self.target_vocab_size - probs.shape[-1]
        return torch.nn.functional.pad(probs, (0, missing)) if missing > 0 else probs

    @torch.inference_mode()
    def propose(
        self, sequence: torch.Tensor, k: int, sampling: SamplingConfig, generator: torch.Generator | None
    ) -> Draft:
        """Up to ``k`` tokens continuing ``sequence: LongTensor[1, L]``: argmax (greedy, ``probs=None``) or drawn
        from ``logits_to_probs(logits, sampling)`` with ``generator`` (those rows, over the target's ids, are
        ``probs``).

        Fewer than ``k`` when the ``stop_rule`` stops the round early (after the token whose confidence, its
        probability under the draft, made it stop), or when the draft model's context would overflow (then
        possibly 0). A stop rule reads one number per drafted token back to the host.
        """
        context = sequence[0].to(self.model.device)
        pending = self.state.sync(context)  # [P], P >= 1: what the cache lacks
        if self._check_ids and int(pending.max()) >= self.vocab_size:
            raise InputError(
                f"The sequence contains token id {int(pending.max())}, outside the draft model's vocabulary of "
                f"{self.vocab_size}. The draft model must cover every id the target can produce."
            )
        # feeding the pending tokens then k - 1 drafts uses positions up to L + k - 2 < max_positions
        k = max(0, min(k, self.state.max_positions - context.shape[0] + 1))
        kept = min(self.vocab_size, self.target_vocab_size)  # ids both models have: draft-only ids get no mass
        tokens: list[torch.Tensor] = []  # k' x LongTensor[] (scalars, left on the device)
        rows: list[torch.Tensor] = []  # k' x FloatTensor[V] (sampling only)
        confidences: list[float] = []  # the draft's probability of each of its tokens (stop rules only)
        step_input = pending
        for _ in range(k):
            logits = self.state.feed(step_input)[:kept]  # [V_kept]
            if sampling.is_greedy:
                token = logits.argmax()  # a point mass: no q row to build
                probs = None
            else:
                probs = logits_to_probs(logits, sampling)  # [V_kept] the q this token is drawn from
                token = sample_token(probs, generator)
                rows.append(self._over_target_ids(probs))
            tokens.append(token)
            step_input = token.view(1)
            if self.stop_rule is not None:
                confidence = torch.softmax(logits, -1)[token] if probs is None else probs[token]
                confidences.append(float(confidence))
                if self.stop_rule.should_stop(confidences):
                    break
        if not tokens:
            return Draft.empty(self.model.device)
        probs = torch.stack(rows) if rows else None
        return Draft(tokens=torch.stack(tokens), probs=probs, forwards=len(tokens))

    def accept(self, sequence_length: int) -> None:
        """Crop the cache to ``sequence_length - 1`` tokens: everything before the target's last token. What is
        kept then agrees with the committed sequence (the prompt and the accepted drafts), so it is trusted."""
        self.state.crop(max(sequence_length - 1, 0))
        self.state.trust(sequence_length - 1)
