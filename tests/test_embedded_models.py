"""The embedded models themselves: what ships loads, fits its context, and decodes exactly like transformers.

Unit tests elsewhere use tiny random models; these run the real ``data/models`` family. The fast suite runs a
chosen grid, the fewest runs that still contain every case that can break (gamma 1, gamma larger than what
remains, a full accept, a first-token reject, an EOS accepted inside a draft, a prompt ending near the context's
end, each prompt set), and checks from the runs' traces that they really do. The exhaustive grid (every prompt x
every gamma x every length) and transformers' ``generate`` on every prompt are marked ``slow``.
"""

from dataclasses import dataclass

import pytest
import torch

from helpers import greedy_tokens, hf_greedy
from specdec_lib import DraftModelDrafter, GenerationResult, speculative_generate
from specdec_lib.core.validation import context_length
from specdec_lib.core.vocab import compare_vocabularies

NEW_TOKENS = 20
GAMMAS = (1, 2, 3, 4, 6, 8)
CONTEXT_MARGIN = 3  # the prompt near the context's end stops this many positions short of it after NEW_TOKENS
NEAR_END = "near the context end"
# (prompt, gamma): each prompt set, gamma 1, a middle gamma and the longest (the budget cuts its last rounds), and a
# prompt that fills the context but CONTEXT_MARGIN positions
CHOSEN = (("code", 1), ("prose", 3), ("grounded", 8), (NEAR_END, 4))


def lengths_for(gamma: int) -> list[int]:
    """The lengths each gamma runs with: 1 (the prefill alone), gamma and gamma + 1 (gamma is larger than what
    remains: the budget cuts the first round to gamma - 2 and gamma - 1 drafts, and a full accept then ends
    generation exactly) and NEW_TOKENS."""
    return sorted({1, gamma, gamma + 1, NEW_TOKENS})


def check_rounds(result: GenerationResult, gamma: int, stop_ids: set[int]) -> None:
    """The trace agrees with the tokens: every round emits its accepted drafts plus one target token (a full accept
    emits its bonus), except a last round cut short right after an accepted stop id."""
    rounds, tokens = result.trace.rounds, result.new_token_list
    assert sum(r.emitted for r in rounds) == len(tokens)
    assert all(r.accepted <= r.drafted <= gamma for r in rounds)
    assert all(r.emitted == r.accepted + 1 for r in rounds[:-1])
    last = rounds[-1]
    assert last.emitted == last.accepted + 1 or (last.emitted <= last.accepted and tokens[-1] in stop_ids)


@pytest.fixture(scope="module")
def drafter(embedded_pair):
    """The shipped draft, checked against the target's tokenizer."""
    return DraftModelDrafter.for_pair(embedded_pair)


@pytest.fixture(scope="module")
def eos(embedded_pair) -> int:
    """The target's EOS id, where every run of this module stops (as transformers' ``generate`` does)."""
    return embedded_pair.target_tokenizer.eos_token_id


@pytest.fixture(scope="module")
def near_end_prompt(embedded_pair, encoded_prompts) -> torch.Tensor:
    """The code prompts run together, cut (from the front) to end CONTEXT_MARGIN positions before the target's
    context once NEW_TOKENS are generated: ``LongTensor[1, context - NEW_TOKENS - CONTEXT_MARGIN]``."""
    length = context_length(embedded_pair.target) - NEW_TOKENS - CONTEXT_MARGIN
    joined = torch.cat([ids for _, ids in encoded_prompts["code"]], dim=1)
    assert joined.shape[1] >= length
    return joined[:, -length:]


@pytest.fixture(scope="module")
def chosen_prompts(encoded_prompts, near_end_prompt) -> dict[str, torch.Tensor]:
    """The grid's prompts by name: the first prompt of each set, and the one near the context's end."""
    prompts = {task: encoded_prompts[task][0][1] for task, _ in CHOSEN if task != NEAR_END}
    return {**prompts, NEAR_END: near_end_prompt}


@pytest.fixture(scope="module")
def chosen_baselines(embedded_pair, chosen_prompts, eos) -> dict[str, list[int]]:
    """The target's own greedy continuation (our baseline) of each chosen prompt, stopping at its EOS."""
    return {name: greedy_tokens(embedded_pair.target, ids, NEW_TOKENS, eos) for name, ids in chosen_prompts.items()}


@dataclass
class Run:
    """One speculative generation of the grid and the tokens it must equal."""

    prompt: str
    gamma: int
    max_new_tokens: int
    stop_ids: set[int]
    result: GenerationResult
    expected: list[int]


def stop_inside_an_accepted_draft(tokens: list[int], result: GenerationResult) -> int | None:
    """The index in ``tokens`` of the first token that was an accepted draft with another accepted draft after it in
    its round, and that appears there for the first time (so a stop id equal to it stops generation there); None
    when no round accepted two drafts."""
    start = 0
    for record in result.trace.rounds:
        for index in range(start, start + record.accepted - 1):
            if tokens[index] not in tokens[:index]:
                return index
        start += record.emitted
    return None


@pytest.fixture(scope="module")
def grid(embedded_pair, drafter, chosen_prompts, chosen_baselines, eos) -> list[Run]:
    """Every chosen (prompt, gamma) at each of its lengths, then one run whose stop id (besides the EOS) is a token
    the grid accepted inside a draft: generation must stop right after it."""
    runs = []
    for name, gamma in CHOSEN:
        for max_new in lengths_for(gamma):
            result = speculative_generate(embedded_pair.target, drafter, chosen_prompts[name], gamma=gamma,
                                          max_new_tokens=max_new, eos_token_id=eos)
            runs.append(Run(name, gamma, max_new, {eos}, result, chosen_baselines[name][:max_new]))
    for run in runs:
        index = stop_inside_an_accepted_draft(run.expected, run.result)
        if index is not None:
            stop_ids = {eos, run.expected[index]}
            result = speculative_generate(embedded_pair.target, drafter, chosen_prompts[run.prompt], gamma=run.gamma,
                                          max_new_tokens=run.max_new_tokens, eos_token_id=sorted(stop_ids))
            runs.append(Run(run.prompt, run.gamma, run.max_new_tokens, stop_ids, result, run.expected[: index + 1]))
            break
    return runs


# ---------------------------------------------------------------------------------------------------- fast checks


def test_the_family_loads_with_the_expected_tokenizers(embedded_pair, embedded_cross_pair):
    assert embedded_pair.same_tokenizer
    assert not embedded_cross_pair.same_tokenizer
    assert compare_vocabularies(embedded_cross_pair.target_tokenizer, embedded_cross_pair.draft_tokenizer).kind == (
        "different")
    assert embedded_pair.target.config.num_hidden_layers > embedded_pair.draft.config.num_hidden_layers


@pytest.mark.parametrize("name", ["prose", NEAR_END])
def test_baseline_equals_transformers_greedy_generate_on_chosen_prompts(embedded_pair, chosen_prompts,
                                                                        chosen_baselines, eos, name):
    """A prose prompt and the one ending near the context (positions up to its last); every prompt: slow."""
    assert chosen_baselines[name] == hf_greedy(embedded_pair.target, chosen_prompts[name], NEW_TOKENS, eos)


def test_speculative_greedy_is_token_identical_on_the_chosen_grid(grid):
    """Each run gives the baseline's tokens (up to its stop id), and its rounds add up to them."""
    for run in grid:
        label = (run.prompt, run.gamma, run.max_new_tokens, sorted(run.stop_ids))
        assert run.result.new_token_list == run.expected, label
        check_rounds(run.result, run.gamma, run.stop_ids)


def test_the_chosen_grid_contains_every_case_that_can_break(embedded_pair, grid, eos):
    """Read from the traces, so that a change of models or prompts that loses a case fails here, not silently."""
    rounds = [(run, record) for run in grid for record in run.result.trace.rounds]
    assert {run.gamma for run in grid} >= {1, max(GAMMAS)}
    assert {run.prompt for run in grid} == {"code", "prose", "grounded", NEAR_END}
    assert any(record.drafted == run.gamma >= 2 and record.accepted == record.drafted for run, record in rounds), (
        "no round accepted all of gamma >= 2 drafts")
    assert any(record.drafted > 0 and record.accepted == 0 for _, record in rounds), "no first-token reject"
    stopped = [run for run in grid if run.stop_ids != {eos}]
    assert stopped, "no round accepted two drafts whose first could serve as a stop id"
    last = stopped[0].result.trace.rounds[-1]
    assert last.emitted < last.accepted and stopped[0].result.new_token_list[-1] in stopped[0].stop_ids, (
        "the stop id did not end generation inside an accepted draft")
    assert len(stopped[0].result.new_token_list) < stopped[0].max_new_tokens

    def shortened_by_the_budget(run: Run) -> bool:
        *earlier, last = run.result.trace.rounds
        left = run.max_new_tokens - sum(r.emitted for r in earlier)  # tokens the last round may still add
        return len(run.expected) == run.max_new_tokens and 0 < last.drafted == left - 1 < run.gamma

    assert any(shortened_by_the_budget(run) for run in grid), "no last round drafted fewer than gamma to fit"
    near_end = next(run for run in grid if run.prompt == NEAR_END and run.max_new_tokens == NEW_TOKENS)
    assert near_end.result.sequence.shape[1] == context_length(embedded_pair.target) - CONTEXT_MARGIN


# --------------------------------------------------------------------------------------------- the exhaustive grid


@pytest.fixture(scope="module")
def baselines(embedded_pair, encoded_prompts, eos) -> dict[str, list[int]]:
    """The target's own greedy continuation of every prompt of every set, stopping at EOS."""
    return {pid: greedy_tokens(embedded_pair.target, ids, NEW_TOKENS, eos)
            for prompts in encoded_prompts.values() for pid, ids in prompts}


@pytest.mark.slow
def test_baseline_equals_transformers_greedy_generate_on_every_prompt(embedded_pair, encoded_prompts, baselines, eos):
    for prompts in encoded_prompts.values():
        for pid, ids in prompts:
            assert baselines[pid] == hf_greedy(embedded_pair.target, ids, NEW_TOKENS, eos_token_id=eos), pid


@pytest.mark.slow
@pytest.mark.parametrize("gamma", GAMMAS)
def test_speculative_greedy_is_token_identical_on_every_prompt(embedded_pair, drafter, encoded_prompts, baselines,
                                                               eos, gamma):
    """Every prompt x `lengths_for(gamma)`: greedy outputs are prefixes of each other, and the rounds add up."""
    for prompts in encoded_prompts.values():
        for pid, ids in prompts:
            for max_new in lengths_for(gamma):
                result = speculative_generate(embedded_pair.target, drafter, ids, gamma=gamma, max_new_tokens=max_new,
                                              eos_token_id=eos)
                assert result.new_token_list == baselines[pid][:max_new], (pid, gamma, max_new)
                check_rounds(result, gamma, {eos})
