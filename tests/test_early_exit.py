"""Self-speculative early exit (`EarlyExitDrafter`): identity, the shared cache, exact sampling, bad input.

The drafter writes the shallow layers' keys into the target's own cache and verifies with the deep layers only,
so the test that matters beyond token identity is that after every round the shared cache is exactly what a
fresh prefill of the committed tokens would hold, in every layer.
"""

import json

import pytest
import torch
from transformers import DynamicCache

from helpers import build_tiny_model, sharpen
from test_sampling_distribution import (
    PROMPT,
    SETTINGS,
    SIGNIFICANCE,
    categories_for,
    exact_joint,
    speculative_samples,
)
from specdec_lib import EarlyExitDrafter, autoregressive_generate, load_embedded, load_prompts, speculative_generate
from specdec_lib.errors import ConfigError
from specdec_lib.modeling import forward_with_cache
from specdec_lib.paths import data_dir
from specdec_lib.sampling import GREEDY, SamplingConfig
from specdec_lib.stats import bucket_counts, chi_square_gof


@pytest.fixture(scope="module")
def tiny_target():
    return sharpen(build_tiny_model("llama", seed=3, num_layers=4))


class CheckedEarlyExit(EarlyExitDrafter):
    """Before drafting each round (so after the previous round's rollback), compares the shared cache with a fresh
    prefill of the committed tokens but the last, which the cache must hold and nothing more."""

    checks = 0

    def propose(self, sequence, k, sampling, generator):
        assert_cache_is_a_fresh_prefill(self.target, self._cache, sequence[:, :-1])
        CheckedEarlyExit.checks += 1
        return super().propose(sequence, k, sampling, generator)


def assert_cache_is_a_fresh_prefill(target, cache, tokens):
    fresh = DynamicCache(config=target.config)
    forward_with_cache(target, tokens, fresh)
    assert len(cache.layers) == len(fresh.layers)
    for shared_layer, fresh_layer in zip(cache.layers, fresh.layers):
        assert shared_layer.keys.shape == fresh_layer.keys.shape
        torch.testing.assert_close(shared_layer.keys, fresh_layer.keys, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(shared_layer.values, fresh_layer.values, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("gamma", [1, 2, 4, 8])
@pytest.mark.parametrize("exit_layer", [1, 3])
def test_greedy_output_is_the_targets_and_the_cache_a_fresh_prefill(tiny_target, gamma, exit_layer):
    before = CheckedEarlyExit.checks
    for seed, new_tokens in [(0, 5), (1, 17), (2, 40)]:
        prompt = torch.randint(2, 64, (1, 6), generator=torch.Generator().manual_seed(seed))
        expected = autoregressive_generate(tiny_target, prompt, max_new_tokens=new_tokens, eos_token_id=None)
        result = speculative_generate(tiny_target, CheckedEarlyExit(tiny_target, exit_layer), prompt, gamma=gamma,
                                      max_new_tokens=new_tokens, eos_token_id=None)
        assert result.new_token_list == expected.new_token_list, (seed, gamma, exit_layer)
    assert CheckedEarlyExit.checks > before  # the cache comparison ran


def test_the_preallocated_cache_gives_the_same_tokens(tiny_target):
    expected = autoregressive_generate(tiny_target, PROMPT, max_new_tokens=30, eos_token_id=None)
    result = speculative_generate(tiny_target, EarlyExitDrafter(tiny_target, 2), PROMPT, gamma=4, max_new_tokens=30,
                                  eos_token_id=None, cache_kind="preallocated")
    assert result.new_token_list == expected.new_token_list


def test_the_embedded_target_drafts_for_itself_token_identically():
    target, tokenizer = load_embedded("target")
    drafter = CheckedEarlyExit(target)  # the exit layer its config records (trained with the auxiliary loss)
    assert drafter.exit_layer == target.config.early_exit_layer
    accepted = 0
    for task in ("code", "prose", "grounded"):
        prompt = tokenizer(load_prompts(task, limit=1)[0].prompt, return_tensors="pt").input_ids
        expected = autoregressive_generate(target, prompt, max_new_tokens=20, eos_token_id=None).new_token_list
        for gamma in (1, 2, 4, 8):
            result = speculative_generate(target, drafter, prompt, gamma=gamma, max_new_tokens=20, eos_token_id=None)
            assert result.new_token_list == expected, (task, gamma)
            accepted += sum(r.accepted for r in result.trace.rounds)
    assert accepted > 0  # the shallow exit really predicts: the rounds do keep drafts


class UntemperedEarlyExit(EarlyExitDrafter):
    """Broken on purpose: samples at the requested temperature, reports the temperature-1 distribution."""

    def propose(self, sequence, k, sampling, generator):
        draft = super().propose(sequence, k, sampling, generator)
        if draft.probs is not None:
            draft.probs = torch.softmax(sampling.temperature * draft.probs.log(), dim=-1)
        return draft


@pytest.mark.parametrize("drafter_class, honest", [(EarlyExitDrafter, True), (UntemperedEarlyExit, False)])
def test_sampling_keeps_the_targets_distribution_and_a_wrong_q_is_caught(drafter_class, honest):
    target = sharpen(build_tiny_model("llama", seed=0, num_layers=2))
    sampling = SETTINGS["T=1.0"] if honest else SamplingConfig(temperature=0.6)
    draws = 800
    categories, probs = categories_for(exact_joint(target, PROMPT, sampling, (8, 6, 4)), draws)
    samples, acceptance = speculative_samples(target, drafter_class(target, 1), PROMPT, sampling, draws)
    test = chi_square_gof(bucket_counts(samples, categories), probs)
    if honest:
        assert test.passes(SIGNIFICANCE) and test.cells >= 8, test
        assert 0.2 < acceptance < 0.95  # accepted and recovered tokens both occur
    else:
        assert test.p_value < 1e-6, test


def test_bad_exit_layers_and_standalone_use_are_explained(tiny_target):
    for exit_layer in (0, 4, 2.5, True):
        with pytest.raises(ConfigError, match="exit_layer"):
            EarlyExitDrafter(tiny_target, exit_layer)
    with pytest.raises(ConfigError, match="no early_exit_layer"):
        EarlyExitDrafter(tiny_target)  # the tiny model's config records none
    drafter = EarlyExitDrafter(tiny_target, 1)
    with pytest.raises(ConfigError, match="speculative_generate"):
        drafter.propose(PROMPT, 2, GREEDY, None)


def test_the_exit_loss_ablation_runs_end_to_end(tmp_path):
    from specdec_lib.training import exit_ablation

    out = tmp_path / "ablation.json"
    threads = torch.get_num_threads()
    exit_ablation.main(["--quick", "--out", str(out)])
    assert torch.get_num_threads() == threads  # the command trains at 2 threads and restores the caller's count
    result = json.loads(out.read_text())
    runs = result["runs"]
    assert [run["early_exit_weight"] for run in runs.values()] == [0.3, 0.0]
    for run in runs.values():
        assert run["self_speculative"]["identical"] is True
        assert run["validation_loss"] > 0 and run["exit_validation_loss"] > 0


def test_the_shipped_ablation_shows_what_the_exit_loss_buys():
    """The shipped numbers (notebook 05 reads them): the auxiliary loss makes the shallow exit a better predictor
    and a better drafter of its own model."""
    result = json.loads((data_dir() / "models" / "exit_ablation.json").read_text())
    with_loss, without = result["runs"]["with exit loss"], result["runs"]["without exit loss"]
    assert with_loss["exit_validation_loss"] < without["exit_validation_loss"]
    assert with_loss["self_speculative"]["alpha"] > without["self_speculative"]["alpha"]
    assert with_loss["self_speculative"]["identical"] and without["self_speculative"]["identical"]


def test_wrappers_pass_the_shared_cache_through(tiny_target):
    """The notebooks' round recorder and the benchmark's timer wrap drafters; the capability must survive."""
    from specdec_lib.bench import TimedDrafter
    from specdec_lib.viz import trace_rounds

    expected = autoregressive_generate(tiny_target, PROMPT, max_new_tokens=20, eos_token_id=None).new_token_list
    result, views = trace_rounds(tiny_target, EarlyExitDrafter(tiny_target, 2), PROMPT, gamma=3, max_new_tokens=20,
                                 eos_token_id=None)
    assert result.new_token_list == expected and len(views) == len(result.trace.rounds)
    timed = TimedDrafter(EarlyExitDrafter(tiny_target, 2))
    assert speculative_generate(tiny_target, timed, PROMPT, gamma=3, max_new_tokens=20,
                                eos_token_id=None).new_token_list == expected
    assert timed.proposals > 0
