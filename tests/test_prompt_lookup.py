"""Prompt lookup drafting: the matching rule (against transformers' own and a brute-force definition), the drafter
inside `speculative_generate` (greedy: token-identical to the target alone, EOS in a copied span included), and
exact sampling with its point-mass drafts.

The generation harnesses here (`assert_greedy_equivalent`, `tiny_prompts`, `eos_cases`, `repeating_prompt`) are
also written out in `test_suffix_drafter.py` (no test module imports another); they are candidates for `helpers`.
"""

import random

import pytest
import torch
from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

from helpers import (
    SETTINGS,
    SIGNIFICANCE,
    Counting,
    assert_greedy_equivalent,
    categories_for,
    detectable_tv,
    eos_cases,
    exact_joint,
    repeating_prompt,
    speculative_samples,
    tiny_prompts,
)
from specdec_lib.core.drafting import Context
from specdec_lib import PromptLookupDrafter
from specdec_lib.drafters import Drafter, find_continuation
from specdec_lib.core.errors import ConfigError
from specdec_lib.core.sampling import GREEDY
from specdec_lib.core.stats import bucket_counts, chi_square_gof



# ---------------------------------------------------------------- the matching rule


def brute_force(tokens: list[int], k: int, min_ngram: int, max_ngram: int, latest: bool) -> list[int]:
    """The rule by its definition: the longest n in range occurring other than as the suffix, its first (or last)
    start, and the (at most k) tokens after it."""
    length = len(tokens)
    for n in range(max_ngram, min_ngram - 1, -1):
        starts = [i for i in range(length - n) if tokens[i : i + n] == tokens[length - n :]]
        if starts:
            start = starts[-1] if latest else starts[0]
            return tokens[start + n : start + n + k]
    return []


def transformers_lookup(tokens: list[int], k: int, max_ngram: int) -> list[int]:
    """What transformers' `PromptLookupCandidateGenerator` proposes for ``tokens`` (no EOS, no length limit)."""
    generator = PromptLookupCandidateGenerator(num_output_tokens=k, max_matching_ngram_size=max_ngram, max_length=10**6)
    candidates, _ = generator.get_candidates(torch.tensor([tokens]))
    return candidates[0, len(tokens) :].tolist()


def random_sequences(count: int, seed: int = 0):
    """``count`` random (tokens, k, min_ngram, max_ngram): short sequences over 2 to 10 ids, so n-grams recur."""
    rng = random.Random(seed)
    for _ in range(count):
        tokens = [rng.randrange(rng.choice([2, 3, 5, 10])) for _ in range(rng.randint(1, 40))]
        max_ngram = rng.randint(1, 5)
        yield tokens, rng.randint(1, 8), rng.randint(1, max_ngram), max_ngram


def test_first_is_transformers_prompt_lookup_rule():
    for tokens, k, _, max_ngram in random_sequences(400):
        assert find_continuation(tokens, k, max_ngram=max_ngram) == transformers_lookup(tokens, k, max_ngram), tokens


@pytest.mark.parametrize("rule", ["first", "longest-earliest", "latest"])
def test_rules_follow_their_definition(rule):
    """"first" and "longest-earliest" (vLLM's name) are one rule; "latest" takes the last occurrence."""
    for tokens, k, min_ngram, max_ngram in random_sequences(1000, seed=1):
        expected = brute_force(tokens, k, min_ngram, max_ngram, latest=rule == "latest")
        assert find_continuation(tokens, k, min_ngram=min_ngram, max_ngram=max_ngram, rule=rule) == expected, tokens


def test_no_match_gives_nothing():
    assert find_continuation([1, 2, 3, 4, 5], 4) == []
    assert find_continuation([7], 4) == [] and find_continuation([], 4) == []
    assert find_continuation([1, 2, 1], 0) == []  # k = 0
    draft = PromptLookupDrafter().propose(Context.of(torch.tensor([[1, 2, 3, 4, 5]]), 4), GREEDY, None)
    assert len(draft) == 0 and draft.tokens.dtype == torch.long and draft.probs is None and draft.forwards == 0


def test_a_match_near_the_end_gives_a_shorter_continuation():
    assert find_continuation([1, 2, 3, 9, 1, 2], 5) == [3, 9, 1, 2]  # 4 tokens follow "1 2": fewer than k
    assert find_continuation([7, 8, 7], 5) == [8, 7]
    assert find_continuation([5, 5, 5], 5) == [5]  # overlapping occurrence: "5 5" at 0, the suffix excluded
    assert find_continuation([4, 6, 4, 6], 8) == [4, 6]  # "4 6" at 0 is followed by the suffix itself


def test_repeated_ngrams_pick_the_occurrence_of_each_rule():
    tokens = [1, 2, 3, 1, 2, 4, 1, 2]  # "1 2" occurs at 0 and 3
    assert find_continuation(tokens, 1) == [3] and find_continuation(tokens, 1, rule="longest-earliest") == [3]
    assert find_continuation(tokens, 1, rule="latest") == [4]
    tokens = [1, 2, 9, 2, 8, 1, 2]  # "1 2" once, "2" twice: the longer match wins over the later one
    assert find_continuation(tokens, 1, rule="latest") == [9] == find_continuation(tokens, 1)


def test_ngram_range_and_k_cap():
    tokens = [3, 2, 5, 1, 2, 9, 1, 2]
    assert find_continuation(tokens, 3, max_ngram=1) == [5, 1, 2]  # "2" first occurs at 1
    assert find_continuation(tokens, 3, max_ngram=2) == [9, 1, 2]  # "1 2" occurs at 3
    assert find_continuation(tokens, 2, max_ngram=2) == [9, 1]  # k caps
    assert find_continuation([1, 2, 3, 1, 2], 3, min_ngram=3) == []  # only the 2-gram recurs
    assert find_continuation(torch.tensor([[3, 2, 5, 1, 2, 9, 1, 2]]), 3) == find_continuation(tokens, 3)
    drafter = PromptLookupDrafter(max_ngram=2)
    assert drafter.propose(Context.of(torch.tensor([tokens]), 2), GREEDY, None).row().tolist() == [9, 1]
    assert drafter.propose(Context.of(torch.tensor([tokens]), 1), GREEDY, None).row().tolist() == [9]


def test_a_match_inside_the_generated_text():
    prompt = [10, 11, 12, 13]  # nothing recurs in the prompt
    assert find_continuation(prompt + [20], 4) == []
    generated = [20, 21, 22, 20, 21]  # ... but the generated text repeats itself
    draft = PromptLookupDrafter().propose(Context.of(torch.tensor([prompt + generated]), 4), GREEDY, None)
    assert draft.row().tolist() == [22, 20, 21]


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(min_ngram=0), "min_ngram"),
        (dict(max_ngram=0), "max_ngram"),
        (dict(min_ngram=1.5), "min_ngram"),
        (dict(min_ngram=True), "min_ngram"),
        (dict(min_ngram=3, max_ngram=2), "below min_ngram"),
        (dict(rule="longest"), "rule must be"),
    ],
)
def test_bad_settings_are_refused(options, message):
    with pytest.raises(ConfigError, match=message):
        PromptLookupDrafter(**options)
    with pytest.raises(ConfigError, match=message):
        find_continuation([1, 2, 1], 2, **options)


def test_a_batch_gets_each_rows_own_copy_and_rows_may_draft_nothing():
    rows = torch.tensor([[7, 8, 9, 7, 8], [1, 2, 3, 4, 5]])  # row 0 repeats "7 8", row 1 repeats nothing
    draft = PromptLookupDrafter().propose(Context(rows, [5, 5], [3, 3]), GREEDY, None)
    assert draft.lengths == [3, 0] and draft.row(0).tolist() == [9, 7, 8] and draft.row(1).tolist() == []
    short = PromptLookupDrafter().propose(Context(rows, [4, 5], [3, 0]), GREEDY, None)  # row 0 committed "7 8 9 7"
    assert short.row(0).tolist() == [8, 9, 7] and short.lengths[1] == 0


def test_the_drafter_runs_no_model():
    drafter = PromptLookupDrafter()
    assert drafter.name == "prompt-lookup" and drafter.device is None and isinstance(drafter, Drafter)


# ---------------------------------------------------------------- greedy: token-identical to the target alone






@pytest.mark.parametrize("rule", ["first", "latest"])
def test_tiny_greedy_speculation_equals_the_target_alone(tiny_llama, rule):
    accepted = sum(
        assert_greedy_equivalent(tiny_llama, lambda: PromptLookupDrafter(rule=rule), prompt, lengths=(1, 6, 40))
        for prompt in tiny_prompts(4)
    )
    assert accepted > 100  # lookup proposed (and the target accepted) many tokens: the runs exercised rollback




def test_an_eos_inside_a_copied_span_stops_generation_right_after_it(tiny_llama):
    copied = sum(eos_cases(tiny_llama, prompt, PromptLookupDrafter) for prompt in tiny_prompts(4, seed=3))
    assert copied >= 3


@pytest.mark.slow
def test_embedded_greedy_speculation_equals_the_target_alone(embedded_pair, encoded_prompts):
    """About 10 s on 2 cores: 2 prompts of each prompt set, gamma 1, 2, 4 and 8, 24 new tokens, EOS as in
    `generate` (the embedded target's own)."""
    prompts = [ids for task in ("code", "prose", "grounded") for _, ids in encoded_prompts[task][:2]]
    accepted = sum(assert_greedy_equivalent(embedded_pair.target, PromptLookupDrafter, prompt, eos_token_id="auto")
                   for prompt in prompts)
    assert accepted > 20


# ---------------------------------------------------------------- sampling: point masses, verified exactly




def test_lookup_drafts_keep_the_target_distribution(sharp_tiny_pair):
    """Copied tokens are point masses: each is kept with probability p(x), else the residual is p without x. At
    T = 0.7, top_p = 0.9 (where p rules some copies out, p(x) = 0) 200 draws catch any TV >= 0.21 over the tested
    cells (asserted): a verifier that kept copies more often (as if q were p) would emit the copied continuation
    far more often than p does. (T = 1, tested here before, verifies point masses the same way: the point-mass test
    of test_sampling_distribution runs it.)"""
    target = sharp_tiny_pair[0]
    drafter, sampling, draws = Counting(PromptLookupDrafter()), SETTINGS["T=0.7, top_p=0.9"], 200
    prompt = repeating_prompt(target)
    categories, probs = categories_for(exact_joint(target, prompt, sampling, (8, 6, 4)), draws)
    samples, acceptance = speculative_samples(target, drafter, prompt, sampling, draws)
    test = chi_square_gof(bucket_counts(samples, categories), probs)
    assert test.passes(SIGNIFICANCE) and detectable_tv(draws, test.cells) <= 0.21, test
    assert drafter.proposing_rounds > draws / 2  # most runs verified copied tokens ...
    assert 0.05 < acceptance < 0.9  # ... some accepted, most rejected (sampled at T = 0.7, copies often differ)
