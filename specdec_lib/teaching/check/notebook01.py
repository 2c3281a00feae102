"""Checks of notebook 01's exercises (greedy matching): verification by hand, the gap between the theory's speed-up
and the measured one, grounded prompts counted and predicted.

- ``my_verify_greedy(my_verify_greedy)``: the learner's ``(num_accepted, next_token)`` against `verify_greedy` on
  hand-made logits (every draft accepted, the first rejected, a middle one rejected, k = 0, ...);
- ``my_expected_speedup(my_expected_speedup)``: Leviathan's formula against `theory.expected_speedup`, α = 0 and
  α = 1 included; ``best_gamma_gap(loop_costs)``: the draft's and the verification's cost measured inside the loop,
  ``(c, v)`` in steps of the target alone, from hand-made traces, against the check's own computation;
- ``forwards_saved(forwards_saved)``: target forwards saved over the target alone, on hand-made traces;
  ``grounded_prompts(expected_forwards)``: the target forwards that independent acceptance predicts for one
  generation, the shortened last rounds included, against the check's own recursion.
"""

from __future__ import annotations

import statistics
from typing import Any

import torch

from ...core.theory import expected_speedup, expected_tokens_per_round
from ...core.result import GenerationResult
from ...core.trace import RoundRecord, Trace
from ...core.verify import verify_greedy
from .core import Case, CheckReport, close, describe, find_mistake, is_number, mismatch, run_cases

# --- exercise 1: verification by hand ----------------------------------------------------------------------------


def _logits_choosing(*tokens: int, vocab: int = 5) -> torch.Tensor:
    """Hand-made logits ``[len(tokens), vocab]`` whose row i has its maximum at ``tokens[i]``."""
    logits = torch.zeros(len(tokens), vocab)
    logits[torch.arange(len(tokens)), torch.tensor(tokens, dtype=torch.long)] = 3.0
    return logits


def _verify_cases() -> list[Case]:
    """Rows of target logits ``[k + 1, V]`` and drafts ``[k]``; expected: `verify_greedy`'s two numbers for them."""
    generator = torch.Generator().manual_seed(0)
    wide = torch.randn(6, 12, generator=generator)  # [k + 1 = 6, V = 12]
    choice = wide.argmax(dim=-1)
    wide_drafts = torch.cat([choice[:3], (choice[3:5] + 1) % 12])  # agrees on 3, then disagrees
    chain = _logits_choosing(2, 4, 1, 3)  # the target's choices t_0 .. t_3 = 2, 4, 1, 3
    cases = [("every draft accepted: the bonus token", chain, [2, 4, 1]),
             ("the first draft rejected", chain, [0, 4, 1]),
             ("the second draft rejected, the third matching its row", chain, [2, 0, 1]),
             ("k = 0: no draft, a plain step", _logits_choosing(3), []),
             ("the last draft rejected", chain, [2, 4, 0]),
             ("k = 5 over a vocabulary of 12, random logits", wide, wide_drafts.tolist())]
    out = []
    for name, logits, drafts in cases:
        drafts = torch.tensor(drafts, dtype=torch.long)
        n, token, _ = verify_greedy(logits[None], drafts[None]).tolist()[0]  # one round: a batch of one
        out.append(Case(name, (logits, drafts), (n, token)))
    return out


def _as_pair(got: Any) -> tuple[int, int] | None:
    """``(num_accepted, next_token)`` from a tuple / list of two integers (or a one-row `Verdict`), else None."""
    if hasattr(got, "accepted") and hasattr(got, "next_token"):
        got = (got.accepted, got.next_token)
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return None
    try:
        return int(got[0]), int(got[1])
    except (TypeError, ValueError, RuntimeError):
        return None


def _judge_verify(case: Case, got: Any) -> str | None:
    logits, drafts = case.args
    pair = _as_pair(got)
    if pair is None:
        return f"Expected a pair (num_accepted, next_token) of integers, got {describe(got)}."
    if pair == case.expected:
        return None
    n, k = case.expected[0], len(drafts)
    choice = logits.argmax(dim=-1).tolist()  # t_0 .. t_k
    matches = sum(int(d) == t for d, t in zip(drafts.tolist(), choice))
    if pair[0] != n and pair[0] == matches:
        return mismatch(case.expected, pair, "you counted every draft that matches its row. Acceptance stops at the "
                                             "first mismatch: the rows after it predict what follows a rejected "
                                             "token, a future that will not happen.")
    if pair[0] == n:
        if n < k and pair[1] == int(drafts[n]):
            return mismatch(case.expected, pair, "that is the rejected draft itself: at the first mismatch the target "
                                                 "appends its own choice, the argmax of row num_accepted.")
        if pair[1] in [choice[i] for i in (n - 1, n + 1) if 0 <= i <= k] and pair[1] != choice[n]:
            return mismatch(case.expected, pair, "the next token comes from the wrong row: row i holds the target's "
                                                 "choice after d_1 .. d_i, so after n accepted drafts it is the argmax "
                                                 "of row n (row k, the last, for the bonus token).")
        return mismatch(case.expected, pair, "the next token is the argmax of row num_accepted of target_logits.")
    return mismatch(case.expected, pair, "walk along the drafts while draft_tokens[n] == target_logits[n].argmax(), "
                                         "and stop at the first mismatch.")


def my_verify_greedy(learner: Any) -> CheckReport:
    """Check ``my_verify_greedy(target_logits [k + 1, V], draft_tokens [k]) -> (num_accepted, next_token)``."""
    report = run_cases("my_verify_greedy", learner, _verify_cases(), _judge_verify)
    if not report and report.problem.startswith("Your function raised") and "k = 0" in report.case_name:
        return CheckReport(report.exercise, report.cases, report.failed_case, report.case_name,
                           report.problem + "\nHint: with k = 0 the drafter proposed nothing: target_logits has one "
                                            "row, and the answer is (0, its argmax) — a plain decoding step.")
    return report


# --- exercise 2: the best gamma ----------------------------------------------------------------------------------


def _speedup_cases() -> list[Case]:
    """``(alpha, gamma, c)`` triples; expected: `theory.expected_speedup`."""
    triples = [("alpha 0.7, gamma 4, c 0.05 (about the notebook's pair)", 0.7, 4, 0.05),
               ("alpha 0.8, gamma 1, c 0.05", 0.8, 1, 0.05), ("alpha 0.3, gamma 8, c 0.2", 0.3, 8, 0.2),
               ("gamma 0: no drafts", 0.5, 0, 0.1), ("alpha 0: nothing accepted", 0.0, 3, 0.1),
               ("alpha 1: every draft accepted (the target as its own draft)", 1.0, 4, 1.0)]
    return [Case(name, (a, g, c), expected_speedup(a, g, c)) for name, a, g, c in triples]


def _judge_speedup(case: Case, got: Any) -> str | None:
    alpha, gamma, c = case.args
    if not is_number(got):
        return f"Expected a number, got {describe(got)}."
    value = float(got)
    if close(value, case.expected, rel_tol=1e-6):
        return None
    tokens = expected_tokens_per_round(alpha, gamma)
    if value != value:  # NaN
        return mismatch(case.expected, value, "at alpha = 1 the closed form is 0 / 0: use its limit, γ + 1 tokens per "
                                              "round, or the sum 1 + α + ... + α^γ, which has no division.")
    if close(value, tokens, rel_tol=1e-6):
        return mismatch(case.expected, value, "that is the expected number of tokens per round; divide by the cost of "
                                              "a round, γ c + 1 target forwards.")
    if close(value, 1 / case.expected, rel_tol=1e-6):
        return mismatch(case.expected, value, "upside down: the speed-up is tokens per round divided by the cost of "
                                              "the round.")
    cost = gamma * c + 1
    if close(value, (tokens - 1) / cost, rel_tol=1e-6):
        return mismatch(case.expected, value, "you counted the accepted drafts only, α + α² + ... + α^γ, and left out "
                                              "the target's own token: every round also emits one token of the "
                                              "target's (recovered at the first rejection, bonus after a full "
                                              "accept), so a round yields 1 + α + ... + α^γ tokens.")
    if alpha < 1 and close(value, (1 - alpha ** gamma) / (1 - alpha) / cost, rel_tol=1e-6):
        return mismatch(case.expected, value, "a round emits up to γ + 1 tokens (the accepted drafts plus the "
                                              "recovered or bonus token): the numerator is 1 − α^(γ + 1).")
    if gamma and any(close(value, tokens / other, rel_tol=1e-6) for other in (gamma * (c + 1), gamma * c, c + 1)):
        return mismatch(case.expected, value, "a round costs γ draft forwards of c each plus ONE target forward: "
                                              "γ c + 1.")
    return mismatch(case.expected, value, "speed-up = (1 − α^(γ + 1)) / ((1 − α)(γ c + 1)).")


def my_expected_speedup(learner: Any) -> CheckReport:
    """Check ``my_expected_speedup(alpha, gamma, c) -> float`` against `theory.expected_speedup`."""
    report = run_cases("my_expected_speedup", learner, _speedup_cases(), _judge_speedup)
    if not report and report.problem.startswith("Your function raised") and "alpha 1" in report.case_name:
        return CheckReport(report.exercise, report.cases, report.failed_case, report.case_name,
                           report.problem + "\nHint: at alpha = 1 the closed form divides 0 by 0: use its limit, "
                                            "γ + 1 tokens per round, or the sum 1 + α + ... + α^γ.")
    return report


# `loop_costs(gamma, rounds, alone_rounds) -> (c, v)`: a round priced as the loop pays it, in the target alone's step.


def _step(alone_rounds: list[RoundRecord]) -> float:
    """The target alone's step in its own loop: the median ``verify_time`` of its rounds (after each run's first)."""
    return statistics.median(record.verify_time for record in alone_rounds)


def _loop_costs(gamma: int, rounds: list[RoundRecord], alone_rounds: list[RoundRecord]) -> tuple[float, float]:
    """``(c, v)`` as the bench measures them: the median draft time per draft forward over the rounds that drafted,
    and the median verify time of the rounds that verified a full draft of ``gamma``, both over `_step`. The
    rounds come after each run's first: its drafting and its verification also read the prompt (a prefill each)."""
    step = _step(alone_rounds)
    c = statistics.median(r.draft_time / r.draft_forwards for r in rounds if r.draft_forwards > 0) / step
    v = statistics.median(r.verify_time for r in rounds if r.drafted == gamma) / step
    return c, v


def _timed(rounds: list[tuple[int, float, float]], kind: str = "recovered") -> list[RoundRecord]:
    """Hand-made rounds after a run's first, from ``(drafted, draft ms, verify ms)``, one round each; a round that
    drafted nothing is a plain target step. Times in seconds."""
    return [RoundRecord(drafted, min(1, drafted), min(1, drafted) + 1, draft_ms / 1e3, verify_ms / 1e3, drafted,
                        kind=kind if drafted else "target") for drafted, draft_ms, verify_ms in rounds]


def _loop_cases() -> list[Case]:
    """Hand-made traces of speculative runs and of the target alone; expected: `_loop_costs`."""
    alone = _timed([(0, 0.0, ms) for ms in (10.0, 10.6, 10.2, 10.4, 10.8)])
    full = _timed([(4, 4.0, 13.0), (4, 4.4, 14.0), (4, 4.8, 13.6), (4, 4.2, 12.8)])
    shortened = _timed([(4, 4.0, 13.0), (4, 4.4, 14.2), (4, 4.8, 13.6), (2, 2.6, 11.6), (0, 0.05, 10.5)])
    busy_alone = _timed([(0, 0.0, ms) for ms in (10.0, 10.2, 31.0, 10.1)])
    busy = _timed([(2, 1.8, 11.9), (2, 1.9, 12.1), (2, 6.0, 30.5), (2, 2.0, 12.4), (2, 1.84, 12.0)])
    six = _timed([(6, 9.0, 17.5), (6, 9.6, 16.9), (6, 8.4, 16.4), (5, 7.5, 15.2)])
    cases = [("four full rounds of gamma = 4", 4, full, alone),
             ("gamma = 4 with a shortened last round and a final round that drafted nothing", 4, shortened, alone),
             ("gamma = 2, one round and one step of the target alone slowed by a busy moment", 2, busy, busy_alone),
             ("gamma = 6, a shortened round among three full ones", 6, six, alone)]
    return [Case(name, (gamma, rounds, alone_rounds), _loop_costs(gamma, rounds, alone_rounds))
            for name, gamma, rounds, alone_rounds in cases]


def _mean_costs(gamma: int, rounds: list[RoundRecord], alone_rounds: list[RoundRecord]) -> tuple[float, float]:
    step = statistics.mean(record.verify_time for record in alone_rounds)
    c = statistics.mean(r.draft_time / r.draft_forwards for r in rounds if r.draft_forwards > 0) / step
    return c, statistics.mean(r.verify_time for r in rounds if r.drafted == gamma) / step


LOOP_MISTAKES = [
    (lambda gamma, rounds, alone: tuple(x * _step(alone) for x in _loop_costs(gamma, rounds, alone)),
     "those are seconds: divide both by the target alone's step (the median verify_time of its rounds), so that c "
     "and v are in the theory's unit, target forwards."),
    (lambda gamma, rounds, alone: (statistics.median(r.draft_time for r in rounds if r.draft_forwards > 0)
                                   / _step(alone), _loop_costs(gamma, rounds, alone)[1]),
     "your c is a whole round's drafting: divide each round's draft_time by its draft_forwards, since the theory's c "
     "is the cost of ONE draft forward (a round of gamma drafts costs gamma c)."),
    (lambda gamma, rounds, alone: (statistics.median(r.draft_time / gamma for r in rounds if r.draft_forwards > 0)
                                   / _step(alone), _loop_costs(gamma, rounds, alone)[1]),
     "a shortened round drafted fewer than gamma tokens: divide each round's draft_time by its own draft_forwards, "
     "not by gamma."),
    (lambda gamma, rounds, alone: (_loop_costs(gamma, rounds, alone)[0],
                                   statistics.median(r.verify_time for r in rounds if r.drafted > 0) / _step(alone)),
     "v is the cost of verifying a full draft of gamma tokens: a shortened round verifies fewer and costs less, so "
     "count only the rounds with drafted == gamma."),
    (lambda gamma, rounds, alone: (_loop_costs(gamma, rounds, alone)[0],
                                   statistics.median(r.verify_time for r in rounds) / _step(alone)),
     "v counts the rounds that verified a full draft only: a final round that drafted nothing verifies no draft."),
    (_mean_costs,
     "that is the mean. Take the median, as the bench does: one round slowed by a busy moment of the machine moves "
     "a mean, not a median."),
    (lambda gamma, rounds, alone: _loop_costs(gamma, rounds, alone)[::-1],
     "c and v are swapped: return (c, v), the draft forward's cost first."),
    (lambda gamma, rounds, alone: (_loop_costs(gamma, rounds, alone)[0] * _step(alone) / statistics.median(
        r.verify_time for r in rounds if r.drafted == gamma), 1.0),
     "you priced the draft against a verification of the speculative loop; the unit is one step of the target "
     "ALONE, which is what the speed-up is measured against (v is then above 1)."),
]


def _as_costs(got: Any) -> tuple[float, float] | None:
    """``(c, v)`` from a pair of numbers, else None."""
    if not isinstance(got, (tuple, list)) or len(got) != 2 or not all(is_number(x) for x in got):
        return None
    return float(got[0]), float(got[1])


def _same_costs(a: Any, b: Any) -> bool:
    a, b = _as_costs(a), _as_costs(b)
    return a is not None and b is not None and all(close(x, y, rel_tol=1e-6) for x, y in zip(a, b))


def _judge_loop(case: Case, got: Any, learner: Any = None) -> str | None:
    pair = _as_costs(got)
    if pair is None:
        return f"Expected a pair (c, v) of numbers, got {describe(got)}."
    if _same_costs(pair, case.expected):
        return None
    hint = find_mistake(pair, case.args, case.expected, LOOP_MISTAKES, _same_costs, learner, _loop_cases())
    if not hint and close(pair[1], 1.0):
        hint = ("v = 1 is the theory's own assumption (a verification priced like one step of the target alone), not a "
                "measurement: take the median verify_time of the rounds that verified a full draft.")
    return mismatch(case.expected, pair, hint or (
        "c = median over the rounds that drafted of draft_time / draft_forwards, v = median verify_time of the rounds "
        "with drafted == gamma, both divided by the target alone's step (the median verify_time of its rounds)."))


def best_gamma_gap(learner: Any) -> CheckReport:
    """Check ``loop_costs(gamma, rounds, alone_rounds) -> (c, v)``: the draft forward's and the verification's cost
    measured inside the loop, in steps of the target alone, on hand-made rounds after each run's first (shortened
    rounds and a busy moment included)."""
    return run_cases("best_gamma_gap", learner, _loop_cases(), lambda case, got: _judge_loop(case, got, learner))


# --- exercise 3: grounded prompts ----------------------------------------------------------------------------------


def _run(rounds: list[tuple[int, int, str]], prompt_length: int = 5) -> GenerationResult:
    """A hand-made generation of ``(drafted, accepted, kind)`` rounds (no timings); the first reads the prompt."""
    records = [RoundRecord(drafted, accepted, accepted + 1, 0.0, 0.0, drafted, kind=kind)
               for drafted, accepted, kind in rounds]
    new = sum(record.emitted for record in records)
    sequence = torch.arange(prompt_length + new).view(1, -1) % 7  # [1, T + N]: the ids do not matter here
    trace = Trace(start_time=0.0, token_times=[0.0] * new, rounds=records)
    return GenerationResult.single(sequence, prompt_length, "speculative[hand-made]", trace)


def _forwards_cases() -> list[Case]:
    """Lists of hand-made generations; expected: new tokens (one target forward each alone) minus rounds."""
    speculative = _run([(4, 2, "recovered"), (4, 4, "bonus"), (4, 0, "recovered"), (3, 3, "bonus")])
    shortened = _run([(4, 1, "recovered"), (4, 3, "recovered"), (2, 2, "bonus")], prompt_length=9)
    alone = _run([(0, 0, "prefill")] + [(0, 0, "target")] * 5)
    rejected = _run([(4, 0, "recovered")] * 3)
    cases = [("one speculative run (13 new tokens, 4 target forwards)", [speculative]),
             ("two runs: the savings add up", [speculative, shortened]),
             ("the target alone: nothing saved", [alone]),
             ("every first draft rejected: nothing saved", [rejected, alone])]
    return [Case(name, (runs,), sum(r.new_tokens.numel() - len(r.trace.rounds) for r in runs)) for name, runs in cases]


def _judge_forwards(case: Case, got: Any) -> str | None:
    (runs,) = case.args
    if not is_number(got):
        return f"Expected a number of target forwards, got {describe(got)}."
    value = float(got)
    if close(value, case.expected, abs_tol=1e-9):
        return None
    new = sum(r.new_tokens.numel() for r in runs)
    used = sum(len(r.trace.rounds) for r in runs)
    if close(value, used):
        return mismatch(case.expected, value, "that is how many target forwards speculative decoding used; the saving "
                                              "is the target alone's forwards (one per new token) minus those.")
    if close(value, case.expected + len(runs)):
        return mismatch(case.expected, value, "the first round is a target forward too: count every round of the "
                                              "trace, the first one included.")
    if new and close(value, case.expected / new):
        return mismatch(case.expected, value, "that is the share saved; return the number of forwards (the share is "
                                              "saved / forwards alone).")
    if close(value, sum(r.drafted - r.accepted for run in runs for r in run.trace.rounds)):
        return mismatch(case.expected, value, "those are the rejected drafts. A target forward is saved for every "
                                              "token a round emits beyond its first.")
    return mismatch(case.expected, value, "forwards saved = new tokens (the target alone needs one forward each) − "
                                          "rounds of the trace (one target forward each), summed over the runs.")


def forwards_saved(learner: Any) -> CheckReport:
    """Check ``forwards_saved(results: list[GenerationResult]) -> int`` on hand-made traces."""
    return run_cases("forwards_saved", learner, _forwards_cases(), _judge_forwards)


# `expected_forwards(alpha, gamma, new_tokens)`: the target forwards the independence model expects for one generation.


def _exactly(alpha: float, n: int, k: int) -> float:
    """P(a round of k drafts accepts exactly n of them): the first n accepted, then one rejected, or all k."""
    return alpha**n * (1 - alpha) if n < k else alpha**k


def _expected_rounds(alpha: float, gamma: int, tokens: int, exactly=_exactly) -> float:
    """Expected rounds to emit ``tokens`` when each round drafts ``k = min(gamma, left - 1)`` (``left``: the tokens
    still to emit), accepts n of them with probability ``exactly(alpha, n, k)`` and emits n + 1 tokens."""
    rounds_for = [0.0] * (tokens + 1)  # rounds_for[left]: expected rounds still needed with `left` tokens to emit
    for left in range(1, tokens + 1):
        k = min(gamma, left - 1)
        rounds_for[left] = 1 + sum(exactly(alpha, n, k) * rounds_for[left - n - 1] for n in range(k + 1))
    return rounds_for[tokens]


def _expected_forwards(alpha: float, gamma: int, new_tokens: int) -> float:
    """The rounds of `_expected_rounds` for every new token: the first round drafts too (the prompt's forward
    verifies its drafts), one target forward each."""
    return _expected_rounds(alpha, gamma, new_tokens)


FORWARDS_MISTAKES = [
    (lambda alpha, gamma, new: new / expected_tokens_per_round(alpha, gamma),
     "that divides the tokens by the theory's tokens per round: it forgets that the last rounds draft fewer "
     "(k = min(γ, tokens left − 1)), so they emit fewer than a full round: follow the tokens left with a recursion "
     "over them."),
    (lambda alpha, gamma, new: 1 + _expected_rounds(alpha, gamma, new - 1),
     "there is no separate prefill: the first round drafts from the prompt and the prompt's forward verifies its "
     "drafts, so every forward is a round of the recursion."),
    (lambda alpha, gamma, new: _expected_rounds(alpha, gamma, new, lambda a, n, k: a**n),
     "α^n is the chance that the first n drafts are accepted, not that exactly n are: exactly n (n < k) also needs "
     "draft n + 1 rejected, α^n (1 − α); all k accepted has chance α^k."),
]


def _expected_forwards_cases() -> list[Case]:
    """``(alpha, gamma, new_tokens)``; expected: `_expected_forwards`."""
    triples = [("alpha 0.75, gamma 4, 48 new tokens (about the notebook's runs)", 0.75, 4, 48),
               ("alpha 0: every round emits one token", 0.0, 4, 10),
               ("alpha 1: every draft accepted", 1.0, 4, 12),
               ("a single new token: one round that drafts nothing", 0.6, 3, 1),
               ("gamma 1, 20 new tokens", 0.8, 1, 20),
               ("gamma 8 longer than the generation's 6 tokens", 0.5, 8, 6)]
    return [Case(name, (a, g, n), _expected_forwards(a, g, n)) for name, a, g, n in triples]


def _same_number(a: Any, b: Any) -> bool:
    return is_number(a) and is_number(b) and close(a, float(b), rel_tol=1e-6)


def _judge_expected_forwards(case: Case, got: Any, learner: Any = None) -> str | None:
    if not is_number(got):
        return f"Expected a number of target forwards, got {describe(got)}."
    value = float(got)
    if close(value, case.expected, rel_tol=1e-6):
        return None
    if value != value:  # NaN
        return mismatch(case.expected, value, "at alpha = 1 a closed form divides 0 by 0: a recursion over the tokens "
                                              "left, with the probabilities alpha^n (1 − alpha) and alpha^k, has no "
                                              "division.")
    hint = find_mistake(value, case.args, case.expected, FORWARDS_MISTAKES, _same_number, learner,
                        _expected_forwards_cases())
    if not hint and close(value, case.expected, rel_tol=0.02):
        hint = ("close, but the check wants the exact expectation: a simulation only approximates it. Write the "
                "recursion over the tokens left.")
    return mismatch(case.expected, value, hint or (
        "forwards = F(new_tokens), where F(r) = 1 + Σ_{n<k} α^n (1 − α) F(r − n − 1) + "
        "α^k F(r − k − 1) with k = min(γ, r − 1), and F(0) = 0."))


def grounded_prompts(learner: Any) -> CheckReport:
    """Check ``expected_forwards(alpha, gamma, new_tokens) -> float``: the target forwards that rounds of independent
    acceptance need for one generation, the shortened last rounds included."""
    return run_cases("grounded_prompts", learner, _expected_forwards_cases(),
                     lambda case, got: _judge_expected_forwards(case, got, learner))
