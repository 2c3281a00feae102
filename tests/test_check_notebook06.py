"""Notebook 06's exercise checks on hand-written answers: the solutions pass, the usual mistakes get their hint."""

import math
import statistics

import pytest

from specdec_lib import check
from specdec_lib.bench.batches import choose_threshold
from specdec_lib.drafters import ConfidenceStop, DraftStopRule
from specdec_lib.core.theory import expected_speedup

# --- exercise 1: the best gamma, predicted ---------------------------------------------------------------------


def best_gamma(alpha, c, verify_cost):
    return max(verify_cost, key=lambda gamma: expected_speedup(alpha, gamma, c, verify_cost[gamma]))


def test_the_best_gamma_solution_passes():
    report = check.predicted_best_gamma(best_gamma)
    assert report and repr(report).startswith("✅ predicted_best_gamma: all 5 hidden cases pass."), repr(report)


@pytest.mark.parametrize("wrong, words", [
    (lambda a, c, v: max(v, key=lambda g: expected_speedup(a, g, c)), "every verification priced at 1"),
    (lambda a, c, v: min(v, key=lambda g: expected_speedup(a, g, c, v[g])), "*smallest* predicted speed-up"),
    (lambda a, c, v: max(expected_speedup(a, g, c, v[g]) for g in v), "You returned the best predicted speed-up"),
    (lambda a, c, v: max(range(len(v)), key=lambda i: expected_speedup(a, list(v)[i], c, list(v.values())[i])),
     "the position of the best gamma in the dict"),
    (lambda a, c, v: max(v, key=lambda g: expected_speedup(a, g, v[g], c)), "You swapped c and v"),
    (lambda a, c, v: max(v), "That is the largest gamma"),
    (lambda a, c, v: min(v, key=v.get), "the cheapest verification"),
])
def test_wrong_best_gammas_get_their_hint(wrong, words):
    report = check.predicted_best_gamma(wrong)
    assert not report and words in repr(report), repr(report)


def test_the_existing_stub_says_it_is_a_stub():
    def predicted_best_gamma(alpha, c, verify_cost):
        raise NotImplementedError  # your code here

    assert "still raises NotImplementedError" in repr(check.predicted_best_gamma(predicted_best_gamma))


# --- exercise 2: a stop rule of your own -----------------------------------------------------------------------


class RelativeDrop(DraftStopRule):
    name = "relative-drop"

    def should_stop(self, confidences):
        return confidences[-1] < 0.5 * confidences[0]


def rule_from(function):
    return type("Wrong", (DraftStopRule,), {"should_stop": lambda self, confidences: function(confidences)})


def test_the_stop_rule_solution_passes_as_a_class_and_as_an_instance():
    assert check.relative_drop_rule(RelativeDrop)
    assert check.relative_drop_rule(RelativeDrop())


@pytest.mark.parametrize("wrong, words", [
    (lambda c: c[-1] < 0.5, "fixed 0.5"),
    (lambda c: c[-1] < 0.4, "ConfidenceStop(0.4)'s rule"),
    (lambda c: len(c) > 1 and c[-1] < 0.5 * c[-2], "*previous* token's confidence"),
    (lambda c: c[-1] <= 0.5 * c[0], "use <, not <="),
    (lambda c: min(c) < 0.5 * max(c), "largest confidence so far"),
    (lambda c: None, "should_stop returned None"),
    (lambda c: c[0] < 0.5 * c[-1], "stops when a confidence *rises*"),
    (lambda c: len(c) > 1 and c[-2] < 0.5 * c[0], "stops one token late"),
    (lambda c: c[-1] < 0.5 * statistics.mean(c), "half the *mean* confidence"),
])
def test_wrong_stop_rules_get_their_hint(wrong, words):
    report = check.relative_drop_rule(rule_from(wrong))
    assert not report and words in repr(report), repr(report)
    assert "Expected the round to draft" in repr(report) or "None" in repr(report)


def test_confidence_stop_itself_and_non_rules_are_refused_with_a_reason():
    assert "ConfidenceStop(0.4)'s rule" in repr(check.relative_drop_rule(ConfidenceStop(0.4)))
    assert "takes your DraftStopRule subclass" in repr(check.relative_drop_rule(lambda c: True))


def test_the_stop_rule_stub_says_so():
    class Stub(DraftStopRule):
        def should_stop(self, confidences):
            raise NotImplementedError  # your code here

    assert "still raises NotImplementedError" in repr(check.relative_drop_rule(Stub))


# --- exercise 3: the disable-by-batch-size threshold ---------------------------------------------------------------


def threshold(rows, method):
    found = None
    for row in sorted((r for r in rows if r["method"] == method), key=lambda r: r["batch"]):
        if row["speedup"] <= 1.0:
            break
        found = row["batch"]
    return found


def test_the_threshold_solution_and_the_library_pass():
    assert check.disable_threshold(threshold)
    assert check.disable_threshold(choose_threshold)


def in_given_order(rows, method):
    found = None
    for row in (r for r in rows if r["method"] == method):
        if row["speedup"] <= 1.0:
            break
        found = row["batch"]
    return found


def mine(rows, method):
    return sorted((r for r in rows if r["method"] == method), key=lambda r: r["batch"])


@pytest.mark.parametrize("wrong, words", [
    (lambda rows, m: max((r["batch"] for r in mine(rows, m) if r["speedup"] > 1), default=None),
     "after it had already lost"),
    (lambda rows, m: next((r["batch"] for r in mine(rows, m) if r["speedup"] <= 1), None),
     "the first batch size where speculation *lost*"),
    (lambda rows, m: threshold([dict(r, speedup=r["speedup"] + 1e-9) for r in rows], m), "exactly 1.0 is no gain"),
    (in_given_order, "Sort the rows by batch size"),
    (lambda rows, m: threshold([dict(r, method=m) for r in rows], m), "rows of `method` only"),
    (lambda rows, m: threshold(rows, m) or 0, "return None"),
    (lambda rows, m: next((r["speedup"] for r in mine(rows, m) if r["batch"] == threshold(rows, m)), None),
     "That is the speed-up at the threshold"),
    (lambda rows, m: next((i for i, r in enumerate(mine(rows, m)) if r["batch"] == threshold(rows, m)), None),
     "the position of the threshold's row"),
    (lambda rows, m: sum(1 for r in mine(rows, m) if r["batch"] <= (threshold(rows, m) or 0)) or None,
     "how many batch sizes speculation won at"),
])
def test_wrong_thresholds_get_their_hint(wrong, words):
    report = check.disable_threshold(wrong)
    assert not report and words in repr(report), repr(report)


# --- exercise 4: a latency percentile ------------------------------------------------------------------------------


def percentile(values, p):
    ordered = sorted(values)
    rank = p / 100 * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (rank - low) * (ordered[high] - ordered[low])


def test_the_percentile_solution_passes_and_so_does_statistics_inclusive_quantiles():
    assert check.percentile(percentile)
    # statistics.quantiles(method="inclusive") is the same linear interpolation (for 1 <= p <= 99)
    inclusive = lambda values, p: (min(values) if p == 0 else max(values) if p == 100 or len(values) == 1  # noqa: E731
                                   else statistics.quantiles(values, n=100, method="inclusive")[int(p) - 1])
    assert check.percentile(inclusive)


@pytest.mark.parametrize("wrong, words", [
    (lambda v, p: sorted(v)[int(p / 100 * (len(v) - 1))], "rounded down, or the nearest"),
    (lambda v, p: sorted(v)[round(p / 100 * (len(v) - 1))], "rounded down, or the nearest"),
    (lambda v, p: sorted(v)[min(int(p / 100 * len(v)), len(v) - 1)], "not p / 100 * n"),
    (lambda v, p: percentile(v, p * len(v) / max(len(v) - 1, 1)) if len(v) > 1 else v[0], "not p / 100 * n"),
    (lambda v, p: v[int(p / 100 * (len(v) - 1))] if len(v) == 1 else _unsorted(v, p), "Sort the values first"),
    (lambda v, p: sum(v) / len(v), "That is the mean"),
    (lambda v, p: statistics.median(v), "That is the median (p50), whatever p"),
    (lambda v, p: percentile(v, min(p * 100, 100)), "your rank went past the end"),
    (lambda v, p: sorted(v)[math.ceil(p / 100 * (len(v) - 1))], "rather than rounding it up"),
    (lambda v, p: _swapped(sorted(v), p), "interpolation weights are swapped"),
    (lambda v, p: (min(v) if p == 0 else max(v) if p == 100 or len(v) == 1
                   else statistics.quantiles(v, n=100)[int(p) - 1]), 'method="exclusive"'),
])
def test_wrong_percentiles_get_their_hint(wrong, words):
    report = check.percentile(wrong)
    assert not report and words in repr(report), repr(report)


def _swapped(ordered, p):
    rank = p / 100 * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (high - rank) * (ordered[high] - ordered[low])


def _unsorted(values, p):
    rank = p / 100 * (len(values) - 1)
    low = int(rank)
    high = min(low + 1, len(values) - 1)
    return values[low] + (rank - low) * (values[high] - values[low])
