"""The reference every speed-up is measured against: the target model alone, one token per forward.

Autoregressive decoding with a KV cache costs one full target forward per new token; speculative decoding
exists to emit several tokens per target forward instead. The result has the same type (and trace) as every
speculative method, so notebooks and benchmarks compare them field by field.
"""

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel

from .forward import check_generation_inputs, forward_with_cache

from .caches import new_cache
from .sampling import GREEDY, SamplingConfig, logits_to_probs, make_generator, sample_token
from .stopping import AUTO, stop_token_ids
from .trace import GenerationResult, RoundRecord, Trace


def autoregressive_generate(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    *,
    max_new_tokens: int,
    sampling: SamplingConfig = GREEDY,
    eos_token_id: int | Sequence[int] | str | None = AUTO,
    seed: int | None = None,
    use_cache: bool = True,
) -> GenerationResult:
    """Generate up to ``max_new_tokens`` tokens after ``input_ids: LongTensor[1, T]`` with ``model`` alone.

    Each round runs one target forward and samples one token from ``logits_to_probs(logits, sampling)``
    (greedy by default, which matches ``model.generate(do_sample=False)`` token for token). Stops after
    ``max_new_tokens`` tokens or right after an end-of-sequence token: ``eos_token_id="auto"`` (default) is the
    model's own EOS, as in ``model.generate``; an id or a list of ids; None never stops early (see
    `specdec_lib.core.stopping`). ``seed`` makes sampling reproducible. ``use_cache=False`` re-runs the whole sequence
    every step, which shows what the KV cache saves: the cost of step t grows with t instead of staying constant.

    Batch size 1 only. Returns a `GenerationResult` with ``method="autoregressive"`` (``"autoregressive-nocache"``
    without the cache) whose trace has one round per target forward (``drafted=0, accepted=0, emitted=1``).
    """
    check_generation_inputs(model, input_ids, max_new_tokens)
    stop_ids = stop_token_ids(model, eos_token_id)
    prompt_length = input_ids.shape[1]
    device = model.device
    input_ids = input_ids.to(device)
    generator = make_generator(seed, device)

    with torch.inference_mode():
        trace = Trace.start(device)
        cache = new_cache(model) if use_cache else None
        sequence = torch.empty(1, prompt_length + max_new_tokens, dtype=torch.long, device=device)
        sequence[:, :prompt_length] = input_ids
        length = prompt_length  # sequence[:, :length] is committed; the cache holds all but its last token
        while length < prompt_length + max_new_tokens:
            round_start = trace.elapsed(device)
            start = length - 1 if use_cache and length > prompt_length else 0  # the newest token, or everything
            logits = forward_with_cache(model, sequence[:, start:length], cache, logits_to_keep=1)
            token = int(sample_token(logits_to_probs(logits[0, -1], sampling), generator))
            sequence[0, length] = token
            length += 1
            now = trace.elapsed(device)
            kind = "prefill" if length == prompt_length + 1 else "target"
            trace.add_round(RoundRecord(0, 0, 1, 0.0, now - round_start, draft_forwards=0, kind=kind), now)
            if kind == "prefill":
                trace.prefill_time = now - round_start
            if token in stop_ids:
                break

    method = "autoregressive" if use_cache else "autoregressive-nocache"
    return GenerationResult(sequence=sequence[:, :length], prompt_length=prompt_length, method=method, trace=trace)
