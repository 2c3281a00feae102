"""The self-checks of notebook 02's exercises: the solutions pass, typical mistakes get their hint, stubs are named."""

import pytest
import torch

from specdec_lib import check
from specdec_lib.core.verify import residual_distribution


def stub(*args):
    raise NotImplementedError  # your code here


def reported(p, q_true, q_reported):  # the solution
    kept = q_true * torch.clamp(p / q_reported, max=1.0)
    alpha = float(kept.sum())
    return kept + (1 - alpha) * residual_distribution(p, q_reported), alpha


def test_reported_q_the_solution_passes():
    assert repr(check.output_with_reported_q(reported)) == "✅ output_with_reported_q: all 5 hidden cases pass."


def test_reported_q_assuming_the_output_is_p_is_named():
    def always_p(p, q_true, q_reported):
        return p.clone(), float(torch.minimum(p, q_reported).sum())

    assert "p is the output only when q_reported" in repr(check.output_with_reported_q(always_p))


def test_reported_q_alpha_from_the_reported_q_is_named():
    def wrong_alpha(p, q_true, q_reported):
        return reported(p, q_true, q_reported)[0], float(torch.minimum(p, q_reported).sum())

    assert "not sum min(p, q_reported)" in repr(check.output_with_reported_q(wrong_alpha))


def test_reported_q_the_residual_of_the_true_q_is_named():
    def true_residual(p, q_true, q_reported):
        kept = q_true * torch.clamp(p / q_reported, max=1.0)
        return kept + (1 - kept.sum()) * residual_distribution(p, q_true), float(kept.sum())

    assert "the verifier knows only the q the drafter reported" in repr(check.output_with_reported_q(true_residual))


def test_reported_q_recovering_from_p_instead_of_the_residual_is_named():
    def from_p(p, q_true, q_reported):
        kept = q_true * torch.clamp(p / q_reported, max=1.0)
        return kept + (1 - kept.sum()) * p, float(kept.sum())

    report = check.output_with_reported_q(from_p)
    assert not report and "you drew the recovered token from p" in repr(report), repr(report)


def test_reported_q_a_zero_residual_divided_is_named():
    def divides(p, q_true, q_reported):
        kept = q_true * torch.clamp(p / q_reported, max=1.0)
        residual = torch.clamp(p - q_reported, min=0)
        return kept + (1 - kept.sum()) * residual / residual.sum(), float(kept.sum())

    report = check.output_with_reported_q(divides)
    assert "all-zero residual" in report.case_name and "NaN" in repr(report)


def test_reported_q_stub():
    assert "still raises NotImplementedError" in repr(check.output_with_reported_q(stub))


@pytest.mark.parametrize(("wrong", "named"), [("b", "Nothing is divided"), ("c", "always kept"),
                                               ("d", "easy to pass, not impossible")])
def test_refused_q_wrong_options_fail_with_their_feedback(wrong, named):
    report = check.refused_q(wrong)
    assert not report and f"Not ({wrong})." in repr(report) and named in repr(report)


def test_refused_q_the_right_option_passes_and_the_stub_is_asked_for_a_letter():
    assert check.refused_q("a") and "ConfigError" in repr(check.refused_q("a"))
    assert "Answer with one of" in repr(check.refused_q(None))


def one_hot(p, x):
    return torch.nn.functional.one_hot(torch.tensor(x), len(p)).to(p.dtype)


def point_mass(p, x):  # the solution: q = δ_x, x kept with probability min(1, p(x) / 1), else the residual
    return p[x] * one_hot(p, x), (1 - p[x]) * residual_distribution(p, one_hot(p, x))


def test_point_mass_the_solution_passes():
    assert check.point_mass_output(point_mass)


def test_point_mass_the_stated_conclusion_over_all_drafts_is_named():
    """The shortcut of the former statement, (out = p, alpha = sum q p), built nothing: it is refused by its shape."""
    report = check.point_mass_output(lambda p, q: (p.clone(), float((p * q).sum())))
    assert not report and "look like (out, alpha) over all drafts" in repr(report)


def test_point_mass_all_of_p_emitted_by_acceptance_is_named():
    report = check.point_mass_output(lambda p, x: (p.clone(), torch.zeros_like(p)))
    assert not report and "the acceptance can only emit the draft x itself" in repr(report)


def test_point_mass_all_of_p_emitted_by_recovery_is_named():
    report = check.point_mass_output(lambda p, x: (torch.zeros_like(p), p.clone()))
    assert not report and "accepted with probability min(1, p(x) / q(x)) = p(x)" in repr(report)


def test_point_mass_recovering_from_p_itself_is_named():
    report = check.point_mass_output(lambda p, x: (point_mass(p, x)[0], (1 - p[x]) * p))
    assert not report and "cannot be the rejected draft x" in repr(report)


def test_point_mass_always_keeping_the_draft_is_named():
    report = check.point_mass_output(lambda p, x: (one_hot(p, x), torch.zeros_like(p)))
    assert not report and "x is not always kept" in repr(report)


def test_point_mass_keeping_only_the_argmax_is_named():
    report = check.point_mass_output(lambda p, x: (float(x == int(p.argmax())) * one_hot(p, x), torch.zeros_like(p)))
    assert not report and "greedy matching" in repr(report)


def test_point_mass_the_residual_as_a_distribution_is_named():
    report = check.point_mass_output(lambda p, x: (point_mass(p, x)[0], residual_distribution(p, one_hot(p, x))))
    assert not report and "recovered is a mass, not a distribution" in repr(report)


def test_point_mass_an_unnormalised_residual_weighted_is_named():
    def unnormalised(p, x):
        return point_mass(p, x)[0], (1 - p[x]) * torch.clamp(p - one_hot(p, x), min=0)

    report = check.point_mass_output(unnormalised)
    assert not report and "normalise the residual before weighting it" in repr(report)


def test_point_mass_a_certain_p_divided_is_named():
    def divides(p, x):
        residual = torch.clamp(p - one_hot(p, x), min=0)
        return point_mass(p, x)[0], (1 - p[x]) * residual / residual.sum()

    report = check.point_mass_output(divides)
    assert "never rejected" in report.case_name and "NaN" in repr(report)


def test_point_mass_stub():
    assert "still raises NotImplementedError" in repr(check.point_mass_output(stub))


def law(alpha, k):  # the solution
    return [alpha**n * (1 - alpha) for n in range(k)] + [alpha**k]


def test_law_the_solution_passes():
    assert check.accepted_count_law(law)


def test_law_without_the_full_round_is_named():
    assert "k + 1 entries" in repr(check.accepted_count_law(lambda alpha, k: law(alpha, k)[:-1]))


def test_law_an_untruncated_last_entry_is_named():
    untruncated = lambda alpha, k: [alpha**n * (1 - alpha) for n in range(k + 1)]  # noqa: E731
    assert "the last entry, n = k, is α^k" in repr(check.accepted_count_law(untruncated))


def test_law_stub():
    assert "still raises NotImplementedError" in repr(check.accepted_count_law(stub))


def metrics(counts):  # the solution
    k, rounds = len(counts) - 1, sum(counts)
    accepted = sum(n * count for n, count in enumerate(counts))
    examined = sum(min(n + 1, k) * count for n, count in enumerate(counts))
    return accepted / examined, accepted / (k * rounds), 1 + accepted / rounds


def test_metrics_the_solution_passes():
    assert check.metrics_from_counts(metrics)


def test_metrics_alpha_as_the_acceptance_rate_is_named():
    assert "that alpha is the acceptance rate" in repr(
        check.metrics_from_counts(lambda counts: (metrics(counts)[1],) + metrics(counts)[1:]))


def test_metrics_k_plus_one_examined_in_a_full_round_is_named():
    def plus_one(counts):
        accepted, rounds = sum(n * c for n, c in enumerate(counts)), sum(counts)
        return (accepted / (accepted + rounds),) + metrics(counts)[1:]

    assert "it examined k drafts, not k + 1" in repr(check.metrics_from_counts(plus_one))


def test_metrics_a_length_without_the_added_token_is_named():
    def no_added_token(counts):
        return metrics(counts)[:2] + (metrics(counts)[2] - 1,)

    assert "plus one token" in repr(check.metrics_from_counts(no_added_token))


def test_metrics_stub():
    assert "still raises NotImplementedError" in repr(check.metrics_from_counts(stub))
