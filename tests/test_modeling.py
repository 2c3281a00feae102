"""modeling.py: cached forwards match full forwards, rollback by crop, and clear errors."""

import pytest
import torch
from transformers import DynamicCache

from helpers import build_tiny_model
from specdec_lib.core.errors import ConfigError, ContextOverflowError, InputError
from specdec_lib.core.caches import cache_length, crop_cache, new_cache
from specdec_lib.core.validation import check_fits_context, check_generation_inputs, check_input_ids, context_length
from specdec_lib.core.forward import (
    LAST_HIDDEN,
    embed,
    forward_with_cache,
    lm_head_logits,
    run_layers,
)


def full_logits(model, ids):
    """Reference: one plain forward over the whole sequence, no cache."""
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits.float()


def test_prefill_matches_plain_forward(tiny_llama, prompt_ids):
    cache = new_cache(tiny_llama)
    with torch.no_grad():
        logits = forward_with_cache(tiny_llama, prompt_ids, cache)
    assert logits.shape == (1, 7, 64) and logits.dtype == torch.float32
    torch.testing.assert_close(logits, full_logits(tiny_llama, prompt_ids))
    assert cache_length(cache) == 7


def test_incremental_decoding_matches_full_forward(tiny_llama, prompt_ids):
    reference = full_logits(tiny_llama, prompt_ids)
    cache = new_cache(tiny_llama)
    with torch.inference_mode():
        steps = [forward_with_cache(tiny_llama, prompt_ids[:, :3], cache)]
        steps += [forward_with_cache(tiny_llama, prompt_ids[:, t : t + 1], cache) for t in range(3, 5)]
        steps.append(forward_with_cache(tiny_llama, prompt_ids[:, 5:], cache))  # a block of 2, like a verify step
    torch.testing.assert_close(torch.cat(steps, dim=1), reference)


def test_no_cache_forward_matches_plain_forward(tiny_llama, prompt_ids):
    with torch.no_grad():
        logits = forward_with_cache(tiny_llama, prompt_ids, None)
    torch.testing.assert_close(logits, full_logits(tiny_llama, prompt_ids))


def test_logits_to_keep_returns_last_positions(tiny_llama, prompt_ids):
    with torch.no_grad():
        kept = forward_with_cache(tiny_llama, prompt_ids, new_cache(tiny_llama), logits_to_keep=3)
    torch.testing.assert_close(kept, full_logits(tiny_llama, prompt_ids)[:, -3:])


def test_crop_then_refeed_equals_fresh_prefill(tiny_llama, prompt_ids):
    """The speculative rollback: feed a wrong continuation, crop it away, feed the right one."""
    cache = new_cache(tiny_llama)
    with torch.no_grad():
        forward_with_cache(tiny_llama, prompt_ids[:, :4], cache)
        forward_with_cache(tiny_llama, torch.tensor([[9, 9, 9, 9, 9]]), cache)  # rejected draft
        crop_cache(cache, 4)
        assert cache_length(cache) == 4
        refed = forward_with_cache(tiny_llama, prompt_ids[:, 4:], cache)
    torch.testing.assert_close(refed, full_logits(tiny_llama, prompt_ids)[:, 4:])


def test_crop_to_current_length_is_noop_and_to_zero_empties(tiny_llama, prompt_ids):
    cache = new_cache(tiny_llama)
    with torch.no_grad():
        forward_with_cache(tiny_llama, prompt_ids, cache)
    crop_cache(cache, 7)
    assert cache_length(cache) == 7
    crop_cache(cache, 0)
    assert cache_length(cache) == 0


def test_crop_beyond_length_is_refused(tiny_llama, prompt_ids):
    cache = new_cache(tiny_llama)
    with torch.no_grad():
        forward_with_cache(tiny_llama, prompt_ids, cache)
    with pytest.raises(ConfigError, match=r"Cannot crop the KV cache to 8 tokens: it holds 7.*never adds"):
        crop_cache(cache, 8)
    with pytest.raises(ConfigError, match=r"to -1 tokens"):
        crop_cache(cache, -1)


def test_forward_respects_callers_grad_mode(tiny_llama, prompt_ids):
    with torch.inference_mode():
        assert forward_with_cache(tiny_llama, prompt_ids, new_cache(tiny_llama)).is_inference()
    assert forward_with_cache(tiny_llama, prompt_ids, None).requires_grad


def test_context_checks(tiny_llama):
    assert context_length(tiny_llama) == 128
    check_fits_context(tiny_llama, 100, 28)
    expected = r"prompt \(100 tokens\) plus max_new_tokens \(29\) = 129 .*context of 128.*at most 28"
    with pytest.raises(ContextOverflowError, match=expected):
        check_fits_context(tiny_llama, 100, 29)


def test_ragged_rows_read_their_own_positions(tiny_llama, prompt_ids):
    """Two rows in one cache, the shorter left-padded and a hole between its prompt and its next token: each row's
    logits are those of the row alone (positions count real slots, no real token reads a hole)."""
    short = prompt_ids[:, 3:]  # 4 tokens
    ids = torch.cat([prompt_ids, torch.cat([torch.zeros(1, 3, dtype=torch.long), short], dim=1)])  # [2, 7]
    real = torch.ones(2, 7, dtype=torch.bool)
    real[1, :3] = False
    cache = new_cache(tiny_llama)
    with torch.no_grad():
        first = forward_with_cache(tiny_llama, ids, cache, logits_to_keep=1, attention_mask=real)
        step = torch.tensor([[9, 0], [11, 9]])  # row 0 one token then a hole; row 1 a hole then one token
        real = torch.cat([real, torch.tensor([[True, False], [False, True]])], dim=1)
        second = forward_with_cache(tiny_llama, step, cache, attention_mask=real)
    torch.testing.assert_close(first[0, -1], full_logits(tiny_llama, prompt_ids)[0, -1])
    torch.testing.assert_close(first[1, -1], full_logits(tiny_llama, short)[0, -1])
    torch.testing.assert_close(second[0, 0], full_logits(tiny_llama, torch.cat([prompt_ids, step[:1, :1]], 1))[0, -1])
    torch.testing.assert_close(second[1, 1], full_logits(tiny_llama, torch.cat([short, step[1:, 1:]], 1))[0, -1])
    with pytest.raises(ConfigError, match=r"attention_mask must be \[B, S \+ T\] = \[2, 10\]"):
        forward_with_cache(tiny_llama, step[:, :1], cache, attention_mask=real)
    with pytest.raises(InputError, match=r"torch.LongTensor \[B, T\]"):
        forward_with_cache(tiny_llama, torch.tensor([1, 2]), cache)


def test_forward_past_context_is_refused(tiny_llama):
    cache = new_cache(tiny_llama)
    with torch.no_grad():
        forward_with_cache(tiny_llama, torch.zeros(1, 127, dtype=torch.long), cache)
        with pytest.raises(ContextOverflowError, match=r"2 new tokens after 127 cached.*context of 128"):
            forward_with_cache(tiny_llama, torch.zeros(1, 2, dtype=torch.long), cache)


def test_logits_to_keep_out_of_range(tiny_llama, prompt_ids):
    with pytest.raises(ConfigError, match=r"logits_to_keep must be between 1 and the number of new tokens \(7\), got 8"):
        forward_with_cache(tiny_llama, prompt_ids, None, logits_to_keep=8)


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        ([[1, 2]], r"must be a torch.LongTensor of shape \[1, T\], got list"),
        (torch.tensor([[1.0, 2.0]]), r"dtype torch.long .*got torch.float32\. Use input_ids.long\(\)"),
        (torch.tensor([1, 2]), r"2 dimensions .*got shape \[2\]\. Add the batch dimension"),
        (torch.tensor([[1, 2], [3, 4]]), r"Only batch size 1 is supported here, got a batch of 2"),
        (torch.zeros(1, 0, dtype=torch.long), r"prompt is empty"),
    ],
)
def test_bad_input_ids_are_explained(ids, message):
    with pytest.raises(InputError, match=message):
        check_input_ids(ids)


def test_token_ids_outside_vocabulary_are_explained(tiny_llama):
    with pytest.raises(InputError, match=r"token id 64, outside the model's vocabulary \[0, 64\)"):
        check_input_ids(torch.tensor([[3, 64]]), tiny_llama)
    with pytest.raises(InputError, match=r"token id -1"):
        check_input_ids(torch.tensor([[-1, 3]]), tiny_llama)


@pytest.mark.parametrize("bad", [0, -3, 2.0, True])
def test_bad_max_new_tokens(tiny_llama, prompt_ids, bad):
    with pytest.raises(ConfigError, match=rf"max_new_tokens must be an integer >= 1, got {bad!r}"):
        check_generation_inputs(tiny_llama, prompt_ids, bad)


def compiled_generations(target, draft, prompt_ids) -> tuple[list[int], list[int], list[int]]:
    """Greedy tokens of the target alone, of its ``torch.compile`` wrapper, and of speculative decoding with both
    models compiled (12 tokens, gamma 3)."""
    from specdec_lib import DraftModelDrafter, autoregressive_generate, speculative_generate

    compiled_target = torch.compile(target, backend="eager")  # dynamo traces; no C++ toolchain needed
    compiled_draft = torch.compile(draft, backend="eager")
    expected = autoregressive_generate(target, prompt_ids, max_new_tokens=12, eos_token_id=None).new_token_list
    alone = autoregressive_generate(compiled_target, prompt_ids, max_new_tokens=12, eos_token_id=None).new_token_list
    speculative = speculative_generate(compiled_target, DraftModelDrafter(compiled_draft), prompt_ids, gamma=3,
                                       max_new_tokens=12, eos_token_id=None).new_token_list
    return expected, alone, speculative


def test_a_compiled_model_is_looked_through(tiny_llama, tiny_draft_llama, prompt_ids):
    """torch.compile wraps the model in an OptimizedModule whose forward is (*args, **kwargs): the cache keyword is
    read from the wrapped module. What the library must do is look through the wrapper, which is the same whether
    dynamo traces or not, so the compiled functions run eagerly here (``set_stance("force_eager")``); the slow
    test below lets dynamo trace them."""
    with torch.compiler.set_stance("force_eager"):
        expected, alone, speculative = compiled_generations(tiny_llama, tiny_draft_llama, prompt_ids)
    assert alone == expected and speculative == expected


@pytest.mark.slow
def test_a_traced_compiled_model_gives_the_same_tokens(tiny_llama, tiny_draft_llama, prompt_ids):
    """The same with dynamo tracing every shape the loop feeds (prefill, one token, 1 + k drafts)."""
    expected, alone, speculative = compiled_generations(tiny_llama, tiny_draft_llama, prompt_ids)
    assert alone == expected and speculative == expected


@pytest.mark.parametrize("architecture", ["llama", "qwen2"])
def test_hidden_states_are_the_lm_heads_input_at_every_position(architecture):
    model = build_tiny_model(architecture, num_layers=2)
    ids = torch.randint(2, 64, (1, 7), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        logits, hidden = forward_with_cache(model, ids, DynamicCache(config=model.config), logits_to_keep=2,
                                            hidden=LAST_HIDDEN)
        assert hidden.shape == (1, 7, model.config.hidden_size)
        torch.testing.assert_close(model.lm_head(hidden[:, -2:]).float(), logits)


@pytest.mark.parametrize("architecture", ["llama", "qwen2"])
def test_layer_slices_run_ahead_and_catch_up_to_the_full_forward(architecture):
    """Shallow layers fed token by token ahead of the deep ones, then the deep ones on the whole block, give the
    full model's logits (the schedule of self-speculative early exit)."""
    model = build_tiny_model(architecture, num_layers=4)
    ids = torch.randint(2, 64, (1, 9), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        expected = model(input_ids=ids).logits
        cache = DynamicCache(config=model.config)
        prefix = run_layers(model, run_layers(model, embed(model, ids[:, :5]), cache, 0, 1), cache, 1, 4)
        shallow = [run_layers(model, embed(model, ids[:, i : i + 1]), cache, 0, 1) for i in range(5, 8)]
        shallow.append(run_layers(model, embed(model, ids[:, 8:]), cache, 0, 1))
        assert cache.get_seq_length(0) == 9 and cache.get_seq_length(1) == 5
        rest = run_layers(model, torch.cat(shallow, dim=1), cache, 1, 4)
        logits = lm_head_logits(model, torch.cat([prefix, rest], dim=1))
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-4)
    with pytest.raises(ConfigError, match="not a slice"):
        run_layers(model, rest, cache, 3, 5)
