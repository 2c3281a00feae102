"""Prompt lookup drafting: the matching rule (against transformers' own and a brute-force definition), the drafter
inside `speculative_generate` (greedy: token-identical to the target alone, EOS in a copied span included), and
exact sampling with its point-mass drafts.

The harnesses here (`assert_greedy_equivalent`, `eos_cases`, `embedded_cases`, `Counting`, `repeating_prompt`,
`assert_samples_exactly`) are reused by `test_suffix_drafter.py`.
"""

import random

import pytest
import torch
from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

from helpers import build_tiny_model, sharpen
from specdec_lib import (
    PromptLookupDrafter,
    autoregressive_generate,
    load_pair,
    load_prompts,
    speculative_generate,
)
from specdec_lib.drafters import Drafter, find_continuation
from specdec_lib.errors import ConfigError, InputError
from specdec_lib.sampling import GREEDY
from specdec_lib.stats import bucket_counts, chi_square_gof, chi_square_homogeneity
from test_sampling_distribution import (
    SETTINGS,
    SIGNIFICANCE,
    categories_for,
    exact_joint,
    speculative_samples,
    target_samples,
)

GAMMAS = (1, 2, 4, 8)


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
    draft = PromptLookupDrafter().propose(torch.tensor([[1, 2, 3, 4, 5]]), 4, GREEDY, None)
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
    drafter = PromptLookupDrafter(max_continuation=2)
    assert drafter.propose(torch.tensor([tokens]), 8, GREEDY, None).tokens.tolist() == [9, 1]
    assert drafter.propose(torch.tensor([tokens]), 1, GREEDY, None).tokens.tolist() == [9]


def test_a_match_inside_the_generated_text():
    prompt = [10, 11, 12, 13]  # nothing recurs in the prompt
    assert find_continuation(prompt + [20], 4) == []
    generated = [20, 21, 22, 20, 21]  # ... but the generated text repeats itself
    draft = PromptLookupDrafter().propose(torch.tensor([prompt + generated]), 4, GREEDY, None)
    assert draft.tokens.tolist() == [22, 20, 21]


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


def test_bad_drafter_arguments_are_refused():
    for cap in (0, -1, 2.0, True):
        with pytest.raises(ConfigError, match="max_continuation"):
            PromptLookupDrafter(max_continuation=cap)
    with pytest.raises(InputError, match="batch size 1"):
        PromptLookupDrafter().propose(torch.tensor([[1, 2], [1, 2]]), 2, GREEDY, None)


def test_the_drafter_runs_no_model():
    drafter = PromptLookupDrafter()
    assert drafter.name == "prompt-lookup" and drafter.device is None and isinstance(drafter, Drafter)


# ---------------------------------------------------------------- greedy: token-identical to the target alone


def assert_greedy_equivalent(target, make_drafter, input_ids, *, gammas=GAMMAS, lengths=(24,), eos_token_id=None):
    """`speculative_generate` with a fresh ``make_drafter()`` equals `autoregressive_generate` token for token for
    every gamma and length; returns the drafts accepted over all runs (so a caller can check drafting happened)."""
    accepted = 0
    for max_new_tokens in lengths:
        expected = autoregressive_generate(target, input_ids, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id)
        for gamma in gammas:
            result = speculative_generate(target, make_drafter(), input_ids, gamma=gamma,
                                          max_new_tokens=max_new_tokens, eos_token_id=eos_token_id)
            assert result.new_token_list == expected.new_token_list, (input_ids.tolist(), gamma, max_new_tokens)
            accepted += sum(record.accepted for record in result.trace.rounds)
    return accepted


def tiny_prompts(count: int = 8, seed: int = 0) -> list[torch.Tensor]:
    """Prompts for the tiny models (vocab 64): random ones, and ones made of a repeated random phrase."""
    generator = torch.Generator().manual_seed(seed)
    prompts = []
    for i in range(count):
        phrase = torch.randint(2, 64, (int(torch.randint(3, 9, (1,), generator=generator)),), generator=generator)
        prompts.append((phrase.repeat(3) if i % 2 else phrase).view(1, -1))
    return prompts


@pytest.fixture(scope="module")
def tiny_target():
    return build_tiny_model("llama", seed=0, num_layers=2)


@pytest.mark.parametrize("rule", ["first", "latest"])
def test_tiny_greedy_speculation_equals_the_target_alone(tiny_target, rule):
    accepted = sum(
        assert_greedy_equivalent(tiny_target, lambda: PromptLookupDrafter(rule=rule), prompt, lengths=(1, 6, 40))
        for prompt in tiny_prompts(6)
    )
    assert accepted > 100  # lookup proposed (and the target accepted) many tokens: the runs exercised rollback


def eos_cases(target, prompt: torch.Tensor, make_drafter, *, gamma: int = 4, length: int = 40):
    """Stop-token checks: the target's greedy text after ``prompt`` falls into a loop; with the first ``length``
    tokens of it pasted into the prompt, the drafter copies spans of the loop. Each token of the loop in turn is
    made the EOS id: the output must equal the baseline's (stopping right after the first EOS). Returns how many
    runs ended on an EOS the drafter had copied (an accepted draft, not the target's own token)."""
    greedy = autoregressive_generate(target, prompt, max_new_tokens=2 * length, eos_token_id=None).new_token_list
    context = torch.cat([prompt, torch.tensor([greedy[:length]])], dim=1)
    copied_eos = 0
    for eos in sorted(set(greedy[length:])):
        expected = autoregressive_generate(target, context, max_new_tokens=length, eos_token_id=eos)
        result = speculative_generate(target, make_drafter(), context, gamma=gamma, max_new_tokens=length,
                                      eos_token_id=eos)
        assert result.new_token_list == expected.new_token_list, eos
        assert result.new_token_list.count(eos) == 1 and result.new_token_list[-1] == eos
        last = result.trace.rounds[-1]
        copied_eos += last.emitted <= last.accepted  # generation ended inside the accepted drafts
    return copied_eos


def test_an_eos_inside_a_copied_span_stops_generation_right_after_it(tiny_target):
    copied = sum(eos_cases(tiny_target, prompt, PromptLookupDrafter) for prompt in tiny_prompts(4, seed=3))
    assert copied >= 3


def embedded_cases(tokenizer, per_task: int = 2) -> list[torch.Tensor]:
    """``per_task`` prompts of each prompt set (code, prose, grounded), tokenized with ``tokenizer``."""
    return [tokenizer(prompt.prompt, return_tensors="pt").input_ids
            for task in ("code", "prose", "grounded") for prompt in load_prompts(task)[:per_task]]


@pytest.fixture(scope="module")
def embedded_pair():
    return load_pair("embedded", device="cpu")


@pytest.mark.slow
def test_embedded_greedy_speculation_equals_the_target_alone(embedded_pair):
    """About 10 s on 2 cores: 2 prompts of each prompt set, gamma 1, 2, 4 and 8, 24 new tokens, EOS as in
    `generate` (the embedded target's own)."""
    accepted = sum(assert_greedy_equivalent(embedded_pair.target, PromptLookupDrafter, prompt, eos_token_id="auto")
                   for prompt in embedded_cases(embedded_pair.target_tokenizer))
    assert accepted > 20


# ---------------------------------------------------------------- sampling: point masses, verified exactly


class Counting(Drafter):
    """Wraps a drafter and counts the rounds it proposed something in (to prove a test really drafted)."""

    def __init__(self, inner: Drafter) -> None:
        self.inner, self.name, self.proposing_rounds = inner, inner.name, 0

    def begin(self, input_ids, **options):
        self.inner.begin(input_ids, **options)

    def propose(self, sequence, k, sampling, generator):
        draft = self.inner.propose(sequence, k, sampling, generator)
        self.proposing_rounds += len(draft) > 0
        return draft

    def accept(self, sequence_length):
        self.inner.accept(sequence_length)


def repeating_prompt(target) -> torch.Tensor:
    """A prompt that ends where it began: ``[0, 5, 17] + greedy continuation + [0, 5, 17]``. After it, the target's
    likely first tokens occur in the prompt, so lookup proposes a continuation in most sampled runs."""
    start = torch.tensor([[0, 5, 17]])
    greedy = autoregressive_generate(target, start, max_new_tokens=10, eos_token_id=None).new_tokens
    return torch.cat([start, greedy.view(1, -1), start], dim=1)


def assert_samples_exactly(target, drafter, prompt, setting: str, draws: int) -> float:
    """Chi-square of the first 3 sampled tokens against the target's exact joint distribution and against its own
    samples; returns the acceptance rate."""
    sampling = SETTINGS[setting]
    categories, probs = categories_for(exact_joint(target, prompt, sampling, (8, 6, 4)), draws)
    samples, acceptance = speculative_samples(target, drafter, prompt, sampling, draws)
    counts = bucket_counts(samples, categories)
    test = chi_square_gof(counts, probs)
    assert test.passes(SIGNIFICANCE) and test.cells >= 5, (setting, test)
    baseline = bucket_counts(target_samples(target, prompt, sampling, draws), categories)
    assert chi_square_homogeneity(counts, baseline).passes(SIGNIFICANCE), setting
    return acceptance


@pytest.fixture(scope="module")
def sharp_target():
    return sharpen(build_tiny_model("llama", seed=0, num_layers=2))


@pytest.mark.parametrize("setting", ["T=1.0", "T=0.7, top_p=0.9"])
def test_lookup_drafts_keep_the_target_distribution(sharp_target, setting):
    drafter, draws = Counting(PromptLookupDrafter()), 500
    acceptance = assert_samples_exactly(sharp_target, drafter, repeating_prompt(sharp_target), setting, draws)
    assert drafter.proposing_rounds > draws / 2  # most runs verified copied tokens ...
    assert 0.05 < acceptance < 0.9  # ... some accepted, most rejected (sampled at T >= 0.7, copies often differ)
