"""sampling.py: hand-made logits with known answers for every filter, and parameter validation."""

import math

import pytest
import torch

from specdec_lib.core.errors import ConfigError
from specdec_lib.core.sampling import GREEDY, SamplingConfig, logits_to_probs, make_generator, sample_token

LOGITS = torch.tensor([1.0, 3.0, 2.0, 0.0])  # softmax: [0.0871, 0.6439, 0.2369, 0.0321]


def test_greedy_is_one_hot_argmax():
    probs = logits_to_probs(LOGITS, GREEDY)
    assert probs.tolist() == [0.0, 1.0, 0.0, 0.0]
    assert probs.dtype == torch.float32


def test_greedy_ties_go_to_lowest_id():
    assert logits_to_probs(torch.tensor([0.0, 5.0, 5.0, 1.0]), GREEDY).tolist() == [0.0, 1.0, 0.0, 0.0]


def test_plain_sampling_is_softmax_in_float32():
    probs = logits_to_probs(LOGITS.half(), SamplingConfig())
    assert probs.dtype == torch.float32
    torch.testing.assert_close(probs, torch.softmax(LOGITS, dim=-1))


def test_temperature_divides_logits():
    torch.testing.assert_close(logits_to_probs(LOGITS, SamplingConfig(temperature=2.0)), torch.softmax(LOGITS / 2, -1))


def test_top_k_keeps_k_most_likely():
    probs = logits_to_probs(LOGITS, SamplingConfig(top_k=2))
    expected = torch.softmax(torch.tensor([3.0, 2.0]), -1)
    torch.testing.assert_close(probs, torch.tensor([0.0, expected[0], expected[1], 0.0]))


def test_top_k_larger_than_vocab_is_off():
    torch.testing.assert_close(logits_to_probs(LOGITS, SamplingConfig(top_k=10)), torch.softmax(LOGITS, -1))


def test_top_k_keeps_ties_with_kth():
    probs = logits_to_probs(torch.tensor([2.0, 1.0, 1.0, 0.0]), SamplingConfig(top_k=2))
    assert (probs > 0).tolist() == [True, True, True, False]


def test_top_p_keeps_smallest_set_reaching_p():
    # sorted probabilities 0.6439, 0.2369, 0.0871, 0.0321: 0.6439 < 0.8 <= 0.6439 + 0.2369
    probs = logits_to_probs(LOGITS, SamplingConfig(top_p=0.8))
    expected = torch.softmax(torch.tensor([3.0, 2.0]), -1)
    torch.testing.assert_close(probs, torch.tensor([0.0, expected[0], expected[1], 0.0]))


def test_top_p_exactly_at_a_boundary_stops_there():
    probs = logits_to_probs(torch.log(torch.tensor([0.5, 0.25, 0.25])), SamplingConfig(top_p=0.5))
    assert probs.tolist() == [1.0, 0.0, 0.0]


def test_tiny_top_p_keeps_the_top_token():
    assert logits_to_probs(LOGITS, SamplingConfig(top_p=1e-9)).tolist() == [0.0, 1.0, 0.0, 0.0]


def test_top_p_one_is_off():
    torch.testing.assert_close(logits_to_probs(LOGITS, SamplingConfig(top_p=1.0)), torch.softmax(LOGITS, -1))


def test_top_k_then_top_p_on_renormalised_mass():
    # after top-k=3 the kept mass renormalises to 0.665, 0.245, 0.090: top-p 0.9 keeps the first two
    probs = logits_to_probs(LOGITS, SamplingConfig(top_k=3, top_p=0.9))
    assert (probs > 0).tolist() == [False, True, True, False]


def test_filters_apply_per_row_and_rows_are_normalised():
    logits = torch.randn(2, 3, 50, generator=torch.Generator().manual_seed(0))
    probs = logits_to_probs(logits, SamplingConfig(temperature=0.7, top_k=20, top_p=0.9))
    assert probs.shape == (2, 3, 50)
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, 3))
    assert ((probs > 0).sum(-1) <= 20).all()


def test_sample_token_of_one_hot_is_its_argmax():
    probs = logits_to_probs(torch.randn(5, 10), GREEDY)
    assert torch.equal(sample_token(probs, None), probs.argmax(-1))


def test_sample_token_shape_and_seeded_reproducibility():
    probs = torch.softmax(torch.randn(3, 4, 10), -1)
    first = sample_token(probs, make_generator(7, "cpu"))
    assert first.shape == (3, 4) and first.dtype == torch.long
    assert torch.equal(first, sample_token(probs, make_generator(7, "cpu")))


def test_sample_token_never_draws_a_filtered_token():
    probs = logits_to_probs(LOGITS, SamplingConfig(top_k=2)).expand(1000, 4)
    assert set(sample_token(probs, make_generator(0, "cpu")).tolist()) == {1, 2}


def test_greedy_constructors():
    assert SamplingConfig.greedy() == GREEDY
    assert GREEDY.is_greedy and not SamplingConfig(temperature=0.5).is_greedy


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": -0.1}, r"temperature must be a finite number >= 0, got -0.1\. Use 0 for greedy"),
        ({"temperature": math.inf}, r"temperature must be a finite number >= 0, got inf"),
        ({"temperature": math.nan}, r"temperature must be a finite number >= 0, got nan"),
        ({"temperature": "hot"}, r"temperature must be a finite number >= 0, got 'hot'"),
        ({"top_k": -1}, r"top_k must be an integer >= 0, got -1\. Use 0 to switch top-k off"),
        ({"top_k": 2.5}, r"top_k must be an integer >= 0, got 2.5"),
        ({"top_p": 0.0}, r"top_p must be a number in \(0, 1\], got 0.0\. Use 1.0 to switch"),
        ({"top_p": 1.5}, r"top_p must be a number in \(0, 1\], got 1.5"),
        ({"top_p": True}, r"top_p must be a number in \(0, 1\], got True"),
    ],
)
def test_invalid_parameters_are_explained(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        SamplingConfig(**kwargs)


def test_make_generator_rejects_bad_seed():
    assert make_generator(None, "cpu") is None
    with pytest.raises(ConfigError, match="seed must be an integer or None, got '1'"):
        make_generator("1", "cpu")


@pytest.mark.parametrize("temperature", [1e-40, 1e-30, 1e-12])
def test_a_tiny_temperature_is_a_finite_near_greedy_distribution(temperature):
    """(l - max l) / T stays finite: all mass on the argmax, shared evenly by exact ties (the T -> 0 limit).
    Before core v2, l / T overflowed to inf and softmax gave NaN, which torch.multinomial refused deep inside."""
    logits = torch.tensor([[1.0, 3.0, -2.0, 2.9], [0.5, 0.5, -1.0, 0.0]])
    probs = logits_to_probs(logits, SamplingConfig(temperature=temperature))
    assert torch.isfinite(probs).all()
    assert probs[0].tolist() == [0.0, 1.0, 0.0, 0.0] and probs[1].tolist() == [0.5, 0.5, 0.0, 0.0]
    assert sample_token(probs[0], torch.Generator().manual_seed(0)).item() == 1


def test_a_tiny_temperature_decodes_like_greedy(tiny_llama, tiny_draft_llama, prompt_ids):
    from specdec_lib import DraftModelDrafter, autoregressive_generate, speculative_generate

    tiny = SamplingConfig(temperature=1e-40)
    greedy = autoregressive_generate(tiny_llama, prompt_ids, max_new_tokens=10, eos_token_id=None).new_token_list
    assert autoregressive_generate(tiny_llama, prompt_ids, max_new_tokens=10, eos_token_id=None, sampling=tiny,
                                   seed=0).new_token_list == greedy
    result = speculative_generate(tiny_llama, DraftModelDrafter(tiny_draft_llama), prompt_ids, gamma=3,
                                  max_new_tokens=10, eos_token_id=None, sampling=tiny, seed=0)
    assert result.new_token_list == greedy
