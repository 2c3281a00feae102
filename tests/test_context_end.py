"""Every decoder runs up to the last position of the target's context, token-identical to the target alone.

Near the end of the context a round must draft fewer tokens (a chain: positions), a token tree fewer depths (its
forward writes one cache slot per node, N + 1 of them, while its deepest node takes only the position root +
depth), and a batch must budget each row by its own length. The tiny models' context is 128 positions: each case
asks for the tokens that fill it to the last position (prompt + max_new_tokens = 128).
"""

import pytest
import torch

from helpers import TINY_CONTEXT, greedy_tokens
from specdec_lib import (DraftModelDrafter, DynamicTree, EarlyExitDrafter, PromptLookupDrafter, TreeShape, load_eagle,
                         batched_autoregressive_generate, batched_speculative_generate, jacobi_generate,
                         speculative_generate, tree_speculative_generate)

NEW_TOKENS = 20
PROMPT = torch.arange(2, 2 + TINY_CONTEXT - NEW_TOKENS).remainder(60).add(2).view(1, -1)  # 108 tokens


@pytest.fixture(scope="module")
def models(sharp_tiny_pair):
    target, draft = sharp_tiny_pair
    return target, draft, greedy_tokens(target, PROMPT, NEW_TOKENS)


@pytest.mark.parametrize("gamma", [1, 4, 8])
def test_a_chain_fills_the_context(models, gamma):
    target, draft, expected = models
    for drafter in (DraftModelDrafter(draft), PromptLookupDrafter(), EarlyExitDrafter(target, 1)):
        result = speculative_generate(target, drafter, PROMPT, gamma=gamma, max_new_tokens=NEW_TOKENS,
                                      eos_token_id=None)
        assert result.new_token_list == expected, (type(drafter).__name__, gamma)
        assert result.sequence.shape[1] == TINY_CONTEXT


@pytest.mark.parametrize("shape", [TreeShape((4, 4)), TreeShape((3, 2, 2)), TreeShape((1, 1, 1, 1)),
                                   DynamicTree(depth=4, top_k=3, budget=12), DynamicTree(depth=6, top_k=4, budget=20)],
                         ids=str)
@pytest.mark.parametrize("cache_kind", ["dynamic", "preallocated"])
def test_a_token_tree_fills_the_context(models, shape, cache_kind):
    """A (4, 4) tree has 20 nodes: its forward writes 21 slots, more than the positions left at the end; a dynamic
    tree of budget 20 likewise, and its drafter's cache holds the 20 nodes it expanded besides."""
    target, draft, expected = models
    result = tree_speculative_generate(target, DraftModelDrafter(draft), PROMPT, shape=shape,
                                       max_new_tokens=NEW_TOKENS, eos_token_id=None, cache_kind=cache_kind)
    assert result.new_token_list == expected
    assert any(record.drafted > shape.depth for record in result.trace.rounds) or shape.is_chain


def test_jacobi_fills_the_context(models):
    target, _, expected = models
    assert jacobi_generate(target, PROMPT, max_new_tokens=NEW_TOKENS, gamma=6, eos_token_id=None
                           ).new_token_list == expected


def test_a_batch_budgets_each_row_by_its_own_length(models):
    """Row 0 fills the context; row 1, shorter, stops at its max_new_tokens far from it."""
    target, draft, expected = models
    short = PROMPT[0, :40]
    rows = [PROMPT[0], short]
    alone = [expected, greedy_tokens(target, short[None], NEW_TOKENS)]
    for drafter in (draft, "prompt-lookup"):
        result = batched_speculative_generate(target, drafter, rows, gamma=6, max_new_tokens=NEW_TOKENS,
                                              eos_token_id=None)
        assert result.tokens == alone, drafter
    assert batched_autoregressive_generate(target, rows, max_new_tokens=NEW_TOKENS, eos_token_id=None).tokens == alone


def test_the_embedded_eagle_layer_drafts_dynamic_trees_up_to_the_context(embedded_pair, encoded_prompts):
    """A dynamic tree's drafter holds the nodes it expanded, more slots than the positions left near the end of the
    context: the EAGLE layer's storage grows to hold them (484-token prompt, 512 positions, 20 new tokens)."""
    pair = embedded_pair
    text = torch.cat([ids for _, ids in encoded_prompts["code"]], dim=1)[:, :484]
    for shape in (DynamicTree(depth=6, top_k=4, budget=20), TreeShape((4, 4))):
        result = tree_speculative_generate(pair.target, load_eagle(pair.target), text, shape=shape,
                                           max_new_tokens=20, eos_token_id=None)
        assert result.new_token_list == greedy_tokens(pair.target, text, 20), shape


def test_the_embedded_target_drafts_a_tree_up_to_its_context(embedded_pair, encoded_prompts):
    """The case that used to be refused ("Cannot run 21 new tokens after 492 cached ones"): a 484-token prompt on
    the 512-position target, 20 new tokens, a (4, 4) tree."""
    pair = embedded_pair
    text = torch.cat([ids for _, ids in encoded_prompts["code"]], dim=1)[:, :484]
    result = tree_speculative_generate(pair.target, DraftModelDrafter.for_pair(pair), text, shape=TreeShape((4, 4)),
                                       max_new_tokens=20, eos_token_id=None)
    assert result.new_token_list == greedy_tokens(pair.target, text, 20)
