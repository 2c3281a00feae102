"""The reference every speed-up is measured against: the target model alone, one token per forward.

Autoregressive decoding with a KV cache costs one full target forward per new token; speculative decoding
exists to emit several tokens per target forward instead. The result has the same type (and trace) as every
speculative method, so notebooks and benchmarks compare them field by field.
"""

import torch
from transformers import PreTrainedModel

from .modeling import check_generation_inputs, forward_with_cache, new_cache
from .sampling import GREEDY, SamplingConfig, logits_to_probs, make_generator, sample_token
from .trace import GenerationResult, RoundRecord, Trace


def autoregressive_generate(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    *,
    max_new_tokens: int,
    sampling: SamplingConfig = GREEDY,
    eos_token_id: int | None = None,
    seed: int | None = None,
    use_cache: bool = True,
) -> GenerationResult:
    """Generate up to ``max_new_tokens`` tokens after ``input_ids: LongTensor[1, T]`` with ``model`` alone.

    Each round runs one target forward and samples one token from ``logits_to_probs(logits, sampling)``
    (greedy by default, which matches ``model.generate(do_sample=False)`` token for token). Stops after
    ``max_new_tokens`` tokens or right after emitting ``eos_token_id`` (None: never stop early). ``seed``
    makes sampling reproducible. ``use_cache=False`` re-runs the whole sequence every step, which shows what
    the KV cache saves: the cost of step t grows with t instead of staying constant.

    Batch size 1 only. Returns a `GenerationResult` with ``method="autoregressive"`` (``"autoregressive-nocache"``
    without the cache) whose trace has one round per target forward (``drafted=0, accepted=0, emitted=1``).
    """
    check_generation_inputs(model, input_ids, max_new_tokens)
    prompt_length = input_ids.shape[1]
    device = model.device
    input_ids = input_ids.to(device)
    generator = make_generator(seed, device)

    with torch.inference_mode():
        trace = Trace.start(device)
        cache = new_cache(model) if use_cache else None
        sequence = input_ids  # [1, T + t] after t new tokens
        step_input = input_ids  # what the next forward must read: the prompt, then only the newest token
        for _ in range(max_new_tokens):
            round_start = trace.elapsed(device)
            logits = forward_with_cache(model, step_input if use_cache else sequence, cache, logits_to_keep=1)
            token = sample_token(logits_to_probs(logits[0, -1], sampling), generator)  # LongTensor[] (scalar)
            sequence = torch.cat([sequence, token.view(1, 1)], dim=1)
            step_input = token.view(1, 1)
            now = trace.elapsed(device)
            trace.add_round(RoundRecord(0, 0, 1, draft_time=0.0, verify_time=now - round_start, draft_forwards=0), now)
            if len(trace.rounds) == 1:
                trace.prefill_time = now - round_start
            if eos_token_id is not None and token.item() == eos_token_id:
                break

    method = "autoregressive" if use_cache else "autoregressive-nocache"
    return GenerationResult(sequence=sequence, prompt_length=prompt_length, method=method, trace=trace)
