"""Checks of notebook 08's exercises (from the classroom to production): a server's counters, a server's TTFT.

- ``metrics_from_vllm_counters(metrics_from_vllm_counters)``: the learner's acceptance rate, mean acceptance length
  and alpha from the four speculative-decoding counters a vLLM server exports, on counters the check computes from
  hand-made traces (`specdec_lib.teaching.production.vllm_counters`); the expected values are the trace's own metrics
  (`specdec_lib.core.trace`), so a right answer means the server's counters and the course's definitions agree;
- ``queued_ttft("b")``: why the stored load test's time to first token grows with concurrency, with or without
  prompt lookup.
"""

from __future__ import annotations

from typing import Any

from ..production import vllm_counters
from ...core.trace import RoundRecord, Trace, acceptance_rate, mean_acceptance_length, per_token_acceptance
from .core import Case, CheckReport, check_choice, close, describe, mismatch, run_cases

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

QUEUED_TTFT_FEEDBACK = {
    "a": "Prompt lookup does not touch the prefill, and the rows without it show the same growth: at concurrency 1 "
         "the first token comes about as fast with and without it.",
    "b": "Right. The default `transformers serve` runs one `generate` at a time, so a request's first token waits "
         "for every request ahead of it: TTFT measures the queue. Speculation shortens each request's decode, so "
         "the queue drains a little sooner (TTFT p50 at concurrency 4 is lower with lookup), but it cannot remove "
         "the wait. A batching server (vLLM, SGLang, --continuous-batching) turns that queue into batch size instead.",
    "c": "The server honours prompt lookup at every concurrency: the stored table's tokens per chunk stay above 1 "
         "with lookup (the same at every concurrency) and the texts stay identical to the plain ones in every row.",
    "d": "The client opens one connection per request slot and times only the bytes it reads; a few threads cannot "
         "add seconds. And the time does not go to the network: on one machine it is the server's queue.",
}


def queued_ttft(answer: Any) -> CheckReport:
    """Multiple choice: why TTFT grows many times over with concurrency in the stored load test."""
    return check_choice("queued_ttft", answer, "b", QUEUED_TTFT_FEEDBACK)
