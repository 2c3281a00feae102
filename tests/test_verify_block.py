"""verify_block: block verification (Sun et al., ICLR 2025) on the paper's toy, on random cases and on a
context-dependent (Markov-chain) target checked transition by transition; a wrong residual built on purpose is
caught by the same test; and `speculative_generate(verification="block")` end to end.
"""

import itertools

import pytest
import torch

from helpers import build_tiny_model, first_layer_draft, sharpen
from specdec_lib import DraftModelDrafter, speculative_generate
from specdec_lib.errors import ConfigError
from specdec_lib.sampling import SamplingConfig, sample_token
from specdec_lib.stats import bucket_counts, chi_square_gof
from specdec_lib.verify import VerifyResult, block_thresholds, verify_block, verify_exact, verify_greedy
from test_sampling_distribution import categories_for, exact_joint, speculative_samples

SIGNIFICANCE = 0.001


def expected_accepted(p_rows: torch.Tensor, q_rows: torch.Tensor, rule: str) -> float:
    """E[accepted drafts] by enumerating every draft (context-independent p and q: row i for position i)."""
    k, vocab = q_rows.shape
    total = 0.0
    for draft in itertools.product(range(vocab), repeat=k):
        tokens = torch.tensor(draft)
        weight = float(torch.prod(q_rows[torch.arange(k), tokens]))
        if weight == 0:
            continue
        if rule == "block":
            lengths = block_thresholds(p_rows, q_rows, tokens).length_distribution()
            total += weight * float((lengths * torch.arange(k + 1)).sum())
        else:  # token-wise: draft i survives with prod_{j <= i} min(1, p_j(x_j) / q_j(x_j))
            keep = torch.clamp(p_rows[torch.arange(k), tokens] / q_rows[torch.arange(k), tokens], max=1)
            total += weight * float(torch.cumprod(keep, 0).sum())
    return total


def test_the_papers_two_symbol_toy_exactly():
    p, q = torch.tensor([1 / 3, 2 / 3]), torch.tensor([2 / 3, 1 / 3])
    p_rows, q_rows = p.expand(3, 2), q.expand(2, 2)
    assert expected_accepted(p_rows, q_rows, "token") == pytest.approx(10 / 9, abs=1e-6)
    assert expected_accepted(p_rows, q_rows, "block") == pytest.approx(11 / 9, abs=1e-6)


def test_the_toy_by_sampling():
    p, q = torch.tensor([1 / 3, 2 / 3]), torch.tensor([2 / 3, 1 / 3])
    generator = torch.Generator().manual_seed(0)
    draws = 20000
    drafts = torch.multinomial(q, draws * 2, replacement=True, generator=generator).view(draws, 2)
    block = [verify_block(p.expand(3, 2), q.expand(2, 2), d, generator).num_accepted for d in drafts]
    token = [verify_exact(p.expand(3, 2), q.expand(2, 2), d, generator).num_accepted for d in drafts]
    # standard error of a mean of values in {0, 1, 2}: below 0.01 at 20000 draws; 4 sigma
    assert sum(block) / draws == pytest.approx(11 / 9, abs=0.03)
    assert sum(token) / draws == pytest.approx(10 / 9, abs=0.03)


def test_length_distribution_is_a_distribution_and_block_never_accepts_fewer():
    generator = torch.Generator().manual_seed(1)
    for trial in range(20):
        k, vocab = 1 + trial % 3, 3
        p_rows = torch.softmax(torch.randn(k + 1, vocab, generator=generator) * 2, -1)
        q_rows = torch.softmax(torch.randn(k, vocab, generator=generator) * 2, -1)
        draft = torch.multinomial(q_rows, 1, generator=generator).view(-1)
        lengths = block_thresholds(p_rows, q_rows, draft).length_distribution()
        assert lengths.sum().item() == pytest.approx(1.0, abs=1e-6) and (lengths >= -1e-7).all()
        assert expected_accepted(p_rows, q_rows, "block") >= expected_accepted(p_rows, q_rows, "token") - 1e-6


def test_one_hot_p_and_q_coincide_with_greedy_verification():
    generator = torch.Generator().manual_seed(2)
    for trial in range(100):
        k = trial % 5
        logits = torch.randn(k + 1, 7, generator=generator)
        choice = logits.argmax(-1)
        draft = torch.where(torch.rand(k, generator=generator) < 0.7, choice[:k], torch.randint(0, 7, (k,)))
        p, q = torch.eye(7)[choice], torch.eye(7)[draft]
        assert verify_block(p, q, draft, generator) == verify_greedy(logits, draft)


def test_inputs_are_checked_like_verify_exact():
    p = torch.tensor([[0.5, 0.5, 0.0], [1 / 3, 1 / 3, 1 / 3]])
    with pytest.raises(ConfigError, match="probability q = 0"):
        verify_block(p, torch.tensor([[1.0, 0.0, 0.0]]), torch.tensor([1]))
    with pytest.raises(ConfigError, match="k \\+ 1 = 3 rows"):
        verify_block(p, None, torch.tensor([0, 1]))
    assert verify_block(p[:1], torch.empty(0, 3), torch.empty(0, dtype=torch.long)).kind == "bonus"
    assert isinstance(verify_block(p, None, torch.tensor([0]), torch.Generator().manual_seed(0)), VerifyResult)


# ---------------------------------------------------------------- a context-dependent target: a Markov chain

VOCAB, GAMMA, STREAM = 4, 3, 15000


def random_chains(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Peaked random transition matrices ``P(next | previous)`` (the target) and ``Q`` (the draft's own chain)."""
    generator = torch.Generator().manual_seed(seed)
    return tuple(torch.softmax(torch.randn(VOCAB, VOCAB, generator=generator) * 2.5, -1) for _ in range(2))


# On three symbols, or on most random chains, the residual after a partly accepted prefix has a single positive
# entry, so leaving out the prefix weight changes nothing. Seed 35 is the chain (of 200 searched) where it changes
# most: the right and the wrong rule's one-round output laws differ by a total variation of 0.053 (computed exactly).
P_CHAIN, Q_CHAIN = random_chains(35)


def wrong_residual_block(p, q, draft_tokens, generator):
    """A port with the bug class the issue names: the residual taken without the prefix weight (max(p - q, 0))."""
    block = block_thresholds(p, q, draft_tokens)
    k = draft_tokens.shape[0]
    tau = int((torch.rand(k + 1, generator=generator) <= block.thresholds).nonzero()[-1, 0])
    if tau == k:
        return VerifyResult(k, int(sample_token(p[k], generator)), "bonus")
    q_rows = torch.eye(VOCAB)[draft_tokens] if q is None else q
    residual = (p[tau] - q_rows[tau]).clamp_min(0)
    distribution = residual / residual.sum() if residual.sum() > 0 else p[tau]
    return VerifyResult(tau, int(sample_token(distribution, generator)), "recovered")


def markov_stream(verifier, seed: int = 0) -> list[int]:
    """A stream of STREAM tokens decoded speculatively: the draft chain proposes GAMMA tokens, the verifier keeps
    some, and rows p_i / q_i follow the drafted path (each depends on the token before it)."""
    generator = torch.Generator().manual_seed(seed)
    stream = [0]
    while len(stream) < STREAM:
        path, q_rows = [stream[-1]], []
        for _ in range(GAMMA):
            q_rows.append(Q_CHAIN[path[-1]])
            path.append(int(torch.multinomial(q_rows[-1], 1, generator=generator)))
        p_rows = P_CHAIN[torch.tensor(path)]  # [GAMMA + 1, V]: p_i = P(. | path[i])
        drafts = torch.tensor(path[1:])
        result = verifier(p_rows, torch.stack(q_rows), drafts, generator)
        stream += path[1 : 1 + result.num_accepted] + [result.next_token]
    return stream


def transition_tests(stream: list[int]) -> list:
    counts = torch.zeros(VOCAB, VOCAB)
    for a, b in zip(stream, stream[1:]):
        counts[a, b] += 1
    return [chi_square_gof(counts[a].long().tolist(), P_CHAIN[a].tolist()) for a in range(VOCAB)]


def test_block_verification_keeps_a_markov_target_transition_by_transition():
    tests = transition_tests(markov_stream(verify_block))
    assert all(test.passes(SIGNIFICANCE / VOCAB) for test in tests), tests  # Bonferroni over the three rows


def test_the_same_test_catches_a_wrong_residual():
    tests = transition_tests(markov_stream(wrong_residual_block))
    assert any(test.p_value < 1e-6 for test in tests), tests  # measured: p = 3e-11 on the last row (the right rule: p >= 0.13 on every row)


# ---------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def tiny_pair():
    target = sharpen(build_tiny_model("llama", seed=0, num_layers=2))
    return target, first_layer_draft(target)


def test_speculative_block_verification_matches_the_target(tiny_pair):
    target, draft = tiny_pair
    prompt, sampling = torch.tensor([[0, 5, 17]]), SamplingConfig(temperature=1.0)
    categories, probs = categories_for(exact_joint(target, prompt, sampling, (8, 6, 4)), 1000)
    samples, _ = speculative_samples(target, DraftModelDrafter(draft), prompt, sampling, 1000, verification="block")
    test = chi_square_gof(bucket_counts(samples, categories), probs)
    assert test.passes(SIGNIFICANCE) and test.cells >= 8, test


def test_speculative_block_verification_greedy_is_token_identical(tiny_pair):
    target, draft = tiny_pair
    prompt = torch.tensor([[0, 5, 17, 42]])
    exact = speculative_generate(target, DraftModelDrafter(draft), prompt, gamma=4, max_new_tokens=20)
    block = speculative_generate(target, DraftModelDrafter(draft), prompt, gamma=4, max_new_tokens=20,
                                 verification="block")
    assert block.new_token_list == exact.new_token_list
    with pytest.raises(ConfigError, match="block verification has no lenience"):
        speculative_generate(target, DraftModelDrafter(draft), prompt, gamma=4, max_new_tokens=4,
                             verification="block", lenience=2.0)
