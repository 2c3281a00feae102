"""Token trees: shapes, the tree mask and positions (checked against chain forwards), KV compaction (checked
against a fresh prefill), greedy and exact tree verification (hand-made logits, a Markov-chain target and a
wrong rule built on purpose, its effect computed exactly by enumerating every round), and tree speculative decoding
end to end (token-identical greedy on a chosen grid, the full grid behind ``slow``; exact sampling).

`verify_tree_exact` verifies one tree at a time (~0.1 ms), so its statistical tests are sized to the effect they
must catch, and say so (`detectable_tv`: power 0.9 at their p-value threshold)."""

import itertools
from collections import defaultdict

import pytest
import torch

from helpers import (
    NEW_TOKENS,
    PROMPT,
    SETTINGS,
    SIGNIFICANCE,
    TESTED,
    categories_for,
    detectable_tv,
    exact_joint,
    expected_transitions,
    random_chains,
    row_laws,
    transition_p_values,
)
from specdec_lib import DraftModelDrafter, autoregressive_generate, speculative_generate

from specdec_lib.core.errors import ConfigError
from specdec_lib.core.caches import cache_length, compact_cache, new_cache
from specdec_lib.core.forward import forward_with_cache
from specdec_lib.core.sampling import sample_token
from specdec_lib.core.stats import bucket_counts, chi_square_gof, total_variation
from specdec_lib.core.verify import Verdict
from specdec_lib import tree_speculative_generate
from specdec_lib.core.trees import (
    TreeShape,
    ancestor_matrix,
    children_of,
    node_depths,
    tree_attention_mask,
    tree_position_ids,
    verify_tree_exact,
    verify_tree_greedy,
)


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
def target(sharp_tiny_pair):
    """The sharpened tiny target (peaked distributions: tree candidates are both accepted and rejected)."""
    return sharp_tiny_pair[0]


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


def outcome(verdict: Verdict) -> tuple[tuple[int, ...], int, str]:
    """``(path, next_token, kind)`` of a one-tree `Verdict`."""
    _, token, kind = verdict.tolist()[0]
    return verdict.paths()[0], token, kind


def test_greedy_tree_verification_follows_the_targets_argmax():
    parents, tokens = TreeShape((2, 2)).parents(), torch.tensor([[3, 4, 5, 6, 1, 2]])
    # the target wants 4 after the root (node 1), then 2 after node 1 (node 5), then 7 after node 5 (a leaf)
    logits = _logits_choosing([4, 0, 2, 0, 0, 0, 7])[None]
    assert outcome(verify_tree_greedy(logits, tokens, parents)) == ((1, 5), 7, "bonus")
    recovered = _logits_choosing([4, 0, 3, 0, 0, 0, 7])[None]  # no child of node 1 carries 3: recovered
    assert outcome(verify_tree_greedy(recovered, tokens, parents)) == ((1,), 3, "recovered")
    assert outcome(verify_tree_greedy(_logits_choosing([6])[None], torch.empty(1, 0, dtype=torch.long), ())) == (
        (), 6, "bonus")
    both = verify_tree_greedy(torch.cat([logits, recovered]), tokens.expand(2, -1), parents)  # two trees, one shape
    assert both.path.tolist() == [[1, 5], [1, -1]] and both.tolist() == [(2, 7, "bonus"), (1, 3, "recovered")]


def test_tree_verification_checks_its_shapes():
    with pytest.raises(ConfigError, match="N \\+ 1"):
        verify_tree_greedy(torch.zeros(1, 3, 8), torch.tensor([[1, 2, 3]]), (-1, -1, 0))
    with pytest.raises(ConfigError, match="one per node"):
        verify_tree_exact(torch.full((1, 4, 8), 1 / 8), torch.tensor([[1, 2]]), (-1, -1, 0))
    with pytest.raises(ConfigError, match="one tree is a batch of one"):
        verify_tree_greedy(torch.zeros(4, 8), torch.tensor([1, 2, 3]), (-1, -1, 0))


ROOT_DRAWS = 3000  # ~0.4 s of `verify_tree_exact` calls


def test_exact_tree_verification_emits_the_targets_distribution_at_the_root():
    """Candidates 2, 0, 5 under the root (5 impossible under p): the first emitted token is distributed as p. Over
    the 5 possible tokens ROOT_DRAWS trees catch a deviation of TV 0.05 (power 0.9 at p < SIGNIFICANCE); drawing
    the recovered token from p instead of the residual would move it by p(T) (1 - p(T)) = 0.21, T the candidates."""
    p = torch.tensor([0.3, 0.05, 0.4, 0.1, 0.15, 0.0])
    tokens, parents = torch.tensor([2, 0, 5]), (-1, -1, -1)
    rows = p.repeat(1, 4, 1)  # [1, N + 1, V]: one tree
    generator = torch.Generator().manual_seed(0)
    first = []
    for _ in range(ROOT_DRAWS):
        path, token, _ = outcome(verify_tree_exact(rows, tokens[None], parents, generator))
        first.append(int(tokens[path[0]]) if path else token)
    counts = torch.bincount(torch.tensor(first), minlength=6)
    test = chi_square_gof(counts.tolist(), p.tolist())
    assert counts[5] == 0 and test.passes(SIGNIFICANCE), (counts.tolist(), test)
    candidates_mass = float(p[tokens].sum())  # p(T) = 0.7
    assert detectable_tv(ROOT_DRAWS, test.cells) <= 0.05 < candidates_mass * (1 - candidates_mass) / 4


# A context-dependent target: a Markov chain. The drafter's candidates at each node are the draft chain's top-2
# (deterministic, so each round's tree depends only on the last token); the target's row at each node is
# P(. | the node's token). One stream of ROUNDS rounds (~0.5 s; ~1.2 tokens a round, 360 to 1600 per row).
VOCAB, ROUNDS = 5, 3000
P_CHAIN, Q_CHAIN = random_chains(VOCAB, seed=3, sharpness=2.0)
SHAPE = TreeShape((2, 2))
PARENTS, CHILDREN = SHAPE.parents(), children_of(SHAPE.parents())


def candidate_tree(last: int) -> list[int]:
    """The tokens of `SHAPE`'s nodes after ``last``: under each node, the draft chain's best candidates in order."""
    tokens: list[int] = []
    for node, parent in enumerate(PARENTS):
        previous = last if parent < 0 else tokens[parent]
        rank = PARENTS[:node].count(parent)  # the (rank + 1)-th best child
        tokens.append(int(Q_CHAIN[previous].argsort(descending=True)[rank]))
    return tokens


TREES = [candidate_tree(last) for last in range(VOCAB)]


def recovered_from_p(p, tokens, parents, generator):
    """A wrong rule built on purpose: the recovered token drawn from p itself, not from the residual (so the
    rejected candidates can come back and are over-represented)."""
    verdict = verify_tree_exact(p, tokens, parents, generator)
    if bool(verdict.bonus):
        return verdict
    path = verdict.paths()[0]
    row = 0 if not path else path[-1] + 1
    return Verdict(verdict.accepted, sample_token(p[:, row], generator), verdict.bonus, verdict.path)


def markov_tree_counts(verifier, rounds: int = ROUNDS, seed: int = 0) -> torch.Tensor:
    """Transition counts ``[V, V]`` of one stream from token 0, decoded speculatively for ``rounds`` rounds: each
    round verifies the tree `TREES` gives after the last token with ``verifier`` (a `verify_tree_exact`-like rule)."""
    generator = torch.Generator().manual_seed(seed)
    tokens = [torch.tensor(tree) for tree in TREES]
    p_rows = [P_CHAIN[torch.tensor([last] + tree)] for last, tree in enumerate(TREES)]  # [N + 1, V] per last token
    counts = torch.zeros(VOCAB, VOCAB, dtype=torch.long)
    last = 0
    for _ in range(rounds):
        path, token, _ = outcome(verifier(p_rows[last][None], tokens[last][None], PARENTS, generator))
        emitted = [TREES[last][node] for node in path] + [token]
        for before, after in zip([last] + emitted, emitted):
            counts[before, after] += 1
        last = emitted[-1]
    return counts


def tree_round_law(recovered_token_from_p: bool):
    """``a -> {emitted tokens: probability}``: one round after token a, every outcome enumerated. At a node whose
    token is b and whose candidates are C: each c in C is accepted with probability P[b, c] (point masses) and the
    walk goes on below it; otherwise the round ends with x ~ P[b] restricted to x not in C (the residual), or, the
    bug, x ~ P[b] with probability 1 - P[b](C). A leaf ends the round with a bonus x ~ P[b]."""
    def law_after(a: int) -> dict:
        law: dict = defaultdict(float)

        def walk(row: int, token: int, emitted: tuple, probability: float) -> None:
            candidates = {TREES[a][child]: child for child in CHILDREN[row]}
            rejected = 1 - sum(float(P_CHAIN[token, c]) for c in candidates)
            for following, p_following in enumerate(P_CHAIN[token].tolist()):
                if following in candidates:
                    walk(candidates[following] + 1, following, emitted + (following,), probability * p_following)
                if recovered_token_from_p and candidates:
                    law[emitted + (following,)] += probability * rejected * p_following
                elif following not in candidates:
                    law[emitted + (following,)] += probability * p_following

        walk(0, a, (), 1.0)
        return law
    return law_after






def test_exact_tree_verification_keeps_a_markov_target_transition_by_transition():
    """A chi-square test per row (Bonferroni over the V rows): every row catches a deviation of TV 0.16 (power
    0.9), the busiest one of 0.08."""
    counts = markov_tree_counts(verify_tree_exact)
    p_values = transition_p_values(counts, P_CHAIN)
    assert all(p_value > SIGNIFICANCE / VOCAB for p_value in p_values), p_values
    power = [detectable_tv(int(n), VOCAB, alpha=SIGNIFICANCE / VOCAB) for n in counts.sum(dim=1)]
    assert max(power) <= 0.16 and min(power) <= 0.08, power


def test_the_same_test_catches_a_recovered_token_drawn_from_p():
    """The wrong rule moves the transitions out of token 0 by a TV of 0.24 (exactly, every round enumerated; the
    same enumeration gives P exactly for the right rule): the test's draws catch a deviation half that size with
    power 0.9, and the test fails."""
    exact = expected_transitions(tree_round_law(recovered_token_from_p=False), VOCAB, ROUNDS)
    assert torch.allclose(row_laws(exact), P_CHAIN.double(), atol=1e-6)
    wrong = expected_transitions(tree_round_law(recovered_token_from_p=True), VOCAB, ROUNDS)
    effect = [total_variation(law, target) for law, target in zip(row_laws(wrong), P_CHAIN)]
    assert effect[0] == pytest.approx(0.24, abs=0.01) and max(effect) == effect[0], effect
    counts = markov_tree_counts(recovered_from_p)
    assert detectable_tv(int(counts[0].sum()), VOCAB, alpha=SIGNIFICANCE / VOCAB) <= effect[0] / 2
    p_values = transition_p_values(counts, P_CHAIN)
    assert p_values[0] < SIGNIFICANCE / VOCAB, p_values  # measured: p = 1e-38 (the right rule: p >= 0.05 on every row)


# ---------------------------------------------------------------- tree speculative decoding end to end


@pytest.fixture(scope="module")
def tree_drafter(sharp_tiny_pair):
    """A tree drafter on the sharpened target's first layer (it agrees with the target often, not always)."""
    return DraftModelDrafter(sharp_tiny_pair[1])  # the one draft-model drafter, drafting trees


def assert_greedy_tree_decoding_is_the_targets(target, tree_drafter, branching, max_new) -> None:
    """Greedy tree decoding of two prompts (3 and 6 tokens) equals the target alone, token for token."""
    for prompt in ([[0, 5, 17]], [[3, 9, 27, 44, 2, 8]]):
        ids = torch.tensor(prompt)
        expected = autoregressive_generate(target, ids, max_new_tokens=max_new, eos_token_id=None).new_token_list
        result = tree_speculative_generate(target, tree_drafter, ids, shape=TreeShape(branching),
                                           max_new_tokens=max_new, eos_token_id=None)
        assert result.new_token_list == expected, (branching, max_new, prompt)
        assert sum(r.emitted for r in result.trace.rounds) == max_new


BRANCHINGS, MAX_NEW = [(1,), (2,), (3, 1), (2, 2, 1), (1, 1, 1, 1)], [1, 2, 5, 17]


@pytest.mark.parametrize(("branching", "max_new"), [
    pytest.param((2, 2), 1, id="max-new-1-prefill-only"),
    pytest.param((2, 2, 1), 2, id="no-depth-fits-the-budget"),
    pytest.param((2, 2, 1), 5, id="depth-cut-to-the-budget"),
    pytest.param((3, 1), 17, id="branching-at-the-root"),
    pytest.param((2, 2, 1), 17, id="branching-at-two-depths"),
    pytest.param((1, 1, 1, 1), 17, id="chain-shape"),
])
def test_greedy_tree_decoding_is_token_identical_to_the_target_alone(target, tree_drafter, branching, max_new):
    assert_greedy_tree_decoding_is_the_targets(target, tree_drafter, branching, max_new)


@pytest.mark.slow
@pytest.mark.parametrize(("branching", "max_new"), list(itertools.product(BRANCHINGS, MAX_NEW)))
def test_greedy_tree_decoding_is_token_identical_on_the_full_grid(target, tree_drafter, branching, max_new):
    assert_greedy_tree_decoding_is_the_targets(target, tree_drafter, branching, max_new)


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


TREE_DRAWS = 200  # ~2 s: tree_speculative_generate runs one at a time


def test_tree_sampling_keeps_the_targets_distribution_end_to_end(target, tree_drafter):
    """The first three tokens of TREE_DRAWS seeded runs of 4 tokens at T = 0.7, top-p 0.9 (tokens 2 and 3 from a
    (2, 2) tree round) against their exact law under the target alone (`exact_joint`, one-sample chi-square over
    ~9 cells): a check of the wiring (tree rows processed and verified exactly), catching a deviation of TV 0.21
    (power 0.9); the rule's own exactness is checked by the root and Markov tests above."""
    sampling = SETTINGS["T=0.7, top_p=0.9"]
    categories, probs = categories_for(exact_joint(target, PROMPT, sampling, (8, 6, 4)), TREE_DRAWS)
    samples = [tuple(tree_speculative_generate(target, tree_drafter, PROMPT, shape=TreeShape((2, 2)),
                                               max_new_tokens=NEW_TOKENS, sampling=sampling, seed=seed,
                                               eos_token_id=None).new_token_list[:TESTED])
               for seed in range(TREE_DRAWS)]
    test = chi_square_gof(bucket_counts(samples, categories), probs)
    assert test.passes(SIGNIFICANCE) and test.cells >= 8, test
    assert detectable_tv(TREE_DRAWS, test.cells) <= 0.21


def test_a_tree_shape_must_be_a_tree_shape(target, tree_drafter):
    with pytest.raises(ConfigError, match="TreeShape"):
        tree_speculative_generate(target, tree_drafter, torch.tensor([[0, 5]]), shape=(2, 2), max_new_tokens=4)
