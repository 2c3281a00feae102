"""The embedded models themselves, on every prompt of the three prompt sets.

Unit tests elsewhere use tiny random models; these run the real ``data/models`` family, so they
also check that what ships loads, fits its context, and decodes exactly like transformers.
"""
import pytest
from helpers import hf_greedy

from specdec_lib import (DraftModelDrafter, autoregressive_generate, load_pair, load_prompts,
                         speculative_generate)
from specdec_lib.vocab import compare_vocabularies

NEW_TOKENS = 20
GAMMAS = (1, 2, 3, 4, 6, 8)


@pytest.fixture(scope="module")
def pair():
    return load_pair("embedded", device="cpu")


@pytest.fixture(scope="module")
def encoded(pair):
    """(prompt id, LongTensor[1, T]) for every prompt of every set."""
    return [(p.id, pair.target_tokenizer(p.prompt, return_tensors="pt").input_ids) for p in load_prompts()]


@pytest.fixture(scope="module")
def baseline(pair, encoded):
    """The target's own greedy continuation of every prompt (our baseline), stopping at EOS."""
    eos = pair.target_tokenizer.eos_token_id
    return {pid: autoregressive_generate(pair.target, ids, max_new_tokens=NEW_TOKENS, eos_token_id=eos).new_token_list
            for pid, ids in encoded}


def test_the_family_loads_with_the_expected_tokenizers(pair):
    assert pair.same_tokenizer
    cross = load_pair("embedded-cross", device="cpu")
    assert not cross.same_tokenizer
    assert compare_vocabularies(cross.target_tokenizer, cross.draft_tokenizer).kind == "different"
    assert pair.target.config.num_hidden_layers > pair.draft.config.num_hidden_layers


def test_baseline_equals_transformers_greedy_generate_on_every_prompt(pair, encoded, baseline):
    eos = pair.target_tokenizer.eos_token_id
    for pid, ids in encoded:
        assert baseline[pid] == hf_greedy(pair.target, ids, NEW_TOKENS, eos_token_id=eos), pid


@pytest.mark.parametrize("gamma", GAMMAS)
def test_speculative_greedy_is_token_identical_on_every_prompt(pair, encoded, baseline, gamma):
    """For max_new_tokens in {1, gamma, gamma + 1, NEW_TOKENS}: greedy outputs are prefixes of each other."""
    drafter = DraftModelDrafter.for_pair(pair)
    eos = pair.target_tokenizer.eos_token_id
    for pid, ids in encoded:
        for max_new in sorted({1, gamma, gamma + 1, NEW_TOKENS}):
            result = speculative_generate(pair.target, drafter, ids, gamma=gamma, max_new_tokens=max_new,
                                          eos_token_id=eos)
            assert result.new_token_list == baseline[pid][:max_new], (pid, gamma, max_new)
            assert sum(r.emitted for r in result.trace.rounds) == len(result.new_token_list)
