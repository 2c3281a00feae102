"""The self-checks of notebook 00's exercises: the solutions pass, typical mistakes get their hint, stubs are named."""

import numpy as np
import pytest
import torch

from specdec_lib import check


def top_k(logits, k):  # the solution
    kth_largest = torch.topk(logits, k, dim=-1).values[..., -1:]
    return torch.softmax(logits.masked_fill(logits < kth_largest, float("-inf")), dim=-1)


def stub(*args):
    raise NotImplementedError  # your code here


def test_top_k_the_solution_passes():
    assert repr(check.top_k_probs(top_k)) == "✅ top_k_probs: all 5 hidden cases pass."


def test_top_k_a_missing_softmax_is_named():
    def no_softmax(logits, k):
        kth = torch.topk(logits, k, dim=-1).values[..., -1:]
        return logits.masked_fill(logits < kth, float("-inf"))

    assert "apply torch.softmax" in repr(check.top_k_probs(no_softmax))


def test_top_k_keeping_one_too_many_is_an_off_by_one():
    def k_plus_one(logits, k):
        kth = torch.topk(logits, min(k + 1, logits.shape[-1]), dim=-1).values[..., -1:]
        return torch.softmax(logits.masked_fill(logits < kth, float("-inf")), dim=-1)

    report = repr(check.top_k_probs(k_plus_one))
    assert "you keep 4 tokens where k = 3 should keep 3" in report and "off-by-one" in report


def test_top_k_over_the_wrong_dimension_is_named():
    def by_column(logits, k):
        kth = torch.topk(logits, k, dim=0).values[-1]
        return torch.softmax(logits.masked_fill(logits < kth, float("-inf")), dim=-1)

    report = check.top_k_probs(by_column)
    assert not report and "batch" in report.case_name and "last dimension" in repr(report)


def test_top_k_a_one_row_version_gets_a_hint_on_the_batch():
    def one_row(logits, k):
        kth = torch.topk(logits, k).values[-1]
        return torch.softmax(logits.masked_fill(logits < kth, float("-inf")), dim=-1)

    report = repr(check.top_k_probs(one_row))
    assert "raised RuntimeError" in report and "values[..., -1:]" in report


def test_top_k_an_index_past_the_k_th_largest_is_named():
    def index_k(logits, k):
        kth = torch.topk(logits, k, dim=-1).values[..., k]
        return torch.softmax(logits.masked_fill(logits < kth, float("-inf")), dim=-1)

    report = repr(check.top_k_probs(index_k))
    assert "raised IndexError" in report and "values[..., k - 1]" in report


def test_top_k_exactly_k_indices_miss_the_tie():
    def indices(logits, k):
        kept = torch.topk(logits, k, dim=-1).indices
        masked = torch.full_like(logits, float("-inf")).scatter(-1, kept, logits.gather(-1, kept))
        return torch.softmax(masked, dim=-1)

    assert "ties with the k-th largest logit are kept" in repr(check.top_k_probs(indices))


def test_top_k_softmax_before_masking_does_not_sum_to_one():
    def softmax_first(logits, k):
        probs = torch.softmax(logits, dim=-1)
        return probs.masked_fill(probs < torch.topk(probs, k, dim=-1).values[..., -1:], 0.0)

    assert "do not sum to 1" in repr(check.top_k_probs(softmax_first))


def test_top_k_stub():
    assert "still raises NotImplementedError" in repr(check.top_k_probs(stub))


def fit(lengths, seconds):  # the solution
    design = torch.stack([torch.ones_like(lengths), lengths], dim=1)  # [n, 2]
    fixed, per_token = torch.linalg.lstsq(design, seconds.unsqueeze(1)).solution.squeeze(1).tolist()
    return per_token, fixed


@pytest.mark.parametrize("answer", [fit, lambda x, y: tuple(np.polyfit(x.numpy(), y.numpy(), 1))])
def test_fit_the_solution_and_numpy_pass(answer):
    assert check.fit_step_cost(answer)


def test_fit_swapped_outputs_are_named():
    assert "swapped" in repr(check.fit_step_cost(lambda x, y: fit(x, y)[::-1]))


@pytest.mark.parametrize("scale, unit", [(1e3, "milliseconds"), (1e6, "microseconds")])
def test_fit_a_unit_slip_is_named(scale, unit):
    report = repr(check.fit_step_cost(lambda x, y: (fit(x, y)[0] * scale, fit(x, y)[1])))
    assert f"your seconds_per_token is in {unit}" in report


def test_fit_a_line_through_the_origin_is_named():
    def origin(lengths, seconds):
        return float((lengths * seconds).sum() / (lengths**2).sum()), 0.0

    assert "needs an intercept" in repr(check.fit_step_cost(origin))


def test_fit_stub():
    assert "still raises NotImplementedError" in repr(check.fit_step_cost(stub))


@pytest.mark.parametrize("wrong", ["a", "c", "d"])
def test_prose_versus_code_wrong_options_fail_with_their_feedback(wrong):
    report = check.prose_versus_code(wrong)
    assert not report and repr(report).startswith(f"❌ prose_versus_code: answer fails.\n   Not ({wrong}).")


def test_prose_versus_code_the_right_option_passes_and_the_stub_is_asked_for_a_letter():
    assert check.prose_versus_code("b") and "prefill" in repr(check.prose_versus_code("b"))
    assert "Answer with one of 'a', 'b', 'c', 'd'" in repr(check.prose_versus_code(None))
