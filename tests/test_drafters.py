"""drafters: the Drafter interface, and DraftModelDrafter's drafts, probabilities, cache rollback and checks."""

import pytest
import torch

from helpers import build_tiny_tokenizer
from specdec_lib.core.drafting import Context
from specdec_lib import autoregressive_generate, speculative_generate
from specdec_lib.drafters import Draft, Drafter, DraftModelDrafter
from specdec_lib.core.errors import ConfigError, InputError
from specdec_lib.core.forward import forward_with_cache
from specdec_lib.core.caches import cache_length
from specdec_lib.core.pair import ModelPair
from specdec_lib.core.sampling import GREEDY, SamplingConfig, logits_to_probs, make_generator

SAMPLING = SamplingConfig(temperature=0.8, top_k=20)


def test_greedy_draft_is_the_draft_models_own_greedy_continuation(tiny_draft_llama, prompt_ids):
    drafter = DraftModelDrafter(tiny_draft_llama)
    drafter.begin(Context.of(prompt_ids))
    draft = drafter.propose(Context.of(prompt_ids, 5), GREEDY, None)
    expected = autoregressive_generate(tiny_draft_llama, prompt_ids, max_new_tokens=5).new_token_list
    assert draft.row().tolist() == expected
    assert draft.tokens.dtype == torch.long and draft.forwards == 5
    assert draft.probs is None  # a greedy draft is a point mass: no one-hot rows are built
    # the cache holds the prompt and the first k - 1 drafts: the last draft is fed next round
    assert cache_length(drafter.cache) == prompt_ids.shape[1] + 4


def fresh_proposal(model, sequence, k, sampling=GREEDY, seed=None):
    drafter = DraftModelDrafter(model)
    drafter.begin(Context.of(sequence[:, :1]))
    return drafter.propose(Context.of(sequence, k), sampling, make_generator(seed, "cpu"))


@pytest.mark.parametrize("kept", [0, 2, 4])  # drafts accepted before the target's own token
def test_rollback_after_accept_matches_a_fresh_drafter(tiny_draft_llama, prompt_ids, kept):
    drafter = DraftModelDrafter(tiny_draft_llama)
    drafter.begin(Context.of(prompt_ids))
    draft = drafter.propose(Context.of(prompt_ids, 4), GREEDY, None)
    drafts = draft.row()
    correction = (drafts[kept] + 1) % 64 if kept < 4 else torch.tensor(7)  # recovered or bonus token
    sequence = torch.cat([prompt_ids, drafts[:kept].view(1, -1), correction.view(1, 1)], dim=1)
    drafter.accept(Context.of(sequence))
    # rejected drafts are dropped; after a full accept the last draft and the bonus token are still to be fed
    assert cache_length(drafter.cache) == min(sequence.shape[1] - 1, prompt_ids.shape[1] + 3)
    again = drafter.propose(Context.of(sequence, 3), GREEDY, None)
    assert again.row().tolist() == fresh_proposal(tiny_draft_llama, sequence, 3).row().tolist()
    assert again.forwards == 3  # the first forward catches up the uncached tokens (1 or 2) in one go


def test_forgotten_accept_or_new_sequence_resynchronizes(tiny_draft_llama, prompt_ids):
    drafter = DraftModelDrafter(tiny_draft_llama)
    drafter.begin(Context.of(prompt_ids))
    drafter.propose(Context.of(prompt_ids, 4), GREEDY, None)
    other = torch.tensor([[0, 5, 17, 9, 9, 9]])  # shares only a 3-token prefix with what the cache holds
    expected = fresh_proposal(tiny_draft_llama, other, 3).row().tolist()
    assert drafter.propose(Context.of(other, 3), GREEDY, None).row().tolist() == expected


def test_sampled_draft_reports_the_distribution_it_drew_from(tiny_draft_llama, prompt_ids):
    first = fresh_proposal(tiny_draft_llama, prompt_ids, 4, SAMPLING, seed=5)
    again = fresh_proposal(tiny_draft_llama, prompt_ids, 4, SAMPLING, seed=5)
    assert torch.equal(first.tokens, again.tokens) and torch.equal(first.probs, again.probs)  # seeded
    # recompute q on the drafted sequence without a cache: row i is the processed distribution at that position
    full = torch.cat([prompt_ids, first.tokens], dim=1)
    with torch.inference_mode():
        logits = forward_with_cache(tiny_draft_llama, full, None)[0, prompt_ids.shape[1] - 1 : -1]  # [4, V]
    torch.testing.assert_close(first.probs[0], logits_to_probs(logits, SAMPLING), atol=1e-5, rtol=1e-4)
    chosen = first.probs[0].gather(1, first.row().view(-1, 1))
    assert (chosen > 0).all()  # every token was possible under its reported q (top-k zeroes the rest)
    assert ((first.probs > 0).sum(-1) <= 20).all()


def test_draft_stops_at_the_draft_models_context(make_tiny_model):
    model = make_tiny_model(seed=1, num_layers=1)
    model.config.max_position_embeddings = 10
    drafter = DraftModelDrafter(model)
    sequence = torch.arange(2, 10).view(1, 8)  # 8 tokens: room for drafts at positions 8 and 9 (fed: up to 9)
    drafter.begin(Context.of(sequence))
    assert len(drafter.propose(Context.of(sequence, 5), GREEDY, None)) == 3  # feeds positions 0..9, drafts 3 tokens
    long_sequence = torch.arange(2, 13).view(1, 11)
    drafter.begin(Context.of(long_sequence[:, :1]))
    assert len(drafter.propose(Context.of(long_sequence, 5), GREEDY, None)) == 0


def test_ids_outside_the_draft_vocabulary_are_explained(make_tiny_model, prompt_ids):
    drafter = DraftModelDrafter(make_tiny_model(vocab_size=32))
    with pytest.raises(InputError, match="vocabulary"):
        drafter.begin(Context.of(prompt_ids))  # prompt_ids contains 42 and 61
    drafter.begin(Context.of(prompt_ids[:, :3] % 32))
    with pytest.raises(InputError, match="draft model's vocabulary of 32"):
        drafter.propose(Context.of(torch.tensor([[0, 5, 40]]), 2), GREEDY, None)


def pair(make_tiny_model, draft_kind="a", draft_vocab=None):
    target_tokenizer, draft_tokenizer = build_tiny_tokenizer("a"), build_tiny_tokenizer(draft_kind)
    target = make_tiny_model(vocab_size=len(target_tokenizer))
    draft = make_tiny_model(seed=1, num_layers=1, vocab_size=draft_vocab or len(draft_tokenizer))
    return ModelPair(target, draft, target_tokenizer, draft_tokenizer, "test", torch.device("cpu"))


def test_for_pair_accepts_a_shared_tokenizer(make_tiny_model):
    drafter = DraftModelDrafter.for_pair(pair(make_tiny_model))
    assert drafter.name == "draft-model" and drafter.device == torch.device("cpu")


def test_for_pair_refuses_different_tokenizers_pointing_to_cross_tokenizer_drafter(make_tiny_model):
    with pytest.raises(ConfigError, match="CrossTokenizerDrafter"):
        DraftModelDrafter.for_pair(pair(make_tiny_model, draft_kind="b"))


def test_for_pair_refuses_a_draft_vocabulary_smaller_than_the_target_tokenizer(make_tiny_model):
    small = pair(make_tiny_model, draft_vocab=len(build_tiny_tokenizer("a")) - 4)
    with pytest.raises(ConfigError, match="embeddings"):
        DraftModelDrafter.for_pair(small)


def test_tokenizers_come_in_pairs(tiny_draft_llama):
    with pytest.raises(ConfigError, match="both"):
        DraftModelDrafter(tiny_draft_llama, draft_tokenizer=build_tiny_tokenizer("a"))


def test_drafter_needs_propose():
    with pytest.raises(TypeError):
        Drafter()  # abstract

    class Fixed(Drafter):
        def propose(self, context, sampling, generator):
            return Draft(torch.tensor([3, 4, 5])[: context.k])

    drafter = Fixed()
    drafter.begin(Context.of(torch.tensor([[1]])))
    drafter.accept(Context.of(torch.tensor([[1, 3]])))  # the defaults do nothing
    assert drafter.propose(Context.of(torch.tensor([[1]]), 2), GREEDY, None).row().tolist() == [3, 4]


class Returns(Drafter):
    """A drafter that returns whatever it is given, to see how the engine receives it."""

    def __init__(self, draft) -> None:
        self.draft = draft

    def propose(self, context, sampling, generator):
        return self.draft


@pytest.mark.parametrize("draft, message", [
    (Draft(torch.tensor([1, 2, 3, 4])), r"asked for at most \[3\]"),
    (Draft(torch.tensor([1.0, 2.0])), "torch.long tensor"),
    (Draft(torch.tensor([1, 2]), torch.ones(3, 64) / 64), r"shape \[B, K, V\] = \[1, 2, 64\]"),
    (Draft(torch.tensor([1]), forwards=-1), "forwards must be an integer >= 0"),
    ([1, 2], "must return a Draft"),
    (Draft(torch.tensor([[1, 2], [3, 4]])), "2 rows but 1 rows"),
])
def test_a_malformed_draft_is_refused_with_a_message_for_its_author(tiny_llama, draft, message):
    with pytest.raises(ConfigError, match=message):
        speculative_generate(tiny_llama, Returns(draft), torch.tensor([[0, 5, 17]]), gamma=3, max_new_tokens=8)


def test_a_one_row_draft_may_be_given_one_dimensional(tiny_llama):
    draft = Draft(torch.tensor([1, 2]), torch.full((2, 64), 1 / 64), forwards=2)
    assert draft.tokens.shape == (1, 2) and draft.probs.shape == (1, 2, 64)  # stored as the batch of one it is
    result = speculative_generate(tiny_llama, Returns(draft), torch.tensor([[0, 5, 17]]), gamma=3, max_new_tokens=4,
                                  eos_token_id=None, sampling=SamplingConfig(temperature=1.0), seed=0)
    assert result.trace.rounds[0].drafted == 2 and result.trace.rounds[0].draft_tokens == (1, 2)
