"""Self-speculative early exit (`EarlyExitDrafter`): identity, the shared cache, exact sampling, bad input.

The drafter writes the shallow layers' keys into the target's own cache and verifies with the deep layers only,
so the test that matters beyond token identity is that after every round the shared cache is exactly what a
fresh prefill of the committed tokens would hold, in every layer.
"""

import json

import pytest
import torch
from transformers import DynamicCache

from helpers import (
    PEAKED_PROMPT,
    PROMPT,
    SETTINGS,
    SIGNIFICANCE,
    UntemperedQ,
    build_tiny_model,
    categories_for,
    detectable_tv,
    exact_joint,
    sharpen,
    speculative_samples,
)
from specdec_lib.core.drafting import Context
from specdec_lib import EarlyExitDrafter, autoregressive_generate, speculative_generate
from specdec_lib.core.errors import ConfigError
from specdec_lib.core.forward import forward_with_cache
from specdec_lib.core.paths import data_dir
from specdec_lib.core.sampling import GREEDY, SamplingConfig
from specdec_lib.core.stats import bucket_counts, chi_square_gof


@pytest.fixture(scope="module")
def tiny_target():
    return sharpen(build_tiny_model("llama", seed=3, num_layers=4))


class CheckedEarlyExit(EarlyExitDrafter):
    """Before drafting each round after the first (so after the previous round's rollback), compares the shared
    cache with a fresh prefill of the committed tokens but the last, which the cache must hold and nothing more (the
    first round finds it empty: its forward reads the prompt)."""

    checks = 0

    def propose(self, context, sampling, generator):
        if self._cache.get_seq_length(0) == 0:  # the first round
            return super().propose(context, sampling, generator)
        assert_cache_is_a_fresh_prefill(self.target, self._cache, context.sequence[:, :-1])
        CheckedEarlyExit.checks += 1
        return super().propose(context, sampling, generator)


def assert_cache_is_a_fresh_prefill(target, cache, tokens):
    fresh = DynamicCache(config=target.config)
    forward_with_cache(target, tokens, fresh)
    assert len(cache.layers) == len(fresh.layers)
    for shared_layer, fresh_layer in zip(cache.layers, fresh.layers):
        assert shared_layer.keys.shape == fresh_layer.keys.shape
        torch.testing.assert_close(shared_layer.keys, fresh_layer.keys, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(shared_layer.values, fresh_layer.values, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("exit_layer, gamma", [(1, 1), (1, 8), (3, 2), (3, 4)])
def test_greedy_output_is_the_targets_and_the_cache_a_fresh_prefill(tiny_target, exit_layer, gamma):
    """Each gamma of {1, 2, 4, 8} once, at the shallowest and the deepest exit of the 4-layer target (8 combinations
    before: the cache comparison costs a fresh prefill per round). Over 5, 17 and 40 tokens each one meets the cases
    a rollback can get wrong (all drafts kept and the first rejected: asserted; drafts cut to fit the last tokens)."""
    before = CheckedEarlyExit.checks
    rounds = []
    for seed, new_tokens in [(0, 5), (1, 17), (2, 40)]:
        prompt = torch.randint(2, 64, (1, 6), generator=torch.Generator().manual_seed(seed))
        expected = autoregressive_generate(tiny_target, prompt, max_new_tokens=new_tokens, eos_token_id=None)
        result = speculative_generate(tiny_target, CheckedEarlyExit(tiny_target, exit_layer), prompt, gamma=gamma,
                                      max_new_tokens=new_tokens, eos_token_id=None)
        assert result.new_token_list == expected.new_token_list, (seed, gamma, exit_layer)
        rounds += result.trace.rounds[1:]
    assert CheckedEarlyExit.checks > before  # the cache comparison ran
    assert any(0 < r.accepted == r.drafted for r in rounds) and any(r.accepted == 0 < r.drafted for r in rounds)


def test_the_preallocated_cache_gives_the_same_tokens(tiny_target):
    expected = autoregressive_generate(tiny_target, PROMPT, max_new_tokens=30, eos_token_id=None)
    result = speculative_generate(tiny_target, EarlyExitDrafter(tiny_target, 2), PROMPT, gamma=4, max_new_tokens=30,
                                  eos_token_id=None, cache_kind="preallocated")
    assert result.new_token_list == expected.new_token_list


def test_the_embedded_target_drafts_for_itself_token_identically(embedded_pair, encoded_prompts):
    """What a tiny model cannot show: the shipped target records its exit layer, and that exit (trained with the
    auxiliary loss) drafts tokens the target keeps. One code prompt, gamma 4, 12 tokens, the cache checked every
    round; every prompt set and gamma: the slow test below."""
    target = embedded_pair.target
    drafter = CheckedEarlyExit(target)  # the exit layer its config records (trained with the auxiliary loss)
    assert drafter.exit_layer == target.config.early_exit_layer
    prompt = encoded_prompts["code"][0][1]
    expected = autoregressive_generate(target, prompt, max_new_tokens=12, eos_token_id=None).new_token_list
    result = speculative_generate(target, drafter, prompt, gamma=4, max_new_tokens=12, eos_token_id=None)
    assert result.new_token_list == expected
    assert sum(r.accepted for r in result.trace.rounds) > 0  # the shallow exit really predicts


@pytest.mark.slow
def test_the_embedded_target_drafts_for_itself_token_identically_on_every_prompt_set(embedded_pair, encoded_prompts):
    """About 15 s on 2 cores: the first prompt of each set, gamma 1, 2, 4 and 8, 20 tokens, the cache checked every
    round."""
    target = embedded_pair.target
    drafter = CheckedEarlyExit(target)
    accepted = 0
    for task in ("code", "prose", "grounded"):
        prompt = encoded_prompts[task][0][1]
        expected = autoregressive_generate(target, prompt, max_new_tokens=20, eos_token_id=None).new_token_list
        for gamma in (1, 2, 4, 8):
            result = speculative_generate(target, drafter, prompt, gamma=gamma, max_new_tokens=20, eos_token_id=None)
            assert result.new_token_list == expected, (task, gamma)
            accepted += sum(r.accepted for r in result.trace.rounds)
    assert accepted > 0  # the shallow exit really predicts: the rounds do keep drafts


# After [0, 20, 63] the sharp tiny target is peaked: many 3-token outcomes are expected 5 times in a few hundred draws
# (the prompt test_sampling_distribution chose for power; to move to helpers).


@pytest.mark.parametrize("honest", [True, False], ids=["honest", "untempered q"])
def test_sampling_keeps_the_targets_distribution_and_a_wrong_q_is_caught(sharp_tiny_pair, honest):
    """Exit layer 1 of the sharp tiny target drafts with exactly the first-layer draft of `sharp_tiny_pair` (its
    first layer, final norm and LM head), so the effects `test_sampling_distribution` computes exactly for that draft
    are this drafter's (over the same cells after `PEAKED_PROMPT`, 200 draws):

    - honest, T = 0.7, top_p = 0.9: any TV >= 0.21 is caught (asserted); the untempered q would move the law by
      TV 0.26 (lambda = 68: power > 0.999);
    - reporting the untempered q at T = 0.6 (no filter, so `UntemperedQ` reports softmax(logits)): TV 0.24,
      lambda = 54, power 0.9987 at SIGNIFICANCE, the threshold the same test then fails at."""
    target, _ = sharp_tiny_pair
    sampling, draws = (SETTINGS["T=0.7, top_p=0.9"], 200) if honest else (SamplingConfig(temperature=0.6), 200)
    drafter = EarlyExitDrafter(target, 1) if honest else UntemperedQ(EarlyExitDrafter(target, 1))
    categories, probs = categories_for(exact_joint(target, PEAKED_PROMPT, sampling, (8, 6, 4)), draws)
    samples, acceptance = speculative_samples(target, drafter, PEAKED_PROMPT, sampling, draws)
    test = chi_square_gof(bucket_counts(samples, categories), probs)
    if honest:
        assert test.passes(SIGNIFICANCE) and detectable_tv(draws, test.cells) <= 0.21, test
        assert 0.2 < acceptance < 0.95  # accepted and recovered tokens both occur
    else:
        assert not test.passes(SIGNIFICANCE), test


def test_bad_exit_layers_and_standalone_use_are_explained(tiny_target):
    for exit_layer in (0, 4, 2.5, True):
        with pytest.raises(ConfigError, match="exit_layer"):
            EarlyExitDrafter(tiny_target, exit_layer)
    with pytest.raises(ConfigError, match="no early_exit_layer"):
        EarlyExitDrafter(tiny_target)  # the tiny model's config records none
    drafter = EarlyExitDrafter(tiny_target, 1)
    with pytest.raises(ConfigError, match="speculative_generate"):
        drafter.propose(Context.of(PROMPT, 2), GREEDY, None)


def assert_ablation_ran(result: dict) -> None:
    """Both targets were trained (with the exit loss's weight, then 0) and measured, and drafting for themselves from
    the shallow exit kept their own greedy output."""
    runs = result["runs"]
    assert [run["early_exit_weight"] for run in runs.values()] == [0.3, 0.0]
    for run in runs.values():
        assert run["self_speculative"]["identical"] is True
        assert run["validation_loss"] > 0 and run["exit_validation_loss"] > 0


def test_the_exit_loss_ablation_runs_end_to_end():
    """`run_ablation` on the quick spec with the arguments ``--quick`` passes (tiny models, a corpus slice), at the
    session's one thread. The command itself trains at 2 threads, which on a busy 2-core machine costs 3 to 20 s of
    contended CPU instead of about 3: its wrapper (threads, JSON file) is run behind ``slow`` below."""
    from specdec_tools.training import exit_ablation

    assert_ablation_ran(exit_ablation.run_ablation(exit_ablation.QUICK, max_files=12, prompts=2, new_tokens=8,
                                                   gamma=2))


@pytest.mark.slow
def test_the_exit_loss_ablation_command_runs_end_to_end(tmp_path):
    """``python -m specdec_tools.training.exit_ablation --quick``: the JSON it writes, and the caller's thread count
    restored after its 2-thread training."""
    from specdec_tools.training import exit_ablation

    out = tmp_path / "ablation.json"
    threads = torch.get_num_threads()
    exit_ablation.main(["--quick", "--out", str(out)])
    assert torch.get_num_threads() == threads  # the command trains at 2 threads and restores the caller's count
    assert_ablation_ran(json.loads(out.read_text()))


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
    from specdec_lib.teaching.viz import trace_rounds

    expected = autoregressive_generate(tiny_target, PROMPT, max_new_tokens=20, eos_token_id=None).new_token_list
    result, views = trace_rounds(tiny_target, EarlyExitDrafter(tiny_target, 2), PROMPT, gamma=3, max_new_tokens=20,
                                 eos_token_id=None)
    assert result.new_token_list == expected and len(views) == len(result.trace.rounds)
    timed = TimedDrafter(EarlyExitDrafter(tiny_target, 2))
    assert speculative_generate(tiny_target, timed, PROMPT, gamma=3, max_new_tokens=20,
                                eos_token_id=None).new_token_list == expected
    assert timed.proposals > 0
