"""Notebook 08's exercise checks on hand-written answers: the solutions pass, the usual mistakes get their hint."""

import pytest

from specdec_lib import check
from specdec_lib.teaching.check.notebook08 import QUEUED_TTFT_FEEDBACK

# --- exercise 1: our metrics from vLLM's counters -----------------------------------------------------------------


def solution(num_drafts, num_draft_tokens, num_accepted_tokens, accepted_per_pos):
    rejections = num_drafts - accepted_per_pos[-1]  # the rounds that did not accept all γ drafts
    return (num_accepted_tokens / num_draft_tokens, 1 + num_accepted_tokens / num_drafts,
            num_accepted_tokens / (num_accepted_tokens + rejections))


def test_the_solution_passes():
    report = check.metrics_from_vllm_counters(solution)
    assert report and repr(report) == "✅ metrics_from_vllm_counters: all 5 hidden cases pass.", repr(report)


def with_rate(rate):
    return lambda d, t, a, pos: (rate(d, t, a, pos), *solution(d, t, a, pos)[1:])


def with_length(length):
    return lambda d, t, a, pos: (solution(d, t, a, pos)[0], length(d, t, a, pos), solution(d, t, a, pos)[2])


def with_alpha(alpha):
    return lambda d, t, a, pos: (*solution(d, t, a, pos)[:2], alpha(d, t, a, pos))


@pytest.mark.parametrize("wrong, words", [
    (with_rate(lambda d, t, a, pos: a / d), "accepted tokens per round"),
    (with_rate(lambda d, t, a, pos: 1 - a / t), "num_accepted_tokens / num_draft_tokens"),
    (with_length(lambda d, t, a, pos: a / d), "recovered or bonus"),
    (with_length(lambda d, t, a, pos: 1 + a / t), "tokens per verification round"),
    (with_alpha(lambda d, t, a, pos: a / t), "that is the acceptance rate"),
    (with_alpha(lambda d, t, a, pos: a / (a + d)), "ended with a bonus token"),
    (with_alpha(lambda d, t, a, pos: pos[0] / d), "first position's acceptance only"),
    (with_alpha(lambda d, t, a, pos: 0.5), "the one rejection that ends its round"),
])
def test_each_usual_mistake_gets_its_hint(wrong, words):
    report = check.metrics_from_vllm_counters(wrong)
    assert not report and words in repr(report), repr(report)


def test_the_hint_shows_the_counters_of_the_failing_case():
    report = repr(check.metrics_from_vllm_counters(with_alpha(lambda d, t, a, pos: a / t)))
    assert "hidden case 1 of 5" in report and "num_drafts 6, num_draft_tokens 24, num_accepted_tokens 14" in report


def test_stub_crash_and_wrong_shapes_are_messages():
    def stub(num_drafts, num_draft_tokens, num_accepted_tokens, accepted_per_pos):
        raise NotImplementedError  # your code here

    assert "still raises NotImplementedError" in repr(check.metrics_from_vllm_counters(stub))
    assert "raised ZeroDivisionError" in repr(check.metrics_from_vllm_counters(lambda d, t, a, pos: (a / 0, 1, 1)))
    assert "Expected a tuple of three numbers" in repr(check.metrics_from_vllm_counters(lambda d, t, a, pos: a / t))
    assert "Expected a tuple of three numbers" in repr(
        check.metrics_from_vllm_counters(lambda d, t, a, pos: ("rate", "length", "alpha")))


# --- exercise 2: why TTFT grows under load --------------------------------------------------------------------


def test_the_right_answer_passes_and_explains():
    report = check.queued_ttft("b")
    assert report and "one `generate` at a time" in repr(report)


@pytest.mark.parametrize("letter", sorted(set(QUEUED_TTFT_FEEDBACK) - {"b"}))
def test_every_wrong_option_fails_with_its_feedback(letter):
    report = check.queued_ttft(letter)
    assert not report and QUEUED_TTFT_FEEDBACK[letter][:40] in repr(report)


def test_no_answer_yet_is_a_message():
    assert "Answer with one of 'a', 'b', 'c', 'd'" in repr(check.queued_ttft(None))


def test_the_feedback_types_no_measured_number_and_its_claims_hold_in_every_stored_load_test():
    import json
    import re

    from specdec_lib.core.paths import data_dir
    from specdec_lib.teaching.check.notebook08 import QUEUED_TTFT_FEEDBACK

    for letter, text in QUEUED_TTFT_FEEDBACK.items():
        assert not re.search(r"\d\.\d", text), (letter, text)  # e.g. no "1.71 tokens per chunk"
    files = sorted((data_dir() / "bench").glob("serve-*.json"))
    assert files
    for path in files:
        rows = json.loads(path.read_text())["rows"]
        lookup = [row for row in rows if row["prompt_lookup"] != "off"]
        plain = {row["concurrency"]: row for row in rows if row["prompt_lookup"] == "off"}
        # (c): with lookup, tokens per chunk stay above 1 and the same at every concurrency
        assert all(row["tokens_per_chunk"] > 1 for row in lookup), path
        assert len({round(row["tokens_per_chunk"], 9) for row in lookup}) == 1, path
        # (b): at concurrency 4 the queue drains sooner with lookup; (a): TTFT grows with concurrency either way
        assert next(r for r in lookup if r["concurrency"] == 4)["ttft_p50_s"] < plain[4]["ttft_p50_s"], path
        for row in lookup:
            assert row["ttft_p50_s"] >= next(r for r in lookup if r["concurrency"] == 1)["ttft_p50_s"], path
