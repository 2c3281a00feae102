"""Notebook 08's exercise checks on hand-written answers: the solutions pass, the usual mistakes get their hint."""

import pytest

from specdec_lib import check

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


def queued(requests, concurrency, *, from_send=True, limit=True, free_after_first=False, last_token=False):
    """The solution's one-at-a-time server, with one thing changed at a time to make the usual mistakes."""
    sent, start, end, ttfts = [], [], [], []
    for k, (first_token, total) in enumerate(requests):
        sent.append(end[k - concurrency] if limit and k >= concurrency else 0.0)
        free = 0.0 if not k else start[k - 1] + requests[k - 1][0] if free_after_first else end[k - 1]
        start.append(max(sent[k], free))
        end.append(start[k] + total)
        ttfts.append(start[k] + (total if last_token else first_token) - (sent[k] if from_send else 0.0))
    return ttfts


def test_the_queue_solution_passes():
    report = check.queued_ttft(queued)
    assert report and repr(report) == "✅ queued_ttft: all 5 hidden cases pass.", repr(report)


@pytest.mark.parametrize("wrong, words", [
    # shortcuts that return the conclusion ("TTFT grows with concurrency") without modelling the queue
    (lambda requests, concurrency: [first * concurrency for first, _ in requests], "scaled the TTFT alone"),
    (lambda requests, concurrency: [first for first, _ in requests], "each request's TTFT alone"),
    # plausible wrong queues
    (lambda requests, concurrency: queued(requests, concurrency, from_send=False), "from the start of the test"),
    (lambda requests, concurrency: queued(requests, concurrency, limit=False), "sent them all at once"),
    (lambda requests, concurrency: queued(requests, concurrency, free_after_first=True), "busy with a request until"),
    (lambda requests, concurrency: queued(requests, concurrency, last_token=True), "the time to the *last* token"),
])
def test_shortcuts_and_wrong_queues_are_rejected_with_their_hint(wrong, words):
    report = check.queued_ttft(wrong)
    assert not report and words in repr(report), repr(report)


def test_the_queue_stub_and_wrong_shapes_are_messages():
    def stub(requests, concurrency):
        raise NotImplementedError  # your code here

    assert "still raises NotImplementedError" in repr(check.queued_ttft(stub))
    assert "Expected a list with one TTFT per request, got float" in repr(check.queued_ttft(lambda r, c: 1.0))
    assert "Expected 8 TTFTs, one per request, got 1" in repr(check.queued_ttft(lambda r, c: [1.0]))
    assert "takes your function itself" in repr(check.queued_ttft("b"))


def test_the_model_explains_every_stored_load_test():
    """What the solution asserts, on every stored file: the one-at-a-time model lands near the stored TTFTs."""
    import json

    from specdec_lib.core.paths import data_dir
    from specdec_lib.core.trace import latency_percentiles

    files = sorted((data_dir() / "bench").glob("serve-*.json"))
    assert files
    for path in files:
        rows = {(r["concurrency"], r["prompt_lookup"] != "off"): r for r in json.loads(path.read_text())["rows"]}
        for (level, lookup), row in rows.items():
            alone = sorted(rows[1, lookup]["per_request"], key=lambda request: request["index"])
            model = latency_percentiles(queued([(r["ttft_s"], r["total_s"]) for r in alone], level))
            assert abs(model[50] / row["ttft_p50_s"] - 1) < 0.2 and abs(model[95] / row["ttft_p95_s"] - 1) < 0.2
