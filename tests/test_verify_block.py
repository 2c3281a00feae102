"""verify_block: block verification (Sun et al., ICLR 2025) on the paper's toy (exactly, and by sampling in one
batched call), on random cases, as a batch (ragged rows), on a
context-dependent (Markov-chain) target checked transition by transition, exactly (every round enumerated) and by
sampling many streams at once, where a wrong residual built on purpose is caught by the same test; and
`speculative_generate(verification="block")` end to end.
"""

import itertools
import math
from collections import defaultdict

import pytest
import torch

from helpers import (
    PROMPT,
    SETTINGS,
    SIGNIFICANCE,
    categories_for,
    chain_transition_counts,
    detectable_tv,
    exact_joint,
    expected_transitions,
    random_chains,
    row_laws,
    speculative_samples,
    transition_p_values,
)
from specdec_lib import DraftModelDrafter, speculative_generate
from specdec_lib.core.errors import ConfigError
from specdec_lib.core.stats import bucket_counts, chi_square_gof, total_variation
from specdec_lib.core.block_verify import block_thresholds, verify_block
from specdec_lib.core.verify import Verdict, residual_distribution, verify_exact, verify_greedy


def one_draft(p_rows: torch.Tensor, q_rows: torch.Tensor | None, tokens: torch.Tensor):
    """`block_thresholds` of one draft (``p_rows [k + 1, V]``, ``q_rows [k, V]``, ``tokens [k]``): a batch of one."""
    return block_thresholds(p_rows[None], None if q_rows is None else q_rows[None], tokens[None])


def accepted_length_law(p_rows: torch.Tensor, q_rows: torch.Tensor, rule: str) -> torch.Tensor:
    """``[k + 1]``: P(n drafts accepted), by enumerating every draft (context-independent p and q: row i for
    position i); ``rule`` "block" (`block_thresholds`' length law) or "token" (draft i survives with
    ``prod_{j <= i} min(1, p_j(x_j) / q_j(x_j))``)."""
    k, vocab = q_rows.shape
    law = torch.zeros(k + 1, dtype=torch.float64)
    for draft in itertools.product(range(vocab), repeat=k):
        tokens = torch.tensor(draft)
        weight = float(torch.prod(q_rows[torch.arange(k), tokens]))
        if weight == 0:
            continue
        if rule == "block":
            law += weight * one_draft(p_rows, q_rows, tokens).length_distribution()[0].double()
        else:
            keep = torch.clamp(p_rows[torch.arange(k), tokens] / q_rows[torch.arange(k), tokens], max=1)
            survive = torch.cat([torch.ones(1), torch.cumprod(keep, 0)]).double()  # P(at least n accepted)
            law += weight * (survive - torch.cat([survive[1:], torch.zeros(1, dtype=torch.float64)]))
    return law


def expected_accepted(p_rows: torch.Tensor, q_rows: torch.Tensor, rule: str) -> float:
    """E[accepted drafts] under ``rule`` (`accepted_length_law`)."""
    law = accepted_length_law(p_rows, q_rows, rule)
    return float((law * torch.arange(len(law))).sum())


TOY_P, TOY_Q = torch.tensor([1 / 3, 2 / 3]), torch.tensor([2 / 3, 1 / 3])  # the paper's two-symbol toy, k = 2


def test_the_papers_two_symbol_toy_exactly():
    p_rows, q_rows = TOY_P.expand(3, 2), TOY_Q.expand(2, 2)
    assert expected_accepted(p_rows, q_rows, "token") == pytest.approx(10 / 9, abs=1e-6)
    assert expected_accepted(p_rows, q_rows, "block") == pytest.approx(11 / 9, abs=1e-6)


def test_the_toy_by_sampling():
    """20 000 rounds of each rule in one batched call: the accepted count follows its exact law (3 cells: TV 0.018
    caught, power 0.9 at p < SIGNIFICANCE), and its mean sits within 4 standard errors (sd <= 1 for counts in
    {0, 1, 2}), under half the 1/9 gap between the rules, of 11/9 (block) and 10/9 (token-wise)."""
    draws = 20_000
    tolerance = 4 / math.sqrt(draws)
    assert tolerance < (11 / 9 - 10 / 9) / 2
    generator = torch.Generator().manual_seed(0)
    drafts = torch.multinomial(TOY_Q, draws * 2, replacement=True, generator=generator).view(draws, 2)
    for rule, verify, mean in (("block", verify_block, 11 / 9), ("token", verify_exact, 10 / 9)):
        verdict = verify(TOY_P.expand(draws, 3, 2), TOY_Q.expand(draws, 2, 2), drafts, generator=generator)
        test = chi_square_gof(torch.bincount(verdict.accepted, minlength=3),
                              accepted_length_law(TOY_P.expand(3, 2), TOY_Q.expand(2, 2), rule))
        assert test.passes(SIGNIFICANCE) and detectable_tv(draws, test.cells) <= 0.018, (rule, test)
        assert float(verdict.accepted.double().mean()) == pytest.approx(mean, abs=tolerance), rule


def test_length_distribution_is_a_distribution_and_block_never_accepts_fewer():
    generator = torch.Generator().manual_seed(1)
    for trial in range(20):
        k, vocab = 1 + trial % 3, 3
        p_rows = torch.softmax(torch.randn(k + 1, vocab, generator=generator) * 2, -1)
        q_rows = torch.softmax(torch.randn(k, vocab, generator=generator) * 2, -1)
        draft = torch.multinomial(q_rows, 1, generator=generator).view(-1)
        lengths = one_draft(p_rows, q_rows, draft).length_distribution()[0]
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
        block = verify_block(p[None], q[None], draft[None], generator=generator)
        assert block.tolist() == verify_greedy(logits[None], draft[None]).tolist()


def test_the_token_after_a_partly_kept_block_comes_from_the_weighted_residual():
    """k = 2 drafts [0, 2] with w_1 = p_0(0) / q_0(0) = 0.5: after one kept draft the residual
    ``max(w_1 p_1 - q_1, 0) = (0.05, 0, 0)`` allows token 0 only, where ``max(p_1 - q_1, 0)`` (the prefix weight left
    out) would also give token 1 a share of 1/7. tau = 1 has probability h_1 (1 - h_2) = 0.075: 4000 rows of one
    batch keep exactly one draft ~300 times, and every one of them must be followed by token 0."""
    p = torch.tensor([[0.2, 0.5, 0.3], [0.5, 0.3, 0.2], [1 / 3, 1 / 3, 1 / 3]])
    q = torch.tensor([[0.4, 0.3, 0.3], [0.2, 0.25, 0.55]])
    tokens = torch.tensor([0, 2])
    block = one_draft(p, q, tokens)
    assert block.residuals[0, 1].tolist() == pytest.approx([0.05, 0, 0], abs=1e-6)
    assert float(block.length_distribution()[0, 1]) == pytest.approx(0.0745, abs=1e-3)
    rows = 4000
    verdict = verify_block(p.expand(rows, 3, 3), q.expand(rows, 2, 3), tokens.expand(rows, 2),
                           generator=torch.Generator().manual_seed(0))
    after_one = verdict.next_token[verdict.accepted == 1]
    assert after_one.numel() > 200 and set(after_one.tolist()) == {0}
    assert set(verdict.next_token[verdict.accepted == 0].tolist()) == {1}  # w_0 = 1: max(p_0 - q_0, 0)


def test_inputs_are_checked_like_verify_exact():
    p = torch.tensor([[0.5, 0.5, 0.0], [1 / 3, 1 / 3, 1 / 3]])
    with pytest.raises(ConfigError, match="probability q = 0"):
        verify_block(p[None], torch.tensor([[[1.0, 0.0, 0.0]]]), torch.tensor([[1]]))
    with pytest.raises(ConfigError, match=r"\[B, K \+ 1, V\] = \[1, 3, V\]"):
        verify_block(p[None], None, torch.tensor([[0, 1]]))
    with pytest.raises(ConfigError, match="one round is a batch of one"):
        verify_block(p, None, torch.tensor([[0]]))
    assert verify_block(p[None, :1], torch.empty(1, 0, 3), torch.empty(1, 0, dtype=torch.long)).tolist()[0][2] == "bonus"
    assert isinstance(verify_block(p[None], None, torch.tensor([[0]]), generator=torch.Generator().manual_seed(0)),
                      Verdict)
    with pytest.raises(ConfigError, match=r"num_drafts must be a LongTensor \[B\] = \[1\] of counts in \[0, K = 1\]"):
        verify_block(p[None], None, torch.tensor([[0]]), torch.tensor([2]))
    with pytest.raises(ConfigError, match="position 0 of row 1 has probability q = 0"):
        verify_block(p.expand(2, 2, 3), torch.tensor([[[1.0, 0, 0]], [[1.0, 0, 0]]]), torch.tensor([[0], [1]]))
    with pytest.raises(ConfigError, match="one round is a batch of one"):
        block_thresholds(p, None, torch.tensor([0]))


# ---------------------------------------------------------------- a batch of ragged rounds


def test_ragged_rows_never_accept_padding_and_take_their_bonus_from_their_own_row():
    """Row b drafted b of K = 3 tokens ``[1, 2, 3]``, p_i a point mass on draft i (p_3 on token 4): every prefix
    weight is 1, so the longest length a row may keep passes, and a length past the row's drafts must never be kept.
    Row b keeps exactly b drafts and draws its bonus from p[b, b], token b + 1."""
    vocab = 8
    tokens = torch.tensor([[1, 2, 3]] * 4)
    p = torch.eye(vocab)[[1, 2, 3, 4]].expand(4, 4, vocab)
    num_drafts = torch.arange(4)
    uniform = torch.full((4, 3, vocab), 1 / vocab)
    for q in (None, uniform, uniform * (torch.arange(3) < num_drafts[:, None])[..., None]):
        verdict = verify_block(p, q, tokens, num_drafts, torch.Generator().manual_seed(0))
        assert verdict.tolist() == [(b, b + 1, "bonus") for b in range(4)]


# ---------------------------------------------------------------- a context-dependent target: a Markov chain

VOCAB, GAMMA = 4, 3
# On three symbols, or on most random chains, the residual after a partly accepted prefix has a single positive
# entry, so leaving out the prefix weight changes nothing. Seed 35 is the chain (of 200 searched) where it changes
# most: the wrong residual moves the transitions out of token 3 by a TV of 0.057 (`block_round_law`, exactly).
P_CHAIN, Q_CHAIN = random_chains(VOCAB, seed=35, sharpness=2.5)
# 2000 streams of 25 rounds (~1.6 tokens a round): the rarest row gets ~9000 transitions, token 3's ~22 000
STREAMS, ROUNDS = 2000, 25




def block_round_law(weighted_residual: bool):
    """``a -> {emitted tokens: probability}``: one round of block verification after token a, every draft path of
    the draft chain enumerated, with `block_thresholds`' length law; the token after tau < GAMMA kept drafts is
    drawn from its residual ``norm(max(w_tau p_tau - q_tau, 0))``, or (``weighted_residual=False``, the bug) from
    ``norm(max(p_tau - q_tau, 0))``."""
    def law_after(a: int) -> dict:
        law: dict = defaultdict(float)
        for drafts in itertools.product(range(VOCAB), repeat=GAMMA):
            path = (a,) + drafts
            p_rows, q_rows = P_CHAIN[list(path)], Q_CHAIN[list(path[:-1])]  # [GAMMA + 1, V], [GAMMA, V]
            weight = float(torch.prod(q_rows[torch.arange(GAMMA), torch.tensor(drafts)]))
            block = one_draft(p_rows, q_rows, torch.tensor(drafts))
            for tau, length_probability in enumerate(block.length_distribution()[0].tolist()):
                if length_probability == 0:
                    continue
                if tau == GAMMA:
                    following = p_rows[GAMMA]  # the bonus token
                elif weighted_residual:
                    following = block.residuals[0, tau] / block.residual_mass[0, tau]  # Z_tau > 0 where tau can be kept
                else:
                    following = residual_distribution(p_rows[tau], q_rows[tau])
                for token, probability in enumerate(following.tolist()):
                    law[drafts[:tau] + (token,)] += weight * length_probability * probability
        return law
    return law_after


def wrong_residual_block(p, q, draft_tokens, num_drafts, generator) -> Verdict:
    """A port with the bug class the issue names: block verification's own accepted length tau, but the token after
    tau < k kept drafts drawn from ``norm(max(p_tau - q_tau, 0))``, without the prefix weight w_tau."""
    verdict = verify_block(p, q, draft_tokens, num_drafts, generator)
    rows, tau = torch.arange(p.shape[0]), verdict.accepted
    q_at_tau = torch.cat([q, q.new_zeros(q.shape[0], 1, q.shape[2])], dim=1)[rows, tau]  # [B, V]
    wrong = torch.multinomial(residual_distribution(p[rows, tau], q_at_tau), 1, generator=generator)[:, 0]
    return Verdict(tau, torch.where(verdict.bonus, verdict.next_token, wrong), verdict.bonus, verdict.path)




def test_block_verification_keeps_a_markov_target_exactly():
    """No sampling: the expected transition counts of a stream, every round enumerated, are P row by row."""
    expected = expected_transitions(block_round_law(weighted_residual=True), VOCAB, ROUNDS)
    assert torch.allclose(row_laws(expected), P_CHAIN.double(), atol=1e-5)


def test_block_verification_keeps_a_markov_target_transition_by_transition():
    """STREAMS streams at once; a chi-square test per row (Bonferroni over the V rows). Every row catches a
    deviation of TV 0.03 (power 0.9), token 3's row one of 0.02: the wrong residual's 0.057 is caught with margin
    (as is the mutant that drops the prefix weight inside `verify_block`)."""
    counts = chain_transition_counts(verify_block, P_CHAIN, Q_CHAIN, gamma=GAMMA, streams=STREAMS,
                                     rounds=ROUNDS)
    p_values = transition_p_values(counts, P_CHAIN)
    assert all(p_value > SIGNIFICANCE / VOCAB for p_value in p_values), p_values
    power = [detectable_tv(int(n), VOCAB, alpha=SIGNIFICANCE / VOCAB) for n in counts.sum(dim=1)]
    assert max(power) <= 0.03 and power[3] <= 0.02, power


def test_the_same_test_catches_a_wrong_residual():
    """The wrong rule's transitions out of token 3 are off by a TV of 0.057 (exactly, every round enumerated): the
    test's draws catch a deviation half that size with power 0.9, and the test fails."""
    expected = expected_transitions(block_round_law(weighted_residual=False), VOCAB, ROUNDS)
    effect = [total_variation(law, target) for law, target in zip(row_laws(expected), P_CHAIN)]
    assert effect[3] == pytest.approx(0.057, abs=1e-3) and max(effect) == effect[3]
    counts = chain_transition_counts(wrong_residual_block, P_CHAIN, Q_CHAIN, gamma=GAMMA, streams=STREAMS,
                                     rounds=ROUNDS)
    assert detectable_tv(int(counts[3].sum()), VOCAB, alpha=SIGNIFICANCE / VOCAB) <= effect[3] / 2
    p_values = transition_p_values(counts, P_CHAIN)
    assert p_values[3] < SIGNIFICANCE / VOCAB, p_values  # measured: p = 5e-80 (the right rule: p >= 0.01 on every row)


# ---------------------------------------------------------------- end to end

E2E_DRAWS = 300  # ~2 s: speculative_generate runs one at a time


def test_speculative_block_verification_matches_the_target(sharp_tiny_pair):
    """The first three tokens of E2E_DRAWS seeded runs at T = 0.7, top-p 0.9 (tokens 2 and 3: one round of k = 2
    drafts, block-verified) against their exact law under the target (`exact_joint`, ~14 cells). A check of the
    wiring (p processed like q, the block rule called), catching a deviation of TV 0.18 (power 0.9); the rule's own
    exactness is checked to TV 0.02 by the batched tests above."""
    target, draft = sharp_tiny_pair
    sampling = SETTINGS["T=0.7, top_p=0.9"]
    categories, probs = categories_for(exact_joint(target, PROMPT, sampling, (8, 6, 4)), E2E_DRAWS)
    samples, acceptance = speculative_samples(target, DraftModelDrafter(draft), PROMPT, sampling, E2E_DRAWS,
                                              verification="block", eos_token_id=None)
    test = chi_square_gof(bucket_counts(samples, categories), probs)
    assert test.passes(SIGNIFICANCE) and test.cells >= 10, test
    assert detectable_tv(E2E_DRAWS, test.cells) <= 0.18
    assert 0 < acceptance < 1  # drafts were both kept and replaced


def test_speculative_block_verification_greedy_is_token_identical(sharp_tiny_pair):
    target, draft = sharp_tiny_pair
    prompt = torch.tensor([[0, 5, 17, 42]])
    exact = speculative_generate(target, DraftModelDrafter(draft), prompt, gamma=4, max_new_tokens=20)
    block = speculative_generate(target, DraftModelDrafter(draft), prompt, gamma=4, max_new_tokens=20,
                                 verification="block")
    assert block.new_token_list == exact.new_token_list
    with pytest.raises(ConfigError, match="block verification has no lenience"):
        speculative_generate(target, DraftModelDrafter(draft), prompt, gamma=4, max_new_tokens=4,
                             verification="block", lenience=2.0)
