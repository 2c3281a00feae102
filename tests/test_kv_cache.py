"""The pre-allocated pointer cache: same logits and tokens as DynamicCache, rollback = pointer move; and the
rollback refusals for caches that cannot roll back (sliding windows past their window, non-croppable layers)."""

import pytest
import torch
from transformers import DynamicCache, Qwen2Config, Qwen2ForCausalLM

from specdec_lib import DraftModelDrafter, autoregressive_generate, speculative_generate
from specdec_lib.core.errors import ConfigError, ContextOverflowError
from specdec_lib.core.caches import PreallocatedCache, PreallocatedLayer, cache_length, crop_cache, kv_shape, new_cache
from specdec_lib.core.forward import forward_with_cache
from specdec_lib.core.sampling import SamplingConfig


def greedy_with_cache(model, ids, steps, kind):
    """Autoregressive greedy decoding through forward_with_cache with a cache of ``kind``."""
    with torch.inference_mode():
        cache = new_cache(model, kind)
        step, out = ids, []
        for _ in range(steps):
            token = forward_with_cache(model, step, cache, logits_to_keep=1)[0, -1].argmax()
            out.append(int(token))
            step = token.view(1, 1)
    return out


def test_new_cache_kinds(tiny_llama):
    assert isinstance(new_cache(tiny_llama), DynamicCache)
    cache = new_cache(tiny_llama, kind="preallocated")
    assert isinstance(cache, PreallocatedCache) and cache_length(cache) == 0
    shape = kv_shape(tiny_llama)
    assert shape == {"layers": 2, "kv_heads": 2, "head_dim": 8, "context": 128}
    assert cache.layers[0].key_storage.shape == (1, 2, 128, 8)  # allocated once, for the whole context
    with pytest.raises(ConfigError, match="cache kind"):
        new_cache(tiny_llama, kind="paged")


def test_preallocated_matches_dynamic_logits_and_rollback(tiny_llama, prompt_ids):
    with torch.inference_mode():
        results = {}
        for kind in ("dynamic", "preallocated"):
            cache = new_cache(tiny_llama, kind)
            first = forward_with_cache(tiny_llama, prompt_ids, cache)
            forward_with_cache(tiny_llama, torch.tensor([[4, 9, 11, 30]]), cache)  # 4 "drafts"
            crop_cache(cache, 8)  # reject 3 of them
            after = forward_with_cache(tiny_llama, torch.tensor([[12, 13]]), cache)
            results[kind] = (first, after, cache)
        reference = forward_with_cache(tiny_llama, torch.tensor([[0, 5, 17, 42, 3, 8, 61, 4, 12, 13]]), None)
    for kind, (first, after, cache) in results.items():
        assert cache_length(cache) == 10
        torch.testing.assert_close(after, reference[:, -2:], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(results["dynamic"][0], results["preallocated"][0])
    torch.testing.assert_close(results["dynamic"][1], results["preallocated"][1])
    pre, dyn = results["preallocated"][2], results["dynamic"][2]
    for pre_layer, dyn_layer in zip(pre.layers, dyn.layers):
        torch.testing.assert_close(pre_layer.keys, dyn_layer.keys)
        torch.testing.assert_close(pre_layer.values, dyn_layer.values)


def test_preallocated_crop_moves_pointer_without_copy(tiny_llama, prompt_ids):
    cache = new_cache(tiny_llama, "preallocated")
    storage = cache.layers[0].key_storage
    with torch.inference_mode():
        forward_with_cache(tiny_llama, prompt_ids, cache)
    stale = cache.layers[0].keys[:, :, 5:7].clone()
    crop_cache(cache, 5)
    layer = cache.layers[0]
    assert cache.length == 5 and layer.keys.shape[-2] == 5
    assert layer.key_storage is storage and layer.keys.data_ptr() == storage.data_ptr()  # a view, same storage
    torch.testing.assert_close(storage[:, :, 5:7], stale)  # the stale rows stay until overwritten
    crop_cache(cache, 0)
    assert cache_length(cache) == 0


def test_preallocated_overflow_and_layer_api():
    layer = PreallocatedLayer(max_len=4)
    keys = torch.randn(1, 2, 3, 8)
    out_keys, out_values = layer.update(keys, keys + 1)
    assert out_keys.shape == (1, 2, 3, 8) and layer.get_seq_length() == 3 and layer.get_mask_sizes(2) == (5, 0)
    layer.crop(-2)
    assert layer.get_seq_length() == 1
    layer.update(keys, keys)
    with pytest.raises(ContextOverflowError, match="pre-allocated"):
        layer.update(keys, keys)
    with pytest.raises(ConfigError):
        PreallocatedLayer(max_len=0)


@pytest.mark.parametrize("prompt", [[0, 5, 17, 42, 3, 8, 61], [0, 9], [2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2]])
def test_preallocated_autoregressive_token_identical(tiny_llama, prompt):
    ids = torch.tensor([prompt])
    expected = autoregressive_generate(tiny_llama, ids, max_new_tokens=24).new_token_list
    assert greedy_with_cache(tiny_llama, ids, 24, "dynamic") == expected
    assert greedy_with_cache(tiny_llama, ids, 24, "preallocated") == expected


# the fast suite gives the pre-allocated draft cache the shortest and the longest rollbacks and the dynamic one a
# middle gamma (each run tries both target caches); the rest of the grid is slow
FAST_DRAFT_CACHES = {(1, "preallocated"), (3, "dynamic"), (5, "preallocated")}


@pytest.mark.parametrize("gamma, draft_kind", [
    pytest.param(gamma, kind, marks=() if (gamma, kind) in FAST_DRAFT_CACHES else pytest.mark.slow)
    for gamma in (1, 3, 5) for kind in ("dynamic", "preallocated")
])
def test_preallocated_speculative_greedy_token_identical(tiny_llama, tiny_draft_llama, prompt_ids, gamma, draft_kind):
    expected = autoregressive_generate(tiny_llama, prompt_ids, max_new_tokens=30).new_token_list
    for target_kind in ("dynamic", "preallocated"):
        drafter = DraftModelDrafter(tiny_draft_llama, cache_kind=draft_kind)
        result = speculative_generate(
            tiny_llama, drafter, prompt_ids, gamma=gamma, max_new_tokens=30, cache_kind=target_kind
        )
        assert result.new_token_list == expected, (target_kind, draft_kind)


def test_preallocated_speculative_sampling_same_tokens_as_dynamic(tiny_llama, tiny_draft_llama, prompt_ids):
    sampling = SamplingConfig(temperature=1.0)
    runs = [
        speculative_generate(
            tiny_llama, DraftModelDrafter(tiny_draft_llama, cache_kind=kind), prompt_ids,
            gamma=3, max_new_tokens=30, sampling=sampling, seed=7, cache_kind=kind,
        ).new_token_list
        for kind in ("dynamic", "preallocated")
    ]
    assert runs[0] == runs[1]


def test_drafter_reuses_preallocated_storage(tiny_llama, tiny_draft_llama, prompt_ids):
    drafter = DraftModelDrafter(tiny_draft_llama, cache_kind="preallocated")
    speculative_generate(tiny_llama, drafter, prompt_ids, gamma=2, max_new_tokens=8)
    storage = drafter.cache.layers[0].key_storage
    assert storage.shape[-2] == prompt_ids.shape[1] + 8 + 2 + 1  # sized to the generation, not the whole context
    for max_new_tokens in (8, 4):  # as long or shorter: the storage fits
        speculative_generate(tiny_llama, drafter, prompt_ids, gamma=2, max_new_tokens=max_new_tokens)
        assert drafter.cache.layers[0].key_storage is storage  # begin() rewinds the pointer, no new allocation
    speculative_generate(tiny_llama, drafter, prompt_ids, gamma=2, max_new_tokens=20)  # longer: a new allocation
    assert drafter.cache.layers[0].key_storage.shape[-2] == prompt_ids.shape[1] + 20 + 2 + 1


# ---- caches that cannot roll back -------------------------------------------------------------------------

def sliding_qwen2(window: int = 4) -> Qwen2ForCausalLM:
    config = Qwen2Config(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, use_sliding_window=True, sliding_window=window,
        max_window_layers=0, bos_token_id=0, eos_token_id=1, pad_token_id=1,
    )
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config).eval()


def test_sliding_window_rollback_within_window_works():
    model = sliding_qwen2(window=8)
    cache = new_cache(model)
    assert all(cache.is_sliding)
    with torch.inference_mode():
        forward_with_cache(model, torch.tensor([[0, 5, 17, 42]]), cache)
        crop_cache(cache, 2)
        logits = forward_with_cache(model, torch.tensor([[9]]), cache)
        reference = forward_with_cache(model, torch.tensor([[0, 5, 9]]), None)
    torch.testing.assert_close(logits[:, -1], reference[:, -1], rtol=1e-4, atol=1e-5)


def test_sliding_window_rollback_past_window_is_exact_in_past_recording_mode():
    """new_cache puts sliding layers in transformers' past recording mode: they keep the tokens added since the
    last crop, so rejected drafts can be dropped even once the window is full (what transformers' assisted
    generation relies on)."""
    model = sliding_qwen2(window=4)
    cache = new_cache(model)
    with torch.inference_mode():
        forward_with_cache(model, torch.tensor([[0, 5, 17, 42, 3, 8, 61, 7, 9]]), cache)
        crop_cache(cache, 7)  # drop "7, 9": past the window of 4, yet exact
        logits = forward_with_cache(model, torch.tensor([[11]]), cache)
        reference = forward_with_cache(model, torch.tensor([[0, 5, 17, 42, 3, 8, 61, 11]]), None)
    torch.testing.assert_close(logits[:, -1], reference[:, -1], rtol=1e-4, atol=1e-5)


def test_sliding_window_rollback_of_dropped_keys_refused():
    model = sliding_qwen2(window=4)
    cache = new_cache(model)
    with torch.inference_mode():
        forward_with_cache(model, torch.tensor([[0, 5, 17, 42, 3, 8, 61, 7, 9]]), cache)
    crop_cache(cache, 8)  # the crop shrinks the layer back to its last window - 1 = 3 tokens
    with pytest.raises(ConfigError, match=r"DynamicSlidingWindowLayer.*window 4.*removing 2"):
        crop_cache(cache, 6)  # those keys are gone
    crop_cache(cache, 8)  # removing nothing is always fine
    plain = DynamicCache(config=model.config)  # built without past recording: no rollback past the window
    with torch.inference_mode():
        forward_with_cache(model, torch.tensor([[0, 5, 17, 42, 3, 8, 61, 7, 9]]), plain)
    with pytest.raises(ConfigError, match=r"new_cache\(model\).*activate_past_recording.*kind='preallocated'"):
        crop_cache(plain, 8)


@pytest.mark.parametrize("kind", ["dynamic", "preallocated"])
def test_speculative_with_sliding_window_target_equals_its_greedy(tiny_draft_llama, kind):
    model = sliding_qwen2(window=4)
    ids = torch.tensor([[0, 5, 17, 42, 3, 8, 61]])
    expected = autoregressive_generate(model, ids, max_new_tokens=20, use_cache=False).new_token_list
    result = speculative_generate(
        model, DraftModelDrafter(tiny_draft_llama), ids, gamma=4, max_new_tokens=20, cache_kind=kind
    )
    assert result.new_token_list == expected


def test_non_croppable_layer_refused(tiny_llama, prompt_ids):
    cache = new_cache(tiny_llama)
    with torch.inference_mode():
        forward_with_cache(tiny_llama, prompt_ids, cache)
    cache.layers[1].is_croppable = False  # what quantized / recurrent layers report
    with pytest.raises(ConfigError, match="layer 1.*is_croppable=False"):
        crop_cache(cache, 3)
