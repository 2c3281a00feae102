"""EAGLE-2's dynamic trees (`DynamicTree`, `grow_tree`): what a round grows, and that decoding with them keeps the
target's output.

`grow_tree` is checked first on its own, with a stand-in drafter whose logits are a fixed function of the path
(no model): the static shapes it grows are `TreeShape`'s, and a dynamic tree keeps exactly the ``budget`` best-scored
of the candidates it grew, ancestors included. Then end to end: greedy output token-identical to the target alone
for every shape and length, and sampled output distributed as the target's (the tree verifier treats the candidates
as point masses; `test_trees` checks that rule and catches a wrong recovered token).
"""

import itertools

import pytest
import torch

from helpers import PROMPT, SETTINGS, SIGNIFICANCE, categories_for, detectable_tv, exact_joint
from specdec_lib import (DraftModelDrafter, DynamicTree, TreeShape, autoregressive_generate, load_eagle,
                         tree_speculative_generate)
from specdec_lib.core.errors import ConfigError
from specdec_lib.core.stats import bucket_counts, chi_square_gof
from specdec_lib.core.trees import GrownTree, check_parents, grow_tree, node_depths

VOCAB = 12


def path_logits(path: tuple[int, ...]) -> torch.Tensor:
    """A stand-in drafter: logits ``[VOCAB]`` after the tokens ``path`` below the root, a fixed function of it."""
    generator = torch.Generator().manual_seed(hash(path) % (2 ** 31))
    return torch.randn(VOCAB, generator=generator) * 2


def grow(shape) -> tuple[GrownTree, list[tuple[tuple[int, ...], int]]]:
    """`grow_tree` with the stand-in drafter; also returns every call to ``feed`` as (fed parents, first)."""
    fed_paths: list[tuple[int, ...]] = []  # the path of every fed node, in feeding order
    calls = []

    def feed(ids: torch.Tensor, parents: tuple[int, ...], first: int) -> torch.Tensor:
        calls.append((parents, first))
        assert len(parents) == len(fed_paths) + len(ids) and first == 1 + len(fed_paths)
        check_parents(parents)  # the fed nodes are a tree of their own, breadth first
        for token, parent in zip(ids.tolist(), parents[first - 1:]):
            fed_paths.append((fed_paths[parent] if parent >= 0 else ()) + (token,))
        return torch.stack([path_logits(path) for path in fed_paths[first - 1:]])

    return grow_tree(shape, path_logits(()), feed), calls


def paths(tree: GrownTree) -> list[tuple[int, ...]]:
    """The token path from the root to every node."""
    tokens, out = tree.tokens.tolist(), []
    for token, parent in zip(tokens, tree.parents):
        out.append((out[parent] if parent >= 0 else ()) + (token,))
    return out


def score(path: tuple[int, ...], temperature: float = 1.0) -> float:
    """The stand-in drafter's cumulative log-probability of ``path``, its softmax at ``temperature``."""
    return sum(float(torch.log_softmax(path_logits(path[:i]) / temperature, -1)[path[i]]) for i in range(len(path)))


@pytest.mark.parametrize("branching", [(1,), (3,), (2, 2, 1), (4, 2), (1, 1, 1, 1)])
def test_a_static_shape_grows_its_tree_shape(branching):
    shape = TreeShape(branching)
    tree, calls = grow(shape)
    assert tree.parents == shape.parents() and tree.forwards == shape.depth == 1 + len(calls)
    for node_path in paths(tree):  # each node is one of its parent's best children, best first
        ranked = path_logits(node_path[:-1]).argsort(descending=True).tolist()
        assert node_path[-1] in ranked[: branching[len(node_path) - 1]]
    deepest = [d == shape.depth for d in node_depths(tree.parents)]
    assert tree.fed == tuple(-1 if last else i for i, last in enumerate(deepest))  # all but the deepest, in order


def grown_by_the_rules(depth: int, top_k: int, budget: int | None, temperature: float
                       ) -> tuple[list[tuple[int, ...]], list[int]]:
    """Every candidate path the dynamic rules grow, by brute force over paths, and how many nodes each expansion
    feeds: the root's top_k, then the top_k children of each of the top_k best-scored nodes of every depth. With a
    ``budget``, a node is expanded only while it scores above the budget-th best candidate so far (no descendant of
    it could be kept), and growth stops when none is left; None grows every depth in full."""
    level, candidates, expansions = [()], [], []
    for d in range(1, depth + 1):
        children = [parent + (token,) for parent in level
                    for token in path_logits(parent).topk(top_k).indices.tolist()]
        candidates += children
        if d == depth:
            break
        level = sorted(children, key=lambda p: score(p, temperature), reverse=True)[:top_k]
        if budget is not None and len(candidates) >= budget:
            bar = sorted((score(p, temperature) for p in candidates), reverse=True)[budget - 1]
            level = [p for p in level if score(p, temperature) > bar]
            if not level:
                break
        expansions.append(len(level))
    return candidates, expansions


@pytest.mark.parametrize("depth, top_k, budget, temperature",
                         [(1, 3, 2, 1.0), (3, 2, 6, 1.0), (4, 3, 10, 1.0), (5, 4, 16, 1.0), (3, 3, 21, 1.0),
                          (5, 3, 12, 0.3), (4, 2, 7, 2.0), (8, 2, 3, 1.0), (10, 2, 16, 0.3)])
def test_a_dynamic_tree_keeps_the_best_scored_candidates(depth, top_k, budget, temperature):
    shape = DynamicTree(depth, top_k, budget, temperature)
    tree, calls = grow(shape)
    grown = paths(tree)
    check_parents(tree.parents)
    assert len(grown) == budget and len(set(grown)) == budget
    assert max(node_depths(tree.parents)) <= depth
    # the tree must be the budget best of every candidate the rules grow when every depth is grown in full: the
    # expansions grow_tree skips could not have changed it
    candidates, _ = grown_by_the_rules(depth, top_k, None, temperature)
    kept = sorted(candidates, key=lambda p: (-score(p, temperature), len(p)))[:budget]
    assert set(grown) == set(kept)
    assert all(path[:-1] in grown for path in grown if len(path) > 1)  # ancestors kept
    _, expansions = grown_by_the_rules(depth, top_k, budget, temperature)
    assert [len(parents) - first + 1 for parents, first in calls] == expansions
    assert tree.forwards == 1 + len(calls) <= depth


def test_a_dynamic_tree_stops_growing_when_no_deeper_node_could_be_kept():
    """A small budget fills at the first depths; once the best node left to expand scores below the budget's last,
    the drafter runs no more forwards, and the tree is the one full growth would have kept."""
    shape = DynamicTree(depth=8, top_k=2, budget=3)
    tree, calls = grow(shape)
    assert tree.forwards < shape.depth and len(calls) == tree.forwards - 1
    candidates, _ = grown_by_the_rules(8, 2, None, 1.0)
    assert set(paths(tree)) == set(sorted(candidates, key=lambda p: (-score(p), len(p)))[:3])


def test_a_dynamic_tree_with_one_child_is_the_greedy_chain():
    tree, _ = grow(DynamicTree(5, 1, 5))
    path = ()
    for _ in range(5):
        path += (int(path_logits(path).argmax()),)
    assert paths(tree)[-1] == path and tree.parents == (-1, 0, 1, 2, 3) and DynamicTree(5, 1, 5).is_chain


@pytest.mark.parametrize("arguments, message", [
    ((0, 2, 2), "depth must be a whole number >= 1"),
    ((3, 0, 2), "top_k must be a whole number >= 1"),
    ((3, 2, 2.5), "budget must be a whole number >= 1"),
    ((2, 2, 7), "grows at most 6 candidate nodes"),
    ((2, 2, 4, 0.0), "temperature"),
])
def test_a_bad_dynamic_tree_is_explained(arguments, message):
    with pytest.raises(ConfigError, match=message):
        DynamicTree(*arguments)


def test_a_dynamic_tree_cut_near_the_end_keeps_what_its_depth_can_grow():
    assert DynamicTree(6, 4, 30, 0.5).cut(2) == DynamicTree(2, 4, 20, 0.5)
    assert DynamicTree(6, 4, 30).cut(9) == DynamicTree(6, 4, 30)


# ---------------------------------------------------------------- end to end, on the sharp tiny pair

SHAPES = [DynamicTree(1, 2, 2), DynamicTree(3, 2, 5), DynamicTree(4, 3, 10), DynamicTree(6, 4, 20),
          DynamicTree(4, 1, 4), DynamicTree(6, 2, 8, temperature=0.3)]


@pytest.fixture(scope="module")
def tiny(sharp_tiny_pair):
    target, draft = sharp_tiny_pair
    expected = {(i, n): autoregressive_generate(target, prompt, max_new_tokens=n, eos_token_id=None).new_token_list
                for i, prompt in enumerate((PROMPT, torch.tensor([[3, 9, 27, 44, 2, 8]]))) for n in (1, 2, 5, 17)}
    return target, DraftModelDrafter(draft), expected


@pytest.mark.parametrize("shape, max_new", list(itertools.product(SHAPES, (1, 2, 5, 17))), ids=str)
def test_greedy_dynamic_tree_decoding_is_token_identical_to_the_target_alone(tiny, shape, max_new):
    target, drafter, expected = tiny
    for i, prompt in enumerate((PROMPT, torch.tensor([[3, 9, 27, 44, 2, 8]]))):
        result = tree_speculative_generate(target, drafter, prompt, shape=shape, max_new_tokens=max_new,
                                           eos_token_id=None)
        assert result.new_token_list == expected[i, max_new], (shape, max_new, i)
        assert all(record.drafted <= shape.budget for record in result.trace.rounds)


def test_a_dynamic_tree_verifies_more_than_its_depth(tiny):
    target, drafter, _ = tiny
    result = tree_speculative_generate(target, drafter, PROMPT, shape=DynamicTree(3, 3, 9), max_new_tokens=17,
                                       eos_token_id=None)
    assert max(record.drafted for record in result.trace.rounds) == 9


TREE_DRAWS = 200


def test_dynamic_tree_sampling_keeps_the_targets_distribution(tiny):
    """As `test_trees`' end-to-end test: the first three tokens of TREE_DRAWS seeded runs at T = 0.7, top-p 0.9
    against their exact law under the target alone, catching a TV of 0.21 (power 0.9)."""
    target, drafter, _ = tiny
    sampling = SETTINGS["T=0.7, top_p=0.9"]
    categories, probs = categories_for(exact_joint(target, PROMPT, sampling, (8, 6, 4)), TREE_DRAWS)
    samples = [tuple(tree_speculative_generate(target, drafter, PROMPT, shape=DynamicTree(2, 3, 5), max_new_tokens=4,
                                               sampling=sampling, seed=seed, eos_token_id=None).new_token_list[:3])
               for seed in range(TREE_DRAWS)]
    test = chi_square_gof(bucket_counts(samples, categories), probs)
    assert test.passes(SIGNIFICANCE) and test.cells >= 8, test
    assert detectable_tv(TREE_DRAWS, test.cells) <= 0.21


# ---------------------------------------------------------------- the embedded models, every prompt set


@pytest.mark.slow
@pytest.mark.parametrize("budget", [6, 16, 32])
def test_embedded_eagle_dynamic_trees_are_token_identical_on_every_prompt_set(embedded_pair, encoded_prompts, budget):
    pair = embedded_pair
    drafter = load_eagle(pair.target)
    for task, prompts in encoded_prompts.items():
        for name, ids in prompts[:3]:
            expected = autoregressive_generate(pair.target, ids, max_new_tokens=48, eos_token_id=None).new_token_list
            result = tree_speculative_generate(pair.target, drafter, ids, shape=DynamicTree(6, 4, budget),
                                               max_new_tokens=48, eos_token_id=None)
            assert result.new_token_list == expected, (task, name, budget)
