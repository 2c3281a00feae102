"""Suffix decoding: the tree's counts (incremental updates equal a tree built from scratch), the adaptive draft
length, history across requests, and the drafter inside `speculative_generate` (greedy: token-identical to the
target alone; sampling: exact). The generation harnesses are `test_prompt_lookup.py`'s, written out again below
(no test module imports another; they are candidates for `helpers`)."""

import random
from collections import Counter

import pytest
import torch

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
from specdec_lib import SuffixDrafter, autoregressive_generate, speculative_generate
from specdec_lib.drafters import Drafter, SuffixTree
from specdec_lib.core.errors import ConfigError, InputError
from specdec_lib.core.sampling import GREEDY
from specdec_lib.core.stats import bucket_counts, chi_square_gof



def counts_from_scratch(sequences: list[list[int]], max_depth: int) -> dict[tuple[int, ...], int]:
    """The definition: every substring of length <= max_depth of each sequence, counted once per start."""
    counts: Counter = Counter()
    for tokens in sequences:
        for start in range(len(tokens)):
            for depth in range(1, min(max_depth, len(tokens) - start) + 1):
                counts[tuple(tokens[start : start + depth])] += 1
    return dict(counts)


def draft(drafter: SuffixDrafter, tokens: list[int], k: int = 8) -> list[int]:
    """What ``drafter`` proposes for ``tokens`` as a fresh generation's first round."""
    sequence = torch.tensor([tokens])
    drafter.begin(Context.of(sequence))
    return drafter.propose(Context.of(sequence, k), GREEDY, None).row().tolist()


# ---------------------------------------------------------------- the tree


def test_the_docstring_tree():
    tree = SuffixTree(max_depth=3)
    tree.add_sequence([0, 1, 0, 1, 2])  # "a b a b c"
    assert tree.counts[0] == 5
    assert tree.paths() == {(0,): 2, (0, 1): 2, (0, 1, 0): 1, (0, 1, 2): 1, (1,): 2, (1, 0): 1, (1, 0, 1): 1,
                            (1, 2): 1, (2,): 1}


def test_several_sequences_never_share_a_suffix():
    rng = random.Random(0)
    for _ in range(100):
        depth = rng.randint(2, 6)
        sequences = [[rng.randrange(4) for _ in range(rng.randint(0, 20))] for _ in range(rng.randint(1, 3))]
        tree = SuffixTree(depth)
        for tokens in sequences:
            tree.add_sequence(tokens)
        assert tree.paths() == counts_from_scratch(sequences, depth)
        assert tree.counts[0] == sum(map(len, sequences))


def test_incremental_updates_equal_a_tree_built_from_scratch():
    """Rounds commit 1 to 9 tokens at a time; after each `propose` the request tree is that of the whole sequence."""
    rng = random.Random(1)
    for _ in range(20):
        tokens = [rng.randrange(6) for _ in range(120)]
        drafter = SuffixDrafter(max_depth=5)
        length = 7
        drafter.begin(Context.of(torch.tensor([tokens[:length]])))
        while length <= len(tokens):
            drafter.propose(Context.of(torch.tensor([tokens[:length]]), 4), GREEDY, None)
            drafter.accept(length)
            fresh = SuffixTree(5)
            fresh.add_sequence(tokens[:length])
            assert drafter.request_tree.paths() == fresh.paths() == counts_from_scratch([tokens[:length]], 5)
            length += rng.randint(1, 9)


# ---------------------------------------------------------------- the adaptive draft


def test_a_repetitive_context_gives_full_drafts():
    assert draft(SuffixDrafter(), [1, 2, 3, 4, 5, 6, 7, 8] * 6) == [1, 2, 3, 4, 5, 6, 7, 8]


def test_a_once_seen_continuation_is_drafted_up_to_the_thresholds():
    once = [1, 2, 3, 4, 5, 6, 7, 8, 9, 50, 51, 1, 2, 3]  # "1 2 3" was followed by "4 5 6 ..." once
    # path probability 1/2 (the current "1 2 3" counts too, with no continuation yet); 3 matched tokens: 3 drafts
    assert draft(SuffixDrafter(max_spec_factor=1.0), once) == [4, 5, 6]
    assert draft(SuffixDrafter(), once) == [4, 5, 6, 7, 8, 9, 50, 51]  # no factor (the default): k = 8 caps
    assert draft(SuffixDrafter(), once, k=2) == [4, 5]
    assert draft(SuffixDrafter(min_probability=0.6), once) == []  # 1/2 < 0.6: nothing worth verifying


def test_the_draft_length_follows_the_match_length():
    short = [5, 6, 7, 8, 9, 40, 6]  # only "6" matches (1 token)
    assert draft(SuffixDrafter(max_spec_factor=1.0), short) == [7]
    assert draft(SuffixDrafter(max_spec_factor=3), short) == [7, 8, 9]
    assert draft(SuffixDrafter(), short) == [7, 8, 9, 40, 6]  # no factor: until the text ends


def test_the_most_frequent_continuation_wins_and_branching_lowers_its_probability():
    branching = [1, 2, 3, 4, 10, 1, 2, 3, 7, 11, 1, 2, 3, 4, 12, 1, 2, 3]  # "1 2 3" then 4 twice, 7 once
    # P(4) = 2/4 (the current "1 2 3" counts too); "1 2 3 4" was followed by 10 once and 12 once: P = 1/4 each
    assert draft(SuffixDrafter(max_spec_factor=1.0), branching) == [4, 10, 1]  # 3 matched tokens: 3 drafts
    assert draft(SuffixDrafter(min_probability=0.3), branching) == [4]
    assert draft(SuffixDrafter(min_probability=0.6), branching) == []
    assert draft(SuffixDrafter(), [10, 11, 12, 13]) == []  # nothing recurs: nothing to draft


def test_no_match_in_an_empty_tree():
    tree = SuffixTree(4)
    assert tree.speculate([1, 2, 3], 4, min_probability=0.1, max_spec_factor=1.0).tokens == []


# ---------------------------------------------------------------- history across requests


def test_history_helps_a_repeated_request_and_begin_keeps_it(tiny_llama, prompt_ids):
    drafter = SuffixDrafter()
    expected = autoregressive_generate(tiny_llama, prompt_ids, max_new_tokens=40, eos_token_id=None).new_token_list
    accepted = []
    for _ in range(2):
        result = speculative_generate(tiny_llama, drafter, prompt_ids, gamma=8, max_new_tokens=40, eos_token_id=None)
        assert result.new_token_list == expected
        accepted.append(sum(record.accepted for record in result.trace.rounds))
        drafter.remember(result.new_tokens)
    assert accepted[1] > accepted[0] + 10  # the second request is drafted from the first one's answer
    history = drafter.history_tree.paths()
    drafter.begin(Context.of(torch.tensor([[3, 4]])))
    assert drafter.request_tree.paths() == {} and drafter.history_tree.paths() == history
    remembered = SuffixTree(24)
    remembered.add_sequence(expected)
    remembered.add_sequence(expected)
    assert history == remembered.paths()


def test_remember_takes_one_sequence():
    drafter = SuffixDrafter()
    drafter.remember(torch.tensor([[1, 2, 3]]))
    drafter.remember([1, 2, 4])
    assert drafter.history_tree.counts[0] == 6
    with pytest.raises(InputError, match="one sequence"):
        drafter.remember(torch.tensor([[1, 2], [3, 4]]))


# ---------------------------------------------------------------- arguments


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(max_depth=1), "max_depth"),
        (dict(max_depth=2.5), "max_depth"),
        (dict(max_depth=True), "max_depth"),
        (dict(min_probability=-0.1), "min_probability"),
        (dict(min_probability=1.5), "min_probability"),
        (dict(min_probability="high"), "min_probability"),
        (dict(max_spec_factor=0), "max_spec_factor"),
        (dict(max_spec_factor=-1.0), "max_spec_factor"),
    ],
)
def test_bad_settings_are_refused(options, message):
    with pytest.raises(ConfigError, match=message):
        SuffixDrafter(**options)


def test_bad_calls_are_refused():
    drafter = SuffixDrafter()
    drafter.begin(Context.of(torch.tensor([[1, 2, 3]])))
    drafter.propose(Context.of(torch.tensor([[1, 2, 3, 4]]), 2), GREEDY, None)
    with pytest.raises(InputError, match="only grows"):
        drafter.propose(Context.of(torch.tensor([[1, 2, 3]]), 2), GREEDY, None)
    with pytest.raises(ConfigError, match="batch of one"):
        drafter.propose(Context(torch.tensor([[1, 2], [1, 2]]), [2, 2], [2, 2]), GREEDY, None)
    assert drafter.name == "suffix" and drafter.device is None and isinstance(drafter, Drafter)


# ---------------------------------------------------------------- inside speculative decoding








def test_tiny_greedy_speculation_equals_the_target_alone(tiny_llama):
    accepted = sum(assert_greedy_equivalent(tiny_llama, SuffixDrafter, prompt, lengths=(1, 6, 40))
                   for prompt in tiny_prompts(4))
    assert accepted > 100


def test_an_eos_inside_a_drafted_span_stops_generation_right_after_it(tiny_llama):
    assert sum(eos_cases(tiny_llama, prompt, SuffixDrafter) for prompt in tiny_prompts(4, seed=3)) >= 3


@pytest.mark.slow
def test_embedded_greedy_speculation_equals_the_target_alone(embedded_pair, encoded_prompts):
    """About 10 s on 2 cores: 2 prompts of each prompt set, gamma 1, 2, 4 and 8, 24 new tokens."""
    prompts = [ids for task in ("code", "prose", "grounded") for _, ids in encoded_prompts[task][:2]]
    accepted = sum(assert_greedy_equivalent(embedded_pair.target, SuffixDrafter, prompt, eos_token_id="auto")
                   for prompt in prompts)
    assert accepted > 20




def test_suffix_drafts_keep_the_target_distribution(sharp_tiny_pair):
    """Suffix drafts are point masses, verified like prompt lookup's. 200 draws at T = 0.7, top_p = 0.9 catch any TV
    >= 0.21 over the tested cells (asserted)."""
    target = sharp_tiny_pair[0]
    drafter, sampling, draws = Counting(SuffixDrafter()), SETTINGS["T=0.7, top_p=0.9"], 200
    prompt = repeating_prompt(target)
    categories, probs = categories_for(exact_joint(target, prompt, sampling, (8, 6, 4)), draws)
    samples, acceptance = speculative_samples(target, drafter, prompt, sampling, draws)
    test = chi_square_gof(bucket_counts(samples, categories), probs)
    assert test.passes(SIGNIFICANCE) and detectable_tv(draws, test.cells) <= 0.21, test
    assert drafter.proposing_rounds > draws / 2
    assert 0.05 < acceptance < 0.9
