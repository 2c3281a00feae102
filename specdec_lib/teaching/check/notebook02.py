"""Checks of notebook 02's exercises (exact sampling verification): the wrong q, no distribution, k > 1.

Every check computes exactly (no sampling) on hidden toy distributions:

- ``output_with_reported_q(output_with_reported_q)``: the emitted token's distribution and alpha when drafts
  drawn from ``q_true`` are verified with another ``q_reported``; ``refused_q("a")``: what the rule would do with
  the argmax one-hot that `verify_exact` refuses, if it were let through;
- ``point_mass_output(point_mass_output)``: for one given draft x verified as a point mass (``q=None``), the
  emitted token's mass split into what the acceptance emits and what the recovery emits (their sum, and what it
  means for any drafter, is for the learner to derive);
- ``accepted_count_law(accepted_count_law)`` against `stats.accepted_count_distribution`, and
  ``metrics_from_counts(metrics_from_counts)``: alpha, acceptance rate and mean acceptance length from a histogram
  of accepted counts, against the trace's `per_token_acceptance`, `acceptance_rate`, `mean_acceptance_length`.
"""

from __future__ import annotations

from typing import Any

import torch

from ...core.stats import accepted_count_distribution
from ...core.trace import RoundRecord, Trace, acceptance_rate, mean_acceptance_length, per_token_acceptance
from ...core.verify import residual_distribution
from .core import Case, CheckReport, check_choice, close, describe, mismatch, run_cases, tensor_problem

# --- exercise 1: the wrong q -------------------------------------------------------------------------------------


def _reported_output(p: torch.Tensor, q_true: torch.Tensor, q_reported: torch.Tensor) -> tuple[torch.Tensor, float]:
    """The exact output ``[V]`` and alpha of verifying ``x ~ q_true`` with ``q_reported`` (> 0 everywhere).

    Token y is proposed ``q_true(y)`` of the time and accepted with probability ``min(1, p(y) / q_reported(y))``;
    a rejection (probability ``1 - alpha``) draws from the residual of the *reported* q."""
    kept = q_true * torch.clamp(p / q_reported, max=1.0)  # [V]
    alpha = float(kept.sum())
    return kept + (1 - alpha) * residual_distribution(p, q_reported), alpha


def _output_pair(got: Any, vocab: int) -> tuple[torch.Tensor, float] | str:
    """``(out [V], alpha)`` read from the learner's answer, or the message saying why it is not one."""
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return f"Expected a pair (out, alpha): out a tensor [V] and alpha a number, got {describe(got)}."
    out, alpha = got
    if not isinstance(out, torch.Tensor) or out.shape != (vocab,):
        return f"Expected out to be a tensor of shape [{vocab}], got {describe(out)}."
    try:
        return out.detach().cpu().double(), float(alpha)
    except (TypeError, ValueError, RuntimeError):
        return f"Expected alpha to be a number, got {describe(alpha)}."


def _reported_cases() -> list[Case]:
    p = torch.tensor([0.40, 0.35, 0.15, 0.10])
    z = torch.tensor([1.0, 2.2, 0.3, 1.6])
    tempered, plain = torch.softmax(z / 0.5, dim=-1), torch.softmax(z, dim=-1)
    two_p, two_q = torch.tensor([0.7, 0.3]), torch.tensor([0.4, 0.6])
    cases = [("the true q reported", p, plain, plain),
             ("sampled at T = 0.5, the untempered softmax reported", p, tempered, plain),
             ("sampled at T = 1, a sharper q (T = 0.5) reported", p, plain, tempered),
             ("two tokens, q reported flatter than the truth", two_p, two_q, torch.tensor([0.5, 0.5])),
             ("the reported q equals p (an all-zero residual)", p, plain, p.clone())]
    return [Case(name, (pp, qt, qr), _reported_output(pp, qt, qr)) for name, pp, qt, qr in cases]


def _judge_reported(case: Case, got: Any) -> str | None:
    p, q_true, q_reported = case.args
    expected_out, expected_alpha = case.expected
    read = _output_pair(got, len(p))
    if isinstance(read, str):
        return read
    out, alpha = read
    shown = (expected_out, expected_alpha)
    if bool(torch.isnan(out).any()) or alpha != alpha:
        return mismatch(shown, (out, alpha), "NaN: where p = q_reported the residual max(p − q, 0) is all zero and "
                                             "normalising it divides 0 by 0. A rejection has probability 0 there; "
                                             "residual_distribution returns p in that case.")
    out_ok = tensor_problem(out, expected_out.double(), atol=1e-6) is None
    alpha_ok = close(alpha, expected_alpha, rel_tol=1e-6, abs_tol=1e-9)
    if out_ok and alpha_ok:
        return None
    as_if_reported = _reported_output(p, q_reported, q_reported)  # drafts drawn from q_reported: out = p
    if not out_ok and torch.allclose(out, p.double(), atol=1e-6):
        return mismatch(shown, (out, alpha), "p is the output only when q_reported is what the drafts were drawn "
                                             "from. Here they come from q_true: token y is proposed q_true(y) of the "
                                             "time and accepted with probability min(1, p(y) / q_reported(y)).")
    if out_ok and close(alpha, as_if_reported[1], rel_tol=1e-6):
        return mismatch(shown, (out, alpha), "alpha is the probability that a draft drawn from q_true is accepted: "
                                             "sum_x q_true(x) · min(1, p(x) / q_reported(x)), not sum min(p, "
                                             "q_reported).")
    kept = q_true * torch.clamp(p / q_reported, max=1.0)  # [V]: the accepted mass
    true_residual = kept + (1 - expected_alpha) * residual_distribution(p, q_true)  # recovered from the wrong q
    if torch.allclose(out, true_residual.double(), atol=1e-6):
        return mismatch(shown, (out, alpha), "the recovered token is drawn from norm(max(p − q_reported, 0)): the "
                                             "verifier knows only the q the drafter reported.")
    from_p = kept + (1 - expected_alpha) * p  # recovered from p itself, not from the residual
    if torch.allclose(out, from_p.double(), atol=1e-6):
        return mismatch(shown, (out, alpha), "you drew the recovered token from p. After a rejection it comes from "
                                             "the residual norm(max(0, p − q_reported)): acceptance already gives each token "
                                             "min(p, q_reported) of its mass, so drawing the rest from p again "
                                             "over-weights the tokens the draft proposes at least as often as p "
                                             "(q ≥ p): the output leans towards the draft.")
    if abs(float(out.sum()) - 1) > 1e-4:
        return mismatch(shown, (out, alpha), "out must sum to 1: the accepted mass q_true · min(1, p / q_reported) "
                                             "plus (1 − alpha) × the residual norm(max(p − q_reported, 0)).")
    return mismatch(shown, (out, alpha), "out(y) = q_true(y) · min(1, p(y) / q_reported(y)) + (1 − alpha) · "
                                         "norm(max(p − q_reported, 0))(y), alpha the sum of the first term.")


def output_with_reported_q(learner: Any) -> CheckReport:
    """Check ``output_with_reported_q(p, q_true, q_reported) -> (out [V], alpha)`` on hidden toy distributions."""
    return run_cases("output_with_reported_q", learner, _reported_cases(), _judge_reported)


REFUSED_Q = {
    "a": "The test is u · q(x) < p(x) (section 4's my_verify_exact). For every draft but the argmax the reported q(x) "
         "is 0, so it reads u · 0 < p(x): kept whenever p(x) > 0, however often the drafter proposes x. The argmax a "
         "has q(a) = 1 and is kept with probability p(a) only, although the drafter proposes it q_true(a) < 1 of the "
         "time. So a comes out q_true(a) · p(a) of the time, less than p(a), and the other tokens make up the "
         "difference: the output is not p. A q that gives the drawn token probability 0 cannot be the distribution it "
         "was drawn from, which is what verify_exact's ConfigError says.",
    "b": "Nothing is divided: verify_exact tests u · q(x) < p(x), a product. And in the form min(1, p(x) / q(x)), "
         "p(x) / 0 is infinite and min(1, ∞) = 1: the draft would be accepted, silently, not crash.",
    "c": "The proof of section 3 needs q to be the law the drafts came from: token y is drafted q(y) of the time and "
         "kept with probability min(1, p(y) / q(y)), so acceptance emits min(p(y), q(y)) of it. With the one-hot, a "
         "draft x other than the argmax is drafted q_true(x) of the time and always kept, and the argmax a, drafted "
         "q_true(a) of the time, is kept only p(a) of it: the recovery cannot repair both, and the output is not p.",
    "d": "A reported q(x) = 0 makes the test u · 0 < p(x) easy to pass, not impossible: the drafts other than the "
         "argmax are accepted whenever p(x) > 0, not rejected.",
}


def refused_q(answer: Any) -> CheckReport:
    """Multiple choice: what the rule would do, let through, with the argmax one-hot that `verify_exact` refuses."""
    return check_choice("refused_q", answer, "a", REFUSED_Q)


# --- exercise 2: no distribution at all --------------------------------------------------------------------------


def _point_mass_split(p: torch.Tensor, x: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The emitted token's mass ``[V]`` given the draft x verified as a point mass ``q = δ_x``: (emitted by acceptance,
    emitted by recovery). x is kept with probability ``min(1, p(x) / q(x)) = p(x)``; a rejection (``1 - p(x)``)
    draws from the residual ``norm(max(p - δ_x, 0))``."""
    point = torch.nn.functional.one_hot(torch.tensor(x), len(p)).to(p.dtype)  # [V]: q = δ_x
    kept = float(torch.clamp(p[x] / point[x], max=1.0))  # min(1, p(x) / 1) = p(x)
    return kept * point, (1 - kept) * residual_distribution(p, point)


def _point_mass_cases() -> list[Case]:
    p = torch.tensor([0.40, 0.35, 0.15, 0.10])
    with_zero, certain = torch.tensor([0.5, 0.0, 0.3, 0.2]), torch.tensor([0.0, 1.0, 0.0, 0.0])
    cases = [("a toy p, the draft x = 0 (p's most likely token)", p, 0), ("the same p, the draft x = 3", p, 3),
             ("p with a zero, the draft x = 2", with_zero, 2),
             ("p with a zero, the draft x = 1 has p(x) = 0 (never accepted)", with_zero, 1),
             ("p certain of the draft x = 1 (never rejected)", certain, 1)]
    return [Case(name, (pp, x), _point_mass_split(pp, x)) for name, pp, x in cases]


def _split_pair(got: Any, vocab: int) -> tuple[torch.Tensor, torch.Tensor] | str:
    """``(accepted [V], recovered [V])`` read from the learner's answer, or the message saying why it is not one."""
    if isinstance(got, (tuple, list)) and len(got) == 2 and isinstance(got[0], torch.Tensor) and not isinstance(
            got[1], torch.Tensor):
        return (f"Expected a pair of tensors (accepted, recovered), got {describe(got)}: a distribution and a number "
                "look like (out, alpha) over all drafts. This exercise asks for one given draft x and the two ways "
                "the step can emit a token; what they add up to is for you to work out in the next cell.")
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return f"Expected a pair (accepted, recovered) of tensors [{vocab}], got {describe(got)}."
    for name, part in zip(("accepted", "recovered"), got):
        if not isinstance(part, torch.Tensor) or part.shape != (vocab,):
            return f"Expected {name} to be a tensor of shape [{vocab}], got {describe(part)}."
    return got[0].detach().cpu().double(), got[1].detach().cpu().double()


def _judge_point_mass(case: Case, got: Any) -> str | None:
    p, x = case.args
    read = _split_pair(got, len(p))
    if isinstance(read, str):
        return read
    accepted, recovered = read
    p = p.double()
    expected_accepted, expected_recovered = (part.double() for part in case.expected)
    shown = case.expected

    def same(a: torch.Tensor, b: torch.Tensor) -> bool:
        return bool(torch.allclose(a, b, atol=1e-6, rtol=0))

    if bool(torch.isnan(accepted).any() or torch.isnan(recovered).any()):
        return mismatch(shown, read, "NaN: when p(x) = 1 the draft is never rejected and max(p − δ_x, 0) is all "
                                     "zero, so normalising it divides 0 by 0. That branch has probability 1 − p(x) "
                                     "= 0: its mass is 0 (residual_distribution(p, δ_x) returns p there).")
    point = torch.nn.functional.one_hot(torch.tensor(x), len(p)).double()  # [V]: δ_x
    if not same(accepted, expected_accepted):
        if same(accepted, p) and not same(p, expected_accepted):
            return mismatch(shown, read, "the acceptance can only emit the draft x itself: accepted is p(x) at x "
                                         "and 0 elsewhere. The rest of p is the recovery's to emit.")
        if same(accepted, point):
            return mismatch(shown, read, "x is not always kept, not even as p's most likely token: it is accepted "
                                         "with probability min(1, p(x) / q(x)) = p(x), since the point mass has q(x) "
                                         "= 1. Keeping every draft is section 2's 'trust the draft', keeping the "
                                         "argmax its 'greedy matching'; neither emits p.")
        return mismatch(shown, read, "x is accepted with probability min(1, p(x) / q(x)) = p(x) (q = δ_x, q(x) = "
                                     "1): accepted is p(x) at x and 0 elsewhere.")
    if same(recovered, expected_recovered):
        return None
    rejected = 1 - float(p[x])
    residual = torch.clamp(p - point, min=0)  # max(p − δ_x, 0): p without x, not normalised
    if same(recovered, rejected * p):
        return mismatch(shown, read, "the recovered token cannot be the rejected draft x: it is drawn from "
                                     "norm(max(p − δ_x, 0)), which is p without x, renormalised.")
    if rejected > 0 and same(recovered, residual / residual.sum()):
        return mismatch(shown, read, "recovered is a mass, not a distribution: the residual norm(max(p − δ_x, 0)) "
                                     "times the probability of a rejection, 1 − p(x).")
    if same(recovered, rejected * residual):
        return mismatch(shown, read, "normalise the residual before weighting it: norm(max(p − δ_x, 0)) = max(p − "
                                     "δ_x, 0) / (1 − p(x)), then times the rejection probability 1 − p(x).")
    return mismatch(shown, read, "recovered = (1 − p(x)) · norm(max(p − δ_x, 0)): a rejection happens with "
                                 "probability 1 − p(x) and draws from the residual of p against the point mass.")


def point_mass_output(learner: Any) -> CheckReport:
    """Check ``point_mass_output(p, x) -> (accepted [V], recovered [V])``: the emitted token's mass for one draft x
    verified as a point mass (``q=None``), split into what the acceptance and the recovery emit."""
    return run_cases("point_mass_output", learner, _point_mass_cases(), _judge_point_mass)


# --- exercise 3: accepted counts for k > 1 -----------------------------------------------------------------------


def _law_cases() -> list[Case]:
    pairs = [("alpha 0.6, k 4", 0.6, 4), ("alpha 0.9, k 1", 0.9, 1), ("alpha 0: nothing accepted", 0.0, 3),
             ("alpha 1: everything accepted", 1.0, 2), ("k 0: a round without drafts", 0.5, 0)]
    return [Case(name, (a, k), accepted_count_distribution(a, k)) for name, a, k in pairs]


def _numbers(got: Any) -> list[float] | None:
    """A list of floats from a list, tuple or 1-D tensor of numbers, else None."""
    if isinstance(got, torch.Tensor) and got.ndim == 1:
        got = got.tolist()
    if not isinstance(got, (list, tuple)):
        return None
    try:
        return [float(value) for value in got]
    except (TypeError, ValueError, RuntimeError):
        return None


def _judge_law(case: Case, got: Any) -> str | None:
    alpha, k = case.args
    values = _numbers(got)
    if values is None:
        return f"Expected a list of k + 1 probabilities, got {describe(got)}."
    if len(values) != k + 1:
        return mismatch(case.expected, values, f"a round of k = {k} drafts accepts n = 0, 1, ..., k of them: k + 1 "
                                               "entries, the last one for 'all accepted'.")
    if all(close(a, b, rel_tol=1e-6, abs_tol=1e-12) for a, b in zip(values, case.expected)):
        return None
    if k and close(values[-1], alpha ** k * (1 - alpha), rel_tol=1e-6, abs_tol=1e-12):
        return mismatch(case.expected, values, "the last entry, n = k, is α^k: after k acceptances there is no draft "
                                               "left to reject (the bonus token follows).")
    return mismatch(case.expected, values, "P(N = n) = α^n (1 − α) for n < k: n acceptances, then a rejection.")


def accepted_count_law(learner: Any) -> CheckReport:
    """Check ``accepted_count_law(alpha, k) -> [P(N = 0), ..., P(N = k)]`` against `accepted_count_distribution`."""
    return run_cases("accepted_count_law", learner, _law_cases(), _judge_law)


def _trace_of(counts: list[int]) -> Trace:
    """A trace of rounds of ``k = len(counts) - 1`` drafts, ``counts[n]`` of them accepting n (no timings)."""
    k = len(counts) - 1
    rounds = [RoundRecord(k, n, n + 1, 0.0, 0.0, k, kind="bonus" if n == k else "recovered")
              for n, count in enumerate(counts) for _ in range(count)]
    return Trace(start_time=0.0, rounds=rounds)


def _metrics_cases() -> list[Case]:
    histograms = [("k = 4, a mixed histogram", [10, 5, 3, 2, 6]), ("k = 1", [30, 70]),
                  ("k = 3, every draft accepted", [0, 0, 0, 8]), ("k = 2, nothing accepted", [5, 0, 0]),
                  ("k = 3, no full round", [4, 3, 1, 0])]
    out = []
    for name, counts in histograms:
        trace = _trace_of(counts)
        expected = (per_token_acceptance(trace), acceptance_rate(trace), mean_acceptance_length(trace))
        out.append(Case(name, (list(counts),), expected))
    return out


def _judge_metrics(case: Case, got: Any) -> str | None:
    (counts,) = case.args
    values = _numbers(got)
    if values is None or len(values) != 3:
        return f"Expected three numbers (alpha, acceptance_rate, mean_acceptance_length), got {describe(got)}."
    alpha, rate, length = case.expected
    right = [close(v, e, rel_tol=1e-6, abs_tol=1e-12) for v, e in zip(values, case.expected)]
    if all(right):
        return None
    rounds = sum(counts)
    accepted = sum(n * count for n, count in enumerate(counts))
    if not right[0]:
        if close(values[0], rate, rel_tol=1e-6):
            return mismatch(case.expected, values, "that alpha is the acceptance rate (accepted / drafted). Alpha "
                                                   "divides by the examined drafts: accepted + 1 in a round with a "
                                                   "rejection, k in a full round (the drafts after a rejection are "
                                                   "never examined).")
        if close(values[0], accepted / (accepted + rounds), rel_tol=1e-6):
            return mismatch(case.expected, values, "a full round has no rejected draft: it examined k drafts, not "
                                                   "k + 1.")
        return mismatch(case.expected, values, "alpha = accepted / examined, examined = min(n + 1, k) for a round "
                                               "that accepted n.")
    if not right[1]:
        return mismatch(case.expected, values, "acceptance rate = accepted / drafted, k drafted per round.")
    if close(values[2], length - 1, rel_tol=1e-6, abs_tol=1e-12):
        return mismatch(case.expected, values, "each round emits its accepted drafts plus one token (recovered or "
                                               "bonus): mean acceptance length = 1 + accepted / rounds.")
    return mismatch(case.expected, values, "mean acceptance length = 1 + accepted / rounds.")


def metrics_from_counts(learner: Any) -> CheckReport:
    """Check ``metrics_from_counts(counts) -> (alpha, acceptance_rate, mean_acceptance_length)``.

    ``counts[n]``: the rounds of ``k = len(counts) - 1`` drafts that accepted n of them."""
    return run_cases("metrics_from_counts", learner, _metrics_cases(), _judge_metrics)
