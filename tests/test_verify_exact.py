"""verify_exact / verify_relaxed: hand-made cases with known answers, then toy distributions checked statistically.

Tier 1: small vocabularies where the decision is forced (p(x) = 0 always rejects, p(x) >= q(x) always accepts,
one-hot p and q reproduce verify_greedy) and a line-by-line reference implementation that must agree draw for draw.
Tier 3 on toy distributions (V = 5 or 6): over thousands of seeded rounds, the first emitted token follows p
(chi-square above SIGNIFICANCE, TV shrinking like the sampling noise), acceptance is alpha = sum min(p, q), the
accepted count follows the truncated geometric law, and a whole stream over position-dependent distributions has
the target's marginals and joint. The relaxed rule and a drafter reporting the wrong q fail the same test.
"""

from functools import lru_cache

import pytest
import torch

from specdec_lib.errors import ConfigError
from specdec_lib.stats import (
    accepted_count_distribution,
    binomial_z,
    chi_square_gof,
    histogram,
    total_variation,
    tv_noise_floor,
)
from specdec_lib.verify import (
    VerifyResult,
    acceptance_probability,
    residual_distribution,
    verify_exact,
    verify_greedy,
    verify_relaxed,
)

SIGNIFICANCE = 0.001  # a correct sampler fails a test this strict once in a thousand seeds; ours are fixed
DRAWS = 12_000  # rounds per toy case: ~1 s each with the per-call cost of verify_exact (~70 us)


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


def first_tokens(drafts: torch.Tensor, results: list[VerifyResult]) -> torch.Tensor:
    """The first emitted token of each round: the first draft if accepted, else the recovered token."""
    return torch.tensor([int(d[0]) if r.num_accepted else r.next_token for d, r in zip(drafts, results)])


@lru_cache(maxsize=None)
def rounds(case: str, k: int = 1, draws: int = DRAWS, lenience: float | None = None, seed: int = 0):
    """``draws`` seeded rounds of k i.i.d. positions of `CASES[case]`: (drafts [draws, k], results)."""
    p, q_true, q_reported, _ = CASES[case]
    generator = torch.Generator().manual_seed(seed)
    drafts = torch.multinomial(q_true, draws * k, replacement=True, generator=generator).view(draws, k)
    p_rows = p.expand(k + 1, V)  # the same target distribution at every position
    q_rows = None if q_reported is None else q_reported.expand(k, V)
    if lenience is None:
        results = [verify_exact(p_rows, q_rows, d, generator) for d in drafts]
    else:
        results = [verify_relaxed(p_rows, q_rows, d, generator, lenience=lenience) for d in drafts]
    return drafts, results


# ---------------------------------------------------------------- tier 1: forced decisions, exact answers


def test_a_token_the_target_rules_out_is_always_rejected_and_never_recovered():
    p = torch.stack([dist(0, 0.5, 0.5, 0), dist(1, 1, 1, 1)])
    q = dist(0.7, 0.1, 0.1, 0.1).view(1, 4)
    for seed in range(50):
        result = verify_exact(p, q, torch.tensor([0]), torch.Generator().manual_seed(seed))
        assert result.num_accepted == 0 and result.kind == "recovered"
        assert result.next_token in (1, 2)  # residual max(p - q, 0) = [0, .4, .4, 0]


def test_a_token_the_target_likes_at_least_as_much_is_always_accepted():
    p = torch.stack([dist(0.1, 0.6, 0.3, 0), dist(0, 0, 0, 1)])
    q = dist(0.3, 0.3, 0.4, 0).view(1, 4)  # p(1) = 0.6 >= q(1) = 0.3: min(1, p/q) = 1
    for seed in range(50):
        result = verify_exact(p, q, torch.tensor([1]), torch.Generator().manual_seed(seed))
        assert result == VerifyResult(1, 3, "bonus") and result.emitted == 2


def test_disjoint_supports_reject_everything_and_recover_from_p():
    p = torch.stack([dist(0.5, 0.5, 0, 0)] * 3)
    q = torch.stack([dist(0, 0, 0.5, 0.5)] * 2)
    for seed in range(30):
        result = verify_exact(p, q, torch.tensor([2, 3]), torch.Generator().manual_seed(seed))
        assert result.num_accepted == 0 and result.next_token in (0, 1)


def test_rejection_stops_at_the_first_rejected_position():
    p = torch.stack([dist(1, 1, 0, 0), dist(0, 0, 1, 1), dist(1, 0, 0, 0), dist(0, 1, 0, 0)])
    q = torch.stack([dist(1, 1, 0, 0), dist(1, 0, 0, 0), dist(1, 0, 0, 0)])  # position 1 drafts 0: p(0) = 0
    result = verify_exact(p, q, torch.tensor([1, 0, 0]), torch.Generator().manual_seed(0))
    assert result.num_accepted == 1 and result.kind == "recovered" and result.next_token in (2, 3)


def test_k_zero_is_a_plain_sample_from_p():
    p = dist(0, 0, 1, 0).view(1, 4)
    assert verify_exact(p, None, torch.empty(0, dtype=torch.long)) == VerifyResult(0, 2, "bonus")
    assert verify_exact(p, torch.empty(0, 4), torch.empty(0, dtype=torch.long)) == VerifyResult(0, 2, "bonus")


def test_one_hot_p_and_q_reproduce_verify_greedy():
    generator = torch.Generator().manual_seed(1)
    for trial in range(200):
        k = trial % 5
        logits = torch.randn(k + 1, 7, generator=generator)
        target_choice = logits.argmax(-1)
        other = torch.randint(0, 7, (k,), generator=generator)
        draft = torch.where(torch.rand(k, generator=generator) < 0.7, target_choice[:k], other)
        p, q = torch.eye(7)[target_choice], torch.eye(7)[draft]
        result = verify_exact(p, q, draft, generator)
        assert result == verify_greedy(logits, draft)
        assert result.kind == ("bonus" if result.num_accepted == k else "recovered")


def test_unknown_q_is_a_point_mass_on_each_draft():
    p = torch.stack([dist(0.2, 0.3, 0.5), dist(0.2, 0.3, 0.5)])
    for seed in range(100):  # q = None and an explicit one-hot q take the same decisions from the same draws
        tokens = torch.tensor([seed % 3])
        a = verify_exact(p, None, tokens, torch.Generator().manual_seed(seed))
        b = verify_exact(p, torch.eye(3)[tokens], tokens, torch.Generator().manual_seed(seed))
        assert a == b
        if a.kind == "recovered":
            assert a.next_token != int(tokens[0])  # the residual is p without the rejected draft


def test_all_zero_residual_falls_back_to_p_without_nans():
    p = torch.stack([dist(0, 0.5, 0.5), dist(1, 1, 1)])
    # p == q: every draft q can draw is accepted (the residual max(p - q, 0) = 0 is never needed)
    result = verify_exact(p, p[:1].clone(), torch.tensor([1]), torch.Generator().manual_seed(0))
    assert result.num_accepted == 1 and result.kind == "bonus"
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


def test_a_seed_fixes_the_round_and_matches_the_reference_draw_for_draw():
    maker = torch.Generator().manual_seed(7)
    for trial in range(300):
        k, vocab = trial % 5, 3 + trial % 6
        p = torch.softmax(3 * torch.randn(k + 1, vocab, generator=maker), -1)
        p = p * (torch.rand(k + 1, vocab, generator=maker) > 0.2)  # some zeros
        p[:, 0] += 1e-3  # keep every row non-empty
        p = p / p.sum(-1, keepdim=True)
        q = None if trial % 4 == 0 else torch.softmax(2 * torch.randn(k, vocab, generator=maker), -1)
        tokens = torch.randint(0, vocab, (k,), generator=maker)
        mine = verify_exact(p, q, tokens, torch.Generator().manual_seed(trial))
        assert mine == verify_exact(p, q, tokens, torch.Generator().manual_seed(trial))  # reproducible
        reference = reference_verify(p, q, tokens, torch.Generator().manual_seed(trial))
        assert (mine.num_accepted, mine.next_token, mine.kind) == reference
        assert verify_relaxed(p, q, tokens, torch.Generator().manual_seed(trial), lenience=1) == mine  # l = 1 is exact


def test_relaxed_accepts_at_least_as_much_from_the_same_draws():
    p, q = P.expand(4, V), Q.expand(3, V)
    for seed in range(100):
        tokens = torch.multinomial(Q, 3, replacement=True, generator=torch.Generator().manual_seed(1000 + seed))
        exact = verify_exact(p, q, tokens, torch.Generator().manual_seed(seed))
        relaxed = verify_relaxed(p, q, tokens, torch.Generator().manual_seed(seed), lenience=3.0)
        assert relaxed.num_accepted >= exact.num_accepted


def test_bad_inputs_are_explained():
    p, q, tokens = P.expand(3, V), Q.expand(2, V), torch.tensor([1, 2])
    with pytest.raises(ConfigError, match=r"k \+ 1 = 3 rows"):
        verify_exact(p[:2], q, tokens)
    with pytest.raises(ConfigError, match=r"\[k \+ 1, V\]"):
        verify_exact(P, q, tokens)
    with pytest.raises(ConfigError, match=r"q .*\[k = 2, V\]"):
        verify_exact(p, Q.expand(3, V), tokens)
    with pytest.raises(ConfigError, match="same vocabulary"):
        verify_exact(p, torch.ones(2, V + 1) / (V + 1), tokens)
    with pytest.raises(ConfigError, match="logits_to_probs"):
        verify_exact(torch.randn(3, V), q, tokens)  # logits are not probabilities
    with pytest.raises(ConfigError, match="logits_to_probs"):
        verify_exact(p, torch.full((2, V), float("nan")), tokens)
    with pytest.raises(ConfigError, match=r"\[0, 6\)"):
        verify_exact(p, q, torch.tensor([1, 6]))
    with pytest.raises(ConfigError, match="integer token ids"):
        verify_exact(p, q, torch.tensor([1.0, 2.0]))
    with pytest.raises(ConfigError, match=r"1-D"):
        verify_exact(p, q, torch.tensor([[1, 2]]))
    for lenience in (0, -1.0, float("inf"), True, "2"):
        with pytest.raises(ConfigError, match="lenience"):
            verify_relaxed(p, q, tokens, lenience=lenience)
    with pytest.raises(ConfigError, match="same shape"):
        acceptance_probability(P, Q[:3])


# ---------------------------------------------------------------- tier 3: toy distributions, statistically


@pytest.mark.parametrize("case", list(CASES))
def test_first_token_follows_p_and_acceptance_is_alpha(case):
    p, q_true, q_reported, alpha = CASES[case]
    drafts, results = rounds(case)
    tokens = first_tokens(drafts, results)
    counts = histogram(tokens, V)
    test = chi_square_gof(counts, p)
    assert test.passes(SIGNIFICANCE), (case, test, counts.tolist())
    # TV to p shrinks with the number of draws: at every size it stays inside 3x the sampling-noise envelope,
    # which falls like 1 / sqrt(n) (a biased sampler's TV levels off at its bias instead, see the relaxed test)
    sizes = (DRAWS // 16, DRAWS // 4, DRAWS)
    tvs = [total_variation(histogram(tokens[:n], V), p) for n in sizes]
    assert all(tv <= 3 * tv_noise_floor(p, n) for tv, n in zip(tvs, sizes)), tvs
    # acceptance: a binomial count with success probability alpha
    accepted = sum(r.num_accepted for r in results)
    assert abs(binomial_z(accepted, DRAWS, alpha)) < 4, (case, accepted / DRAWS, alpha)
    if q_reported is not None:
        assert float(acceptance_probability(p, q_reported)) == pytest.approx(alpha, abs=1e-6)


def test_recovered_tokens_follow_the_residual():
    drafts, results = rounds("overlap")
    recovered = [r.next_token for r in results if r.kind == "recovered"]
    assert len(recovered) > DRAWS / 3
    assert chi_square_gof(histogram(recovered, V), residual_distribution(P, Q)).passes(SIGNIFICANCE)
    # a rejection means p(x) < q(x), where the residual max(p - q, 0) is 0: the rejected draft never comes back
    assert all(r.next_token != int(d[0]) for d, r in zip(drafts, results) if r.kind == "recovered")
    assert all(r.kind == "bonus" for r in results if r.num_accepted == 1)


@pytest.mark.parametrize("k", [2, 4])
def test_accepted_count_follows_the_truncated_geometric_law(k):
    draws = 6000
    drafts, results = rounds("overlap", k=k, draws=draws, seed=k)
    counts = torch.bincount(torch.tensor([r.num_accepted for r in results]), minlength=k + 1)
    theory = accepted_count_distribution(0.6, k)
    assert chi_square_gof(counts, theory).passes(SIGNIFICANCE), (counts.tolist(), theory)
    assert all((r.kind == "bonus") == (r.num_accepted == k) for r in results)
    first = first_tokens(drafts, results)
    assert chi_square_gof(histogram(first, V), P).passes(SIGNIFICANCE)


def test_a_whole_stream_over_position_dependent_distributions_is_the_targets():
    """Simulate speculative decoding of 4 tokens whose target/draft distributions depend on the position:
    every position's marginal is p_t and positions 0, 1 are independent, as when the target samples alone."""
    length, gamma, draws, vocab = 4, 2, 5000, 5
    maker = torch.Generator().manual_seed(11)
    p = torch.softmax(2 * torch.randn(length + gamma, vocab, generator=maker), -1)  # p_t, position t
    q = torch.softmax(p.log() + torch.randn(length + gamma, vocab, generator=maker), -1)  # a noisy draft of it
    generator = torch.Generator().manual_seed(12)
    streams = []
    for _ in range(draws):
        stream: list[int] = []
        while len(stream) < length:
            t, k = len(stream), min(gamma, length - len(stream) - 1)
            drafts = torch.tensor([int(torch.multinomial(q[t + i], 1, generator=generator)) for i in range(k)],
                                  dtype=torch.long)  # x_i ~ q_{t+i}
            result = verify_exact(p[t : t + k + 1], q[t : t + k], drafts, generator)
            stream += drafts[: result.num_accepted].tolist() + [result.next_token]
        streams.append(stream[:length])
    streams_t = torch.tensor(streams)  # [draws, length]
    for t in range(length):
        assert chi_square_gof(histogram(streams_t[:, t], vocab), p[t]).passes(SIGNIFICANCE), t
    pairs = streams_t[:, 0] * vocab + streams_t[:, 1]
    assert chi_square_gof(histogram(pairs, vocab * vocab), torch.outer(p[0], p[1]).flatten()).passes(SIGNIFICANCE)


# ---------------------------------------------------------------- the same tests fail when the guarantee breaks


def relaxed_output_distribution(p: torch.Tensor, q: torch.Tensor, lenience: float) -> torch.Tensor:
    """What one relaxed position emits: accepted ``q(x) min(1, l p(x)/q(x)) = min(q(x), l p(x))``, plus the
    rejected mass ``1 - sum min(q, l p)`` spread over the residual ``norm(max(p - q, 0))``."""
    accepted = torch.minimum(q, lenience * p)
    return accepted + (1 - accepted.sum()) * residual_distribution(p, q)


def test_relaxed_acceptance_fails_the_test_and_lands_where_theory_says():
    lenience = 2.0
    drafts, results = rounds("overlap", lenience=lenience)
    counts = histogram(first_tokens(drafts, results), V)
    shifted = relaxed_output_distribution(P, Q, lenience)
    assert total_variation(shifted, P) == pytest.approx(0.15, abs=1e-6)  # a shift of 0.15 in probability
    assert chi_square_gof(counts, P).p_value < 1e-9  # the test catches it
    assert chi_square_gof(counts, shifted).passes(SIGNIFICANCE)  # and it is exactly the predicted shift
    assert total_variation(counts, P) > 10 * tv_noise_floor(P, DRAWS)  # TV stops shrinking at the bias
    accepted = sum(r.num_accepted for r in results)
    assert abs(binomial_z(accepted, DRAWS, float(torch.minimum(Q, lenience * P).sum()))) < 4  # 0.75 > alpha = 0.6


def test_a_draft_token_the_reported_q_rules_out_is_refused():
    """q_i(x_i) = 0: the drafter cannot have drawn x_i from q. The rule u q < p used to accept it whenever p > 0."""
    p = torch.stack([dist(0.5, 0.5, 0), dist(1, 1, 1)])
    q = dist(1, 0, 0).view(1, 3)  # e.g. one-hot argmax rows reported while sampling
    with pytest.raises(ConfigError, match=r"Draft token 1 at position 0 has probability q = 0"):
        verify_exact(p, q, torch.tensor([1]), torch.Generator().manual_seed(0))
    with pytest.raises(ConfigError, match="probability q = 0"):
        verify_relaxed(p, q, torch.tensor([1]), torch.Generator().manual_seed(0), lenience=2.0)
    assert verify_exact(p, q, torch.tensor([0]), torch.Generator().manual_seed(0)).num_accepted in (0, 1)


def test_a_drafter_reporting_the_wrong_q_fails_the_test():
    logits = torch.tensor([2.0, 1.5, 1.0, 0.2, -0.5, 0.0])
    q_true = torch.softmax(logits / 0.5, -1)  # the drafter samples at temperature 0.5 ...
    q_reported = torch.softmax(logits, -1)  # ... but reports its untempered softmax
    p = torch.softmax(torch.tensor([1.0, 2.0, 0.5, 1.0, 0.0, 0.5]) / 0.5, -1)
    generator = torch.Generator().manual_seed(5)
    drafts = torch.multinomial(q_true, DRAWS, replacement=True, generator=generator).view(-1, 1)
    for reported, should_pass in ((q_true, True), (q_reported, False)):
        results = [verify_exact(p.expand(2, V), reported.view(1, V), d, generator) for d in drafts[: DRAWS // 2]]
        test = chi_square_gof(histogram(first_tokens(drafts, results), V), p)
        assert test.passes(SIGNIFICANCE) == should_pass, (should_pass, test)
