"""Adaptive draft length (`specdec_lib.drafters.schedules`): same tokens, exact sampling, the schedules' rules.

A schedule only changes how many tokens are drafted; the verifier checks whatever was drafted. So greedy output
must stay the target's, token for token, and sampled output must keep the target's distribution even though
the draft length now depends on the draft's own probabilities.
"""

import pytest
import torch

from helpers import (
    PEAKED_PROMPT,
    PROMPT,
    SETTINGS,
    SIGNIFICANCE,
    categories_for,
    detectable_tv,
    exact_joint,
    speculative_samples,
)
from specdec_lib.core.drafting import Context
from specdec_lib import autoregressive_generate, speculative_generate
from specdec_lib.drafters import (
    ConfidenceStop,
    CostAwareStop,
    DraftModelDrafter,
    HeuristicSchedule,
    PromptLookupDrafter,
)
from specdec_lib.core.drafting import Draft, Drafter
from specdec_lib.core.errors import ConfigError
from specdec_lib.core.stats import bucket_counts, chi_square_gof


SCHEDULES = {
    "heuristic": lambda draft: HeuristicSchedule(DraftModelDrafter(draft)),
    "heuristic-from-2": lambda draft: HeuristicSchedule(DraftModelDrafter(draft), initial=2),
    "confidence": lambda draft: DraftModelDrafter(draft, stop_rule=ConfidenceStop(0.6)),
    "cost-aware": lambda draft: DraftModelDrafter(draft, stop_rule=CostAwareStop(0.2, 0.05)),
    "heuristic-lookup": lambda draft: HeuristicSchedule(PromptLookupDrafter()),
}


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_greedy_output_stays_the_targets_and_the_length_really_adapts(sharp_tiny_pair, schedule):
    """Two random prompts of 40 tokens each (seeds 0 and 3 of the four this test used to run) cover every case a
    schedule can break, asserted: a round that keeps all its drafts (the heuristic then drafts 2 more), one that
    rejects its first draft (1 fewer), lengths that change, the cap gamma = 6 and a last round cut short."""
    target, draft = sharp_tiny_pair
    drafter = SCHEDULES[schedule](draft)
    rounds = []
    for seed in (0, 3):
        prompt = torch.randint(2, 64, (1, 6), generator=torch.Generator().manual_seed(seed))
        expected = autoregressive_generate(target, prompt, max_new_tokens=40, eos_token_id=None)
        result = speculative_generate(target, drafter, prompt, gamma=6, max_new_tokens=40, eos_token_id=None)
        assert result.new_token_list == expected.new_token_list, (schedule, seed)
        rounds += result.trace.rounds[1:-1]  # the last round may be cut by max_new_tokens
    assert any(0 < r.accepted == r.drafted for r in rounds) and any(r.accepted == 0 < r.drafted for r in rounds)
    if schedule != "heuristic-lookup":  # (a lookup finds nothing on random prompts often: its length is moot)
        assert len({r.drafted for r in rounds}) > 1  # not a fixed gamma in disguise


# After [0, 20, 63] the sharp tiny target is peaked: many 3-token outcomes are expected 5 times in a few hundred draws
# (the prompt test_sampling_distribution chose for power; to move to helpers).

SAMPLED = {  # the schedules whose draft lengths differ from a fixed gamma within the 4 tokens of a sampled run
    "heuristic-from-1": lambda draft: HeuristicSchedule(DraftModelDrafter(draft), initial=1),
    "confidence": SCHEDULES["confidence"],
    "cost-aware": SCHEDULES["cost-aware"],
}


@pytest.mark.parametrize("schedule", SAMPLED)
def test_sampling_keeps_the_targets_distribution(sharp_tiny_pair, schedule):
    """200 draws at T = 1 catch any TV >= 0.2 over the tested cells (asserted). Starting from 1, the heuristic drafts
    one token, then (after a keep) emits the bonus as x3: a round shape the fixed-gamma tests never test; the stop
    rules end rounds after 1 or 2 drafts depending on the drafts' own probabilities."""
    target, draft = sharp_tiny_pair
    sampling, draws = SETTINGS["T=1.0"], 200
    categories, probs = categories_for(exact_joint(target, PEAKED_PROMPT, sampling, (8, 6, 4)), draws)
    samples, acceptance = speculative_samples(target, SAMPLED[schedule](draft), PEAKED_PROMPT, sampling, draws)
    test = chi_square_gof(bucket_counts(samples, categories), probs)
    assert test.passes(SIGNIFICANCE) and detectable_tv(draws, test.cells) <= 0.2, test
    assert 0.1 < acceptance < 0.99


def test_the_default_heuristic_samples_draw_for_draw_like_a_fixed_gamma(sharp_tiny_pair):
    """Started at the loop's gamma, the heuristic drafts what a fixed gamma drafts for the 4 tokens of a sampled
    run (2 drafts, then 1 after a rejection) and draws nothing itself: its tokens are the fixed-gamma run's, seed for
    seed, so the fixed-gamma distribution tests (test_sampling_distribution) cover it."""
    target, draft = sharp_tiny_pair
    sampling, draws = SETTINGS["T=1.0"], 20
    fixed, _ = speculative_samples(target, DraftModelDrafter(draft), PEAKED_PROMPT, sampling, draws)
    adaptive, _ = speculative_samples(target, SCHEDULES["heuristic"](draft), PEAKED_PROMPT, sampling, draws)
    assert adaptive == fixed and len(set(fixed)) > 5  # (different seeds, different tokens: not a constant)


class FixedDraft(Drafter):
    """Proposes a given number of copies of token 5 (always k when asked for less)."""

    def propose(self, context, sampling, generator):
        return Draft(tokens=torch.full((context.k,), 5, dtype=torch.long))


def test_the_heuristic_adds_two_after_a_full_accept_and_drops_one_after_a_rejection():
    schedule = HeuristicSchedule(FixedDraft(), initial=3)
    schedule.begin(Context.of(PROMPT))
    sequence = torch.zeros(1, 10, dtype=torch.long)
    assert len(schedule.propose(Context.of(sequence, 8), SETTINGS["T=1.0"], None)) == 3
    schedule.accept(Context.of(torch.zeros(1, 10 + 3 + 1, dtype=torch.long)))  # all 3 accepted, plus the bonus
    assert schedule.length == 5
    assert len(schedule.propose(Context.of(torch.zeros(1, 14, dtype=torch.long), 8), SETTINGS["T=1.0"], None)) == 5
    schedule.accept(Context.of(torch.zeros(1, 14 + 2 + 1, dtype=torch.long)))  # 2 of 5 accepted
    assert schedule.length == 4
    for _ in range(6):  # never below 1
        sequence = torch.zeros(1, 20, dtype=torch.long)
        schedule.propose(Context.of(sequence, 8), SETTINGS["T=1.0"], None)
        schedule.accept(Context.of(torch.zeros(1, 21, dtype=torch.long)))
    assert schedule.length == 1
    assert schedule.lengths[:2] == [3, 5]
    schedule.begin(Context.of(PROMPT))  # a new generation starts over
    assert schedule.length == 3 and schedule.lengths == []


def test_stop_rules_decide_on_confidences():
    assert ConfidenceStop(0.4).should_stop([0.9, 0.3]) and not ConfidenceStop(0.4).should_stop([0.3, 0.5])
    rule = CostAwareStop(0.1, 0.05)  # price 0.15
    assert not rule.should_stop([0.9, 0.5])  # 0.45 > 0.15: one more token is worth its price
    assert rule.should_stop([0.5, 0.5, 0.5])  # 0.125 < 0.15


def test_bad_schedules_are_explained(sharp_tiny_pair):
    _, draft = sharp_tiny_pair
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
