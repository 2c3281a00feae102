"""Jacobi decoding: greedy decoding solved as a fixed-point iteration of the target itself, with no drafter.

Greedy decoding defines the next n tokens by n equations, ``y_i = argmax p(. | x, y_1 .. y_{i-1})`` for
i = 1 .. n. Autoregressive decoding solves them one after the other: n sequential target forwards. Jacobi
decoding (Santilli et al. 2023, "Accelerating Transformer Inference for Translation via Parallel Decoding"; Song
et al. 2021 for Jacobi iteration in neural networks) updates all n unknowns at once from a guess ``y^0``:

    y^{t+1}_i = argmax p(. | x, y^t_1 .. y^t_{i-1})     for every i, in ONE forward over [x, y^t_1 .. y^t_n]

The greedy output is the fixed point, and the iteration reaches it in at most n steps: ``y^{t+1}_1`` is exact
(it depends on x only), and once ``y^t_1 .. y^t_j`` are exact, ``y^{t+1}_{j+1}`` is. It saves forwards only
when a position's prediction comes out right although the guess before it was still wrong, which happens in
repetitive text (the embedded target's loops) and rarely elsewhere. Lookahead decoding (Fu et al. 2024) keeps the
n-grams these iterations produce and verifies them like drafts.

Committing the converged prefix after each iteration, as `jacobi_generate` does, is *greedy verification with
the previous iterate as the draft*: ``verify_greedy(logits, guess)`` accepts the guesses that equal the target's
choice and appends the target's own next token, so the output is token-identical to greedy decoding, the target
runs once per iteration, and there is no draft model: the "draft" is the target's own last forward. That is how
draft-free parallel decoding relates to speculative decoding, and also how it differs: nothing cheap proposes,
the expensive model guesses for itself, so its tokens per forward are usually lower than a good drafter's.
"""

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel

from .errors import ConfigError
from .caches import crop_cache, new_cache
from .forward import check_generation_inputs, context_length, forward_with_cache
from .speculative import kept_until_stop
from .stopping import AUTO, stop_token_ids
from .trace import GenerationResult, RoundRecord, Trace
from .verify import verify_greedy


def _check_block_size(block_size: object) -> None:
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ConfigError(
            f"block_size (the number of future tokens Jacobi decoding guesses and updates per forward) must be an "
            f"integer >= 1, got {block_size!r}. Typical values are 2 to 8."
        )


def jacobi_generate(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    *,
    max_new_tokens: int,
    block_size: int = 4,
    eos_token_id: int | Sequence[int] | str | None = AUTO,
) -> GenerationResult:
    """Greedy decoding of up to ``max_new_tokens`` tokens after ``input_ids: LongTensor[1, T]`` by Jacobi iteration.

    The prefill round is the baseline's (the prompt's forward gives the first token). Each later round is one
    Jacobi iteration over a block of ``k <= block_size`` guessed tokens (fewer near ``max_new_tokens``):

        1. forward [x_L, g_1 .. g_k] with the KV cache          -> logits [k + 1, V]
        2. verdict = verify_greedy(logits, g)                     n converged guesses + the target's next token
        3. commit g_1 .. g_n and that token; crop the cache past the committed tokens
        4. next guess = argmax of rows n + 1 .. k (the Jacobi update of the positions not yet converged),
           padded to k with the last committed token (the initial guess of a new position)

    Token-identical to ``autoregressive_generate(model, input_ids, ...)`` (greedy), with the same stopping rules
    (``eos_token_id``: see `specdec_lib.core.stopping`) and result type; each round's `RoundRecord` counts the guesses
    as ``drafted`` and the converged ones as ``accepted``, with no draft forwards, so `target_forwards` and
    `tokens_per_target_forward` compare it with the baseline directly. Batch size 1, greedy only.
    """
    _check_block_size(block_size)
    check_generation_inputs(model, input_ids, max_new_tokens)
    stop_ids = stop_token_ids(model, eos_token_id)
    device = model.device
    prompt_length = input_ids.shape[1]
    total_length = prompt_length + max_new_tokens
    max_positions = context_length(model)

    with torch.inference_mode():
        sequence = torch.empty(1, total_length, dtype=torch.long, device=device)
        sequence[:, :prompt_length] = input_ids
        trace = Trace.start(device)
        cache = new_cache(model)
        logits = forward_with_cache(model, sequence[:, :prompt_length], cache, logits_to_keep=1)  # [1, 1, V]
        token = int(logits[0, -1].argmax())
        sequence[0, prompt_length] = token
        length = prompt_length + 1  # committed tokens; the cache holds all but the last
        now = trace.elapsed(device)
        trace.add_round(RoundRecord(0, 0, 1, 0.0, now, draft_forwards=0, kind="prefill"), now)
        trace.prefill_time = now
        finished = token in stop_ids
        guess = torch.empty(0, dtype=torch.long, device=device)  # LongTensor[<= block_size]: the current iterate

        while not finished and length < total_length:
            start = now
            k = min(block_size, total_length - length - 1, max_positions - length)  # k guesses + 1 token fit
            filler = sequence[0, length - 1].expand(max(k - guess.numel(), 0))  # new positions: the last token
            guess = torch.cat([guess[:k], filler])  # [k]
            sequence[0, length : length + k] = guess
            logits = forward_with_cache(model, sequence[:, length - 1 : length + k], cache,
                                        logits_to_keep=k + 1)[0]  # [k + 1, V]: row i predicts position L + i
            verdict = verify_greedy(logits, guess)
            accepted = verdict.num_accepted
            sequence[0, length + accepted] = verdict.next_token
            emitted, finished = kept_until_stop(sequence[0, length : length + accepted + 1], stop_ids)
            guess = logits[accepted + 1 :].argmax(dim=-1)  # [k - n]: the Jacobi update of the unconverged positions
            length += emitted
            crop_cache(cache, length - 1)  # drop the positions after the committed tokens
            now = trace.elapsed(device, wait=False)  # the verdict was just read back
            kind = verdict.kind if k else "target"
            trace.add_round(RoundRecord(k, accepted, emitted, 0.0, now - start, draft_forwards=0, kind=kind), now)

    return GenerationResult(sequence=sequence[:, :length], prompt_length=prompt_length,
                            method=f"jacobi[block={block_size}]", trace=trace)
