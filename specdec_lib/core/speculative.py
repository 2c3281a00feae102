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

from collections.abc import Sequence
from typing import Literal

import torch
from transformers import PreTrainedModel

from ..drafters.base import Draft, Drafter, check_draft
from .errors import ConfigError
from .caches import crop_cache, new_cache
from .memory import cache_bytes
from .forward import check_generation_inputs, context_length, forward_with_cache
from .sampling import GREEDY, SamplingConfig, logits_to_probs, make_generator, sample_token
from .stopping import AUTO, stop_token_ids
from .trace import GenerationResult, RoundRecord, Trace
from .block_verify import verify_block
from .verify import VerifyResult, check_lenience, verify_exact, verify_greedy, verify_relaxed

VERIFICATIONS = ("exact", "block", "relaxed")


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


def check_sampling(sampling: SamplingConfig, verification: str = "exact", lenience: float | None = None) -> None:
    """Refuse a sampling config that is not a `SamplingConfig` and an unknown or inconsistent verification mode."""
    if not isinstance(sampling, SamplingConfig):
        raise ConfigError(f"sampling must be a SamplingConfig, got {type(sampling).__name__}. Use e.g. GREEDY.")
    if verification not in VERIFICATIONS:
        raise ConfigError(
            f"verification must be 'exact' (token-wise rejection sampling), 'block' (block verification: the "
            f"accepted prefix decided jointly; both keep the target's distribution) or 'relaxed' (accepts more, "
            f"changes the distribution), got {verification!r}."
        )
    if verification == "relaxed":
        if sampling.is_greedy:
            raise ConfigError(
                "verification='relaxed' relaxes the acceptance test of *sampled* drafts; greedy decoding "
                "(temperature 0) has nothing to relax. Sample (e.g. SamplingConfig(temperature=1.0)) or use 'exact'."
            )
        check_lenience(lenience)
    elif lenience is not None:
        raise ConfigError(
            f"lenience={lenience!r} only applies to verification='relaxed'; {verification} verification has no "
            "lenience."
        )


def _verify(
    target_logits: torch.Tensor,
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor | None,
    sampling: SamplingConfig,
    generator: torch.Generator | None,
    verification: str = "exact",
    lenience: float | None = None,
) -> VerifyResult:
    """The verdict of one round: `verify_greedy` on the logits (greedy; block verification coincides with it at
    temperature 0), or (sampling) `verify_exact` / `verify_block` / `verify_relaxed` with
    ``p = logits_to_probs(target_logits, sampling)``, the same processing the drafter applied to get ``draft_probs``
    (its q) and the baseline applies before sampling, and ``generator`` for the acceptance draws."""
    if sampling.is_greedy:
        return verify_greedy(target_logits, draft_tokens)
    p = logits_to_probs(target_logits, sampling)  # [k + 1, V]: the target's processed distributions
    q = None if draft_probs is None else draft_probs.to(p.device)  # [k, V] or None (a point mass per draft)
    if verification == "relaxed":
        return verify_relaxed(p, q, draft_tokens, generator, lenience=lenience)  # NOT distribution-preserving
    if verification == "block":
        return verify_block(p, q, draft_tokens, generator)
    return verify_exact(p, q, draft_tokens, generator)


def _check_drafter(drafter: object) -> None:
    if not all(callable(getattr(drafter, method, None)) for method in ("begin", "propose", "accept")):
        raise ConfigError(
            f"drafter must be a Drafter with begin/propose/accept methods (e.g. DraftModelDrafter(draft_model)), "
            f"got {type(drafter).__name__}."
        )
    if getattr(drafter, "wants_target_hidden", False) and getattr(drafter, "shares_target_cache", False):
        raise ConfigError(
            f"{type(drafter).__name__} sets both wants_target_hidden and shares_target_cache: a drafter that runs "
            "the verification forward itself (shares_target_cache) already sees the target's hidden states."
        )


def _check_draft_ids(draft_tokens: torch.Tensor, target_vocab: int) -> None:
    """Refuse draft ids the target cannot read (its embedding lookup would fail deep inside torch)."""
    if draft_tokens.numel() and int(draft_tokens.max()) >= target_vocab:
        raise ConfigError(
            f"The drafter proposed token id {int(draft_tokens.max())}, outside the target's vocabulary of "
            f"{target_vocab}. Draft and target must share a tokenizer (see specdec_lib.core.vocab)."
        )


def _verification_forward(target: PreTrainedModel, drafter: Drafter, step_input: torch.Tensor, cache,
                          shares_cache: bool, wants_hidden: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The target's forward over ``step_input: [1, 1 + k']`` (the last committed token and the drafts): logits
    ``[1 + k', V]``, and the hidden states ``[1, 1 + k', D]`` for a ``wants_hidden`` drafter (else None). A
    ``shares_cache`` drafter (early exit) runs it itself: only the layers its drafts have not been through."""
    keep = step_input.shape[1]
    if shares_cache:
        return drafter.target_forward(step_input, cache, keep)[0], None
    if wants_hidden:
        logits, hidden = forward_with_cache(target, step_input, cache, logits_to_keep=keep, return_hidden=True)
        return logits[0], hidden
    return forward_with_cache(target, step_input, cache, logits_to_keep=keep)[0], None


def first_stop(tokens: list[int], stop_ids: frozenset[int]) -> int | None:
    """Index of the first stop id in ``tokens`` (None: there is none)."""
    return next((i for i, token in enumerate(tokens) if token in stop_ids), None)


def kept_until_stop(new_tokens: torch.Tensor, stop_ids: frozenset[int]) -> tuple[int, bool]:
    """How many of a round's ``new_tokens`` (LongTensor[emitted]) to keep, and whether generation ends there.

    An accepted stop id ends generation right after it: ``(index of the first stop + 1, True)``; without one, all
    of them and ``False``. With no stop ids the tokens are not read back from the device at all.
    """
    if stop_ids:
        stop = first_stop(new_tokens.tolist(), stop_ids)
        if stop is not None:
            return stop + 1, True
    return new_tokens.numel(), False


def speculative_generate(
    target: PreTrainedModel,
    drafter: Drafter,
    input_ids: torch.Tensor,
    *,
    gamma: int,
    max_new_tokens: int,
    sampling: SamplingConfig = GREEDY,
    eos_token_id: int | Sequence[int] | str | None = AUTO,
    seed: int | None = None,
    verification: Literal["exact", "block", "relaxed"] = "exact",
    lenience: float | None = None,
    cache_kind: str = "dynamic",
    record_memory: bool = False,
) -> GenerationResult:
    """Generate up to ``max_new_tokens`` tokens after ``input_ids: LongTensor[1, T]`` with ``target``,
    drafting up to ``gamma`` tokens per round with ``drafter``.

    Same stopping rules and result type as `autoregressive_generate`: stops after exactly ``max_new_tokens``
    tokens (the last rounds draft fewer, never emit more) or right after an end-of-sequence token (even when it is
    an accepted draft token in the middle of a round). ``eos_token_id``: ``"auto"`` (default) stops at the
    target's own EOS like transformers' ``generate``; an id or a list of ids; None never stops early (see
    `specdec_lib.core.stopping`).

    - Greedy (``sampling=GREEDY``, the default): `verify_greedy`; the output is token-identical to
      ``autoregressive_generate(target, ...)``.
    - Sampling (``SamplingConfig(temperature=..., top_k=..., top_p=...)``): `verify_exact`, rejection sampling
      against ``p = logits_to_probs(target_logits, sampling)``; the output is distributed exactly like
      ``autoregressive_generate(target, ..., sampling=sampling)`` (not token-identical: the random draws differ),
      provided the drafter reports the q it really sampled from. ``seed`` makes the run reproducible: same seed,
      same tokens.
    - ``verification="block"`` (sampling): `verify_block`, block verification (Sun et al. 2025): the accepted
      prefix is decided jointly, exactly the target's distribution again, and never fewer accepted tokens in
      expectation than token-wise ``"exact"``. Greedy: identical to ``"exact"``.
    - ``verification="relaxed"`` with ``lenience=l`` (sampling only) uses `verify_relaxed`, accepting with
      ``min(1, l * p / q)``. **It does NOT preserve the target's distribution**: more tokens per round, different
      text statistics. It exists to measure that trade-off; keep the default ``"exact"`` otherwise.

    The trace has one `RoundRecord` per target forward: the prefill round (the prompt's forward, first token,
    ``kind="prefill"``) then one per verification, whose ``kind`` says whether the target's token was recovered
    or a bonus. ``RoundRecord.accepted`` counts the drafts the target accepted; only in the final round, when an
    accepted EOS ends generation, can ``emitted`` be below ``accepted + 1``.

    ``cache_kind`` chooses the target's cache (see `specdec_lib.core.caches.new_cache`): ``"dynamic"`` or
    ``"preallocated"`` (sized to prompt + max_new_tokens + gamma + 1 positions); the tokens are the same.
    Host synchronisations (what a GPU waits for) per round: one for timing, just before the verification
    forward, so that the trace can tell drafting from verifying time (the other clock reads follow a read-back
    and do not wait); one to read the verdict (greedy: a single transfer of the accepted count and the target's
    choices); one more to read the emitted tokens when stop ids are set; one for the range check of the draft ids,
    skipped for drafters whose ids are the target's by construction (``proposes_target_ids``). Drafters and
    sampling verification add their own (a stop rule reads one number per drafted token).

    ``record_memory=True`` also measures, after every forward, the bytes the target's KV cache (``"target"``) and
    the drafter's (``"draft"``, for drafters exposing a ``cache``) allocate, keeping the peaks in
    ``trace.peak_kv_bytes``; it is off by default because it walks every cache layer twice a round.
    """
    check_gamma(gamma)
    _check_drafter(drafter)
    check_sampling(sampling, verification, lenience)
    check_generation_inputs(target, input_ids, max_new_tokens)
    stop_ids = stop_token_ids(target, eos_token_id)
    device = target.device
    check_same_device(device, getattr(drafter, "device", None))
    prompt_length = input_ids.shape[1]
    total_length = prompt_length + max_new_tokens
    generator = make_generator(seed, device)
    target_vocab = target.get_output_embeddings().out_features  # V: the width of the target's logits, p and q
    readable_ids = target.get_input_embeddings().num_embeddings  # ids the target's embedding table can read
    max_positions = context_length(target)
    cache_positions = min(total_length + gamma + 1, max_positions)
    trusted_ids = getattr(drafter, "proposes_target_ids", False) and target_vocab <= readable_ids

    with torch.inference_mode():
        # the committed tokens live in one buffer: `sequence[:, :length]` is a view (no copy per round), and each
        # round writes its drafts at [length, length + k) before verifying them, so the target's input is a view too
        sequence = torch.empty(1, total_length, dtype=torch.long, device=device)
        sequence[:, :prompt_length] = input_ids
        trace = Trace.start(device)
        cache = new_cache(target, cache_kind, max_len=cache_positions)

        wants_hidden = getattr(drafter, "wants_target_hidden", False)  # Medusa heads, EAGLE
        shares_cache = getattr(drafter, "shares_target_cache", False)  # self-speculative early exit
        if shares_cache:
            drafter.attach_target_cache(cache)

        # prefill round: the prompt's forward gives the first token, exactly as in the baseline
        drafter.begin(input_ids, max_length=cache_positions, target_vocab_size=target_vocab)
        after_begin = trace.elapsed(device)
        logits = forward_with_cache(target, sequence[:, :prompt_length], cache, logits_to_keep=1,
                                    return_hidden=wants_hidden)  # [1, 1, V] (and [1, T, D])
        if wants_hidden:
            logits, hidden = logits
            drafter.observe_target(hidden[0])
        if record_memory:
            trace.note_kv_bytes("target", cache_bytes(cache).allocated)
        token = int(sample_token(logits_to_probs(logits[0, -1], sampling), generator))
        sequence[0, prompt_length] = token
        length = prompt_length + 1  # L committed tokens; the target's cache holds the first L - 1
        now = trace.elapsed(device)
        trace.add_round(RoundRecord(0, 0, 1, after_begin, now - after_begin, draft_forwards=0, kind="prefill"), now)
        trace.prefill_time = now
        drafter.accept(length)  # (nothing to roll back yet; keeps the begin/propose/accept protocol)
        finished = token in stop_ids

        while not finished and length < total_length:
            remaining = total_length - length
            # k drafts + 1 recovered/bonus token must fit in `remaining`; the forward reaches position L + k - 1
            k = min(gamma, remaining - 1, max_positions - length)

            round_start = now  # the previous round's end: one clock read (and no wait) fewer per round
            draft = drafter.propose(sequence[:, :length], k, sampling, generator) if k > 0 else Draft.empty(device)
            check_draft(draft, k)
            drafted = len(draft)
            draft_tokens = draft.tokens.to(device)  # LongTensor[k'], k' <= k
            if not trusted_ids:
                _check_draft_ids(draft_tokens, readable_ids)
            if record_memory and getattr(drafter, "cache", None) is not None:
                trace.note_kv_bytes("draft", cache_bytes(drafter.cache).allocated)
            verify_start = trace.elapsed(device)  # the round's one wait for the device: drafting ends here

            sequence[0, length : length + drafted] = draft_tokens
            step_input = sequence[:, length - 1 : length + drafted]  # [1, 1 + k']: last committed token + drafts
            logits, hidden = _verification_forward(target, drafter, step_input, cache, shares_cache, wants_hidden)
            if record_memory:
                trace.note_kv_bytes("target", cache_bytes(cache).allocated)  # the peak: drafts in, before rollback
            verdict = _verify(logits, draft_tokens, draft.probs, sampling, generator, verification, lenience)

            accepted = verdict.num_accepted
            sequence[0, length + accepted] = verdict.next_token  # the recovered token replaces the first rejection
            emitted, finished = kept_until_stop(sequence[0, length : length + accepted + 1], stop_ids)
            length += emitted  # never past total_length: k <= remaining - 1
            crop_cache(cache, length - 1)  # drop rejected drafts; the last token is fed next round
            verify_end = trace.elapsed(device, wait=False)  # the verdict was just read back: the forward is done

            if wants_hidden:
                drafter.observe_target(hidden[0, :emitted])  # [emitted, D]: the inputs whose outputs were kept

            drafter.accept(length)
            now = trace.elapsed(device, wait=False)  # queued rollback work is counted in the next round's drafting
            record = RoundRecord(
                drafted=drafted,
                accepted=accepted,
                emitted=emitted,
                draft_time=(verify_start - round_start) + (now - verify_end),
                verify_time=verify_end - verify_start,
                draft_forwards=draft.forwards,
                kind=verdict.kind if drafted else "target",
            )
            trace.add_round(record, verify_end)

    name = getattr(drafter, "name", type(drafter).__name__)
    return GenerationResult(
        sequence=sequence[:, :length], prompt_length=prompt_length, method=f"speculative[{name}]", trace=trace
    )
