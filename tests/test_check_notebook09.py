"""Notebook 09's exercise checks on hand-written answers: the solution passes, the usual mistakes get their hint."""

import pytest
import torch

from specdec_lib import check, near_tie_tolerance
from specdec_lib.teaching.check.notebook09 import _PROMISE


def solution(logits, reference, candidate, dtype):
    if torch.equal(reference, candidate):
        return "identical"
    fork = int((reference != candidate).nonzero()[0, 0])
    top = logits.max(dim=-1).values
    margin = float(logits[fork, reference[fork]] - logits[fork, candidate[fork]])
    gaps = top - logits.gather(1, candidate[:, None])[:, 0]
    within = all(float(gap) <= near_tie_tolerance(dtype, float(t)) for gap, t in zip(gaps, top))
    return "near-tie" if margin <= near_tie_tolerance(dtype, float(top[fork])) and within else "disagreement"


def test_the_solution_passes():
    report = check.fork_verdict(solution)
    assert report and repr(report) == "✅ fork_verdict: all 6 hidden cases pass.", repr(report)


def first_fork_only(logits, reference, candidate, dtype):
    if torch.equal(reference, candidate):
        return "identical"
    fork = int((reference != candidate).nonzero()[0, 0])
    margin = float(logits[fork, reference[fork]] - logits[fork, candidate[fork]])
    return "near-tie" if margin <= near_tie_tolerance(dtype, float(logits[fork].max())) else "disagreement"


@pytest.mark.parametrize("wrong, words", [
    (lambda logits, r, c, dtype: "identical" if torch.equal(r, c) else "disagreement", "A fork is not yet a bug"),
    (first_fork_only, "every-position check"),
    (lambda logits, r, c, dtype: "identical" if torch.equal(r, c) else solution(logits, r, c, torch.bfloat16),
     "The tolerance depends on the dtype"),
])
def test_the_usual_mistakes_get_their_hint(wrong, words):
    report = check.fork_verdict(wrong)
    assert not report and words in repr(report), repr(report)


def test_a_stub_and_a_non_verdict_are_explained():
    def stub(logits, reference, candidate, dtype):
        raise NotImplementedError
    assert "still raises NotImplementedError" in repr(check.fork_verdict(stub))
    assert "Expected one of 'identical', 'near-tie', 'disagreement'" in repr(check.fork_verdict(lambda *a: True))


@pytest.mark.parametrize("letter", sorted(_PROMISE))
def test_every_option_of_the_promise_question_is_explained(letter):
    report = check.lossless_promise(letter)
    assert bool(report) is (letter == "b") and _PROMISE[letter][:20] in repr(report)


def test_the_promise_feedback_types_no_measured_number_and_its_claims_hold_in_the_stored_bench():
    import json
    import re

    from specdec_lib.bench.numerics import summary_rows
    from specdec_lib.core.numerics import spacing
    from specdec_lib.core.paths import data_dir

    assert not any(re.search(r"\d\.\d", text) for text in _PROMISE.values())
    document = json.loads((data_dir() / "bench" / "numerics.json").read_text())
    forks = {row["dtype"]: 0 for row in summary_rows(document)}
    for row in summary_rows(document):
        forks[row["dtype"]] += row["forks"]
    assert forks["float16"] < forks["bfloat16"] / 4                               # the premise
    assert spacing(torch.float16, 8.0) * 8 == spacing(torch.bfloat16, 8.0)        # (b): a grid 8 times finer
    drift = {dtype: body["drift_nats"] for dtype, body in document["dtypes"].items()}
    assert 0 < drift["float16"] < drift["bfloat16"]                               # (b) smaller drift; (d) not zero
