"""The self-checks of notebook 03 (specdec_lib.teaching.check.notebook03): the solutions pass, typical mistakes get a hint."""

import copy

import pytest
import torch

from specdec_lib import DraftModelDrafter, check, speculative_generate
from specdec_lib.core.caches import crop_cache
from specdec_lib.teaching.check import notebook03

# --- exercise 1: my_crop ------------------------------------------------------------------------------------------


def solution_crop(cache, keep):
    for layer in cache.layers:
        layer.keys = layer.keys[:, :, :keep]
        layer.values = layer.values[:, :, :keep]


def last_positions(cache, keep):
    for layer in cache.layers:
        layer.keys = layer.keys[:, :, layer.keys.shape[2] - keep:]
        layer.values = layer.values[:, :, layer.values.shape[2] - keep:]


def heads_sliced(cache, keep):
    for layer in cache.layers:
        layer.keys = layer.keys[:, :keep]
        layer.values = layer.values[:, :keep]


def returns_a_copy(cache, keep):
    new = copy.deepcopy(cache)
    solution_crop(new, keep)
    return new


def keys_only(cache, keep):
    for layer in cache.layers:
        layer.keys = layer.keys[:, :, :keep]


def first_layer_only(cache, keep):
    cache.layers[0].keys = cache.layers[0].keys[:, :, :keep]
    cache.layers[0].values = cache.layers[0].values[:, :, :keep]


def slice_not_assigned(cache, keep):
    for layer in cache.layers:
        keys, values = layer.keys[:, :, :keep], layer.values[:, :, :keep]  # noqa: F841 (the mistake)


def minus_zero(cache, keep):
    for layer in cache.layers:
        removed = layer.keys.shape[2] - keep
        layer.keys, layer.values = layer.keys[:, :, :-removed], layer.values[:, :, :-removed]


def one_too_many(cache, keep):
    solution_crop(cache, keep + 1)


def values_only(cache, keep):
    for layer in cache.layers:
        layer.values = layer.values[:, :, :keep]


def batch_sliced(cache, keep):
    for layer in cache.layers:
        layer.keys, layer.values = layer.keys[:keep], layer.values[:keep]


def head_dim_sliced(cache, keep):
    for layer in cache.layers:
        layer.keys, layer.values = layer.keys[..., :keep], layer.values[..., :keep]


def after_keep(cache, keep):
    for layer in cache.layers:
        layer.keys, layer.values = layer.keys[:, :, keep:], layer.values[:, :, keep:]


def removes_keep(cache, keep):
    cache.crop(-keep) if keep else None  # transformers' crop with a negative length removes that many


def removes_keep_later_case(cache, keep):
    """[:, :, :-keep] where it cannot pass for an off-by-one: right on the first case, wrong on the second."""
    if keep == 3:
        solution_crop(cache, keep)
    else:
        removes_keep(cache, keep)


def stub(cache, keep):
    raise NotImplementedError  # your code here


def test_the_solution_and_the_library_pass_my_crop():
    assert check.my_crop(solution_crop)
    assert check.my_crop(crop_cache)
    assert check.my_crop(lambda cache, keep: cache.crop(keep - cache.get_seq_length()))  # transformers' own, in place
    assert repr(check.my_crop(solution_crop)) == "✅ my_crop: all 5 hidden cases pass."


@pytest.mark.parametrize("wrong, words", [
    (last_positions, "kept the *last* 3 positions"),
    (heads_sliced, "you sliced dimension 1, the KV heads"),
    (returns_a_copy, "rolls back *in place*"),
    (keys_only, "keys are right but its values are not"),
    (first_layer_only, "every layer caches every token"),
    (slice_not_assigned, "assign the slice back to the layer"),
    (one_too_many, "keep exactly the first `keep`"),
    (minus_zero, "becomes [:, :, :-0], which is empty"),
    (values_only, "values are cropped but its keys still hold all"),
    (batch_sliced, "your slice cut another dimension than the positions"),
    (head_dim_sliced, "you sliced the last dimension, head_dim"),
    (after_keep, "kept the 4 positions *after* the first 3"),
    (removes_keep, "keep exactly the first `keep`"),
    (removes_keep, "that removes `keep` positions instead of keeping them"),
    (removes_keep_later_case, "removes `keep` positions instead of keeping them. Keep the first `keep`"),
])
def test_typical_mistakes_of_my_crop_get_their_hint(wrong, words):
    report = check.my_crop(wrong)
    assert not report
    assert words in repr(report), repr(report)


def test_a_my_crop_stub_and_a_result_instead_of_a_function():
    assert "still raises NotImplementedError" in repr(check.my_crop(stub))
    assert "takes your function itself" in repr(check.my_crop(None))


# --- exercise 2: forget only the draft's rollback -----------------------------------------------------------------


def solution_loop(input_ids, gamma, max_new_tokens, draft_rollback):
    """Section 3's loop with the draft's crop behind the flag (the check's reference loop is that loop)."""
    return notebook03.reference_loop(input_ids, gamma, max_new_tokens, draft_rollback=draft_rollback)


def library_run(input_ids, gamma, max_new_tokens, draft_rollback):
    """The shortcut: the library's rollback-correct speculative decoding, whatever the flag."""
    pair = notebook03.embedded_pair()
    result = speculative_generate(pair.target, DraftModelDrafter.for_pair(pair), input_ids, gamma=gamma,
                                  max_new_tokens=max_new_tokens, eos_token_id=None)
    return result.new_token_list, len(result.trace.rounds)


def stated_conclusion(input_ids, gamma, max_new_tokens, draft_rollback):
    """The shortcut that writes down a conclusion instead of running the loop: the target's own tokens, and one
    forward more than a correct loop when the draft forgets its rollback."""
    tokens, forwards = library_run(input_ids, gamma, max_new_tokens, True)
    return tokens, forwards + (0 if draft_rollback else 1)


@pytest.mark.parametrize("wrong, words", [
    (library_run, "the count of the loop that rolls both caches back"),
    (stated_conclusion, "count one target forward per round of the loop"),
    (lambda i, g, m, d: solution_loop(i, g, m, True), "the count of the loop that rolls both caches back"),
    (lambda i, g, m, d: solution_loop(i, g, m, False), "the count of the loop that never crops the draft's cache"),
    (lambda i, g, m, d: notebook03.reference_loop(i, g, m, draft_rollback=d, target_rollback=d),
     "whose *target* cache keeps the rejected drafts"),
    (lambda i, g, m, d: notebook03.reference_loop(i, g, m, draft_rollback=True, target_rollback=d),
     "whose *target* cache keeps the rejected drafts"),
    (lambda i, g, m, d: (solution_loop(i, g, m, d)[0], solution_loop(i, g, m, d)[1] + 1),
     "there is no forward before the first round"),
    (lambda i, g, m, d: solution_loop(i, g, m, d)[0], "Expected a pair (new tokens, target forwards)"),
])
def test_forget_draft_rollback_checks_the_loop_itself(wrong, words):
    report = check.forget_draft_rollback(wrong)
    assert not report
    assert words in repr(report), repr(report)


def test_the_solution_passes_forget_draft_rollback_and_the_cases_tell_the_flags_apart():
    report = check.forget_draft_rollback(solution_loop)
    assert report and "compare draft_rollback=True and False" in repr(report)
    forwards = [notebook03._reference(*case)[1] for case in notebook03.ROLLBACK_CASES]
    assert forwards[0] != forwards[1]  # the first two cases differ only by the flag: a loop ignoring it fails one
    assert "still raises NotImplementedError" in repr(check.forget_draft_rollback(stub_loop))
    assert "takes your function itself" in repr(check.forget_draft_rollback("c"))


def stub_loop(input_ids, gamma, max_new_tokens, draft_rollback):
    raise NotImplementedError  # your code here


# --- exercise 3: KV bytes per token, the crossover --------------------------------------------------------------------


def element_size(dtype):
    return torch.empty((), dtype=dtype).element_size()


def solution_kv(config, dtype):
    return 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * element_size(dtype)


def test_the_solution_and_the_library_pass_my_kv_bytes_per_token():
    assert check.my_kv_bytes_per_token(solution_kv)
    assert check.my_kv_bytes_per_token(
        lambda config, dtype: 2 * config.num_hidden_layers * config.num_key_value_heads
        * (config.hidden_size // config.num_attention_heads) * torch.finfo(dtype).bits // 8)


@pytest.mark.parametrize("wrong, words", [
    (lambda c, d: solution_kv(c, d) // 2, "keys *and* values, a factor 2"),
    (lambda c, d: 2 * c.num_hidden_layers * c.num_attention_heads * c.head_dim * element_size(d),
     "you used num_attention_heads"),
    (lambda c, d: 2 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim * torch.finfo(d).bits,
     "that is bits, not bytes"),
    (lambda c, d: 2 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim * 4, "you assumed 4 bytes (float32)"),
    (lambda c, d: 2 * c.num_key_value_heads * c.head_dim * element_size(d), "one layer's worth"),
    (lambda c, d: 2 * c.num_hidden_layers * c.num_key_value_heads * element_size(d), "you left out head_dim"),
])
def test_typical_mistakes_of_my_kv_bytes_per_token_get_their_hint(wrong, words):
    report = check.my_kv_bytes_per_token(wrong)
    assert not report
    assert words in repr(report), repr(report)


def test_crossover_length_solution_and_mistakes():
    assert check.crossover_length(lambda per_token, weights: weights // per_token + 1)
    floor = check.crossover_length(lambda per_token, weights: weights // per_token)
    assert not floor and "it must *exceed* them" in repr(floor)
    ceil = check.crossover_length(lambda per_token, weights: -(-weights // per_token))  # right unless it divides
    assert not ceil and "hidden case 2 of 4" in repr(ceil) and "it must *exceed* them" in repr(ceil)
    ratio = check.crossover_length(lambda per_token, weights: weights / per_token)
    assert not ratio and "a whole number of tokens" in repr(ratio)
    inverted = check.crossover_length(lambda per_token, weights: per_token / weights)
    assert not inverted and "tokens = weight bytes / bytes per token" in repr(inverted)


def test_llama_cache_crossover():
    assert check.llama_cache_crossover(16 * 10**9 // (2 * 32 * 8 * 128 * 2) + 1)
    assert check.llama_cache_crossover(16 * 2**30 // (2 * 32 * 8 * 128 * 2) + 1)  # 16 GiB
    attention_heads = 16 * 10**9 // (2 * 32 * 32 * 128 * 2)
    assert "8 KV heads (not the 32 attention heads)" in repr(check.llama_cache_crossover(attention_heads))
    assert "forget the factor 2" in repr(check.llama_cache_crossover(16 * 10**9 // (32 * 8 * 128 * 2)))
    assert "Expected a number, got NoneType" in repr(check.llama_cache_crossover(None))
