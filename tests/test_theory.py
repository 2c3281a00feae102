"""theory.py: the Leviathan et al. formulas against hand-computed values, limits and input checks."""

import pytest

from specdec_lib.core.errors import ConfigError
from specdec_lib.core.theory import (
    alpha_from_tokens_per_round,
    best_budget,
    expected_speedup,
    expected_tokens_per_round,
    optimal_gamma,
)


@pytest.mark.parametrize("gamma", [0, 1, 4, 8])
def test_alpha_zero_gives_one_token_per_round(gamma):
    assert expected_tokens_per_round(0.0, gamma) == 1.0


@pytest.mark.parametrize("gamma", [0, 1, 4, 8])
def test_alpha_one_gives_gamma_plus_one(gamma):
    assert expected_tokens_per_round(1.0, gamma) == gamma + 1
    assert expected_tokens_per_round(1 - 1e-9, gamma) == pytest.approx(gamma + 1, rel=1e-6)  # continuous limit


def test_tokens_per_round_is_the_geometric_sum():
    # 1 + 0.5 + 0.25 + 0.125 = 1.875
    assert expected_tokens_per_round(0.5, 3) == pytest.approx(1.875)
    assert expected_tokens_per_round(0.8, 4) == pytest.approx(sum(0.8**i for i in range(5)))


def test_speedup_against_hand_computed_values():
    # alpha 0.8, gamma 4, c 0.1: (1 - 0.8^5) / (0.2 * 1.4) = 0.67232 / 0.28 = 2.4011...
    assert expected_speedup(0.8, 4, 0.1) == pytest.approx(0.67232 / 0.28)
    # alpha 0.5, gamma 2, c 0.5: 1.75 / 2 = 0.875 (drafting costs more than it saves)
    assert expected_speedup(0.5, 2, 0.5) == pytest.approx(0.875)
    assert expected_speedup(1.0, 3, 0.25) == pytest.approx(4 / 1.75)
    assert expected_speedup(0.7, 0, 0.3) == 1.0  # no drafts: the target alone


def test_optimal_gamma_examples():
    assert optimal_gamma(0.0, 0.1) == 0  # nothing is ever accepted: do not draft
    assert optimal_gamma(1.0, 0.1, max_gamma=16) == 16  # everything is accepted: draft as much as allowed
    best = optimal_gamma(0.8, 0.1)
    assert all(expected_speedup(0.8, best, 0.1) >= expected_speedup(0.8, g, 0.1) for g in range(17))


def test_optimal_gamma_grows_with_alpha_and_shrinks_with_cost():
    alphas = [i / 20 for i in range(20)]
    by_alpha = [optimal_gamma(a, 0.05) for a in alphas]
    assert by_alpha == sorted(by_alpha) and by_alpha[-1] > by_alpha[0]
    by_cost = [optimal_gamma(0.8, c) for c in (0.01, 0.05, 0.1, 0.3, 1.0)]
    assert by_cost == sorted(by_cost, reverse=True)


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.6, 0.9, 1.0])
def test_alpha_from_tokens_per_round_inverts_the_formula(alpha):
    assert alpha_from_tokens_per_round(expected_tokens_per_round(alpha, 5), 5) == pytest.approx(alpha, abs=1e-9)


@pytest.mark.parametrize("alpha", [-0.1, 1.5, "0.5", None, True])
def test_bad_alpha_is_explained(alpha):
    with pytest.raises(ConfigError, match="alpha"):
        expected_tokens_per_round(alpha, 3)


@pytest.mark.parametrize("gamma", [-1, 2.5, "3", None, True])
def test_bad_gamma_is_explained(gamma):
    with pytest.raises(ConfigError, match="gamma"):
        expected_tokens_per_round(0.5, gamma)


@pytest.mark.parametrize("c", [0, -0.1, float("inf"), "0.1", True])
def test_bad_cost_ratio_is_explained(c):
    with pytest.raises(ConfigError, match="c \\(the cost"):
        expected_speedup(0.5, 3, c)
    with pytest.raises(ConfigError, match="c \\(the cost"):
        optimal_gamma(0.5, c)


def test_bad_inversion_inputs_are_explained():
    with pytest.raises(ConfigError, match="between 1 and gamma"):
        alpha_from_tokens_per_round(7.0, 5)
    with pytest.raises(ConfigError, match="gamma must be >= 1"):
        alpha_from_tokens_per_round(1.0, 0)
    with pytest.raises(ConfigError, match="max_gamma"):
        optimal_gamma(0.5, 0.1, max_gamma=-1)


def test_the_verify_cost_term_prices_the_verification_forward():
    # v = 1 is Leviathan's model; a dearer verification lowers the speed-up by exactly the round cost's ratio
    assert expected_speedup(0.8, 4, 0.1, verify_cost=1.0) == expected_speedup(0.8, 4, 0.1)
    assert expected_speedup(0.8, 4, 0.1, verify_cost=1.3) == pytest.approx(0.67232 / 0.2 / 1.7)
    # a verification that grows with the block moves the best gamma down
    costs = [1.0] + [1.0 + 0.15 * g for g in range(1, 17)]
    assert optimal_gamma(0.8, 0.05, verify_costs=costs) < optimal_gamma(0.8, 0.05)
    with pytest.raises(ConfigError, match="verify_cost"):
        expected_speedup(0.8, 4, 0.1, verify_cost=0)
    with pytest.raises(ConfigError, match="one cost per gamma"):
        optimal_gamma(0.8, 0.1, max_gamma=4, verify_costs=[1.0, 1.1])


# ---------------------------------------------------------------- the token tree's budget from v(n)


def test_best_budget_takes_the_widest_tree_where_verification_is_flat_and_a_narrow_one_where_it_climbs():
    tokens = {4: 3.0, 8: 3.4, 16: 3.7}  # more nodes, a few more accepted tokens
    assert best_budget(tokens, {1: 1.0, 17: 1.0}, draft_cost=0.5) == 16
    assert best_budget(tokens, {1: 1.0, 5: 1.1, 9: 1.5, 17: 2.5}, draft_cost=0.5) == 4
    # by hand: 3.0 / (0.5 + 1.1) = 1.875, 3.4 / (0.5 + 1.3) = 1.889 (v(9) on the line from v(5) to v(17)),
    # 3.7 / (0.5 + 1.5) = 1.85
    assert best_budget(tokens, {1: 1.0, 5: 1.1, 17: 1.5}, draft_cost=0.5) == 8


@pytest.mark.parametrize("tokens, costs, message", [
    ({}, {1: 1.0}, "tokens_per_round is empty"),
    ({8: 3.0}, {1: 1.0, 5: 1.2}, "measure a forward of 9 positions too"),
    ({4: 6.0}, {1: 1.0, 5: 1.2}, "tokens_per_round"),
    ({4: 3.0}, {0: 1.0, 5: 1.2}, "verify_costs width"),
])
def test_best_budget_explains_what_it_lacks(tokens, costs, message):
    with pytest.raises(ConfigError, match=message):
        best_budget(tokens, costs, draft_cost=0.5)
