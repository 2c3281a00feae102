"""What speculative decoding can gain, in closed form (Leviathan, Kalman & Matias, ICML 2023, section 3).

Model: each draft token is accepted independently with probability ``alpha`` (the *acceptance rate*), a round
drafts ``gamma`` tokens, and one draft forward costs ``c`` target forwards (``c = T_draft / T_target``).

- Tokens per round (= per target forward). A round emits ``n + 1`` tokens when the first ``n`` drafts are
  accepted (the +1 is the recovered or bonus token), so

      E[tokens/round] = sum_{i=0}^{gamma} alpha^i = (1 - alpha^(gamma+1)) / (1 - alpha)   (gamma + 1 at alpha = 1)

- Cost of a round: ``gamma`` draft forwards and one target forward, ``gamma * c + 1`` target-forward units,
  against one unit per token for the target alone. Hence the expected wall-clock speed-up

      speedup = (1 - alpha^(gamma+1)) / ((1 - alpha) * (gamma * c + 1))

Leviathan's model prices the verification forward at 1, the cost of a one-token forward. It is not: on a CPU a
forward over ``gamma + 1`` positions costs 1.15-1.5 times a one-token one (more arithmetic per weight read), on a
GPU close to 1 until the batch fills the chip. ``verify_cost`` (``v``, that ratio, measured) puts it back:

      speedup = (1 - alpha^(gamma+1)) / ((1 - alpha) * (gamma * c + v))

and `optimal_gamma` takes one measured ``v`` per gamma: the ratio of two cached forwards' times
(`specdec_lib.bench.model_measures.forward_cost` of ``gamma + 1`` tokens over that of one), measured side by side as
notebooks 01 and 06 do.
"""

from collections.abc import Mapping, Sequence

from .errors import ConfigError
from .validation import check_count, check_number


def _check_alpha(alpha: float) -> None:
    check_number("alpha (the acceptance rate)", alpha, minimum=0, maximum=1)


def _check_gamma(gamma: int, name: str = "gamma") -> None:
    check_count(f"{name} (the number of draft tokens per round)", gamma, minimum=0)


def _check_verify_cost(v: float) -> None:
    check_number("verify_cost (the cost of the (gamma + 1)-token verification forward relative to a one-token target "
                 "forward)", v, minimum=0, open_low=True,
                 hint="1 is Leviathan's assumption; measure it (1.2 is typical on a CPU).")


def _check_cost_ratio(c: float) -> None:
    check_number("c (the cost of one draft forward relative to one target forward)", c, minimum=0, open_low=True,
                 hint="Measure it as T_draft / T_target, e.g. 0.1 for a draft ten times cheaper.")


def expected_tokens_per_round(alpha: float, gamma: int) -> float:
    """``E[tokens/round] = (1 - alpha^(gamma+1)) / (1 - alpha)``, the geometric sum ``1 + alpha + ... + alpha^gamma``.

    Between 1 (``alpha = 0``: only the recovered token) and ``gamma + 1`` (``alpha = 1``: all drafts + the bonus).
    """
    _check_alpha(alpha)
    _check_gamma(gamma)
    if alpha == 1:
        return float(gamma + 1)  # the limit of the closed form
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def expected_speedup(alpha: float, gamma: int, c: float, verify_cost: float = 1.0) -> float:
    """``speedup = (1 - alpha^(gamma+1)) / ((1 - alpha) * (gamma * c + v))``: tokens per round over round cost.

    ``verify_cost`` ``v``: the verification forward over ``gamma + 1`` positions in one-token target forwards (1,
    the default, is Leviathan's model). Above 1 means speculative decoding is faster than the target alone;
    ``gamma = 0`` gives exactly 1 (with ``v = 1``).
    """
    _check_cost_ratio(c)
    _check_verify_cost(verify_cost)
    return expected_tokens_per_round(alpha, gamma) / (gamma * c + verify_cost)


def optimal_gamma(alpha: float, c: float, max_gamma: int = 16, verify_costs: Sequence[float] | None = None) -> int:
    """The ``gamma`` in ``0 .. max_gamma`` with the largest `expected_speedup` (the smallest one on ties).

    ``verify_costs``: ``v`` for each gamma ``0 .. max_gamma`` (``verify_costs[0]`` is 1: a one-token forward);
    None prices every verification at 1. 0 means drafting does not pay at this acceptance rate and cost ratio:
    decode with the target alone.
    """
    _check_alpha(alpha)
    _check_cost_ratio(c)
    _check_gamma(max_gamma, "max_gamma")
    if verify_costs is None:
        verify_costs = [1.0] * (max_gamma + 1)
    if len(verify_costs) != max_gamma + 1:
        raise ConfigError(
            f"verify_costs needs one cost per gamma 0 .. max_gamma = {max_gamma} ({max_gamma + 1} numbers), got "
            f"{len(verify_costs)}."
        )
    speedups = [expected_speedup(alpha, gamma, c, v) for gamma, v in zip(range(max_gamma + 1), verify_costs)]
    return speedups.index(max(speedups))


def alpha_from_tokens_per_round(tokens_per_round: float, gamma: int) -> float:
    """Invert `expected_tokens_per_round`: the alpha under which rounds of ``gamma`` drafts average
    ``tokens_per_round`` tokens (e.g. `tokens_per_target_forward` of a trace; its rounds that drafted nothing and
    shortened final rounds bias it slightly low). Solved by bisection, the function being increasing in alpha.
    """
    _check_gamma(gamma)
    if gamma == 0:
        raise ConfigError("gamma must be >= 1 to estimate alpha: rounds without drafts say nothing about acceptance.")
    check_number("tokens_per_round", tokens_per_round, minimum=1, maximum=gamma + 1,
                 hint="A round emits its accepted drafts plus one token: between 1 and gamma + 1.")
    if tokens_per_round == gamma + 1:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(60):  # an interval of 2^-60: below float precision
        middle = (low + high) / 2
        if sum(middle**i for i in range(gamma + 1)) < tokens_per_round:  # the sum form: no cancellation near 1
            low = middle
        else:
            high = middle
    return (low + high) / 2


def best_budget(tokens_per_round: Mapping[int, float], verify_costs: Mapping[int, float], draft_cost: float) -> int:
    """The token-tree budget with the most tokens per unit of time, priced on the machine's own costs.

    ``tokens_per_round``: budget b -> tokens a verification round emitted with trees of b nodes (counted, e.g.
    `tokens_per_target_forward` of a short pilot run: counts do not depend on the machine); ``verify_costs``: the
    measured cost curve, n -> v(n), a target forward over n new positions over a one-token one (at least n = 1 and
    the largest b + 1; other n are read off the straight line between the nearest measured ones); ``draft_cost``:
    a round's drafting in one-token target forwards, the same for every budget of one depth and top-k (the budget
    only widens the target's verification). A round of budget b costs ``draft_cost + v(b + 1)``, so the choice is

        argmax_b  tokens_per_round[b] / (draft_cost + v(b + 1))

    (the smallest such b on ties). Where v(n) stays flat, wide trees are nearly free and the largest budget wins;
    where it climbs, the extra nodes must buy more accepted tokens than they cost.
    """
    if not tokens_per_round:
        raise ConfigError("tokens_per_round is empty: give the tokens per round of at least one budget.")
    measured = sorted(verify_costs.items())
    if not measured:
        raise ConfigError("verify_costs is empty: give v(n) for n = 1 and for budget + 1 of every budget.")
    for n, v in measured:
        check_count("a verify_costs width n", n, minimum=1, hint="n counts the positions a forward reads.")
        _check_verify_cost(v)
    check_number("draft_cost", draft_cost, minimum=0, hint="Drafting costs a non-negative share of a forward.")

    def v_at(n: int) -> float:
        if n in verify_costs:
            return verify_costs[n]
        for (low, v_low), (high, v_high) in zip(measured, measured[1:]):
            if low < n < high:
                return v_low + (v_high - v_low) * (n - low) / (high - low)
        raise ConfigError(f"verify_costs covers n = {measured[0][0]} .. {measured[-1][0]}; budget {n - 1} needs "
                          f"v({n}): measure a forward of {n} positions too.")

    rates = {}
    for budget, tokens in sorted(tokens_per_round.items()):
        check_count("a budget", budget, minimum=1, hint="A tree has at least one node.")
        check_number(f"tokens_per_round[{budget}]", tokens, minimum=1, maximum=budget + 1,
                     hint="A round emits its accepted nodes (at most one per depth) plus one token.")
        rates[budget] = tokens / (draft_cost + v_at(budget + 1))
    return max(rates, key=lambda budget: (rates[budget], -budget))
