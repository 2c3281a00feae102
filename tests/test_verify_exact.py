"""verify_exact / verify_relaxed over ``[B, K]``: hand-made cases with known answers (one round, a batch of one),
then toy distributions checked statistically.

Tier 1: small vocabularies where the decision is forced (p(x) = 0 always rejects, p(x) >= q(x) always accepts,
one-hot p and q reproduce verify_greedy) and a line-by-line reference implementation that must agree draw for draw.
A batch: ragged rows never accept their padding and take their bonus from their own row; the inputs are checked.
Tier 3 on toy distributions (V = 5 or 6): every case's rounds are verified in one `verify_exact` call (a
row per round), so each test affords the draws its claim needs; each states the smallest total variation distance
it catches (`detectable_tv`, power 0.9 at its p-value threshold) and checks that statement. The first emitted
token follows p (chi-square above SIGNIFICANCE, TV shrinking like the sampling noise), acceptance is alpha = sum
min(p, q), the accepted count follows the truncated geometric law, and streams over position-dependent
distributions (ragged rows in one batch) have the target's marginals and joint. The relaxed rule and a drafter
reporting the wrong q fail the same test, by the margin their exact effect (`one_position_law`) predicts.
"""

import math
from functools import lru_cache

import pytest
import torch

from helpers import SIGNIFICANCE, detectable_tv, one_position_law
from specdec_lib.core.errors import ConfigError
from specdec_lib.core.stats import (
    accepted_count_distribution,
    binomial_z,
    chi_square_gof,
    histogram,
    total_variation,
    tv_noise_floor,
)
from specdec_lib.core.verify import (
    Verdict,
    acceptance_probability,
    residual_distribution,
    verify_exact,
    verify_greedy,
    verify_relaxed,
)

# Rounds per toy case, verified in one batched call (milliseconds): over V = 6 cells a deviation of TV >= 0.014
# from the right law is caught with power 0.9 at p < SIGNIFICANCE, and an acceptance rate 0.01 off at |z| >= 4.
DRAWS = 40_000


def dist(*values: float) -> torch.Tensor:
    t = torch.tensor(values, dtype=torch.float32)
    return t / t.sum()


P = dist(0.35, 0.25, 0.20, 0.10, 0.10, 0.00)  # the target, with a token it never emits
Q = dist(0.10, 0.40, 0.20, 0.00, 0.05, 0.25)  # a draft that overlaps it: alpha = 0.6
V = P.numel()

# name -> (p, q the drafter samples from, q it reports (None: no distribution), theoretical acceptance)
CASES = {
    "overlap": (P, Q, Q, 0.60),
    "disjoint supports": (dist(0.5, 0.3, 0.2, 0, 0, 0), *[dist(0, 0, 0, 0.2, 0.3, 0.5)] * 2, 0.0),
    "point mass q": (P, torch.eye(V)[1], torch.eye(V)[1], 0.25),
    "p with zeros, uniform q": (dist(0, 0.5, 0, 0.3, 0.2, 0), torch.full((V,), 1 / V), torch.full((V,), 1 / V), 0.5),
    "p equals q": (P, P, P, 1.0),
    # a drafter without a distribution: drafts drawn from Q, verified as point masses (accept with p(x)):
    # still exact, accepted with sum_x q(x) p(x) = 0.18 only
    "q unknown (None)": (P, Q, None, float((P * Q).sum())),
}




def one_round(p: torch.Tensor, q: torch.Tensor | None, tokens: torch.Tensor, generator: torch.Generator | None = None,
              *, rule=verify_exact, **options) -> tuple[int, int, str]:
    """``(accepted, next_token, kind)`` of one round, ``p [k + 1, V]``, ``q [k, V] | None``, ``tokens [k]``, verified
    by ``rule`` as a batch of one."""
    return rule(p[None], None if q is None else q[None], tokens[None], None, generator, **options).tolist()[0]


def first_tokens(drafts: torch.Tensor, verdict: Verdict) -> torch.Tensor:
    """The first emitted token of each round: the first draft if accepted, else the recovered token."""
    return torch.where(verdict.accepted > 0, drafts[:, 0], verdict.next_token)


@lru_cache(maxsize=None)
def rounds(case: str, k: int = 1, lenience: float = 1.0, seed: int = 0) -> tuple[torch.Tensor, Verdict]:
    """`DRAWS` seeded rounds of k i.i.d. positions of `CASES[case]`, one batch row each: (drafts [DRAWS, k], the
    verdict). ``lenience`` other than 1 runs `verify_relaxed`."""
    p, q_true, q_reported, _ = CASES[case]
    generator = torch.Generator().manual_seed(seed)
    drafts = torch.multinomial(q_true, DRAWS * k, replacement=True, generator=generator).view(DRAWS, k)
    p_rows = p.expand(DRAWS, k + 1, V)  # the same target distribution at every position
    q_rows = None if q_reported is None else q_reported.expand(DRAWS, k, V)
    if lenience == 1.0:
        return drafts, verify_exact(p_rows, q_rows, drafts, generator=generator)
    return drafts, verify_relaxed(p_rows, q_rows, drafts, None, generator, lenience=lenience)


# ---------------------------------------------------------------- tier 1: forced decisions, exact answers


def test_a_token_the_target_rules_out_is_always_rejected_and_never_recovered():
    p = torch.stack([dist(0, 0.5, 0.5, 0), dist(1, 1, 1, 1)])
    q = dist(0.7, 0.1, 0.1, 0.1).view(1, 4)
    for seed in range(50):
        accepted, token, kind = one_round(p, q, torch.tensor([0]), torch.Generator().manual_seed(seed))
        assert accepted == 0 and kind == "recovered"
        assert token in (1, 2)  # residual max(p - q, 0) = [0, .4, .4, 0]


def test_a_token_the_target_likes_at_least_as_much_is_always_accepted():
    p = torch.stack([dist(0.1, 0.6, 0.3, 0), dist(0, 0, 0, 1)])
    q = dist(0.3, 0.3, 0.4, 0).view(1, 4)  # p(1) = 0.6 >= q(1) = 0.3: min(1, p/q) = 1
    for seed in range(50):
        assert one_round(p, q, torch.tensor([1]), torch.Generator().manual_seed(seed)) == (1, 3, "bonus")


def test_disjoint_supports_reject_everything_and_recover_from_p():
    p = torch.stack([dist(0.5, 0.5, 0, 0)] * 3)
    q = torch.stack([dist(0, 0, 0.5, 0.5)] * 2)
    for seed in range(30):
        accepted, token, _ = one_round(p, q, torch.tensor([2, 3]), torch.Generator().manual_seed(seed))
        assert accepted == 0 and token in (0, 1)


def test_rejection_stops_at_the_first_rejected_position():
    p = torch.stack([dist(1, 1, 0, 0), dist(0, 0, 1, 1), dist(1, 0, 0, 0), dist(0, 1, 0, 0)])
    q = torch.stack([dist(1, 1, 0, 0), dist(1, 0, 0, 0), dist(1, 0, 0, 0)])  # position 1 drafts 0: p(0) = 0
    accepted, token, kind = one_round(p, q, torch.tensor([1, 0, 0]), torch.Generator().manual_seed(0))
    assert accepted == 1 and kind == "recovered" and token in (2, 3)


def test_k_zero_is_a_plain_sample_from_p():
    p = dist(0, 0, 1, 0).view(1, 4)
    assert one_round(p, None, torch.empty(0, dtype=torch.long)) == (0, 2, "bonus")
    assert one_round(p, torch.empty(0, 4), torch.empty(0, dtype=torch.long)) == (0, 2, "bonus")


def test_one_hot_p_and_q_reproduce_verify_greedy():
    generator = torch.Generator().manual_seed(1)
    for trial in range(200):
        k = trial % 5
        logits = torch.randn(k + 1, 7, generator=generator)
        target_choice = logits.argmax(-1)
        other = torch.randint(0, 7, (k,), generator=generator)
        draft = torch.where(torch.rand(k, generator=generator) < 0.7, target_choice[:k], other)
        p, q = torch.eye(7)[target_choice], torch.eye(7)[draft]
        accepted, token, kind = one_round(p, q, draft, generator)
        assert (accepted, token, kind) == verify_greedy(logits[None], draft[None]).tolist()[0]
        assert kind == ("bonus" if accepted == k else "recovered")


def test_unknown_q_is_a_point_mass_on_each_draft():
    p = torch.stack([dist(0.2, 0.3, 0.5), dist(0.2, 0.3, 0.5)])
    for seed in range(100):  # q = None and an explicit one-hot q take the same decisions from the same draws
        tokens = torch.tensor([seed % 3])
        accepted, token, kind = one_round(p, None, tokens, torch.Generator().manual_seed(seed))
        assert (accepted, token, kind) == one_round(p, torch.eye(3)[tokens], tokens, torch.Generator().manual_seed(seed))
        if kind == "recovered":
            assert token != int(tokens[0])  # the residual is p without the rejected draft


def test_all_zero_residual_falls_back_to_p_without_nans():
    p = torch.stack([dist(0, 0.5, 0.5), dist(1, 1, 1)])
    # p == q: every draft q can draw is accepted (the residual max(p - q, 0) = 0 is never needed)
    accepted, _, kind = one_round(p, p[:1].clone(), torch.tensor([1]), torch.Generator().manual_seed(0))
    assert accepted == 1 and kind == "bonus"
    assert torch.equal(residual_distribution(p[0], p[0]), p[0])
    assert not torch.isnan(residual_distribution(torch.eye(3), torch.eye(3))).any()


def test_residual_and_acceptance_probability_by_hand():
    p, q = dist(0.5, 0.3, 0.2, 0), dist(0.2, 0.2, 0.2, 0.4)
    assert float(acceptance_probability(p, q)) == pytest.approx(0.2 + 0.2 + 0.2)  # sum min(p, q)
    assert residual_distribution(p, q).tolist() == pytest.approx([0.75, 0.25, 0, 0])  # [.3, .1, 0, 0] / 0.4
    assert acceptance_probability(torch.stack([p, q]), torch.stack([q, q])).tolist() == pytest.approx([0.6, 1.0])


def reference_verify(p, q, tokens, generator):
    """The rule written out position by position (what notebook 02 builds), consuming the RNG like the library:
    k uniforms first, then one multinomial draw."""
    k = len(tokens)
    u = torch.rand(k, generator=generator)
    for i in range(k):
        x = int(tokens[i])
        q_x = 1.0 if q is None else float(q[i, x])
        if u[i] * q_x >= p[i, x]:  # rejected: u >= p/q
            q_row = torch.eye(p.shape[1])[x] if q is None else q[i]
            residual = torch.clamp(p[i] - q_row, min=0)
            distribution = residual / residual.sum() if residual.sum() > 0 else p[i]
            return i, int(torch.multinomial(distribution, 1, generator=generator)), "recovered"
    return k, int(torch.multinomial(p[k], 1, generator=generator)), "bonus"


def random_round(maker: torch.Generator, trial: int) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """A random round: k = trial % 5 drafts over V = 3 .. 8, p [k + 1, V] with some zeros, q [k, V] (None every
    fourth trial), draft tokens [k] (any id: some have p = 0)."""
    k, vocab = trial % 5, 3 + trial % 6
    p = torch.softmax(3 * torch.randn(k + 1, vocab, generator=maker), -1)
    p = p * (torch.rand(k + 1, vocab, generator=maker) > 0.2)  # some zeros
    p[:, 0] += 1e-3  # keep every row non-empty
    p = p / p.sum(-1, keepdim=True)
    q = None if trial % 4 == 0 else torch.softmax(2 * torch.randn(k, vocab, generator=maker), -1)
    return p, q, torch.randint(0, vocab, (k,), generator=maker)


def test_a_seed_fixes_the_round_and_matches_the_reference_draw_for_draw():
    maker = torch.Generator().manual_seed(7)
    for trial in range(300):
        p, q, tokens = random_round(maker, trial)
        mine = one_round(p, q, tokens, torch.Generator().manual_seed(trial))
        assert mine == one_round(p, q, tokens, torch.Generator().manual_seed(trial))  # reproducible
        assert mine == reference_verify(p, q, tokens, torch.Generator().manual_seed(trial))
        relaxed = one_round(p, q, tokens, torch.Generator().manual_seed(trial), rule=verify_relaxed, lenience=1)
        assert relaxed == mine  # l = 1 is exact


def test_relaxed_accepts_at_least_as_much_from_the_same_draws():
    p, q = P.expand(4, V), Q.expand(3, V)
    for seed in range(100):
        tokens = torch.multinomial(Q, 3, replacement=True, generator=torch.Generator().manual_seed(1000 + seed))
        exact = one_round(p, q, tokens, torch.Generator().manual_seed(seed))
        relaxed = one_round(p, q, tokens, torch.Generator().manual_seed(seed), rule=verify_relaxed, lenience=3.0)
        assert relaxed[0] >= exact[0]


def test_bad_inputs_are_explained():
    p, q, tokens = P.expand(2, 3, V), Q.expand(2, 2, V), torch.tensor([[1, 2], [2, 4]])
    with pytest.raises(ConfigError, match=r"LongTensor \[B, K\] \(one row per round\), got \[2\] \(one round is a batch"):
        verify_exact(p, q, tokens[0])
    with pytest.raises(ConfigError, match=r"\[B, K \+ 1, V\] = \[2, 3, V\]"):
        verify_exact(p[:, :2], q, tokens)
    with pytest.raises(ConfigError, match=r"one round is a batch of one"):
        verify_exact(p[0], q, tokens)
    with pytest.raises(ConfigError, match=r"q .*\[B, K, V\] = \[2, 2, V\]"):
        verify_exact(p, q[:, :1], tokens)
    with pytest.raises(ConfigError, match="same vocabulary"):
        verify_exact(p, torch.ones(2, 2, V + 1) / (V + 1), tokens)
    with pytest.raises(ConfigError, match="logits_to_probs"):
        verify_exact(torch.randn(2, 3, V), q, tokens)  # logits are not probabilities
    with pytest.raises(ConfigError, match="logits_to_probs"):
        verify_exact(p, torch.full((2, 2, V), float("nan")), tokens)
    with pytest.raises(ConfigError, match=r"\[0, 6\)"):
        verify_exact(p, q, torch.tensor([[1, 2], [1, 6]]))
    with pytest.raises(ConfigError, match="integer token ids"):
        verify_exact(p, q, tokens.float())
    with pytest.raises(ConfigError, match=r"num_drafts must be a LongTensor \[B\] = \[2\]"):
        verify_exact(p, q, tokens, torch.tensor([1]))
    with pytest.raises(ConfigError, match=r"num_drafts must be a LongTensor \[B\] = \[2\] of counts in \[0, K = 2\]"):
        verify_exact(p, q, tokens, torch.tensor([0, 3]))
    with pytest.raises(ConfigError, match="Draft token 3 at position 1 of row 1 has probability q = 0"):
        verify_exact(p, q, torch.tensor([[1, 2], [2, 3]]))  # Q(3) = 0
    assert verify_exact(p, q, torch.tensor([[1, 2], [2, 3]]), torch.tensor([2, 1])).accepted.shape == (2,)
    for lenience in (0, -1.0, float("inf"), True, "2"):
        with pytest.raises(ConfigError, match="lenience"):
            verify_relaxed(p, q, tokens, lenience=lenience)
    with pytest.raises(ConfigError, match="same shape"):
        acceptance_probability(P, Q[:3])


# ---------------------------------------------------------------- a batch of ragged rounds


def test_ragged_rows_never_accept_padding_and_take_their_bonus_from_their_own_row():
    """Row b drafted b of K = 3 tokens ``[1, 2, 3]``. p_i is a point mass on draft i, so every position would be
    accepted, padding included, and p_3 one on token 4: row b must accept exactly b drafts and draw its bonus from
    its own row p[b, b], token b + 1 (another row's bonus token would differ). A q that is zero on the padding is no
    error there: only drafted positions must have q > 0."""
    vocab = 8
    tokens = torch.tensor([[1, 2, 3]] * 4)
    p = torch.eye(vocab)[[1, 2, 3, 4]].expand(4, 4, vocab)
    num_drafts = torch.arange(4)
    uniform = torch.full((4, 3, vocab), 1 / vocab)
    zero_on_padding = uniform * (torch.arange(3) < num_drafts[:, None])[..., None]
    for q in (None, uniform, zero_on_padding):
        verdict = verify_exact(p, q, tokens, num_drafts, torch.Generator().manual_seed(0))
        assert verdict.tolist() == [(b, b + 1, "bonus") for b in range(4)]


# ---------------------------------------------------------------- tier 3: toy distributions, statistically


@pytest.mark.parametrize("case", list(CASES))
def test_first_token_follows_p_and_acceptance_is_alpha(case):
    p, q_true, q_reported, alpha = CASES[case]
    drafts, verdict = rounds(case)
    tokens = first_tokens(drafts, verdict)
    test = chi_square_gof(histogram(tokens, V), p)
    assert test.passes(SIGNIFICANCE), (case, test)
    assert detectable_tv(DRAWS, test.cells) <= 0.014  # any bias of TV 0.014 fails this test (power 0.9)
    # TV to p shrinks with the number of draws: at every size it stays inside 3x the sampling-noise envelope,
    # which falls like 1 / sqrt(n) (a biased sampler's TV levels off at its bias instead, see the relaxed test)
    sizes = (DRAWS // 16, DRAWS // 4, DRAWS)
    tvs = [total_variation(histogram(tokens[:n], V), p) for n in sizes]
    assert all(tv <= 3 * tv_noise_floor(p, n) for tv, n in zip(tvs, sizes)), tvs
    # acceptance: a binomial count with success probability alpha; |z| < 4 pins the rate to +-0.01
    assert 4 * math.sqrt(0.25 / DRAWS) <= 0.01
    assert abs(binomial_z(int(verdict.accepted.sum()), DRAWS, alpha)) < 4, (case, alpha)
    if q_reported is not None:
        assert float(acceptance_probability(p, q_reported)) == pytest.approx(alpha, abs=1e-6)
        assert torch.allclose(one_position_law(p, q_true, q_reported), p, atol=1e-6)  # the law is p exactly


def test_recovered_tokens_follow_the_residual():
    drafts, verdict = rounds("overlap")
    recovered = verdict.next_token[~verdict.bonus]  # ~16 000 rounds: rejected with probability 0.4
    test = chi_square_gof(histogram(recovered, V), residual_distribution(P, Q))
    assert test.passes(SIGNIFICANCE), test
    assert detectable_tv(recovered.numel(), test.cells) <= 0.02
    # a rejection means p(x) < q(x), where the residual max(p - q, 0) is 0: the rejected draft never comes back
    assert bool((recovered != drafts[~verdict.bonus, 0]).all())
    assert torch.equal(verdict.bonus, verdict.accepted == 1)


@pytest.mark.parametrize("k", [2, 4])
def test_accepted_count_follows_the_truncated_geometric_law(k):
    drafts, verdict = rounds("overlap", k=k, seed=k)
    counts = torch.bincount(verdict.accepted, minlength=k + 1)
    theory = accepted_count_distribution(0.6, k)
    test = chi_square_gof(counts, theory)
    assert test.passes(SIGNIFICANCE), (counts.tolist(), theory)
    assert detectable_tv(DRAWS, test.cells) <= 0.014
    assert torch.equal(verdict.bonus, verdict.accepted == k)
    assert chi_square_gof(histogram(first_tokens(drafts, verdict), V), P).passes(SIGNIFICANCE)


def test_a_whole_stream_over_position_dependent_distributions_is_the_targets():
    """Speculative decoding of 4 tokens whose target / draft distributions depend on the position, 50 000 streams
    advanced together: a stream at position t drafts k = min(gamma, 3 - t) tokens x_i ~ q_{t+i} (ragged rows in one
    batch, as streams drift apart) and verifies them against p_t .. p_{t+k}. Every position's marginal must be p_t
    and positions 0, 1 independent, as when the target samples alone. Over V = 5 cells a marginal off by TV 0.012
    fails, over the 25 pairs a joint off by TV 0.016 (power 0.9 at p < SIGNIFICANCE each)."""
    length, gamma, streams, vocab = 4, 2, 50_000, 5
    maker = torch.Generator().manual_seed(11)
    p = torch.softmax(2 * torch.randn(length + gamma, vocab, generator=maker), -1)  # p_t, position t
    q = torch.softmax(p.log() + torch.randn(length + gamma, vocab, generator=maker), -1)  # a noisy draft of it
    generator = torch.Generator().manual_seed(12)
    emitted = torch.zeros(streams, length + gamma, dtype=torch.long)  # each stream's tokens, by position
    position = torch.zeros(streams, dtype=torch.long)  # tokens emitted so far
    drafted_counts = set()
    while bool((position < length).any()):
        active = (position < length).nonzero()[:, 0]  # [B]
        start = position[active]
        num_drafts = (length - 1 - start).clamp(max=gamma)  # k_b: k drafts + 1 token fit in what remains
        drafted_counts.update(num_drafts.tolist())
        rows = start[:, None] + torch.arange(gamma + 1)  # [B, gamma + 1]: positions t .. t + gamma
        q_rows = q[rows[:, :gamma]]  # [B, gamma, V]
        drafts = torch.multinomial(q_rows.reshape(-1, vocab), 1, generator=generator).view(-1, gamma)
        verdict = verify_exact(p[rows], q_rows, drafts, num_drafts, generator)
        new = torch.cat([drafts, drafts.new_zeros(len(active), 1)], dim=1)  # [B, gamma + 1]
        new[torch.arange(len(active)), verdict.accepted] = verdict.next_token
        kept = torch.arange(gamma + 1) <= verdict.accepted[:, None]  # accepted drafts + the appended token
        emitted[active[:, None].expand_as(rows)[kept], rows[kept]] = new[kept]
        position[active] = start + verdict.accepted + 1
    assert drafted_counts == {0, 1, 2}  # rows with 2, 1 and no drafts were verified together
    for t in range(length):
        test = chi_square_gof(histogram(emitted[:, t], vocab), p[t])
        assert test.passes(SIGNIFICANCE) and detectable_tv(streams, test.cells) <= 0.012, (t, test)
    pairs = emitted[:, 0] * vocab + emitted[:, 1]
    test = chi_square_gof(histogram(pairs, vocab * vocab), torch.outer(p[0], p[1]).flatten())
    assert test.passes(SIGNIFICANCE) and detectable_tv(streams, test.cells) <= 0.016, test


# ---------------------------------------------------------------- the same tests fail when the guarantee breaks


def test_relaxed_acceptance_fails_the_test_and_lands_where_theory_says():
    """Lenience 2 moves the first token's law by TV 0.15 exactly; the test's 40 000 draws catch a third of that
    (power 0.9) even at p < 1e-9."""
    lenience = 2.0
    drafts, verdict = rounds("overlap", lenience=lenience)
    counts = histogram(first_tokens(drafts, verdict), V)
    shifted = one_position_law(P, Q, Q, lenience)
    assert total_variation(shifted, P) == pytest.approx(0.15, abs=1e-6)  # a shift of 0.15 in probability
    assert detectable_tv(DRAWS, V, alpha=1e-9) < 0.15 / 3
    assert chi_square_gof(counts, P).p_value < 1e-9  # the test catches it
    assert chi_square_gof(counts, shifted).passes(SIGNIFICANCE)  # and it is exactly the predicted shift
    assert total_variation(counts, P) > 10 * tv_noise_floor(P, DRAWS)  # TV stops shrinking at the bias
    accepted = int(verdict.accepted.sum())
    assert abs(binomial_z(accepted, DRAWS, float(torch.minimum(Q, lenience * P).sum()))) < 4  # 0.75 > alpha = 0.6


def test_a_draft_token_the_reported_q_rules_out_is_refused():
    """q_i(x_i) = 0: the drafter cannot have drawn x_i from q. The rule u q < p used to accept it whenever p > 0."""
    p = torch.stack([dist(0.5, 0.5, 0), dist(1, 1, 1)])
    q = dist(1, 0, 0).view(1, 3)  # e.g. one-hot argmax rows reported while sampling
    with pytest.raises(ConfigError, match=r"Draft token 1 at position 0 has probability q = 0"):
        one_round(p, q, torch.tensor([1]), torch.Generator().manual_seed(0))
    with pytest.raises(ConfigError, match="probability q = 0"):
        one_round(p, q, torch.tensor([1]), torch.Generator().manual_seed(0), rule=verify_relaxed, lenience=2.0)
    assert one_round(p, q, torch.tensor([0]), torch.Generator().manual_seed(0))[0] in (0, 1)


def test_a_drafter_reporting_the_wrong_q_fails_the_test():
    """Drafts drawn at temperature 0.5 but reported as the temperature-1 softmax: the first token's law moves by the
    TV `one_position_law` computes (0.10), five times what DRAWS rounds catch (power 0.9). The same rounds verified
    with the true q pass, with the reported q fail, and land on the predicted law."""
    logits = torch.tensor([2.0, 1.5, 1.0, 0.2, -0.5, 0.0])
    q_true = torch.softmax(logits / 0.5, -1)  # the drafter samples at temperature 0.5 ...
    q_reported = torch.softmax(logits, -1)  # ... but reports its untempered softmax
    p = torch.softmax(torch.tensor([1.0, 2.0, 0.5, 1.0, 0.0, 0.5]) / 0.5, -1)
    wrong_law = one_position_law(p, q_true, q_reported)
    effect = total_variation(wrong_law, p)
    assert effect == pytest.approx(0.104, abs=1e-3) and detectable_tv(DRAWS, V) < effect / 5
    generator = torch.Generator().manual_seed(5)
    drafts = torch.multinomial(q_true, DRAWS, replacement=True, generator=generator).view(-1, 1)
    for reported, law in ((q_true, p), (q_reported, wrong_law)):
        verdict = verify_exact(p.expand(DRAWS, 2, V), reported.expand(DRAWS, 1, V), drafts, generator=generator)
        counts = histogram(first_tokens(drafts, verdict), V)
        assert chi_square_gof(counts, p).passes(SIGNIFICANCE) == (reported is q_true)
        assert chi_square_gof(counts, law).passes(SIGNIFICANCE)
