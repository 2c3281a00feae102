"""Self-checks of notebook 05 (drafting without a draft model): ``check.<exercise>(your_answer)``.

- `latest_prompt_lookup` (exercise 1): your prompt lookup that copies after the *latest* earlier occurrence of the
  longest recurring n-gram, run on hidden token lists against ``find_continuation(..., rule="latest")``;
- `free_draft_speedup` (exercise 2): the speed-up of a drafter that costs nothing to run, from a trace's rounds and
  measured verification costs, on hand-made traces;
- `which_exit` (exercise 3): multiple choice, what happens above and below the trained exit layer, and to c;
- `acceptance_by_position` (exercise 4): the acceptance of each draft position from a trace's rounds, on hand-made
  traces (what the EAGLE-3 ablation compares).

A wrong answer is compared with the usual mistakes (`find_mistake`): when it equals what one of them returns, the hint
names that mistake instead of only showing expected against got.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Sequence
from typing import Any

from ...core.trace import RoundRecord, Trace, per_position_acceptance
from ...drafters.prompt_lookup import find_continuation
from .core import Case, CheckReport, check_choice, close, find_mistake, is_number, mismatch, run_cases


# --- exercise 1: the most recent match ------------------------------------------------------------------------


def _latest(tokens: list[int], k: int, max_ngram: int = 3) -> list[int]:
    return find_continuation(tokens, k, max_ngram=max_ngram, rule="latest")


def _first(tokens: list[int], k: int, max_ngram: int = 3) -> list[int]:
    return find_continuation(tokens, k, max_ngram=max_ngram, rule="first")


def _scan(tokens: list[int], k: int, max_ngram: int, sizes: Callable[[int], range], *, tail: int = 1,
          stop: int = -1, keep_match: bool = False, cap: bool = True) -> list[int]:
    """Latest-occurrence lookup with one thing changed: the order of the n tried (``sizes``, given the largest n
    that fits), where the scan starts (``tail = 0``: at the suffix itself; 2: one occurrence too early) and stops
    (``stop = 0``: never at position 0), whether the match itself is copied, whether k caps the draft."""
    for n in sizes(min(max_ngram, len(tokens) - 1)):
        if not 0 < n < len(tokens):
            continue
        suffix = tokens[-n:]
        for start in range(len(tokens) - n - tail, stop, -1):
            if tokens[start : start + n] == suffix:
                begin = start if keep_match else start + n
                return tokens[begin : begin + k] if cap else tokens[begin:]
    return []


def _longest_first(top: int) -> range:
    return range(top, 0, -1)


def _shortest_first(top: int) -> range:
    return range(1, top + 1)


_RANGE_STOP = "range(top, 0, -1) counts down to 1: range's stop is exclusive, its start is not."

LOOKUP_MISTAKES = [
    (_first, "That is the continuation of the *first* (leftmost) occurrence, the rule of transformers and "
             "find_continuation's default. Scan the start positions from right to left, latest first: "
             "range(len(tokens) - n - 1, -1, -1)."),
    (lambda t, k, m=3: _scan(t, k, m, lambda top: range(top - 1, 0, -1)),
     "Your n range never tries n = max_ngram: the longest n-gram to match is min(max_ngram, len(tokens) - 1) "
     "itself, so start there, range(min(max_ngram, len(tokens) - 1), 0, -1). " + _RANGE_STOP),
    (lambda t, k, m=3: _scan(t, k, m, lambda top: range(top, 1, -1)),
     "Your n range never tries n = 1 (a single recurring token): range(top, 1, -1) stops at 2. " + _RANGE_STOP),
    (lambda t, k, m=3: _scan(t, k, m, lambda top: range(top + 1, 0, -1)),
     "Your n range starts one too high: n runs from min(max_ngram, len(tokens) - 1) down to 1, never above "
     "max_ngram. " + _RANGE_STOP),
    (lambda t, k, m=3: _scan(t, k, m, _longest_first, tail=2),
     "Your scan starts one position too early and misses an occurrence that ends right before the last token: "
     "the latest candidate start is len(tokens) - n - 1 (its n-gram ends at index len(tokens) - 2)."),
    (lambda t, k, m=3: _scan(t, k, m, _longest_first, stop=0),
     "Your scan never looks at start position 0: range(len(tokens) - n - 1, 0, -1) stops at 1. To reach the first "
     "token, the stop must be -1: range(len(tokens) - n - 1, -1, -1)."),
    (lambda t, k, m=3: _scan(t, k, m, _longest_first, tail=0),
     "The latest occurrence of the last n tokens is always the suffix itself, and nothing follows it. Start the "
     "scan one position earlier, at len(tokens) - n - 1, so that the occurrence ends before the last token."),
    (lambda t, k, m=3: _scan(t, k, m, _shortest_first),
     "You tried the shortest n first. Prompt lookup prefers the *longest* recurring n-gram (n from max_ngram "
     "down to 1), and only then takes its latest occurrence."),
    (lambda t, k, m=3: _scan(t, k, m, _longest_first, keep_match=True),
     "Your draft starts with the matched n-gram itself. The draft is what *followed* the match: "
     "tokens[start + n : start + n + k]."),
    (lambda t, k, m=3: _scan(t, k, m, _longest_first, cap=False),
     "Your draft is longer than k: copy at most k tokens, tokens[start + n : start + n + k]."),
]


def _lookup_cases() -> list[Case]:
    hand_made = [
        ("the suffix [1, 2, 3] occurs twice before: first and latest differ",
         [1, 2, 3, 9, 4, 1, 2, 3, 8, 5, 1, 2, 3], 2, 3),
        ("the longest recurring n-gram [1, 2] occurs once; the shorter [2] recurs later",
         [1, 2, 5, 7, 3, 2, 6, 1, 2], 2, 3),
        ("no n-gram recurs", [4, 8, 15, 16, 23, 42], 4, 3),
        ("the latest match ends one token before the end: fewer than k tokens follow it", [4, 7, 7], 3, 3),
        ("overlapping repeats", [5, 5, 5, 5], 4, 3),
        ("max_ngram = 1: only the last token is matched", [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5], 3, 1),
        ("a continuation that is longer than k", [6, 1, 2, 3, 4, 5, 6, 7, 8, 6], 3, 3),
    ]
    cases = [Case(name, (tokens, k, max_ngram), _latest(tokens, k, max_ngram)) for name, tokens, k, max_ngram
             in hand_made]
    rng = random.Random(5)
    for number in range(60):
        tokens = [rng.randrange(rng.choice((3, 5, 12))) for _ in range(rng.randrange(2, 40))]
        k, max_ngram = rng.choice((1, 4, 8)), rng.choice((1, 2, 3))
        cases.append(Case(f"random token list {number + 1} (k = {k}, max_ngram = {max_ngram})", (tokens, k, max_ngram),
                          _latest(tokens, k, max_ngram)))
    return cases


def _same_tokens(a: Any, b: Any) -> bool:
    try:
        return [int(x) for x in a] == [int(x) for x in b]
    except (TypeError, ValueError):
        return False


def _answers(function: Callable, cases: Sequence[Case]) -> list[Any]:
    """``function``'s answer on every case (None where it raises)."""
    answers = []
    for case in cases:
        try:
            answers.append(function(*copy.deepcopy(case.args)))
        except Exception:  # noqa: BLE001 - a crash is simply not an answer that agrees with anything
            answers.append(None)
    return answers


def _closest_mistake(learner: Callable, cases: Sequence[Case], case: Case, got: Any) -> str:
    """The hint of the usual mistake that explains the learner's answers best: among those giving ``got`` on the
    failing ``case`` (and not the right answer), the one that agrees with the learner on the most hidden cases.
    Several mistakes can give the same wrong answer on one case (an empty draft, say); across all cases only the
    learner's own mistake keeps agreeing."""
    theirs = _answers(learner, cases)
    best, best_agreement = "", -1
    for mistake, hint in LOOKUP_MISTAKES:
        if not find_mistake(got, case.args, case.expected, [(mistake, hint)], _same_tokens):
            continue
        agreement = sum(a is not None and _same_tokens(a, b) for a, b in zip(theirs, _answers(mistake, cases)))
        if agreement > best_agreement:
            best, best_agreement = hint, agreement
    return best


def latest_prompt_lookup(learner: Callable) -> CheckReport:
    """Exercise 1: ``learner(tokens, k, max_ngram)`` must return the up to k tokens that followed the latest
    earlier occurrence of the longest recurring suffix n-gram (``find_continuation(..., rule="latest")``), on
    hand-made and random token lists."""
    cases = _lookup_cases()

    def judge(case: Case, got: Any) -> str | None:
        if not isinstance(got, (list, tuple)):
            return f"Expected a list of token ids, got {type(got).__name__}."
        if _same_tokens(got, case.expected):
            return None
        return mismatch(case.expected, got, _closest_mistake(learner, cases, case, got))

    return run_cases("latest_prompt_lookup", learner, cases, judge)


# --- exercise 2: gamma for a drafter that is free ---------------------------------------------------------------


def _speedup(rounds: Sequence[tuple[int, int]], verify_cost: dict[int, float]) -> float:
    """Tokens emitted over the cost of the verification forwards, a round with d drafts reading d + 1 positions."""
    return sum(emitted for _, emitted in rounds) / sum(verify_cost[drafted + 1] for drafted, _ in rounds)


SPEEDUP_MISTAKES = [
    (lambda rounds, v: sum(e for _, e in rounds) / len(rounds),
     "That is tokens per target forward: it prices every verification forward at 1. A round that verified d "
     "drafts reads d + 1 positions and costs verify_cost[d + 1] one-token forwards."),
    (lambda rounds, v: sum(e for _, e in rounds) / (len(rounds) * v[max(d for d, _ in rounds) + 1]),
     "You priced every round at the longest draft's cost. Prompt lookup often drafts fewer tokens than gamma, or "
     "none (that round verifies 1 position and costs verify_cost[1] = 1): price each round by its own drafts."),
    (lambda rounds, v: sum(e for _, e in rounds) / sum(v[max(d, 1)] for d, _ in rounds),
     "A round with d drafts verifies d + 1 positions (the last committed token, then the d drafts): its cost is "
     "verify_cost[d + 1], not verify_cost[d]."),
    (lambda rounds, v: sum(e / v[d + 1] for d, e in rounds) / len(rounds),
     "You averaged the rounds' own ratios. The speed-up is all tokens over all cost, sum(emitted) / sum(cost): an "
     "average of ratios weights a cheap one-token round like a long accepted copy."),
    (lambda rounds, v: sum(v[d + 1] for d, _ in rounds) / sum(e for _, e in rounds),
     "That is the cost per token, the inverse of the speed-up: return tokens / cost."),
    (lambda rounds, v: sum(e - 1 for _, e in rounds) / sum(v[d + 1] for d, _ in rounds),
     "You left out the target's own token. Every verification forward emits the accepted drafts *plus* one token "
     "of the target's (recovered or bonus), and `emitted` already counts it: the tokens are sum(emitted), not "
     "sum(emitted - 1). A round that drafted nothing still writes one token."),
    (lambda rounds, v: sum(d for d, _ in rounds) / sum(v[d + 1] for d, _ in rounds),
     "You counted the drafted tokens. Only the accepted ones enter the text, plus the target's own token each "
     "round: the tokens are sum(emitted)."),
]

_POSITIONS_HINT = ("A round with d drafts verifies d + 1 positions, the target's own last token and then the d drafts, "
                   "so its cost is verify_cost[d + 1]; verify_cost has no entry 0, because even a round that drafted "
                   "nothing runs the target on one position.")

_COSTS = {n: 1.0 + 0.07 * (n - 1) for n in range(1, 18)}  # a CPU-like v: 17 positions cost about twice one
_STEEP = {n: 1.0 + 0.25 * (n - 1) for n in range(1, 10)}  # a verify forward that is dear per position

SPEEDUP_CASES = [
    Case("prompt lookup at gamma = 8: long copies, short ones, and rounds that drafted nothing",
         ([(8, 9), (0, 1), (3, 2), (8, 4), (0, 1), (5, 6)], _COSTS)),
    Case("every round drafted gamma = 4 and kept them all", ([(4, 5), (4, 5), (4, 5)], _STEEP)),
    Case("a dear verify forward: long drafts that are rejected early", ([(8, 1), (8, 2), (1, 2), (0, 1)], _STEEP)),
    Case("one round of 16 drafts, all accepted", ([(16, 17)], _COSTS)),
    Case("rounds that drafted nothing only: the target alone", ([(0, 1), (0, 1)], _COSTS)),
]
SPEEDUP_CASES = [Case(case.name, case.args, _speedup(*case.args)) for case in SPEEDUP_CASES]


def free_draft_speedup(learner: Callable) -> CheckReport:
    """Exercise 2: ``learner(rounds, verify_cost)`` with ``rounds`` a list of ``(drafted, emitted)`` per
    verification forward and ``verify_cost`` a dict ``{positions: cost in one-token forwards}`` must return
    ``sum(emitted) / sum(verify_cost[drafted + 1])``, on hand-made traces."""

    def judge(case: Case, got: Any) -> str | None:
        if not is_number(got):
            return f"Expected a number (the speed-up), got {type(got).__name__}."
        if close(got, case.expected, rel_tol=1e-9):
            return None
        hint = find_mistake(got, case.args, case.expected, SPEEDUP_MISTAKES, lambda a, b: close(a, b, rel_tol=1e-9))
        return mismatch(case.expected, got, hint)

    report = run_cases("free_draft_speedup", learner, SPEEDUP_CASES, judge)
    if not report and report.problem.startswith("Your function raised KeyError: 0"):
        return CheckReport(report.exercise, report.cases, report.failed_case, report.case_name,
                           report.problem + "\nHint: " + _POSITIONS_HINT)
    return report


# --- exercise 3: which exit? -----------------------------------------------------------------------------------

EXIT_FEEDBACK = {
    "a": "Depth alone does not make an exit readable, and c is not free: each shallow pass runs E layers plus the "
         "LM head, so c grows with E, about (E layers + head) / (all layers + head); an exit halfway up pays about "
         "half a target forward per draft. Print the alpha of each exit: the untrained deeper ones agree with the "
         "target less often than the trained one (the solution asserts it).",
    "b": "Yes. Only layer 4 was trained to be read by the LM head (the auxiliary loss); the other exits were not, and "
         "depth does not make up for it: the untrained exits, shallower or deeper, agree with the target less often "
         "than layer 4 (the solution asserts it on its run). Each draft also costs more the deeper the exit: "
         "c ~ (E layers + LM head) / (all layers + LM head), one more layer's weights per step up. The speed "
         "optimum is a shallow exit that was trained.",
    "c": "The output does not depend on the exit: verification checks every draft with the full target, so any "
         "exit layer gives the target's own greedy tokens (the exercise can assert it). Only acceptance and cost "
         "change.",
    "d": "The LM head (vocabulary x hidden size) weighs about two layers here, not the whole model: c still grows by "
         "one layer's weights per extra layer, so an exit at 12 reads several times what an exit at 2 reads "
         "(print the weights ratio of each exit).",
}


def which_exit(answer: Any) -> CheckReport:
    """Exercise 3 (multiple choice): what happens above and below the trained exit layer, and what of c?

    (a) Deeper exits always draft better, so the deepest exit is the fastest.
    (b) Only the trained exit (layer 4) drafts well: the untrained exits, shallower or deeper, agree less often,
        and c grows with E, so a shallow, trained exit is where drafting pays.
    (c) Any exit other than layer 4 breaks token identity, because the KV cache is shared.
    (d) c is about the same for every exit, because the LM head dominates the cost of a shallow pass.
    """
    return check_choice("which_exit", answer, "b", EXIT_FEEDBACK)


# --- exercise 4: acceptance by draft position --------------------------------------------------------------------


def _by_position(rounds: Sequence[tuple[int, int]]) -> list[float]:
    """`per_position_acceptance` on ``(drafted, accepted)`` pairs: at position j (0-based), over the rounds that
    drafted more than j tokens, the share that accepted more than j."""
    return per_position_acceptance(Trace(start_time=0.0, rounds=[
        RoundRecord(drafted, accepted, accepted + 1, draft_time=0.0, verify_time=0.0, draft_forwards=drafted,
                    kind="bonus" if accepted == drafted else "recovered")
        for drafted, accepted in rounds]))


POSITION_MISTAKES = [
    (lambda rounds: [sum(a > j for _, a in rounds) / len(rounds) for j in range(max(d for d, _ in rounds))],
     "You divided by every round. Position j counts only the rounds that drafted more than j tokens: a round that "
     "stopped drafting earlier (a short copy, the end of the text) says nothing about position j."),
    (lambda rounds: [sum(a == j + 1 for d, a in rounds if d > j) / sum(d > j for d, _ in rounds)
                     for j in range(max(d for d, _ in rounds))],
     "You counted the rounds that accepted exactly j + 1 drafts. Draft j is accepted whenever *more than* j were "
     "accepted: accepted > j (drafts are kept as a prefix)."),
    (lambda rounds: [sum(a > j for d, a in rounds if d > j) / max(1, sum(a > j - 1 for d, a in rounds if d > j))
                     for j in range(max(d for d, _ in rounds))],
     "That is the acceptance of draft j given that draft j - 1 was accepted (a conditional rate). Here it is the "
     "share of the rounds that drafted position j, whatever happened before it: a draft after a rejection counts "
     "as not accepted."),
]

POSITION_CASES = [
    Case("gamma = 3, every round drafted 3", ([(3, 3), (3, 1), (3, 0), (3, 2)],)),
    Case("a drafter that drafts fewer tokens in some rounds", ([(5, 5), (2, 2), (5, 1), (0, 0), (3, 1)],)),
    Case("every draft rejected", ([(4, 0), (4, 0)],)),
    Case("one long round, all accepted", ([(6, 6)],)),
]
POSITION_CASES = [Case(case.name, case.args, _by_position(*case.args)) for case in POSITION_CASES]


def acceptance_by_position(learner: Callable) -> CheckReport:
    """Exercise 4: ``learner(rounds)`` with ``rounds`` a list of ``(drafted, accepted)`` per verification round
    must return, for each draft position j = 1 .. the longest draft, the share of the rounds that drafted j tokens
    or more whose j-th draft was accepted (`per_position_acceptance`), on hand-made traces."""

    def same(a: Any, b: Sequence[float]) -> bool:
        return isinstance(a, (list, tuple)) and len(a) == len(b) and all(
            is_number(x) and close(x, y, rel_tol=1e-9, abs_tol=1e-12) for x, y in zip(a, b))

    def judge(case: Case, got: Any) -> str | None:
        if not isinstance(got, (list, tuple)):
            return f"Expected a list with one share per draft position, got {type(got).__name__}."
        if same(got, case.expected):
            return None
        if len(got) != len(case.expected):
            return mismatch(case.expected, got, f"There is one entry per position up to the longest draft of the "
                                                f"trace: {len(case.expected)} here.")
        return mismatch(case.expected, got, find_mistake(got, case.args, case.expected, POSITION_MISTAKES, same,
                                                         learner, POSITION_CASES))

    return run_cases("acceptance_by_position", learner, POSITION_CASES, judge)
