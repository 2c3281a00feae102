"""Speculative decoding: a cheap drafter proposes, the target verifies a whole block in one forward.

One round, with the committed sequence ``x_1 .. x_L`` (the target's KV cache holds ``x_1 .. x_{L-1}``):

    1. draft:   d_1 .. d_k = drafter.propose(x, k)                      k <= gamma cheap steps
    2. verify:  one target forward over [x_L, d_1, ..., d_k]            k + 1 rows of logits, one expensive step
    3. decide:  n accepted drafts + 1 recovered-or-bonus token          (`verify_greedy` / `verify_exact`)
    4. commit:  append them; crop the target's cache to the committed length - 1 and tell the drafter
                (`drafter.accept`) so both roll back past the first rejected draft

The target runs once per round instead of once per token, so a round emitting ``n + 1`` tokens saves ``n``
target forwards. With greedy verification the output is token-identical to the target's own greedy decoding;
with sampling, exact verification (rejection sampling) makes it distributed exactly like the target's own samples.
"""

from typing import Literal

import torch
from transformers import PreTrainedModel

from .drafters.base import Draft, Drafter, check_draft
from .errors import ConfigError
from .memory import cache_bytes
from .modeling import cache_length, check_generation_inputs, context_length, crop_cache, forward_with_cache, new_cache
from .sampling import GREEDY, SamplingConfig, logits_to_probs, make_generator, sample_token
from .trace import GenerationResult, RoundRecord, Trace
from .verify import _check_lenience, verify_exact, verify_greedy, verify_relaxed

VERIFICATIONS = ("exact", "relaxed")


def check_gamma(gamma: object) -> None:
    """Refuse a draft length ``gamma`` that is not an integer >= 1."""
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 1:
        raise ConfigError(
            f"gamma (the number of draft tokens per round) must be an integer >= 1, got {gamma!r}. "
            "Typical values are 2 to 8; use autoregressive_generate for plain decoding."
        )


def check_same_device(target_device: torch.device | str, drafter_device: torch.device | str | None) -> None:
    """Refuse a drafter whose model sits on another device than the target (None: a drafter with no model)."""
    if drafter_device is None:
        return
    target_device, drafter_device = torch.device(target_device), torch.device(drafter_device)
    if target_device != drafter_device:
        raise ConfigError(
            f"The target model is on {target_device} but the drafter's model is on {drafter_device}. Put both "
            f"on one device, e.g. draft_model.to(target.device) (or load them with load_pair(device=...))."
        )


def _check_sampling(sampling: SamplingConfig, verification: str = "exact", lenience: float | None = None) -> None:
    """Refuse a sampling config that is not a `SamplingConfig` and an unknown or inconsistent verification mode."""
    if not isinstance(sampling, SamplingConfig):
        raise ConfigError(f"sampling must be a SamplingConfig, got {type(sampling).__name__}. Use e.g. GREEDY.")
    if verification not in VERIFICATIONS:
        raise ConfigError(
            f"verification must be 'exact' (rejection sampling, keeps the target's distribution) or 'relaxed' "
            f"(accepts more, changes the distribution), got {verification!r}."
        )
    if verification == "relaxed":
        if sampling.is_greedy:
            raise ConfigError(
                "verification='relaxed' relaxes the acceptance test of *sampled* drafts; greedy decoding "
                "(temperature 0) has nothing to relax. Sample (e.g. SamplingConfig(temperature=1.0)) or use 'exact'."
            )
        _check_lenience(lenience)
    elif lenience is not None:
        raise ConfigError(
            f"lenience={lenience!r} only applies to verification='relaxed'; exact verification has no lenience."
        )


def _verify(
    target_logits: torch.Tensor,
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor | None,
    sampling: SamplingConfig,
    generator: torch.Generator | None,
    verification: str = "exact",
    lenience: float | None = None,
) -> tuple[int, int]:
    """Accepted count and recovered/bonus token for one round.

    Greedy: `verify_greedy` on the logits. Sampling: `verify_exact` (or `verify_relaxed`) with
    ``p = logits_to_probs(target_logits, sampling)``, the same processing the drafter applied to get ``draft_probs``
    (its q) and the baseline applies before sampling, and ``generator`` for the acceptance draws."""
    if sampling.is_greedy:
        return verify_greedy(target_logits, draft_tokens)
    p = logits_to_probs(target_logits, sampling)  # [k + 1, V]: the target's processed distributions
    q = None if draft_probs is None else draft_probs.to(p.device)  # [k, V] or None (a point mass per draft)
    if verification == "relaxed":
        result = verify_relaxed(p, q, draft_tokens, generator, lenience=lenience)  # NOT distribution-preserving
    else:
        result = verify_exact(p, q, draft_tokens, generator)
    return result.num_accepted, result.next_token


def speculative_generate(
    target: PreTrainedModel,
    drafter: Drafter,
    input_ids: torch.Tensor,
    *,
    gamma: int,
    max_new_tokens: int,
    sampling: SamplingConfig = GREEDY,
    eos_token_id: int | None = None,
    seed: int | None = None,
    verification: Literal["exact", "relaxed"] = "exact",
    lenience: float | None = None,
    cache_kind: str = "dynamic",
) -> GenerationResult:
    """Generate up to ``max_new_tokens`` tokens after ``input_ids: LongTensor[1, T]`` with ``target``,
    drafting up to ``gamma`` tokens per round with ``drafter``.

    Same stopping rules and result type as `autoregressive_generate`: stops after exactly ``max_new_tokens``
    tokens (the last rounds draft fewer, never emit more) or right after ``eos_token_id`` (even when the EOS
    is an accepted draft token in the middle of a round).

    - Greedy (``sampling=GREEDY``, the default): `verify_greedy`; the output is token-identical to
      ``autoregressive_generate(target, ...)``.
    - Sampling (``SamplingConfig(temperature=..., top_k=..., top_p=...)``): `verify_exact`, rejection sampling
      against ``p = logits_to_probs(target_logits, sampling)``; the output is distributed exactly like
      ``autoregressive_generate(target, ..., sampling=sampling)`` (not token-identical: the random draws differ),
      provided the drafter reports the q it really sampled from. ``seed`` makes the run reproducible: same seed,
      same tokens.
    - ``verification="relaxed"`` with ``lenience=l`` (sampling only) uses `verify_relaxed`, accepting with
      ``min(1, l * p / q)``. **It does NOT preserve the target's distribution**: more tokens per round, different
      text statistics. It exists to measure that trade-off; keep the default ``"exact"`` otherwise.

    The trace has one `RoundRecord` per target forward: the prefill round (the prompt's forward, first token,
    ``drafted=0``) then one per verification. ``RoundRecord.accepted`` counts the drafts the target accepted;
    only in the final round, when an accepted EOS ends generation, can ``emitted`` be below ``accepted + 1``.
    ``trace.peak_kv_bytes`` holds the most bytes the target's KV cache (``"target"``) and the drafter's
    (``"draft"``, for drafters exposing a ``cache``) allocated, measured after each forward, before rollback.

    ``cache_kind`` chooses the target's cache (see `new_cache`): ``"dynamic"`` or ``"preallocated"``; the
    tokens are the same.
    """
    check_gamma(gamma)
    if not all(callable(getattr(drafter, method, None)) for method in ("begin", "propose", "accept")):
        raise ConfigError(
            f"drafter must be a Drafter with begin/propose/accept methods (e.g. DraftModelDrafter(draft_model)), "
            f"got {type(drafter).__name__}."
        )
    _check_sampling(sampling, verification, lenience)
    check_generation_inputs(target, input_ids, max_new_tokens)
    device = target.device
    check_same_device(device, getattr(drafter, "device", None))
    prompt_length = input_ids.shape[1]
    input_ids = input_ids.to(device)
    generator = make_generator(seed, device)
    target_vocab = target.get_input_embeddings().num_embeddings
    max_positions = context_length(target)

    with torch.inference_mode():
        trace = Trace.start(device)
        cache = new_cache(target, cache_kind)

        # prefill round: the prompt's forward gives the first token, exactly as in the baseline
        drafter.begin(input_ids)
        after_begin = trace.elapsed(device)
        logits = forward_with_cache(target, input_ids, cache, logits_to_keep=1)  # [1, 1, V]
        trace.note_kv_bytes("target", cache_bytes(cache).allocated)
        token = sample_token(logits_to_probs(logits[0, -1], sampling), generator)  # LongTensor[]
        sequence = torch.cat([input_ids, token.view(1, 1)], dim=1)  # [1, T + 1]
        now = trace.elapsed(device)
        trace.add_round(RoundRecord(0, 0, 1, after_begin, now - after_begin, draft_forwards=0), now)
        trace.prefill_time = now
        drafter.accept(sequence.shape[1])  # (nothing to roll back yet; keeps the begin/propose/accept protocol)
        finished = eos_token_id is not None and token.item() == eos_token_id

        while not finished and sequence.shape[1] - prompt_length < max_new_tokens:
            length = sequence.shape[1]  # L committed tokens; the target's cache holds the first L - 1
            remaining = max_new_tokens - (length - prompt_length)
            # k drafts + 1 recovered/bonus token must fit in `remaining`; the forward reaches position L + k - 1
            k = min(gamma, remaining - 1, max_positions - length)

            round_start = trace.elapsed(device)
            draft = drafter.propose(sequence, k, sampling, generator) if k > 0 else Draft.empty(device)
            check_draft(draft, k)
            draft_tokens = draft.tokens.to(device)  # LongTensor[k'], k' <= k
            if draft_tokens.numel() and int(draft_tokens.max()) >= target_vocab:
                raise ConfigError(
                    f"The drafter proposed token id {int(draft_tokens.max())}, outside the target's vocabulary of "
                    f"{target_vocab}. Draft and target must share a tokenizer (see specdec_lib.vocab)."
                )
            drafted = len(draft)
            if getattr(drafter, "cache", None) is not None:
                trace.note_kv_bytes("draft", cache_bytes(drafter.cache).allocated)
            verify_start = trace.elapsed(device)

            pending = sequence[:, cache_length(cache) :]  # [1, 1]: the last committed token, not yet in the cache
            step_input = torch.cat([pending, draft_tokens.view(1, -1)], dim=1)  # [1, 1 + k']
            logits = forward_with_cache(target, step_input, cache, logits_to_keep=drafted + 1)[0]  # [k' + 1, V]
            trace.note_kv_bytes("target", cache_bytes(cache).allocated)  # the peak: drafts in, before rollback
            accepted, next_token = _verify(
                logits, draft_tokens, draft.probs, sampling, generator, verification, lenience
            )

            new = draft_tokens[:accepted].tolist() + [next_token]  # accepted drafts + recovered/bonus token
            if eos_token_id is not None and eos_token_id in new:
                new = new[: new.index(eos_token_id) + 1]  # an accepted EOS ends generation right after it
                finished = True
            new = new[:remaining]  # never more than max_new_tokens (k <= remaining - 1 already ensures it)
            sequence = torch.cat([sequence, torch.tensor([new], dtype=torch.long, device=device)], dim=1)
            crop_cache(cache, sequence.shape[1] - 1)  # drop rejected drafts; the last token is fed next round
            verify_end = trace.elapsed(device)

            drafter.accept(sequence.shape[1])
            now = trace.elapsed(device)
            record = RoundRecord(
                drafted=drafted,
                accepted=accepted,
                emitted=len(new),
                draft_time=(verify_start - round_start) + (now - verify_end),
                verify_time=verify_end - verify_start,
                draft_forwards=draft.forwards,
            )
            trace.add_round(record, verify_end)

    name = getattr(drafter, "name", type(drafter).__name__)
    return GenerationResult(sequence=sequence, prompt_length=prompt_length, method=f"speculative[{name}]", trace=trace)
