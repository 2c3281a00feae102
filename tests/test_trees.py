"""Token trees: shapes, the tree mask and positions (checked against chain forwards), KV compaction (checked
against a fresh prefill), greedy and exact tree verification (hand-made logits, a Markov-chain target and a
wrong rule built on purpose), and tree speculative decoding end to end (token-identical greedy, exact sampling)."""

import pytest
import torch

from helpers import build_tiny_model, first_layer_draft, sharpen
from specdec_lib import DraftModelDrafter, autoregressive_generate, speculative_generate
from specdec_lib.drafters.tree import DraftModelTreeDrafter
from specdec_lib.errors import ConfigError
from specdec_lib.kv_cache import cache_length, compact_cache, new_cache
from specdec_lib.modeling import forward_with_cache
from specdec_lib.sampling import SamplingConfig, sample_token
from specdec_lib.stats import chi_square_gof, chi_square_homogeneity
from specdec_lib.tree_speculative import tree_speculative_generate
from specdec_lib.trees import (
    TreeShape,
    TreeVerdict,
    ancestor_matrix,
    children_of,
    node_depths,
    tree_attention_mask,
    tree_position_ids,
    verify_tree_exact,
    verify_tree_greedy,
)

SIGNIFICANCE = 0.001


# ---------------------------------------------------------------- shapes, masks, positions


def test_a_shape_lists_its_nodes_breadth_first():
    assert TreeShape((2, 2)).parents() == (-1, -1, 0, 0, 1, 1)
    assert TreeShape((3, 1)).parents() == (-1, -1, -1, 0, 1, 2)
    assert TreeShape((1, 1, 1)).parents() == (-1, 0, 1)  # a chain
    assert TreeShape((3, 2, 1)).size == 15 and TreeShape((3, 2, 1)).depth == 3
    assert node_depths((-1, -1, 0, 0, 1, 1)) == [1, 1, 2, 2, 2, 2]
    assert children_of((-1, -1, 0)) == [[0, 1], [2], [], []]


@pytest.mark.parametrize("branching", [(), (0, 2), (2, -1), (1.5,), (True,)])
def test_a_bad_shape_is_explained(branching):
    with pytest.raises(ConfigError, match="TreeShape"):
        TreeShape(branching)


def test_parents_must_come_first():
    with pytest.raises(ConfigError, match="breadth first"):
        ancestor_matrix((-1, 2, 0))


def test_a_chain_gets_the_causal_mask_and_consecutive_positions():
    parents = TreeShape((1, 1, 1)).parents()
    assert torch.equal(ancestor_matrix(parents), torch.tril(torch.ones(4, 4, dtype=torch.bool)))
    assert tree_position_ids(parents, 5).tolist() == [[5, 6, 7, 8]]
    mask = tree_attention_mask(parents, 5)
    assert mask.shape == (1, 1, 4, 9) and bool((mask[0, 0, :, :5] == 0).all())


def test_siblings_never_see_each_other():
    parents = TreeShape((2, 2)).parents()  # nodes 0, 1 under the root; 2, 3 under 0; 4, 5 under 1
    m = ancestor_matrix(parents)
    assert m[1 + 4].tolist() == [True, False, True, False, False, True, False]  # root, node 1, itself
    assert not m[1 + 0, 1 + 1] and not m[1 + 2, 1 + 3]
    assert tree_position_ids(parents, 10, first=3).tolist() == [[12, 12, 12, 12]]  # nodes 2..5 at depth 2
    assert tree_attention_mask(parents, 10, first=3).shape == (1, 1, 4, 17)


@pytest.fixture(scope="module")
def target():
    return sharpen(build_tiny_model("llama", seed=0, num_layers=2))


def _chain_logits(model, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return forward_with_cache(model, torch.tensor([ids]), None)[0, -1]


@pytest.mark.parametrize("kind", ["dynamic", "preallocated"])
def test_one_tree_forward_equals_a_forward_per_branch(target, kind):
    prefix, root = [0, 5, 17, 42], 9
    parents = TreeShape((3, 2)).parents()
    tokens = [11, 12, 13, 21, 22, 23, 24, 25, 26]
    cache = new_cache(target, kind, max_len=64)
    with torch.inference_mode():
        forward_with_cache(target, torch.tensor([prefix]), cache)
        tree = forward_with_cache(target, torch.tensor([[root] + tokens]), cache, tree_parents=parents)[0]
    assert cache_length(cache) == len(prefix) + 1 + len(tokens)
    assert torch.allclose(tree[0], _chain_logits(target, prefix + [root]), atol=1e-4)
    for node in range(len(tokens)):
        path, walk = [], node
        while walk >= 0:
            path.insert(0, tokens[walk])
            walk = parents[walk]
        assert torch.allclose(tree[1 + node], _chain_logits(target, prefix + [root] + path), atol=1e-4), node


@pytest.mark.parametrize("kind", ["dynamic", "preallocated"])
def test_compacting_to_a_path_equals_a_fresh_prefill(target, kind):
    """Keep the prefix, the root and the path root -> node 1 -> node 4 of a (2, 2) tree; the next token's logits
    must equal those of the path decoded from scratch, with no trace of the rejected siblings."""
    prefix, root = [0, 5, 17, 42], 9
    parents, tokens = TreeShape((2, 2)).parents(), [11, 12, 21, 22, 23, 24]
    cache = new_cache(target, kind, max_len=64)
    with torch.inference_mode():
        forward_with_cache(target, torch.tensor([prefix]), cache)
        forward_with_cache(target, torch.tensor([[root] + tokens]), cache, tree_parents=parents)
        start = len(prefix) + 1  # the prefix and the root stay
        compact_cache(cache, start, torch.tensor([start + 1, start + 5]))  # node 1 (12), then node 5 (24)
        assert cache_length(cache) == start + 2
        after = forward_with_cache(target, torch.tensor([[7]]), cache)[0, -1]
    assert torch.allclose(after, _chain_logits(target, prefix + [root, 12, 24, 7]), atol=1e-4)


def test_compaction_refuses_positions_it_cannot_keep(target):
    cache = new_cache(target)
    with torch.inference_mode():
        forward_with_cache(target, torch.tensor([[0, 5, 17, 42, 9]]), cache)
    for keep in ([1], [4, 3], [5]):
        with pytest.raises(ConfigError, match="increasing"):
            compact_cache(cache, 3, torch.tensor(keep))


# ---------------------------------------------------------------- verification on hand-made logits


def _logits_choosing(choices: list[int], vocab: int = 8) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(choices), vocab).float() * 10


def test_greedy_tree_verification_follows_the_targets_argmax():
    parents, tokens = TreeShape((2, 2)).parents(), torch.tensor([3, 4, 5, 6, 1, 2])
    # the target wants 4 after the root (node 1), then 2 after node 1 (node 5), then 7 after node 5 (a leaf)
    logits = _logits_choosing([4, 0, 2, 0, 0, 0, 7])
    assert verify_tree_greedy(logits, tokens, parents) == TreeVerdict((1, 5), 7, "bonus")
    logits = _logits_choosing([4, 0, 3, 0, 0, 0, 7])  # no child of node 1 carries 3: recovered
    assert verify_tree_greedy(logits, tokens, parents) == TreeVerdict((1,), 3, "recovered")
    assert verify_tree_greedy(_logits_choosing([6]), torch.empty(0, dtype=torch.long), ()) == TreeVerdict((), 6, "bonus")


def test_tree_verification_checks_its_shapes():
    with pytest.raises(ConfigError, match="N \\+ 1"):
        verify_tree_greedy(torch.zeros(3, 8), torch.tensor([1, 2, 3]), (-1, -1, 0))
    with pytest.raises(ConfigError, match="one per node"):
        verify_tree_exact(torch.full((4, 8), 1 / 8), torch.tensor([1, 2]), (-1, -1, 0))


def test_exact_tree_verification_emits_the_targets_distribution_at_the_root():
    """Candidates 2, 0, 5 under the root (5 impossible under p): the first emitted token is distributed as p."""
    p = torch.tensor([0.3, 0.05, 0.4, 0.1, 0.15, 0.0])
    tokens, parents = torch.tensor([2, 0, 5]), (-1, -1, -1)
    rows = p.repeat(4, 1)
    generator = torch.Generator().manual_seed(0)
    first = []
    for _ in range(20000):
        verdict = verify_tree_exact(rows, tokens, parents, generator)
        first.append(int(tokens[verdict.path[0]]) if verdict.path else verdict.next_token)
    counts = torch.bincount(torch.tensor(first), minlength=6)
    assert counts[5] == 0
    assert chi_square_gof(counts.tolist(), p.tolist()).passes(SIGNIFICANCE)


# A context-dependent target: a Markov chain. The drafter's candidates at each node are the draft chain's top-2
# (deterministic); the target's row at each node is P(. | the node's token).
VOCAB, STREAM = 5, 12000


def _chains(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return tuple(torch.softmax(torch.randn(VOCAB, VOCAB, generator=generator) * 2.0, -1) for _ in range(2))


P_CHAIN, Q_CHAIN = _chains(3)


def recovered_from_p(p, tokens, parents, generator):
    """A wrong rule built on purpose: the recovered token drawn from p itself, not from the residual (so the
    rejected candidates can come back and are over-represented)."""
    verdict = verify_tree_exact(p, tokens, parents, generator)
    if verdict.kind == "bonus":
        return verdict
    row = 0 if not verdict.path else verdict.path[-1] + 1
    return TreeVerdict(verdict.path, int(sample_token(p[row], generator)), verdict.kind)


def markov_tree_stream(verifier, shape=TreeShape((2, 2)), seed: int = 0) -> list[int]:
    generator = torch.Generator().manual_seed(seed)
    parents = shape.parents()
    stream = [0]
    while len(stream) < STREAM:
        node_tokens: list[int] = []
        for parent in parents:
            previous = stream[-1] if parent < 0 else node_tokens[parent]
            rank = sum(1 for q in parents[: len(node_tokens)] if q == parent)  # the (rank + 1)-th best child
            node_tokens.append(int(Q_CHAIN[previous].argsort(descending=True)[rank]))
        p_rows = P_CHAIN[torch.tensor([stream[-1]] + node_tokens)]  # [N + 1, V]
        verdict = verifier(p_rows, torch.tensor(node_tokens), parents, generator)
        stream += [node_tokens[i] for i in verdict.path] + [verdict.next_token]
    return stream


def _transition_tests(stream: list[int]) -> list:
    counts = torch.zeros(VOCAB, VOCAB)
    for a, b in zip(stream, stream[1:]):
        counts[a, b] += 1
    return [chi_square_gof(counts[a].long().tolist(), P_CHAIN[a].tolist()) for a in range(VOCAB)]


def test_exact_tree_verification_keeps_a_markov_target_transition_by_transition():
    tests = _transition_tests(markov_tree_stream(verify_tree_exact))
    assert all(test.passes(SIGNIFICANCE / VOCAB) for test in tests), tests


def test_the_same_test_catches_a_recovered_token_drawn_from_p():
    tests = _transition_tests(markov_tree_stream(recovered_from_p))
    assert any(test.p_value < 1e-6 for test in tests), tests


# ---------------------------------------------------------------- tree speculative decoding end to end


@pytest.fixture(scope="module")
def tree_drafter(target):
    return DraftModelTreeDrafter(first_layer_draft(target))


@pytest.mark.parametrize("branching", [(1,), (2,), (3, 1), (2, 2, 1), (1, 1, 1, 1)])
@pytest.mark.parametrize("max_new", [1, 2, 5, 17])
def test_greedy_tree_decoding_is_token_identical_to_the_target_alone(target, tree_drafter, branching, max_new):
    for prompt in ([[0, 5, 17]], [[3, 9, 27, 44, 2, 8]]):
        ids = torch.tensor(prompt)
        expected = autoregressive_generate(target, ids, max_new_tokens=max_new, eos_token_id=None).new_token_list
        result = tree_speculative_generate(target, tree_drafter, ids, shape=TreeShape(branching),
                                           max_new_tokens=max_new, eos_token_id=None)
        assert result.new_token_list == expected, (branching, max_new, prompt)
        assert sum(r.emitted for r in result.trace.rounds) == max_new


def test_a_chain_shaped_tree_runs_the_same_rounds_as_the_chain(target, tree_drafter):
    ids = torch.tensor([[0, 5, 17]])
    chain = speculative_generate(target, DraftModelDrafter(tree_drafter.model), ids, gamma=3, max_new_tokens=20,
                                 eos_token_id=None)
    tree = tree_speculative_generate(target, tree_drafter, ids, shape=TreeShape((1, 1, 1)), max_new_tokens=20,
                                     eos_token_id=None)
    assert [(r.accepted, r.emitted) for r in tree.trace.rounds] == [(r.accepted, r.emitted) for r in chain.trace.rounds]


def test_tree_decoding_stops_after_eos_like_the_baseline(target, tree_drafter):
    ids = torch.tensor([[0, 5, 17]])
    reference = autoregressive_generate(target, ids, max_new_tokens=24, eos_token_id=None).new_token_list
    eos = reference[6]
    expected = autoregressive_generate(target, ids, max_new_tokens=24, eos_token_id=eos).new_token_list
    result = tree_speculative_generate(target, tree_drafter, ids, shape=TreeShape((2, 2)), max_new_tokens=24,
                                       eos_token_id=eos)
    assert result.new_token_list == expected and result.new_token_list[-1] == eos


def test_tree_sampling_keeps_the_targets_distribution_end_to_end(target, tree_drafter):
    """The first three tokens of many seeded runs, tree against the target alone (two-sample chi-square)."""
    sampling, draws = SamplingConfig(temperature=1.0), 600
    ids = torch.tensor([[0, 5, 17]])
    tree = [tuple(tree_speculative_generate(target, tree_drafter, ids, shape=TreeShape((2, 2)), max_new_tokens=3,
                                            sampling=sampling, seed=i, eos_token_id=None).new_token_list)
            for i in range(draws)]
    alone = [tuple(autoregressive_generate(target, ids, max_new_tokens=3, sampling=sampling, seed=10**6 + i,
                                           eos_token_id=None).new_token_list) for i in range(draws)]
    for position in range(3):
        a = torch.bincount(torch.tensor([t[position] for t in tree]), minlength=64).tolist()
        b = torch.bincount(torch.tensor([t[position] for t in alone]), minlength=64).tolist()
        assert chi_square_homogeneity(a, b).passes(SIGNIFICANCE / 3), position


def test_a_tree_shape_must_be_a_tree_shape(target, tree_drafter):
    with pytest.raises(ConfigError, match="TreeShape"):
        tree_speculative_generate(target, tree_drafter, torch.tensor([[0, 5]]), shape=(2, 2), max_new_tokens=4)
