"""jacobi.py: Jacobi decoding reaches the target's greedy output token for token, in no more target forwards.

The tiny random model checks identity (where almost no guess converges early); a model whose greedy output never
changes (every guess converges at once) checks that converged guesses are committed and the forwards saved; the
embedded target checks identity on a real prompt.
"""

import copy

import pytest
import torch

from helpers import hf_greedy
from specdec_lib import autoregressive_generate
from specdec_lib.core.errors import ConfigError
from specdec_lib import jacobi_generate
from specdec_lib.core.trace import draft_forwards, target_forwards

PROMPTS = [[0, 5, 17, 42, 3, 8, 61], [7], [2, 9, 30]]
NEW_TOKENS = 20


@pytest.mark.parametrize("gamma", [1, 2, 4, 7])
@pytest.mark.parametrize("prompt", PROMPTS)
def test_token_identical_to_greedy_decoding(tiny_llama, prompt, gamma):
    ids = torch.tensor([prompt])
    greedy = autoregressive_generate(tiny_llama, ids, max_new_tokens=NEW_TOKENS, eos_token_id=None)
    jacobi = jacobi_generate(tiny_llama, ids, max_new_tokens=NEW_TOKENS, gamma=gamma, eos_token_id=None)
    assert jacobi.new_token_list == greedy.new_token_list == hf_greedy(tiny_llama, ids, NEW_TOKENS)
    assert torch.equal(jacobi.sequence[:, : ids.shape[1]], ids)
    assert jacobi.method == f"jacobi[gamma={gamma}]"


@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_rounds_count_guesses_and_never_exceed_the_baseline(tiny_llama, gamma):
    ids = torch.tensor([PROMPTS[0]])
    result = jacobi_generate(tiny_llama, ids, max_new_tokens=NEW_TOKENS, gamma=gamma, eos_token_id=None)
    rounds = result.trace.rounds
    assert rounds[0].drafted == gamma  # the first guess, the last prompt token repeated, rides on the prefill
    assert all(0 <= r.accepted <= r.drafted <= gamma and r.emitted == r.accepted + 1 for r in rounds)
    assert sum(r.emitted for r in rounds) == NEW_TOKENS == len(result.trace.token_times)
    assert target_forwards(result.trace) <= NEW_TOKENS  # each iteration commits at least one token
    assert draft_forwards(result.trace) == 0  # there is no drafter


def constant_model(model):
    """A copy of ``model`` whose LM head is zero: every logit ties, greedy always picks id 0."""
    constant = copy.deepcopy(model)
    with torch.no_grad():
        constant.get_output_embeddings().weight.zero_()
    return constant


def test_converged_guesses_are_committed_and_save_forwards(tiny_llama):
    model = constant_model(tiny_llama)
    ids = torch.tensor([[5, 17, 42]])
    result = jacobi_generate(model, ids, max_new_tokens=NEW_TOKENS, gamma=4, eos_token_id=None)
    assert result.new_token_list == [0] * NEW_TOKENS
    # the prompt's forward rejects the first guesses (its last token, 42, repeated) and gives 1 token; then each
    # iteration's 4 guesses (the last token repeated) all converge: 5 per forward, then 4 in the last round, which
    # has room for 3 guesses only
    assert [r.emitted for r in result.trace.rounds] == [1, 5, 5, 5, 4]
    assert [r.kind for r in result.trace.rounds] == ["recovered", "bonus", "bonus", "bonus", "bonus"]


def test_stops_right_after_an_end_of_sequence_token_like_the_baseline(tiny_llama):
    ids = torch.tensor([PROMPTS[0]])
    greedy = autoregressive_generate(tiny_llama, ids, max_new_tokens=NEW_TOKENS, eos_token_id=None).new_token_list
    stop = greedy[NEW_TOKENS // 2]  # a token the greedy output contains: both must stop at its first occurrence
    expected = autoregressive_generate(tiny_llama, ids, max_new_tokens=NEW_TOKENS, eos_token_id=stop).new_token_list
    for gamma in (2, 6):
        result = jacobi_generate(tiny_llama, ids, max_new_tokens=NEW_TOKENS, gamma=gamma, eos_token_id=stop)
        assert result.new_token_list == expected and result.new_token_list[-1] == stop


@pytest.mark.parametrize("gamma", [0, -1, 2.5, True, "4", None])
def test_a_bad_gamma_is_explained(tiny_llama, gamma):
    with pytest.raises(ConfigError, match="gamma"):
        jacobi_generate(tiny_llama, torch.tensor([[1, 2]]), max_new_tokens=4, gamma=gamma)


def test_token_identical_on_the_embedded_target(embedded_pair, encoded_prompts):
    """A short check on a real prompt (each of its forwards costs the 24-layer target)."""
    ids = encoded_prompts["prose"][0][1]
    greedy = autoregressive_generate(embedded_pair.target, ids, max_new_tokens=16, eos_token_id=None)
    jacobi = jacobi_generate(embedded_pair.target, ids, max_new_tokens=16, gamma=4, eos_token_id=None)
    assert jacobi.new_token_list == greedy.new_token_list
    assert target_forwards(jacobi.trace) <= target_forwards(greedy.trace)
