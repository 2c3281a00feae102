"""Adaptive draft length (`specdec_lib.drafters.schedules`): same tokens, exact sampling, the schedules' rules.

A schedule only changes how many tokens are drafted; the verifier checks whatever was drafted. So greedy output
must stay the target's, token for token, and sampled output must keep the target's distribution even though
the draft length now depends on the draft's own probabilities.
"""

import pytest
import torch

from helpers import build_tiny_model, first_layer_draft, sharpen
from test_sampling_distribution import PROMPT, SETTINGS, SIGNIFICANCE, categories_for, exact_joint, speculative_samples
from specdec_lib import autoregressive_generate, speculative_generate
from specdec_lib.drafters import (
    ConfidenceStop,
    CostAwareStop,
    DraftModelDrafter,
    HeuristicSchedule,
    PromptLookupDrafter,
)
from specdec_lib.drafters.base import Draft, Drafter
from specdec_lib.errors import ConfigError
from specdec_lib.stats import bucket_counts, chi_square_gof


@pytest.fixture(scope="module")
def pair():
    target = sharpen(build_tiny_model("llama", seed=0, num_layers=2))
    return target, first_layer_draft(target)


SCHEDULES = {
    "heuristic": lambda draft: HeuristicSchedule(DraftModelDrafter(draft)),
    "heuristic-from-2": lambda draft: HeuristicSchedule(DraftModelDrafter(draft), initial=2),
    "confidence": lambda draft: DraftModelDrafter(draft, stop_rule=ConfidenceStop(0.6)),
    "cost-aware": lambda draft: DraftModelDrafter(draft, stop_rule=CostAwareStop(0.2, 0.05)),
    "heuristic-lookup": lambda draft: HeuristicSchedule(PromptLookupDrafter()),
}


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_greedy_output_stays_the_targets_and_the_length_really_adapts(pair, schedule):
    target, draft = pair
    drafter = SCHEDULES[schedule](draft)
    lengths = set()
    for seed in range(4):
        prompt = torch.randint(2, 64, (1, 6), generator=torch.Generator().manual_seed(seed))
        expected = autoregressive_generate(target, prompt, max_new_tokens=40, eos_token_id=None)
        result = speculative_generate(target, drafter, prompt, gamma=6, max_new_tokens=40, eos_token_id=None)
        assert result.new_token_list == expected.new_token_list, (schedule, seed)
        lengths |= {r.drafted for r in result.trace.rounds[1:-1]}  # the last round may be cut by max_new_tokens
    if schedule != "heuristic-lookup":  # (a lookup finds nothing on random prompts often: its length is moot)
        assert len(lengths) > 1, lengths  # not a fixed gamma in disguise


@pytest.mark.parametrize("schedule", ["heuristic", "confidence", "cost-aware"])
def test_sampling_keeps_the_targets_distribution(pair, schedule):
    target, draft = pair
    sampling = SETTINGS["T=1.0"]
    draws = 800
    categories, probs = categories_for(exact_joint(target, PROMPT, sampling, (8, 6, 4)), draws)
    samples, acceptance = speculative_samples(target, SCHEDULES[schedule](draft), PROMPT, sampling, draws)
    test = chi_square_gof(bucket_counts(samples, categories), probs)
    assert test.passes(SIGNIFICANCE) and test.cells >= 8, test
    assert 0.1 < acceptance < 0.99


class FixedDraft(Drafter):
    """Proposes a given number of copies of token 5 (always k when asked for less)."""

    def propose(self, sequence, k, sampling, generator):
        return Draft(tokens=torch.full((k,), 5, dtype=torch.long))


def test_the_heuristic_adds_two_after_a_full_accept_and_drops_one_after_a_rejection():
    schedule = HeuristicSchedule(FixedDraft(), initial=3)
    schedule.begin(PROMPT)
    sequence = torch.zeros(1, 10, dtype=torch.long)
    assert len(schedule.propose(sequence, 8, SETTINGS["T=1.0"], None)) == 3
    schedule.accept(10 + 3 + 1)  # all 3 accepted, plus the bonus
    assert schedule.length == 5
    assert len(schedule.propose(torch.zeros(1, 14, dtype=torch.long), 8, SETTINGS["T=1.0"], None)) == 5
    schedule.accept(14 + 2 + 1)  # 2 of 5 accepted
    assert schedule.length == 4
    for _ in range(6):  # never below 1
        sequence = torch.zeros(1, 20, dtype=torch.long)
        schedule.propose(sequence, 8, SETTINGS["T=1.0"], None)
        schedule.accept(21)
    assert schedule.length == 1
    assert schedule.lengths[:2] == [3, 5]
    schedule.begin(PROMPT)  # a new generation starts over
    assert schedule.length == 3 and schedule.lengths == []


def test_stop_rules_decide_on_confidences():
    assert ConfidenceStop(0.4).should_stop([0.9, 0.3]) and not ConfidenceStop(0.4).should_stop([0.3, 0.5])
    rule = CostAwareStop(0.1, 0.05)  # price 0.15
    assert not rule.should_stop([0.9, 0.5])  # 0.45 > 0.15: one more token is worth its price
    assert rule.should_stop([0.5, 0.5, 0.5])  # 0.125 < 0.15


def test_bad_schedules_are_explained(pair):
    _, draft = pair
    with pytest.raises(ConfigError, match="probability"):
        ConfidenceStop(1.5)
    with pytest.raises(ConfigError, match="no draft ever pays"):
        CostAwareStop(0.8, 0.3)
    with pytest.raises(ConfigError, match=">= 0"):
        CostAwareStop(-0.1, 0.0)
    with pytest.raises(ConfigError, match="initial"):
        HeuristicSchedule(DraftModelDrafter(draft), initial=0)
    with pytest.raises(ConfigError, match="stop_rule"):
        DraftModelDrafter(draft, stop_rule=0.4)
