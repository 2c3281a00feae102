"""baseline.py: greedy equals transformers' generate token for token; sampling is seeded; inputs are checked."""

import warnings

import pytest
import torch

from helpers import hf_greedy
from specdec_lib import autoregressive_generate
from specdec_lib.core.errors import ConfigError, ContextOverflowError, InputError
from specdec_lib.core.sampling import SamplingConfig
from specdec_lib.core.trace import acceptance_rate, target_forwards, tokens_per_target_forward

SAMPLING = SamplingConfig(temperature=1.0, top_k=20, top_p=0.95)


@pytest.mark.parametrize("prompt", [[0, 5, 17, 42, 3, 8, 61], [7], [2, 9, 30]])
def test_greedy_matches_transformers_generate(tiny_llama, prompt):
    ids = torch.tensor([prompt])
    result = autoregressive_generate(tiny_llama, ids, max_new_tokens=20)
    assert result.new_token_list == hf_greedy(tiny_llama, ids, 20)
    assert torch.equal(result.sequence[:, : len(prompt)], ids)
    assert result.method == "autoregressive"


def test_stops_right_after_eos(tiny_llama, prompt_ids):
    greedy = autoregressive_generate(tiny_llama, prompt_ids, max_new_tokens=20).new_token_list
    eos = greedy[5]
    stop = greedy.index(eos)  # first occurrence
    result = autoregressive_generate(tiny_llama, prompt_ids, max_new_tokens=20, eos_token_id=eos)
    assert result.new_token_list == greedy[: stop + 1]
    assert result.new_token_list == hf_greedy(tiny_llama, prompt_ids, 20, eos_token_id=eos)


def test_without_cache_gives_same_tokens(tiny_llama, prompt_ids):
    cached = autoregressive_generate(tiny_llama, prompt_ids, max_new_tokens=12)
    uncached = autoregressive_generate(tiny_llama, prompt_ids, max_new_tokens=12, use_cache=False)
    assert uncached.new_token_list == cached.new_token_list
    assert uncached.method == "autoregressive-nocache"
    sampled = [
        autoregressive_generate(tiny_llama, prompt_ids, max_new_tokens=12, sampling=SAMPLING, seed=3, use_cache=c)
        for c in (True, False)
    ]
    assert sampled[0].new_token_list == sampled[1].new_token_list


def test_seeded_sampling_is_reproducible(tiny_llama, prompt_ids):
    first = autoregressive_generate(tiny_llama, prompt_ids, max_new_tokens=20, sampling=SAMPLING, seed=1)
    again = autoregressive_generate(tiny_llama, prompt_ids, max_new_tokens=20, sampling=SAMPLING, seed=1)
    other = autoregressive_generate(tiny_llama, prompt_ids, max_new_tokens=20, sampling=SAMPLING, seed=2)
    assert first.new_token_list == again.new_token_list
    assert first.new_token_list != other.new_token_list


def test_trace_has_one_round_per_token(tiny_llama, prompt_ids):
    result = autoregressive_generate(tiny_llama, prompt_ids, max_new_tokens=6)
    trace = result.trace
    assert len(trace.token_times) == 6 == target_forwards(trace)
    assert trace.token_times == sorted(trace.token_times)
    assert all((r.drafted, r.accepted, r.emitted, r.draft_forwards) == (0, 0, 1, 0) for r in trace.rounds)
    assert trace.prefill_time == trace.token_times[0] > 0  # the first round's forward gave the first token
    assert acceptance_rate(trace) is None and tokens_per_target_forward(trace) == 1.0


def test_fills_context_exactly(tiny_llama):
    ids = torch.zeros(1, 120, dtype=torch.long)
    assert len(autoregressive_generate(tiny_llama, ids, max_new_tokens=8).new_token_list) == 8


def test_bad_inputs_are_explained(tiny_llama, prompt_ids):
    with pytest.raises(InputError, match="prompt is empty"):
        autoregressive_generate(tiny_llama, torch.zeros(1, 0, dtype=torch.long), max_new_tokens=3)
    with pytest.raises(InputError, match="Only batch size 1"):
        autoregressive_generate(tiny_llama, prompt_ids.repeat(2, 1), max_new_tokens=3)
    with pytest.raises(InputError, match="Add the batch dimension"):
        autoregressive_generate(tiny_llama, prompt_ids[0], max_new_tokens=3)
    with pytest.raises(InputError, match="dtype torch.long"):
        autoregressive_generate(tiny_llama, prompt_ids.int(), max_new_tokens=3)
    with pytest.raises(ConfigError, match="max_new_tokens must be an integer >= 1, got 0"):
        autoregressive_generate(tiny_llama, prompt_ids, max_new_tokens=0)
    with pytest.raises(ContextOverflowError, match=r"prompt \(7 tokens\) plus max_new_tokens \(122\)"):
        autoregressive_generate(tiny_llama, prompt_ids, max_new_tokens=122)


def test_generation_is_silent(tiny_llama, prompt_ids, capfd):
    """No warnings (e.g. deprecated cache keywords) and no stderr output in normal use."""
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        autoregressive_generate(tiny_llama, prompt_ids, max_new_tokens=5, sampling=SAMPLING, seed=0)
        autoregressive_generate(tiny_llama, prompt_ids, max_new_tokens=5, use_cache=False)
    assert [str(w.message) for w in caught] == []
    assert capfd.readouterr().err == ""
