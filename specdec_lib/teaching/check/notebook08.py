"""Checks of notebook 08's exercises (from the classroom to production): a server's counters, a server's TTFT.

- ``metrics_from_vllm_counters(metrics_from_vllm_counters)``: the learner's acceptance rate, mean acceptance length
  and alpha from the four speculative-decoding counters a vLLM server exports, on counters the check computes from
  hand-made traces (`specdec_lib.teaching.production.vllm_counters`); the expected values are the trace's own metrics
  (`specdec_lib.core.trace`), so a right answer means the server's counters and the course's definitions agree;
- ``queued_ttft(queued_ttfts)``: the learner's model of the stored load test's time to first token, a server that
  serves one request at a time behind a client that keeps ``concurrency`` requests in flight, on hand-made request
  times (equal and mixed lengths, from one request in flight to more slots than requests).
"""

from __future__ import annotations

from typing import Any

from ..production import vllm_counters
from ...core.trace import RoundRecord, Trace, acceptance_rate, mean_acceptance_length, per_token_acceptance
from .core import Case, CheckReport, close, describe, find_mistake, is_number, mismatch, run_cases

# --- exercise 1: our metrics from vLLM's counters -------------------------------------------------------------


def counters_trace(accepted: list[int], gamma: int) -> Trace:
    """A prefill round, then one round per entry of ``accepted`` that drafted ``gamma`` tokens and kept that many."""
    rounds = [RoundRecord(0, 0, 1, 0.0, 0.0, 0, "prefill")]
    rounds += [RoundRecord(gamma, a, a + 1, 0.0, 0.0, gamma, "bonus" if a == gamma else "recovered")
               for a in accepted]
    return Trace(start_time=0.0, rounds=rounds)


# (what the case is, accepted drafts per round, gamma); the first case tells every wrong formula below apart
_COUNTER_TRACES = [
    ("γ = 4, six rounds, two of them accepting all four drafts", [4, 0, 2, 4, 1, 3], 4),
    ("γ = 3, one round accepts everything, the others stop early", [3, 1, 0, 1, 2], 3),
    ("γ = 5, no draft ever accepted", [0, 0, 0, 0], 5),
    ("γ = 2, every draft accepted (no rejection at all)", [2, 2, 2], 2),
    ("γ = 1, one draft per round", [1, 0, 1, 1, 0, 1, 1], 1),
]


def _counter_cases() -> list[Case]:
    cases = []
    for name, accepted, gamma in _COUNTER_TRACES:
        trace = counters_trace(accepted, gamma)
        counters = vllm_counters(trace, num_speculative_tokens=gamma)
        expected = (acceptance_rate(trace), mean_acceptance_length(trace), per_token_acceptance(trace))
        cases.append(Case(name, (counters["num_drafts"], counters["num_draft_tokens"], counters["num_accepted_tokens"],
                                 counters["num_accepted_tokens_per_pos"]), expected))
    return cases


def _three_numbers(got: Any) -> tuple[float, float, float] | None:
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        return None
    try:
        return tuple(float(value) for value in got)  # type: ignore[return-value]
    except (TypeError, ValueError):
        return None


def _judge_counters(case: Case, got: Any) -> str | None:
    numbers = _three_numbers(got)
    if numbers is None:
        return (f"Expected a tuple of three numbers (acceptance_rate, mean_acceptance_length, alpha), got "
                f"{describe(got)}.")
    drafts, draft_tokens, accepted, per_pos = case.args
    rate, length, alpha = numbers
    want_rate, want_length, want_alpha = case.expected
    counters = f"(counters: num_drafts {drafts}, num_draft_tokens {draft_tokens}, num_accepted_tokens {accepted}, " \
               f"accepted_per_pos {per_pos})"
    if not close(rate, want_rate):
        hint = ("that is accepted tokens per round (num_drafts); the acceptance rate is per drafted token: "
                "num_accepted_tokens / num_draft_tokens." if close(rate, accepted / drafts) else
                "the acceptance rate is num_accepted_tokens / num_draft_tokens.")
        return f"acceptance_rate: {mismatch(want_rate, rate, hint)} {counters}"
    if not close(length, want_length):
        hint = ("each verification round also emits one token of the target's own (recovered or bonus): "
                "1 + num_accepted_tokens / num_drafts." if close(length, accepted / drafts) else
                "the mean acceptance length is tokens per verification round, 1 + num_accepted_tokens / num_drafts.")
        return f"mean_acceptance_length: {mismatch(want_length, length, hint)} {counters}"
    if not close(alpha, want_alpha):
        if close(alpha, accepted / draft_tokens):
            hint = ("that is the acceptance rate. Alpha divides by the drafts the target *examined*: a round stops at "
                    "its first rejection, so the drafts after it were never tried.")
        elif close(alpha, accepted / (accepted + drafts)):
            hint = ("you counted a rejection in every round, but the rounds that accepted all γ drafts "
                    "(accepted_per_pos[-1] of them) ended with a bonus token instead: examined = num_accepted_tokens "
                    "+ num_drafts - accepted_per_pos[-1].")
        elif per_pos and close(alpha, per_pos[0] / drafts):
            hint = ("that is the first position's acceptance only; alpha pools every examined draft: "
                    "num_accepted_tokens / (num_accepted_tokens + rounds that ended in a rejection).")
        else:
            hint = ("alpha = accepted / examined drafts; every examined draft is accepted, or is the one rejection "
                    "that ends its round.")
        return f"alpha: {mismatch(want_alpha, alpha, hint)} {counters}"
    return None


def metrics_from_vllm_counters(learner: Any) -> CheckReport:
    """Check ``learner(num_drafts, num_draft_tokens, num_accepted_tokens, accepted_per_pos)`` ->
    ``(acceptance_rate, mean_acceptance_length, alpha)`` on counters of hand-made traces with a fixed γ."""
    return run_cases("metrics_from_vllm_counters", learner, _counter_cases(), _judge_counters)


# --- exercise 2: why TTFT grows under load -------------------------------------------------------------------------


def _served(requests: list[tuple[float, float]], concurrency: int, *, from_send: bool = True,
            busy_until: str = "end", first: bool = True) -> list[float]:
    """TTFTs under a one-at-a-time, first-come-first-served server and a client that keeps ``concurrency`` requests
    in flight (the next sent as one completes), each request ``(first_token_s, total_s)`` as it took alone; the
    keywords make the usual mistakes (timed from 0, a server free after the prefill, the whole answer). Timing from 0
    and sending every request at once give the same answers: the server is never idle when a request is sent."""
    sent, start, end, ttfts = [], [], [], []
    for index, (first_token, total) in enumerate(requests):
        sent.append(end[index - concurrency] if index >= concurrency else 0.0)
        free = (end[-1] if busy_until == "end" else start[-1] + requests[index - 1][0]) if index else 0.0
        start.append(max(sent[-1], free))
        end.append(start[-1] + total)
        ttfts.append(start[-1] + (first_token if first else total) - (sent[-1] if from_send else 0.0))
    return ttfts


QUEUE_MISTAKES = [
    (lambda requests, concurrency: [first_token for first_token, _ in requests],
     "That is each request's TTFT alone: as if the server worked on every request in flight at once. It serves "
     "one at a time, so a request starts when the one before it has finished and it has arrived."),
    (lambda requests, concurrency: [first_token * concurrency for first_token, _ in requests],
     "You scaled the TTFT alone by the concurrency. A queue does not multiply the prefill: a request waits for the "
     "whole answers of the requests ahead of it, their total times."),
    (lambda requests, concurrency: _served(requests, concurrency, from_send=False),
     "You timed every request from the start of the test, as if the client had sent them all at once. TTFT runs "
     "from the moment the client *sent* the request, and it keeps at most `concurrency` in flight: request k "
     "(k >= concurrency) is sent when request k - concurrency completes, and has not waited before that."),
    (lambda requests, concurrency: _served(requests, concurrency, busy_until="first token"),
     "Your server takes the next request once the current one has its first token. It runs one generate at a "
     "time: it is busy with a request until its last token, start + total time."),
    (lambda requests, concurrency: _served(requests, concurrency, first=False),
     "That is the time to the *last* token. TTFT ends at the first token: start of service + the request's own "
     "time to first token."),
]

_EQUAL = [(0.03, 0.3)] * 8
_MIXED = [(0.02, 0.4), (0.05, 0.2), (0.03, 0.5), (0.04, 0.3), (0.02, 0.25), (0.06, 0.35)]
QUEUE_CASES = [
    Case("eight equal requests, all eight in flight at once", (_EQUAL, 8)),
    Case("eight equal requests, at most four in flight", (_EQUAL, 4)),
    Case("six requests of different lengths, two in flight", (_MIXED, 2)),
    Case("one request in flight at a time: nobody waits", (_MIXED, 1)),
    Case("more slots than requests", (_MIXED[:3], 5)),
]
QUEUE_CASES = [Case(case.name, case.args, _served(*case.args)) for case in QUEUE_CASES]


def _same_times(a: Any, b: list[float]) -> bool:
    return (isinstance(a, (list, tuple)) and len(a) == len(b)
            and all(is_number(x) and close(x, y, rel_tol=1e-9, abs_tol=1e-12) for x, y in zip(a, b)))


def queued_ttft(learner: Any) -> CheckReport:
    """Exercise 2: ``learner(requests, concurrency)`` with ``requests = [(first_token_s, total_s), ...]`` (each
    request as it took alone, in the order the client sends them) must return every request's TTFT, from its send
    time to its first token, under a server that serves one request at a time, first come first served, and a
    client that keeps ``concurrency`` requests in flight, sending the next as soon as one completes."""

    def judge(case: Case, got: Any) -> str | None:
        if not isinstance(got, (list, tuple)):
            return f"Expected a list with one TTFT per request, got {type(got).__name__}."
        if len(got) != len(case.expected):
            return f"Expected {len(case.expected)} TTFTs, one per request, got {len(got)}."
        if _same_times(got, case.expected):
            return None
        hint = find_mistake(got, case.args, case.expected, QUEUE_MISTAKES, _same_times, learner, QUEUE_CASES)
        return mismatch(case.expected, list(got), hint)

    return run_cases("queued_ttft", learner, QUEUE_CASES, judge)
