"""Statistics for checking that a sampler draws from the distribution it should: the one place for them.

Exact speculative sampling promises that its tokens are distributed like the target's. A promise about a
distribution is checked with many seeded draws and a test that says how surprising the observed counts would be
if the promise held:

- `chi_square_gof`: one sample against a *known* distribution (Pearson's goodness of fit);
- `chi_square_homogeneity`: two samples against each other when the distribution is unknown (a 2 x C table);
- `total_variation`: how far apart two distributions are, ``TV(p, q) = 1/2 sum_x |p(x) - q(x)|`` (the largest
  difference in probability they give any event); `tv_noise_floor` says how large it is from sampling noise alone;
- `binomial_z`: how many standard deviations a measured rate is from its theoretical value;
- `accepted_count_distribution`: what the number of accepted drafts per round should look like;
- `cluster_mean_interval`: a mean with its 95-percent interval when the values come in dependent clusters
  (Student's t over the cluster means, `t_quantile`).

Pure Python and torch (float64), no SciPy: the notebooks use these too, and SciPy is only a test dependency
(the tests check these p-values against ``scipy.stats``).
"""

import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

import torch

from .errors import ConfigError
from .validation import check_count


def _as_float64(values: Sequence[float] | torch.Tensor, name: str) -> torch.Tensor:
    tensor = torch.as_tensor(values, dtype=torch.float64).flatten().cpu()
    if tensor.numel() == 0:
        raise ConfigError(f"{name} is empty.")
    if bool(torch.isnan(tensor).any()) or bool((tensor < 0).any()):
        raise ConfigError(f"{name} must be non-negative numbers (counts or probabilities), got {tensor.tolist()}.")
    return tensor


@dataclass(frozen=True)
class ChiSquareResult:
    """Pearson's chi-square test: the statistic, its degrees of freedom, the p-value and the cells used.

    ``p_value`` is the probability, if the null hypothesis holds (same distribution), of a statistic at least this
    large: a tiny value (say below 0.001) means the counts are very unlikely under it. ``cells`` counts the
    categories after pooling the rare ones (see `chi_square_gof`). An outcome observed where the hypothesis gives
    probability exactly 0 makes the statistic infinite and the p-value 0.
    """

    statistic: float
    dof: int
    p_value: float
    cells: int

    def passes(self, significance: float = 0.001) -> bool:
        """True when the test does *not* reject the null hypothesis at ``significance`` (p-value above it)."""
        return self.p_value > significance


def chi_square_sf(statistic: float, dof: int) -> float:
    """``P(X >= statistic)`` for X chi-square distributed with ``dof`` degrees of freedom: ``Q(dof/2, statistic/2)``,
    the regularised upper incomplete gamma function."""
    if dof <= 0:
        return 1.0
    if math.isinf(statistic):
        return 0.0
    a = torch.tensor(dof / 2, dtype=torch.float64)
    x = torch.tensor(max(statistic, 0.0) / 2, dtype=torch.float64)
    return float(torch.special.gammaincc(a, x))


def _pool_rare(expected: torch.Tensor, min_expected: float) -> list[list[int]]:
    """Group cell indices so that every group's expected count reaches ``min_expected`` where possible.

    Cells below it are pooled into one "rare" group; if that group is still below it, it joins the smallest
    remaining cell. (Pearson's approximation needs expected counts of about 5 or more per cell.)
    """
    order = sorted(range(expected.numel()), key=lambda i: float(expected[i]))
    rare = [i for i in order if float(expected[i]) < min_expected]
    groups = [[i] for i in order if float(expected[i]) >= min_expected]
    if rare:
        if float(expected[rare].sum()) >= min_expected or not groups:
            groups.append(rare)
        else:
            groups[0] = groups[0] + rare  # groups[0] is the smallest large cell
    return groups


def chi_square_gof(
    counts: Sequence[float] | torch.Tensor, probs: Sequence[float] | torch.Tensor, *, min_expected: float = 5.0
) -> ChiSquareResult:
    """Pearson's goodness-of-fit test of ``counts: [C]`` (observed, per category) against ``probs: [C]`` (known).

    ``statistic = sum_c (O_c - E_c)^2 / E_c`` with ``E_c = n probs_c``, ``dof = cells - 1``. Categories with
    ``probs_c = 0`` are dropped if nothing was observed there and make the test fail outright (p-value 0) if
    something was; categories with ``E_c < min_expected`` are pooled (see `_pool_rare`). ``probs`` is normalised
    (it may be a slightly-off float32 softmax).
    """
    observed = _as_float64(counts, "counts")
    probs_t = _as_float64(probs, "probs")
    if observed.shape != probs_t.shape:
        raise ConfigError(
            f"counts and probs need one entry per category, got {observed.numel()} and {probs_t.numel()}."
        )
    if float(probs_t.sum()) <= 0:
        raise ConfigError("probs must have a positive sum.")
    n = float(observed.sum())
    if n == 0:
        raise ConfigError("counts is all zero: nothing was observed.")
    impossible = probs_t == 0
    if bool((observed[impossible] > 0).any()):
        return ChiSquareResult(math.inf, int((~impossible).sum()) - 1, 0.0, int((~impossible).sum()))
    observed, expected = observed[~impossible], n * probs_t[~impossible] / probs_t.sum()  # E_c = n p_c
    groups = _pool_rare(expected, min_expected)
    o = torch.stack([observed[g].sum() for g in groups])
    e = torch.stack([expected[g].sum() for g in groups])
    statistic = float(((o - e) ** 2 / e).sum())  # sum_c (O_c - E_c)^2 / E_c
    dof = len(groups) - 1
    return ChiSquareResult(statistic, dof, chi_square_sf(statistic, dof), len(groups))


def chi_square_homogeneity(
    counts_a: Sequence[float] | torch.Tensor, counts_b: Sequence[float] | torch.Tensor, *, min_expected: float = 5.0
) -> ChiSquareResult:
    """Pearson's test that two samples (counts per category, ``[C]`` each) come from the same distribution.

    The 2 x C contingency table test: with ``n_a, n_b`` the sample sizes, ``N = n_a + n_b`` and ``T_c`` the
    category totals, ``E_{a,c} = n_a T_c / N`` (same for b) and ``statistic = sum_{s, c} (O_{s,c} - E_{s,c})^2 /
    E_{s,c}`` with ``dof = cells - 1``. Empty categories are dropped; categories whose smaller expected count is
    below ``min_expected`` are pooled (see `_pool_rare`).
    """
    a = _as_float64(counts_a, "counts_a")
    b = _as_float64(counts_b, "counts_b")
    if a.shape != b.shape:
        raise ConfigError(f"Both samples need one count per category, got {a.numel()} and {b.numel()}.")
    n_a, n_b = float(a.sum()), float(b.sum())
    if n_a == 0 or n_b == 0:
        raise ConfigError("Both samples must be non-empty.")
    totals = a + b
    seen = totals > 0
    a, b, totals = a[seen], b[seen], totals[seen]
    groups = _pool_rare(min(n_a, n_b) * totals / (n_a + n_b), min_expected)
    observed = torch.stack([torch.stack([a[g].sum() for g in groups]), torch.stack([b[g].sum() for g in groups])])
    column = observed.sum(dim=0)  # T_c
    expected = torch.stack([n_a * column, n_b * column]) / (n_a + n_b)  # E_{s,c} = n_s T_c / N
    statistic = float(((observed - expected) ** 2 / expected).sum())
    dof = len(groups) - 1
    return ChiSquareResult(statistic, dof, chi_square_sf(statistic, dof), len(groups))


def total_variation(p: Sequence[float] | torch.Tensor, q: Sequence[float] | torch.Tensor) -> float:
    """``TV(p, q) = 1/2 sum_x |p(x) - q(x)|`` between two distributions over the same categories (0: equal,
    1: disjoint supports). Counts are accepted and normalised, so an empirical histogram can be passed as is."""
    p_t, q_t = _as_float64(p, "p"), _as_float64(q, "q")
    if p_t.shape != q_t.shape:
        raise ConfigError(f"p and q need one entry per category, got {p_t.numel()} and {q_t.numel()}.")
    return 0.5 * float((p_t / p_t.sum() - q_t / q_t.sum()).abs().sum())


def tv_noise_floor(probs: Sequence[float] | torch.Tensor, n: int) -> float:
    """An upper bound on the expected TV between ``probs`` and the histogram of ``n`` draws from it.

    Each empirical frequency has standard deviation ``sqrt(p (1 - p) / n)``, and ``E|X - EX| <= sd(X)``, so
    ``E[TV] <= 1/2 sum_x sqrt(p(x) (1 - p(x)) / n)``: it shrinks like ``1 / sqrt(n)``. A correct sampler's TV stays
    around or below it; a biased one's levels off at its bias, however many draws are taken.
    """
    p_t = _as_float64(probs, "probs")
    p_t = p_t / p_t.sum()
    check_count("n (the number of draws)", n, minimum=1)
    return 0.5 * float((p_t * (1 - p_t) / n).sqrt().sum())


def histogram(samples: Sequence[int] | torch.Tensor, num_categories: int) -> torch.Tensor:
    """Counts ``LongTensor[num_categories]`` of integer ``samples`` in ``0 .. num_categories - 1``."""
    values = torch.as_tensor(samples, dtype=torch.long).flatten().cpu()
    if values.numel() and (int(values.min()) < 0 or int(values.max()) >= num_categories):
        raise ConfigError(
            f"samples must lie in [0, {num_categories}), got values from {int(values.min())} to {int(values.max())}."
        )
    return torch.bincount(values, minlength=num_categories)


def bucket_counts(outcomes: Iterable[Hashable], categories: Sequence[Hashable]) -> list[int]:
    """Counts of ``outcomes`` per category of ``categories``, plus a final "other" bucket for everything else.

    For outcomes with too many possible values to test cell by cell (a pair of tokens has V^2), choose the few
    likely ones as categories and let "other" hold the rest: the test stays exact, with ``len(categories)`` dof.
    """
    index = {category: i for i, category in enumerate(categories)}
    if len(index) != len(categories):
        raise ConfigError("categories must be distinct.")
    counts = [0] * (len(categories) + 1)
    for outcome in outcomes:
        counts[index.get(outcome, len(categories))] += 1
    return counts


def binomial_z(successes: int, trials: int, prob: float) -> float:
    """``(successes - trials * prob) / sqrt(trials * prob * (1 - prob))``: how many standard deviations a measured
    count is from what a probability ``prob`` predicts (normal approximation; |z| < 4 happens by chance with
    probability 0.99994). 0 when ``prob`` is 0 or 1 and the count agrees; infinite when it cannot happen."""
    if trials < 1:
        raise ConfigError(f"trials must be >= 1, got {trials!r}.")
    if not 0 <= prob <= 1:
        raise ConfigError(f"prob must be in [0, 1], got {prob!r}.")
    variance = trials * prob * (1 - prob)
    difference = successes - trials * prob
    if variance == 0:
        return 0.0 if difference == 0 else math.copysign(math.inf, difference)
    return difference / math.sqrt(variance)


def accepted_count_distribution(alpha: float | Sequence[float], k: int) -> list[float]:
    """``P(N = n)`` for n = 0 .. k, N the number of accepted drafts in a round of k, when position i is accepted
    with probability ``alpha_i`` independently given the earlier ones (``alpha``: one number for all positions or k).

    ``P(N = n) = alpha_0 ... alpha_{n-1} (1 - alpha_n)`` for n < k and ``alpha_0 ... alpha_{k-1}`` for n = k: a
    geometric distribution truncated at k. With one alpha, ``E[N + 1]`` is `theory.expected_tokens_per_round`.
    """
    check_count("k", k, minimum=0)
    alphas = [float(alpha)] * k if isinstance(alpha, (int, float)) else [float(a) for a in alpha]
    if len(alphas) != k or not all(0 <= a <= 1 for a in alphas):
        raise ConfigError(f"alpha must be one probability or k = {k} of them, got {alpha!r}.")
    probs, reach = [], 1.0  # reach = P(the first n drafts were all accepted)
    for a in alphas:
        probs.append(reach * (1 - a))  # accepted n, rejected draft n
        reach *= a
    probs.append(reach)  # all k accepted
    return probs


#: Student's t, 97.5th percentile, by degrees of freedom (a two-sided 95-percent interval from few clusters);
#: between two listed values the smaller df's is used (a slightly wider interval), beyond the last the normal's
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        12: 2.179, 15: 2.131, 20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}
Z975 = 1.959963984540054


def t_quantile(df: int) -> float:
    """The 97.5th percentile of Student's t with ``df`` degrees of freedom, from `T975` (conservative between)."""
    if df > max(T975):
        return Z975
    return T975[max(d for d in T975 if d <= df)]


def cluster_mean_interval(values: torch.Tensor, clusters: torch.Tensor) -> dict[str, float]:
    """Mean of ``values: [N]`` with a 95-percent interval whose unit is the cluster (``clusters: [N]`` ids): Student's
    t interval over the per-cluster means. ``{"mean", "low", "high", "clusters"}``."""
    ids = torch.unique(clusters)
    means = torch.stack([values[clusters == i].double().mean() for i in ids])
    mean = float(means.mean())
    half = t_quantile(len(ids) - 1) * float(means.std()) / math.sqrt(len(ids)) if len(ids) > 1 else math.inf
    return {"mean": mean, "low": mean - half, "high": mean + half, "clusters": len(ids)}
