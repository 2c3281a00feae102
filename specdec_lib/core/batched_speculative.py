"""Batched speculative decoding: B prompts at once, one target forward verifies every row's drafts.

transformers' assisted generation refuses batch > 1 because rows accept different numbers of drafts, so their
caches stop being the same length. Here one round, over the ``B`` active rows (row b has committed ``L_b`` tokens,
its last one not yet in the target's cache), is:

    1. draft:   up to k_b = min(gamma, remaining_b - 1) tokens per row (`BatchedDrafter.propose`); ragged: a
                prompt-lookup row may find nothing (k'_b = 0). tokens [B, K], K = max k'_b, padded
    2. verify:  one target forward over [B, 1 + K]: the last committed token + the row's drafts + holes,
                with the attention mask and per-row position ids; logits [B, 1 + K, V]
    3. decide:  per row, `verify_greedy(logits[b, :1 + k'_b], drafts_b)` or `verify_exact` on
                ``logits_to_probs(logits[b, :1 + k'_b], sampling)`` with the row's q (None: a point mass);
                row b keeps n_b drafts + 1 recovered-or-bonus token (never more than max_new_tokens, cut after EOS)
    4. rollback: every cache keeps, per row, only what was committed (below); finished rows leave the batch

**Rollback: holes in one shared cache** (`specdec_lib.core.batching.BatchedKV`). All rows share one cache of ``S`` slots
and a mask ``[B, S]`` of real slots. A rejected draft's slot is not removed but marked as a hole (mask 0): no later
token attends to it, and position ids count real slots only, so the next token of the row takes the position right
after its last kept one. Slots that are holes in every row are cut off (so the cache grows by the *longest* kept
block per round, not by 1 + K). Example, gamma = 2, two rows whose last committed tokens are ``c`` and ``z``:

    target input [B=2, 1 + K=3]      c  d1 d2            z  e1 --            (-- : row 2 drafted one token: a hole)
    verdict                          keeps d1, adds r     rejects e1, adds s
    mask of the three new slots      1  1  0             1  0  0              d2, e1 and the padding become holes
    positions of the next tokens     L1 + 1 (r)          L2 (s)               counted over real slots only

The draft model's cache (`BatchedDraftModel`) is a `BatchedKV` too, rolled back the same way: it keeps, per row,
the committed tokens but the last (``truncate(L'_b - 1)``); at the next round each row feeds what its cache lacks
(1 token, or 2 after a full acceptance, or many after plain steps), right-aligned in one ``[B, P]`` block whose
left padding is, again, holes.

**disable_by_batch_size = N** (vLLM's ``disable_by_batch_size``): while more than N rows are active, a round drafts
nothing and is a plain batched target step (``[B, 1]``; speculation pays least when the batch already keeps the
device busy); once at most N rows are active (others finished), rounds speculate again. A draft model then feeds
the tokens it missed at its next draft.

Greedy: every row is token-identical to ``autoregressive_generate(target, prompt_b, ...)`` alone. Sampling: every
row is distributed like the target's own samples (exact verification), drawn from one ``seed``-ed generator.
"""

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from .batching import PAD_ID, BatchedKV, BatchedResult, BatchRun, ForwardRecord, as_prompt_lists, first_tokens
from ..drafters.prompt_lookup import check_ngram_settings, find_continuation
from .errors import ConfigError
from .forward import context_length
from .sampling import GREEDY, SamplingConfig, logits_to_probs, make_generator, sample_token
from .speculative import check_gamma, check_same_device, check_sampling
from .stopping import AUTO, stop_token_ids
from .verify import VerifyResult, verify_exact, verify_greedy


@dataclass
class BatchedDraft:
    """What a batched drafter proposes in one round, for the B active rows.

    ``tokens: LongTensor[B, K]`` row b's draft is ``tokens[b, :lengths[b]]`` (the rest is padding);
    ``lengths: list[int]`` k'_b <= the k_b asked for; ``probs: FloatTensor[B, K, V] | None`` the distributions over
    the target's V ids the tokens were drawn from (None: point masses, a greedy draft or a copy); ``forwards`` the
    drafter's model forwards this round (each over all rows).
    """

    tokens: torch.Tensor
    lengths: list[int]
    probs: torch.Tensor | None = None
    forwards: int = 0


class BatchedDrafter(ABC):
    """Interface of a drafter for a batch (the batched sibling of `specdec_lib.drafters.base.Drafter`).

    Rows are addressed by their place in the batch, which shrinks as rows finish (`select`). Per generation:
    ``begin`` once, then per round ``propose`` (drafting rounds only) and ``accept`` (every round), and ``select``
    whenever rows leave the batch.
    """

    name: str = "batched-drafter"
    device: torch.device | None = None  # None: runs no model

    def begin(self, sequences: list[list[int]], *, max_length: int, target_vocab_size: int) -> None:
        """A new generation: ``sequences`` each row's prompt + first token; ``max_length`` the longest a row gets
        (prompt + max_new_tokens); ``target_vocab_size`` the V that ``probs`` rows cover."""

    @abstractmethod
    def propose(self, sequences: list[list[int]], ks: list[int], sampling: SamplingConfig,
                generator: torch.Generator | None) -> BatchedDraft:
        """Up to ``ks[b]`` tokens continuing ``sequences[b]`` for every row b (same rules as `Drafter.propose`)."""

    def accept(self, lengths: list[int]) -> None:
        """Row b has now committed ``lengths[b]`` tokens: forget what it drafted beyond ``lengths[b] - 1``."""

    def select(self, rows: torch.Tensor) -> None:
        """Only the rows ``rows: LongTensor[B']`` (batch indices, in order) go on."""


class BatchedPromptLookup(BatchedDrafter):
    """Prompt lookup per row: `find_continuation` over each row's own sequence (no model, no state, q = None)."""

    name = "prompt-lookup"

    def __init__(self, *, min_ngram: int = 1, max_ngram: int = 3, rule: str = "first") -> None:
        check_ngram_settings(min_ngram, max_ngram, rule)
        self.min_ngram, self.max_ngram, self.rule = min_ngram, max_ngram, rule

    def propose(self, sequences: list[list[int]], ks: list[int], sampling: SamplingConfig,
                generator: torch.Generator | None) -> BatchedDraft:
        drafts = [find_continuation(seq, k, min_ngram=self.min_ngram, max_ngram=self.max_ngram, rule=self.rule)
                  for seq, k in zip(sequences, ks)]
        lengths = [len(d) for d in drafts]
        tokens = torch.full((len(drafts), max(lengths)), PAD_ID, dtype=torch.long)
        for b, draft in enumerate(drafts):
            tokens[b, : len(draft)] = torch.tensor(draft, dtype=torch.long)
        return BatchedDraft(tokens, lengths)


class BatchedDraftModel(BatchedDrafter):
    """A small causal LM on the target's tokenizer, drafting for all rows at once with its own `BatchedKV`.

    Per round: one forward over ``[B, P]`` (each row's tokens its cache lacks, right-aligned), then one ``[B, 1]``
    forward per further draft token; a row that needs fewer drafts than the longest feeds holes. Drafts are the
    argmax (greedy, ``probs=None``) or drawn from ``logits_to_probs(logits, sampling)``, those rows (over the
    target's ids, zero-padded where the draft's head is narrower) being ``probs``.
    """

    name = "draft-model"

    def __init__(self, model: PreTrainedModel) -> None:
        self.model = model
        self.vocab_size = model.get_input_embeddings().num_embeddings  # ids the draft can read
        self.state: BatchedKV | None = None
        self.target_vocab_size = self.vocab_size

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return self.model.device

    def begin(self, sequences: list[list[int]], *, max_length: int, target_vocab_size: int) -> None:
        if self.vocab_size < target_vocab_size:
            raise ConfigError(
                f"The draft model reads {self.vocab_size} token ids but the target produces {target_vocab_size}: "
                "the draft vocabulary must cover the target's. Use a draft on the target's tokenizer (see "
                "specdec_lib.core.vocab) or the cross-tokenizer drafter (batch size 1)."
            )
        if context_length(self.model) < max_length:
            raise ConfigError(
                f"The draft model's context ({context_length(self.model)} positions) is shorter than the longest "
                f"row's prompt + max_new_tokens ({max_length}). Shorten the prompts or generate fewer tokens."
            )
        self.target_vocab_size = target_vocab_size
        self.state = BatchedKV(self.model, len(sequences))

    @torch.inference_mode()
    def propose(self, sequences: list[list[int]], ks: list[int], sampling: SamplingConfig,
                generator: torch.Generator | None) -> BatchedDraft:
        device, state = self.model.device, self.state
        pending = [seq[real:] for seq, real in zip(sequences, state.real.tolist())]  # >= 1 token per row
        width = max(len(p) for p in pending)
        step = torch.full((len(pending), width), PAD_ID, dtype=torch.long)
        for b, ids in enumerate(pending):
            step[b, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
        valid = torch.arange(width) >= width - torch.tensor([len(p) for p in pending])[:, None]  # [B, P]
        need = torch.tensor(ks, device=device)  # [B]: k_b
        kept = min(self.model.get_output_embeddings().out_features, self.target_vocab_size)
        tokens, rows = [], []
        logits = state.append(step.to(device), valid.to(device))[:, -1, :kept]  # [B, V_kept]
        for i in range(max(ks)):
            if i:  # feed d_i to the rows that still need a draft after it (the others get a hole)
                logits = state.append(tokens[-1][:, None], (need > i)[:, None])[:, -1, :kept]
            if sampling.is_greedy:
                token = logits.argmax(dim=-1)  # [B]
            else:
                probs = logits_to_probs(logits, sampling)  # [B, V_kept]: the q each token is drawn from
                token = sample_token(probs, generator)
                rows.append(torch.nn.functional.pad(probs, (0, self.target_vocab_size - kept)))
            tokens.append(token)
        return BatchedDraft(torch.stack(tokens, dim=1), list(ks), torch.stack(rows, dim=1) if rows else None,
                            forwards=max(ks))

    def accept(self, lengths: list[int]) -> None:
        """Keep each row's committed tokens but the last (its accepted drafts are the tokens it fed)."""
        self.state.truncate(torch.tensor(lengths, device=self.model.device) - 1)

    def select(self, rows: torch.Tensor) -> None:
        self.state.select(rows)


def make_batched_drafter(drafter: object) -> BatchedDrafter:
    """``"prompt-lookup"``, a draft model (``PreTrainedModel``) or a `BatchedDrafter` -> a `BatchedDrafter`."""
    if isinstance(drafter, BatchedDrafter):
        return drafter
    if isinstance(drafter, PreTrainedModel):
        return BatchedDraftModel(drafter)
    if drafter == "prompt-lookup":
        return BatchedPromptLookup()
    raise ConfigError(
        f"drafter must be 'prompt-lookup', a draft model (a PreTrainedModel on the target's tokenizer) or a "
        f"BatchedDrafter (BatchedDraftModel(model), BatchedPromptLookup(max_ngram=3)), got {drafter!r}."
    )


def _check_batched_draft(draft: BatchedDraft, ks: list[int], target_vocab: int) -> None:
    """Refuse a malformed `BatchedDraft` (shapes, lengths over the ask, ids the target cannot read)."""
    if not isinstance(draft, BatchedDraft) or draft.tokens.ndim != 2 or draft.tokens.dtype != torch.long:
        raise ConfigError("A batched drafter's propose() must return a BatchedDraft with tokens LongTensor[B, K].")
    width = draft.tokens.shape[1]
    if len(draft.lengths) != len(ks) or any(not 0 <= n <= min(k, width) for n, k in zip(draft.lengths, ks)):
        raise ConfigError(f"Draft lengths {draft.lengths} exceed the tokens asked for, {ks} (or the tokens given).")
    if draft.probs is not None and tuple(draft.probs.shape) != (*draft.tokens.shape, target_vocab):
        raise ConfigError(f"BatchedDraft.probs must have shape [B, K, V={target_vocab}] or be None, "
                          f"got {list(draft.probs.shape)}.")
    proposed = [int(draft.tokens[b, :n].max()) for b, n in enumerate(draft.lengths) if n]
    if proposed and max(proposed) >= target_vocab:
        raise ConfigError(f"The drafter proposed token id {max(proposed)}, outside the target's vocabulary of "
                          f"{target_vocab}. Draft and target must share a tokenizer (see specdec_lib.core.vocab).")


def _verdict(logits: torch.Tensor, tokens: torch.Tensor, q: torch.Tensor | None, sampling: SamplingConfig,
             generator: torch.Generator | None) -> VerifyResult:
    """One row's verdict: ``logits: [1 + k, V]``, ``tokens: [k]``, ``q: [k, V] | None`` (the library's verifiers)."""
    if sampling.is_greedy:
        return verify_greedy(logits, tokens)
    return verify_exact(logits_to_probs(logits, sampling), q, tokens, generator)


def _check_disable(disable_by_batch_size: object) -> None:
    if disable_by_batch_size is not None and (
        isinstance(disable_by_batch_size, bool) or not isinstance(disable_by_batch_size, int)
        or disable_by_batch_size < 1
    ):
        raise ConfigError(
            f"disable_by_batch_size must be None (always speculate) or an integer >= 1 (speculate only while at "
            f"most that many rows are active), got {disable_by_batch_size!r}."
        )


def batched_speculative_generate(
    target: PreTrainedModel,
    drafter: BatchedDrafter | PreTrainedModel | str,
    prompts: Sequence[torch.Tensor],
    *,
    gamma: int,
    max_new_tokens: int,
    sampling: SamplingConfig = GREEDY,
    eos_token_id: int | Sequence[int] | str | None = AUTO,
    seed: int | None = None,
    disable_by_batch_size: int | None = None,
) -> BatchedResult:
    """Speculative decoding of several prompts (``LongTensor[T_i]`` or ``[1, T_i]``) at once (module docstring).

    ``drafter``: a draft model on the target's tokenizer (wrapped in `BatchedDraftModel`), ``"prompt-lookup"``
    (`BatchedPromptLookup` with its defaults) or any `BatchedDrafter`. Each row stops after ``max_new_tokens``
    tokens (the last rounds draft fewer) or right after a stop id (``eos_token_id``, `specdec_lib.core.stopping`), even
    an accepted draft; finished rows leave the batch. ``disable_by_batch_size``: speculate only while at most that
    many rows are active (None: always). Returns a `BatchedResult` with per-row accepted / drafted / rounds.
    """
    check_gamma(gamma)
    check_sampling(sampling)
    _check_disable(disable_by_batch_size)
    rows = as_prompt_lists(target, prompts, max_new_tokens)
    drafter = make_batched_drafter(drafter)
    device = target.device
    check_same_device(device, drafter.device)
    target_vocab = target.get_output_embeddings().out_features
    generator = make_generator(seed, device)
    run = BatchRun(rows, max_new_tokens, stop_token_ids(target, eos_token_id), device)
    forwards = [ForwardRecord(len(rows))]
    accepted, drafted, rounds = [0] * len(rows), [0] * len(rows), [0] * len(rows)

    with torch.inference_mode():
        state = BatchedKV(target, len(rows))
        finished = first_tokens(state, run, sampling, generator)
        drafter.begin(run.sequences, max_length=max(map(len, rows)) + max_new_tokens, target_vocab_size=target_vocab)
        run.retire(finished, state, drafter)
        while run.active:
            sequences = [run.sequences[row] for row in run.active]
            ks = [min(gamma, run.remaining(row) - 1) for row in run.active]  # k_b drafts + 1 token fit
            speculate = max(ks) > 0 and (disable_by_batch_size is None or len(ks) <= disable_by_batch_size)
            draft = drafter.propose(sequences, ks, sampling, generator) if speculate else None
            if draft is not None:
                _check_batched_draft(draft, ks, target_vocab)
            lengths = draft.lengths if draft is not None else [0] * len(ks)
            width = max(lengths)  # K
            step = torch.tensor([[seq[-1]] for seq in sequences], dtype=torch.long)  # [B, 1]
            if width:
                step = torch.cat([step, draft.tokens[:, :width].cpu()], dim=1)  # [B, 1 + K]
            valid = torch.arange(1 + width) <= torch.tensor(lengths)[:, None]  # [B, 1 + K]: token + own drafts
            logits = state.append(step.to(device), valid.to(device), logits_to_keep=1 + width)  # [B, 1 + K, V]
            forwards.append(ForwardRecord(len(ks), sum(lengths)))

            probs = None if draft is None else draft.probs  # [B, K, V] or None (point masses)
            verdicts = [_verdict(logits[b, : 1 + k], step[b, 1 : 1 + k].to(device),
                                 None if probs is None else probs[b, :k], sampling, generator)
                        for b, k in enumerate(lengths)]
            at = run.now()
            finished = []
            for b, (row, verdict) in enumerate(zip(run.active, verdicts)):
                accepted[row] += verdict.num_accepted
                drafted[row] += lengths[b]
                rounds[row] += 1
                new = step[b, 1 : 1 + verdict.num_accepted].tolist() + [verdict.next_token]
                finished.append(run.commit(row, new, at))
            committed = [len(run.sequences[row]) for row in run.active]
            state.truncate(torch.tensor(committed, device=device) - 1)  # the cache holds all but the last token
            drafter.accept(committed)
            run.retire(finished, state, drafter)

    return BatchedResult(run.new_tokens(), run.token_times, run.now(), forwards,
                         method=f"batched-speculative[{drafter.name}]", accepted=accepted, drafted=drafted,
                         rounds=rounds)
