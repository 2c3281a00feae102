"""Batched decoding: every row of a batch is what that prompt gives alone (greedy: token for token; sampling: in
distribution), with a draft model or prompt lookup, ragged acceptance, rows finishing at different times, and
speculation switched off above a batch size. Tiny random models (tests/conftest.py); the greedy grid runs the cases
that can break, the full batch x drafter x gamma product and an embedded-pair test sit behind ``slow``.
"""

import itertools

import pytest
import torch

from helpers import SIGNIFICANCE, detectable_tv, first_layer_draft, one_position_law
from specdec_lib import autoregressive_generate
from specdec_lib import DraftModelDrafter, PromptLookupDrafter, batched_autoregressive_generate, batched_speculative_generate
from specdec_lib.decoders import batch_drafter
from specdec_lib.core.drafting import Draft, WrappedDrafter
from specdec_lib.core.result import GenerationResult
from specdec_lib.core.forward import positions_from_mask
from specdec_lib.core.rows import left_pad
from specdec_lib.core.errors import ConfigError, ContextOverflowError, InputError
from specdec_lib.core.sampling import SamplingConfig, logits_to_probs
from specdec_lib.core.stats import chi_square_gof, histogram, total_variation

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
def target(tiny_llama):
    return tiny_llama


@pytest.fixture(scope="module")
def drafts(target, tiny_draft_llama):
    """An independent random draft (rarely agrees) and the target's first layer (often agrees)."""
    return {"random": tiny_draft_llama, "first-layer": first_layer_draft(target)}


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
    input_ids, valid = left_pad([torch.tensor([5, 17, 42, 3]), torch.tensor([[9, 4]])], pad_id=0)
    assert input_ids.tolist() == [[5, 17, 42, 3], [0, 0, 9, 4]]
    assert valid.long().tolist() == [[1, 1, 1, 1], [0, 0, 1, 1]]
    assert positions_from_mask(valid).tolist() == [[0, 1, 2, 3], [0, 0, 0, 1]]
    holes = torch.tensor([[1, 1, 0, 1], [0, 1, 0, 1]])  # a hole counts for no position
    assert positions_from_mask(holes).tolist() == [[0, 1, 1, 2], [0, 0, 0, 1]]
    assert left_pad([torch.tensor([5, 17]), torch.tensor([[9, 4]])])[1] is None  # no row padded: no mask


@pytest.mark.parametrize("batch", [1, 3, 5])
@pytest.mark.parametrize("eos", [None, EOS])
def test_batched_baseline_equals_each_row_alone(target, references, batch, eos):
    result = batched_autoregressive_generate(target, prompts(batch), max_new_tokens=NEW_TOKENS, eos_token_id=eos)
    assert result.tokens == references[eos][:batch]
    assert [len(t) for t in result.token_times] == [len(t) for t in result.tokens]
    longest = max(len(t) for t in result.tokens)
    assert result.target_forwards == longest  # finished rows leave the batch, the longest row sets the count
    assert [len(f) for f in result.forwards] == [sum(len(t) > i for t in result.tokens) for i in range(longest)]


def assert_batched_greedy_is_each_row_alone(target, drafts, references, batch, drafter_name, gamma):
    """The first ``batch`` prompts decoded together equal each prompt decoded alone, token for token."""
    drafter = drafter_name if drafter_name == "prompt-lookup" else drafts[drafter_name]
    result = batched_speculative_generate(target, drafter, prompts(batch), gamma=gamma, max_new_tokens=NEW_TOKENS,
                                          eos_token_id=None)
    assert result.tokens == references[None][:batch]
    assert all(len(t) == NEW_TOKENS for t in result.tokens)  # never more than max_new_tokens
    assert all(0 <= a <= d for a, d in zip(result.accepted, result.drafted))
    assert result.target_forwards <= NEW_TOKENS
    return result


def test_one_row_is_the_prompt_alone(target, drafts, references):
    assert_batched_greedy_is_each_row_alone(target, drafts, references, 1, "first-layer", 3)


def test_copies_of_one_prompt_are_prefilled_once_and_each_row_is_the_prompt_alone(target, drafts, references):
    """n samples of one prompt: the prefill reads the prompt once and copies its keys and values to every row
    (`CachedRows`), for the target and the draft model alike; the rows then drift apart (EOS, ragged acceptance)
    and each is still that prompt's own greedy output."""
    batches = {"target": [], "draft": []}
    models = {"target": target, "draft": drafts["first-layer"]}
    hooks = [model.register_forward_pre_hook(
        lambda module, args, kwargs, name=name: batches[name].append(kwargs["input_ids"].shape[0]), with_kwargs=True)
        for name, model in models.items()]
    try:
        result = batched_speculative_generate(target, drafts["first-layer"], [torch.tensor(PROMPTS[0])] * 4, gamma=3,
                                              max_new_tokens=NEW_TOKENS, eos_token_id=EOS)
    finally:
        for hook in hooks:
            hook.remove()
    # the first forward of each read one row (the same prompt, and the same greedy drafts); later forwards all four
    assert batches["target"][0] == batches["draft"][0] == 1 and 4 in batches["target"]
    assert result.tokens == [references[EOS][0]] * 4


def test_ragged_acceptance_with_gamma_one(target, drafts, references):
    """Rows accept different numbers of their one-token drafts, so their caches drift apart from the first rounds."""
    result = assert_batched_greedy_is_each_row_alone(target, drafts, references, 5, "first-layer", 1)
    assert len(set(result.accepted)) > 1


def test_every_draft_rejected_every_row_advances_by_its_recovered_token(target, drafts, references):
    """The random draft never agrees here: every round rolls every row back over all its drafts."""
    result = assert_batched_greedy_is_each_row_alone(target, drafts, references, 3, "random", 3)
    assert result.accepted == [0, 0, 0] and min(result.drafted) > 0


def test_ragged_acceptance_with_gamma_beyond_the_remaining_budget(target, drafts, references):
    """gamma 5, rows accepting different shares: near the end rows draft k = remaining - 1 < gamma, each its own."""
    result = assert_batched_greedy_is_each_row_alone(target, drafts, references, 5, "first-layer", 5)
    assert len({a / d for a, d in zip(result.accepted, result.drafted)}) > 1
    assert any(0 < record.drafted < 5 for forward in result.forwards for record in forward)  # fewer than gamma


def test_prompt_lookup_rows_that_find_nothing_draft_nothing(target, drafts, references):
    """Prompt lookup on random prompts: in some rounds a row finds a match while another drafts nothing (k'_b = 0)."""
    result = assert_batched_greedy_is_each_row_alone(target, drafts, references, 5, "prompt-lookup", 3)
    # in one forward, a row drafted nothing while another drafted
    assert any(min(r.drafted for r in f) == 0 < max(r.drafted for r in f) for f in result.forwards)


@pytest.mark.slow
@pytest.mark.parametrize(("batch", "drafter_name", "gamma"),
                         list(itertools.product([1, 3, 5], ["random", "first-layer", "prompt-lookup"], [1, 3, 5])))
def test_batched_speculative_greedy_equals_each_row_alone_on_the_full_grid(target, drafts, references, batch,
                                                                           drafter_name, gamma):
    assert_batched_greedy_is_each_row_alone(target, drafts, references, batch, drafter_name, gamma)


@pytest.mark.parametrize("new_tokens", [1, 2])
def test_a_few_new_tokens_with_a_large_gamma(target, drafts, references, new_tokens):
    result = batched_speculative_generate(target, drafts["first-layer"], prompts(3), gamma=6,
                                          max_new_tokens=new_tokens, eos_token_id=None)
    assert result.tokens == [ref[:new_tokens] for ref in references[None][:3]]
    assert sum(result.drafted) == 3 * (new_tokens - 1)  # the first round drafts k = remaining - 1
    assert result.target_forwards <= new_tokens


@pytest.mark.parametrize("drafter_name", ["first-layer", "prompt-lookup"])
def test_rows_finish_at_different_times_and_accept_ragged_drafts(target, drafts, references, drafter_name):
    drafter = drafter_name if drafter_name == "prompt-lookup" else drafts[drafter_name]
    result = batched_speculative_generate(target, drafter, prompts(5), gamma=4, max_new_tokens=NEW_TOKENS,
                                          eos_token_id=EOS)
    assert result.tokens == references[EOS]
    assert len({len(t) for t in result.tokens}) == 5 and all(t[-1] == EOS for t in result.tokens)
    assert len(result.forwards[-1]) == 1 < len(result.forwards[0])  # finished rows left the batch
    # ragged acceptance: rows accept different shares of their drafts in the same rounds
    assert len(set(result.accepted)) > 1
    assert len({a / d for a, d in zip(result.accepted, result.drafted) if d}) > 1
    assert all(r <= len(t) for r, t in zip(result.rounds, result.tokens))


def test_timing_helpers(target, drafts):
    result = batched_speculative_generate(target, drafts["first-layer"], prompts(3), gamma=3, max_new_tokens=12,
                                          eos_token_id=None)
    assert isinstance(result, GenerationResult) and result.batch == 3
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
    assert all(r.drafted == 0 for f in result.forwards if len(f) > 2 for r in f)  # plain steps above the threshold
    assert any(r.drafted > 0 for f in result.forwards if len(f) <= 2 for r in f)  # speculation resumes below it
    plain = batched_autoregressive_generate(target, prompts(5), max_new_tokens=NEW_TOKENS, eos_token_id=EOS)

    def steps(run):  # what every row did in the forwards over more than 2 rows
        return [[(r.drafted, r.emitted, r.kind) for r in f] for f in run.forwards if len(f) > 2]
    assert steps(result) == steps(plain)  # the same steps


# ---------------------------------------------------------------- sampling: each row keeps the target's distribution

SAMPLING = SamplingConfig(temperature=1.0)
COPIES = 1000  # copies of one prompt in one batch: independent draws (~0.5 s a run)


@pytest.fixture(scope="module")
def peaked(sharp_tiny_pair):
    """A sharpened tiny target (peaked distributions, like a trained model's), its first layer as the draft (it
    accepts often but not always), and a prompt that loops (the target's greedy continuation of 3 tokens), so that
    its first sampled token often recurs in the prompt and prompt lookup drafts too."""
    target, draft = sharp_tiny_pair
    prompt = autoregressive_generate(target, torch.tensor([[0, 5, 17]]), max_new_tokens=13, eos_token_id=None)
    return target, draft, prompt.sequence[0]




@pytest.fixture(scope="module")
def second_token_laws(peaked):
    """Exact laws ``[V]`` of the second new token, over the 64 first tokens x1 in one forward per model: the
    target's, ``sum_x1 p(x1) p(x2 | x1)``, and what a drafter sampling x2 from the draft model's q(. | x1) but
    reporting a uniform q emits (`one_position_law` for every x1)."""
    target, draft, prompt = peaked
    with torch.inference_mode():
        first = logits_to_probs(target(prompt[None]).logits[0, -1], SAMPLING)  # [V]
        contexts = torch.cat([prompt[None].expand(64, -1), torch.arange(64)[:, None]], dim=1)  # [V, T + 1]
        second = logits_to_probs(target(contexts).logits[:, -1], SAMPLING)  # [V, V]: row x1
        drafted = logits_to_probs(draft(contexts).logits[:, -1], SAMPLING)  # [V, V]: the q x2 is drawn from
    uniform = torch.full_like(drafted, 1 / drafted.shape[-1])
    return {"target": first @ second, "reports uniform q": first @ one_position_law(second, drafted, uniform),
            "first": first}


class ReportsUniformQ(WrappedDrafter):
    """A buggy drafter: it samples from the draft model but reports a uniform q (the bug class of
    `specdec_lib.core.drafting`)."""

    def propose(self, context, sampling, generator):
        draft = self.inner.propose(context, sampling, generator)
        uniform = torch.full_like(draft.probs, 1 / draft.probs.shape[-1])
        return Draft(draft.tokens, uniform, draft.forwards, draft.lengths)


class FromTheSecondRound(WrappedDrafter):
    """Drafts nothing in the first round (the prompts' forward), so that the first new token is the target's own
    sample and the second the first verified one: the schedule `second_token_laws` computes exactly."""

    def begin(self, context, **limits):
        self.first = True
        super().begin(context, **limits)

    def propose(self, context, sampling, generator):
        first, self.first = self.first, False
        return Draft.empty(context.batch) if first else super().propose(context, sampling, generator)


def second_tokens(peaked, drafter, seed, **verification):
    """Histogram of the second new token over COPIES rows of one batch (max_new_tokens=3: drafting from the second
    round on, the first token is the target's own and the next round drafts k = 1 token and verifies it)."""
    target, _, prompt = peaked
    drafter = FromTheSecondRound(batch_drafter(drafter))
    result = batched_speculative_generate(target, drafter, [prompt] * COPIES, gamma=2, max_new_tokens=3,
                                          sampling=SAMPLING, eos_token_id=None, seed=seed, **verification)
    assert 0 < sum(result.accepted) < sum(result.drafted)  # both accepted and recovered second tokens happen
    return histogram([tokens[1] for tokens in result.tokens], 64)


def test_batched_sampling_keeps_the_target_distribution_per_row(peaked, second_token_laws):
    """The second token is the first verified one: an accepted draft or a recovered token. COPIES draws per run over
    ~25 cells catch a deviation of TV 0.12 (power 0.9 at p < SIGNIFICANCE). A drafter reporting a uniform q moves
    the law by a TV of 0.21 (exactly, `second_token_laws`): it fails the same test and lands on the predicted law."""
    law, wrong_law = second_token_laws["target"], second_token_laws["reports uniform q"]
    draft = peaked[1]
    # q = None for prompt lookup: point masses, and some rows draft nothing
    for drafter, seed in ((draft, 1), (PromptLookupDrafter(), 2)):
        test = chi_square_gof(second_tokens(peaked, drafter, seed), law)
        assert test.passes(SIGNIFICANCE) and detectable_tv(COPIES, test.cells) <= 0.12, (drafter, test)
    target, draft, prompt = peaked  # drafting in the first round too: the first token is then a verified one
    first = batched_speculative_generate(target, draft, [prompt] * COPIES, gamma=2, max_new_tokens=3,
                                         sampling=SAMPLING, eos_token_id=None, seed=4)
    assert 0 < sum(first.accepted) < sum(first.drafted) and all(r.rounds[0].drafted == 2 for r in first.traces)
    test = chi_square_gof(histogram([tokens[0] for tokens in first.tokens], 64), second_token_laws["first"])
    assert test.passes(SIGNIFICANCE) and detectable_tv(COPIES, test.cells) <= 0.12, test
    effect = total_variation(wrong_law, law)
    assert effect == pytest.approx(0.21, abs=0.005)
    wrong = second_tokens(peaked, ReportsUniformQ(DraftModelDrafter(draft)), seed=1)
    test = chi_square_gof(wrong, law)
    assert not test.passes(SIGNIFICANCE) and detectable_tv(COPIES, test.cells) <= effect / 1.5, test
    assert chi_square_gof(wrong, wrong_law).passes(SIGNIFICANCE)


def test_batched_verification_rule_reaches_the_verifier(peaked, second_token_laws):
    """``verification`` is the batch's rule too: block verification keeps the law (same power as above); the lenient
    rule with lenience 8 accepts the draft model's q far too often and fails the same test."""
    law, draft = second_token_laws["target"], peaked[1]
    block = chi_square_gof(second_tokens(peaked, draft, 3, verification="block"), law)
    assert block.passes(SIGNIFICANCE) and detectable_tv(COPIES, block.cells) <= 0.12, block
    relaxed = second_tokens(peaked, draft, 3, verification="relaxed", lenience=8.0)
    assert not chi_square_gof(relaxed, law).passes(SIGNIFICANCE)


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
    with pytest.raises(InputError, match=r"outside the model's vocabulary \[0, 32\)"):
        run(target, make_tiny_model(vocab_size=32), prompts(2), gamma=2, max_new_tokens=4)
    with pytest.raises(ConfigError, match="disable_by_batch_size"):
        run(target, "prompt-lookup", prompts(2), gamma=2, max_new_tokens=4, disable_by_batch_size=0)
    with pytest.raises(ConfigError, match="drafter must be 'prompt-lookup'"):
        run(target, "medusa", prompts(2), gamma=2, max_new_tokens=4)

    class ElsewhereDraft(DraftModelDrafter):
        device = torch.device("meta")

    with pytest.raises(ConfigError, match="drafter's model is on meta"):
        run(target, ElsewhereDraft(drafts["random"]), prompts(2), gamma=2, max_new_tokens=4)


@pytest.mark.slow
def test_embedded_pair_batched_greedy_equals_each_row_alone(embedded_pair):
    from specdec_lib.prompts import load_prompts

    pair = embedded_pair
    texts = [p.prompt for p in load_prompts("code", limit=4)]
    rows = [pair.target_tokenizer(text, return_tensors="pt").input_ids[0] for text in texts]
    assert len({len(r) for r in rows}) > 1
    alone = [autoregressive_generate(pair.target, r[None], max_new_tokens=16).new_token_list for r in rows]
    for drafter in (pair.draft, "prompt-lookup"):
        result = batched_speculative_generate(pair.target, drafter, rows, gamma=4, max_new_tokens=16)
        assert result.tokens == alone
    assert batched_autoregressive_generate(pair.target, rows, max_new_tokens=16).tokens == alone
