"""Batched decoding: every row of a batch is what that prompt gives alone (greedy: token for token; sampling: in
distribution), with a draft model or prompt lookup, ragged acceptance, rows finishing at different times, and
speculation switched off above a batch size. Tiny random models (tests/conftest.py) except one embedded-pair test.
"""

import pytest
import torch
from helpers import build_tiny_model, first_layer_draft, sharpen

from specdec_lib.baseline import autoregressive_generate
from specdec_lib.batched_speculative import (
    BatchedDraft,
    BatchedDrafter,
    BatchedDraftModel,
    BatchedPromptLookup,
    batched_speculative_generate,
)
from specdec_lib.batching import BatchedResult, batched_autoregressive_generate, left_pad, position_ids_from_mask
from specdec_lib.errors import ConfigError, ContextOverflowError, InputError
from specdec_lib.sampling import SamplingConfig, logits_to_probs
from specdec_lib.stats import chi_square_gof, histogram

# five prompts of different lengths (random ids); with the tiny target's greedy output, token 36 first occurs at
# new-token index 8, 5, 3, 6 and 21 of the five rows: EOS=36 makes them finish at different times
PROMPTS = [
    [20, 63, 17, 16, 29, 25, 19],
    [59, 59, 19],
    [17, 8, 18, 57, 10, 48, 34, 8, 58, 29, 38, 11],
    [13, 20, 28, 39, 7],
    [29, 15, 4, 53, 10, 41, 20, 61, 35],
]
EOS = 36
NEW_TOKENS = 24


@pytest.fixture(scope="module")
def target():
    return build_tiny_model("llama", seed=0, num_layers=2)


@pytest.fixture(scope="module")
def drafts(target):
    """An independent random draft (rarely agrees) and the target's first layer (often agrees)."""
    return {"random": build_tiny_model("llama", seed=1, num_layers=1), "first-layer": first_layer_draft(target)}


@pytest.fixture(scope="module")
def references(target):
    """Each prompt's own greedy continuation, alone, without and with EOS."""
    def alone(eos):
        return [autoregressive_generate(target, torch.tensor([p]), max_new_tokens=NEW_TOKENS,
                                        eos_token_id=eos).new_token_list for p in PROMPTS]
    return {None: alone(None), EOS: alone(EOS)}


def prompts(batch):
    return [torch.tensor(p) for p in PROMPTS[:batch]]


def test_left_padding_and_positions():
    input_ids, mask = left_pad([torch.tensor([5, 17, 42, 3]), torch.tensor([[9, 4]])], pad_id=0)
    assert input_ids.tolist() == [[5, 17, 42, 3], [0, 0, 9, 4]]
    assert mask.tolist() == [[1, 1, 1, 1], [0, 0, 1, 1]]
    assert position_ids_from_mask(mask).tolist() == [[0, 1, 2, 3], [0, 0, 0, 1]]
    holes = torch.tensor([[1, 1, 0, 1], [0, 1, 0, 1]])  # a hole counts for no position
    assert position_ids_from_mask(holes).tolist() == [[0, 1, 1, 2], [0, 0, 0, 1]]


@pytest.mark.parametrize("batch", [1, 3, 5])
@pytest.mark.parametrize("eos", [None, EOS])
def test_batched_baseline_equals_each_row_alone(target, references, batch, eos):
    result = batched_autoregressive_generate(target, prompts(batch), max_new_tokens=NEW_TOKENS, eos_token_id=eos)
    assert result.tokens == references[eos][:batch]
    assert [len(t) for t in result.token_times] == [len(t) for t in result.tokens]
    longest = max(len(t) for t in result.tokens)
    assert result.target_forwards == longest  # finished rows leave the batch, the longest row sets the count
    assert [f.rows for f in result.forwards] == [sum(len(t) > i for t in result.tokens) for i in range(longest)]


@pytest.mark.parametrize("batch", [1, 3, 5])
@pytest.mark.parametrize("drafter_name", ["random", "first-layer", "prompt-lookup"])
@pytest.mark.parametrize("gamma", [1, 3, 5])
def test_batched_speculative_greedy_equals_each_row_alone(target, drafts, references, batch, drafter_name, gamma):
    drafter = drafter_name if drafter_name == "prompt-lookup" else drafts[drafter_name]
    result = batched_speculative_generate(target, drafter, prompts(batch), gamma=gamma, max_new_tokens=NEW_TOKENS,
                                          eos_token_id=None)
    assert result.tokens == references[None][:batch]
    assert all(len(t) == NEW_TOKENS for t in result.tokens)  # never more than max_new_tokens
    assert all(0 <= a <= d for a, d in zip(result.accepted, result.drafted))
    assert result.target_forwards <= NEW_TOKENS


@pytest.mark.parametrize("new_tokens", [1, 2])
def test_a_few_new_tokens_with_a_large_gamma(target, drafts, references, new_tokens):
    result = batched_speculative_generate(target, drafts["first-layer"], prompts(3), gamma=6,
                                          max_new_tokens=new_tokens, eos_token_id=None)
    assert result.tokens == [ref[:new_tokens] for ref in references[None][:3]]
    assert result.target_forwards == new_tokens and sum(result.drafted) == 0  # k = remaining - 1 = 0


@pytest.mark.parametrize("drafter_name", ["first-layer", "prompt-lookup"])
def test_rows_finish_at_different_times_and_accept_ragged_drafts(target, drafts, references, drafter_name):
    drafter = drafter_name if drafter_name == "prompt-lookup" else drafts[drafter_name]
    result = batched_speculative_generate(target, drafter, prompts(5), gamma=4, max_new_tokens=NEW_TOKENS,
                                          eos_token_id=EOS)
    assert result.tokens == references[EOS]
    assert len({len(t) for t in result.tokens}) == 5 and all(t[-1] == EOS for t in result.tokens)
    assert [f.rows for f in result.forwards][-1] == 1 < result.forwards[0].rows  # finished rows left the batch
    # ragged acceptance: rows accept different shares of their drafts in the same rounds
    assert len(set(result.accepted)) > 1
    assert len({a / d for a, d in zip(result.accepted, result.drafted) if d}) > 1
    assert all(r <= len(t) - 1 for r, t in zip(result.rounds, result.tokens))


def test_timing_helpers(target, drafts):
    result = batched_speculative_generate(target, drafts["first-layer"], prompts(3), gamma=3, max_new_tokens=12,
                                          eos_token_id=None)
    assert isinstance(result, BatchedResult)
    ttft = result.time_to_first_token()
    assert len(ttft) == 3 and len(set(ttft)) == 1  # every row's first token comes from the one prefill
    for times, gaps in zip(result.token_times, result.inter_token_latencies()):
        assert times == sorted(times) and all(g > 0 for g in gaps)
        assert len(gaps) == len(set(times)) - 1  # tokens of one round arrive together
    assert result.tokens_per_second == pytest.approx(36 / result.wall_time)
    assert all(0 <= rate <= 1 for rate in result.acceptance_rate())


def test_disable_by_batch_size_drafts_only_once_few_rows_are_left(target, drafts, references):
    result = batched_speculative_generate(target, drafts["first-layer"], prompts(5), gamma=3,
                                          max_new_tokens=NEW_TOKENS, eos_token_id=EOS, disable_by_batch_size=2)
    assert result.tokens == references[EOS]
    assert all(f.drafted == 0 for f in result.forwards if f.rows > 2)  # plain batched steps above the threshold
    assert any(f.drafted > 0 for f in result.forwards if f.rows <= 2)  # speculation resumes below it
    plain = batched_autoregressive_generate(target, prompts(5), max_new_tokens=NEW_TOKENS, eos_token_id=EOS)
    assert [f for f in result.forwards if f.rows > 2] == [f for f in plain.forwards if f.rows > 2]  # same steps


# ---------------------------------------------------------------- sampling: each row keeps the target's distribution

SAMPLING = SamplingConfig(temperature=1.0)
COPIES = 1500  # copies of one prompt in one batch: independent draws


@pytest.fixture(scope="module")
def peaked():
    """A sharpened tiny target (peaked distributions, like a trained model's), its first layer as the draft (it
    accepts often but not always), and a prompt that loops (the target's greedy continuation of 3 tokens), so that
    its first sampled token often recurs in the prompt and prompt lookup drafts too."""
    target = sharpen(build_tiny_model("llama", seed=0), 30.0)
    prompt = autoregressive_generate(target, torch.tensor([[0, 5, 17]]), max_new_tokens=13, eos_token_id=None)
    return target, first_layer_draft(target), prompt.sequence[0]


@pytest.fixture(scope="module")
def second_token_law(peaked):
    """The target's exact marginal of the second new token: sum_x1 p(x1) p(x2 | x1), over the 64 x1 in one forward."""
    target, _, prompt = peaked
    with torch.inference_mode():
        first = logits_to_probs(target(prompt[None]).logits[0, -1], SAMPLING)  # [V]
        contexts = torch.cat([prompt[None].expand(64, -1), torch.arange(64)[:, None]], dim=1)  # [V, T + 1]
        second = logits_to_probs(target(contexts).logits[:, -1], SAMPLING)  # [V, V]: row x1
    return first @ second  # [V]


class ReportsUniformQ(BatchedDrafter):
    """A buggy drafter: it samples from the draft model but reports a uniform q (the bug class of base.py)."""

    name = "wrong-q"

    def __init__(self, model):
        self.inner = BatchedDraftModel(model)
        self.device = model.device

    def begin(self, sequences, **limits):
        self.inner.begin(sequences, **limits)

    def propose(self, sequences, ks, sampling, generator):
        draft = self.inner.propose(sequences, ks, sampling, generator)
        return BatchedDraft(draft.tokens, draft.lengths, torch.full_like(draft.probs, 1 / draft.probs.shape[-1]))

    def accept(self, lengths):
        self.inner.accept(lengths)

    def select(self, rows):
        self.inner.select(rows)


def second_tokens(peaked, drafter, seed):
    """Histogram of the second new token over COPIES rows of one batch (max_new_tokens=3: the first round after
    the prefill drafts k = 1 token and verifies it)."""
    target, _, prompt = peaked
    result = batched_speculative_generate(target, drafter, [prompt] * COPIES, gamma=2, max_new_tokens=3,
                                          sampling=SAMPLING, eos_token_id=None, seed=seed)
    assert 0 < sum(result.accepted) < sum(result.drafted)  # both accepted and recovered second tokens happen
    return histogram([tokens[1] for tokens in result.tokens], 64)


def test_batched_sampling_keeps_the_target_distribution_per_row(peaked, second_token_law):
    """The second token is the first verified one: an accepted draft or a recovered token. 1500 draws each."""
    draft = peaked[1]
    assert chi_square_gof(second_tokens(peaked, draft, seed=1), second_token_law).p_value > 1e-3
    lookup = second_tokens(peaked, BatchedPromptLookup(), seed=2)  # q = None: point masses, some rows draft nothing
    assert chi_square_gof(lookup, second_token_law).p_value > 1e-3
    # the test has power: a drafter reporting the wrong q makes the output drift towards the draft's distribution
    # (p-values about 1e-77 here)
    assert chi_square_gof(second_tokens(peaked, ReportsUniformQ(draft), seed=1), second_token_law).p_value < 1e-3


def test_same_seed_same_tokens(peaked):
    target, draft, _ = peaked
    runs = [batched_speculative_generate(target, draft, prompts(3), gamma=3, max_new_tokens=10, sampling=SAMPLING,
                                         eos_token_id=None, seed=7).tokens for _ in range(2)]
    assert runs[0] == runs[1]


# ---------------------------------------------------------------- bad inputs

def test_bad_inputs_are_refused_clearly(target, drafts, make_tiny_model):
    run = batched_speculative_generate
    with pytest.raises(InputError, match="list of prompts is empty"):
        run(target, "prompt-lookup", [], gamma=2, max_new_tokens=4)
    with pytest.raises(InputError, match="list of prompts is empty"):
        batched_autoregressive_generate(target, [], max_new_tokens=4)
    with pytest.raises(InputError, match="must be a list"):
        run(target, "prompt-lookup", torch.tensor([[1, 2], [3, 4]]), gamma=2, max_new_tokens=4)
    with pytest.raises(InputError, match=r"Prompt 1 has shape \[2, 2\]"):
        run(target, "prompt-lookup", [torch.tensor([1]), torch.tensor([[1, 2], [3, 4]])], gamma=2, max_new_tokens=4)
    with pytest.raises(InputError, match="empty"):
        run(target, "prompt-lookup", [torch.tensor([3, 4]), torch.tensor([], dtype=torch.long)], gamma=2,
            max_new_tokens=4)
    with pytest.raises(ConfigError, match="gamma"):
        run(target, "prompt-lookup", prompts(2), gamma=0, max_new_tokens=4)
    with pytest.raises(ContextOverflowError, match="exceeds the model's context of 128"):
        run(target, "prompt-lookup", [torch.tensor([3] * 120)], gamma=2, max_new_tokens=10)
    with pytest.raises(ConfigError, match="draft vocabulary must cover the target's"):
        run(target, make_tiny_model(vocab_size=32), prompts(2), gamma=2, max_new_tokens=4)
    with pytest.raises(ConfigError, match="disable_by_batch_size"):
        run(target, "prompt-lookup", prompts(2), gamma=2, max_new_tokens=4, disable_by_batch_size=0)
    with pytest.raises(ConfigError, match="drafter must be 'prompt-lookup'"):
        run(target, "medusa", prompts(2), gamma=2, max_new_tokens=4)

    class ElsewhereDraft(BatchedDraftModel):
        device = torch.device("meta")

    with pytest.raises(ConfigError, match="drafter's model is on meta"):
        run(target, ElsewhereDraft(drafts["random"]), prompts(2), gamma=2, max_new_tokens=4)


@pytest.mark.slow
def test_embedded_pair_batched_greedy_equals_each_row_alone():
    from specdec_lib.models import load_pair
    from specdec_lib.prompts import load_prompts

    pair = load_pair("embedded", device="cpu")
    texts = [p.prompt for p in load_prompts("code", limit=4)]
    rows = [pair.target_tokenizer(text, return_tensors="pt").input_ids[0] for text in texts]
    assert len({len(r) for r in rows}) > 1
    alone = [autoregressive_generate(pair.target, r[None], max_new_tokens=16).new_token_list for r in rows]
    for drafter in (pair.draft, "prompt-lookup"):
        result = batched_speculative_generate(pair.target, drafter, rows, gamma=4, max_new_tokens=16)
        assert result.tokens == alone
    assert batched_autoregressive_generate(pair.target, rows, max_new_tokens=16).tokens == alone
