"""Self-checks of notebook 06 (tuning and measuring): ``check.<exercise>(your_answer)``.

- `predicted_best_gamma` (exercise 1): the gamma with the largest priced prediction, on hidden (alpha, c, v) against
  ``theory.expected_speedup``;
- `relative_drop_rule` (exercise 2): your `DraftStopRule`, driven token by token on hidden confidence sequences as
  `DraftModelDrafter` drives it, against the rule the exercise describes;
- `disable_threshold` (exercise 3): the ``disable_by_batch_size`` threshold from batch-sweep rows, against
  ``bench.batches.choose_threshold``;
- `percentile` (exercise 4): a latency percentile with linear interpolation, against ``trace.latency_percentiles``.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

from ...bench.batches import choose_threshold
from ...drafters.schedules import DraftStopRule
from ...core.theory import expected_speedup
from ...core.trace import latency_percentiles
from .core import Case, CheckReport, close, find_mistake, is_number, mismatch, run_cases

# --- exercise 1: the best gamma, predicted ---------------------------------------------------------------------


def _best(alpha: float, c: float, verify_cost: dict[int, float]) -> list[int]:
    """Every gamma of ``verify_cost`` whose priced speed-up is the largest (ties: any of them is right)."""
    speedups = {gamma: expected_speedup(alpha, gamma, c, v) for gamma, v in verify_cost.items()}
    top = max(speedups.values())
    return [gamma for gamma, s in speedups.items() if close(s, top, rel_tol=1e-12)]


def _unpriced(alpha: float, c: float, verify_cost: dict[int, float]) -> int:
    return max(verify_cost, key=lambda gamma: expected_speedup(alpha, gamma, c))


GAMMA_MISTAKES = [
    (_unpriced, "That is the best gamma of Leviathan's formula, with every verification priced at 1: pass the "
                "measured v, expected_speedup(alpha, gamma, c, verify_cost[gamma])."),
    (lambda a, c, v: min(v, key=lambda g: expected_speedup(a, g, c, v[g])),
     "That gamma has the *smallest* predicted speed-up: take the largest (max, not min)."),
    (lambda a, c, v: max(v, key=lambda g: expected_speedup(a, g, v[g], c)),
     "You swapped c and v: the signature is expected_speedup(alpha, gamma, c, verify_cost), c the draft's cost "
     "per token and v the verification's."),
    (lambda a, c, v: max(v), "That is the largest gamma. More drafts accept more tokens a round, but each costs c "
                             "and the verification grows with gamma: compare the priced speed-ups."),
    (lambda a, c, v: min(v, key=v.get), "That is the gamma with the cheapest verification. The speed-up also "
                                        "weighs the tokens a round accepts: compare the priced speed-ups."),
]

_SWEPT = (1, 2, 3, 4, 6, 8)  # the gammas of the stored sweep: the keys are not 0 .. n - 1

GAMMA_CASES = [
    Case("alpha 0.8, c 0.1, a verify cost that grows fast with gamma",
         (0.8, 0.1, {g: 1.0 + 0.12 * g for g in _SWEPT})),
    Case("alpha 0.9, c 0.02, a nearly free verification", (0.9, 0.02, {g: 1.0 + 0.01 * g for g in _SWEPT})),
    Case("alpha 0.55, c 0.15, the CPU-like costs of the stored sweep",
         (0.55, 0.15, {1: 1.24, 2: 1.39, 3: 1.29, 4: 0.90, 6: 1.17, 8: 1.36})),
    Case("alpha 0.7, c 0.05, gammas 2 to 12", (0.7, 0.05, {g: 1.0 + 0.08 * g for g in range(2, 13)})),
    Case("alpha 0.95, c 0.08, one gamma only", (0.95, 0.08, {5: 1.3})),
]
GAMMA_CASES = [Case(case.name, case.args, _best(*case.args)) for case in GAMMA_CASES]


def predicted_best_gamma(learner: Callable) -> CheckReport:
    """Exercise 1: ``learner(alpha, c, verify_cost)`` must return the key of ``verify_cost`` (gamma -> v) with the
    largest ``expected_speedup(alpha, gamma, c, v)``, on hidden alphas, costs and gamma sets."""

    def judge(case: Case, got: Any) -> str | None:
        alpha, c, verify_cost = case.args
        best = case.expected
        if is_number(got) and got in best:
            return None
        expected = best[0]
        if isinstance(got, float) and close(got, expected_speedup(alpha, expected, c, verify_cost[expected]), 1e-9):
            return mismatch(expected, got, "You returned the best predicted speed-up; return the gamma that gives "
                                           "it (the key of verify_cost).")
        hint = find_mistake(got, case.args, expected, GAMMA_MISTAKES, lambda a, b: a == b, learner, GAMMA_CASES)
        gammas = list(verify_cost)
        if not hint and isinstance(got, int) and 0 <= got < len(gammas) and gammas[got] in best:
            hint = "That is the position of the best gamma in the dict, not the gamma itself: return the key."
        return mismatch(expected, got, hint)

    return run_cases("predicted_best_gamma", learner, GAMMA_CASES, judge)


# --- exercise 2: a stop rule of your own -----------------------------------------------------------------------


def _drafted(should_stop: Callable[[list[float]], Any], confidences: Sequence[float]) -> int | str:
    """How many tokens a round drafts with this rule: `DraftModelDrafter` asks it after every drafted token (the
    token that triggers the stop is still proposed); the round's k is ``len(confidences)``."""
    for count in range(1, len(confidences) + 1):
        verdict = should_stop(list(confidences[:count]))
        if verdict is None:
            return "None"
        if verdict:
            return count
    return len(confidences)


def _relative_drop(confidences: list[float]) -> bool:
    return confidences[-1] < 0.5 * confidences[0]


STOP_MISTAKES = [  # the order matters where two mistakes draft alike on a case: the more specific one first
    (lambda c: c[-1] <= 0.5 * c[0], "A token at exactly half the first confidence is not below it: use <, not <=."),
    (lambda c: min(c) < 0.5 * max(c), "You compared with the round's largest confidence so far; the bar is half "
                                      "the *first* one, 0.5 * confidences[0]."),
    (lambda c: c[-1] < 0.5, "You compared with a fixed 0.5. The bar moves with the round: half its *first* "
                            "confidence, 0.5 * confidences[0]."),
    (lambda c: c[-1] < 0.4, "That is ConfidenceStop(0.4)'s rule (a fixed threshold). The bar is half the round's "
                            "first confidence, 0.5 * confidences[0]."),
    (lambda c: len(c) > 1 and c[-1] < 0.5 * c[-2],
     "You compared with the *previous* token's confidence. The bar is set once per round, by its first token: "
     "0.5 * confidences[0]."),
    (lambda c: c[0] < 0.5 * c[-1], "Your rule stops when a confidence *rises* to twice the first one; it should "
                                   "stop on a drop, when the newest is below half the first: confidences[-1] < "
                                   "0.5 * confidences[0]."),
    (lambda c: len(c) > 1 and c[-2] < 0.5 * c[0],
     "Your rule stops one token late: should_stop is asked right after each drafted token, whose confidence is "
     "confidences[-1]; stop on that one, not on the token before it."),
    (lambda c: c[-1] < 0.5 * sum(c) / len(c), "You compared with half the *mean* confidence so far. The bar is "
                                              "half the round's first confidence, 0.5 * confidences[0]."),
]

STOP_SEQUENCES = [
    ("an unsure start, bar 0.2", [0.4, 0.35, 0.3, 0.25, 0.19, 0.9]),
    ("a steady fall, bar 0.45", [0.9, 0.7, 0.5, 0.44, 0.3]),
    ("a token at exactly half the first, bar 0.4", [0.8, 0.4, 0.7, 0.3]),
    ("a dip, a recovery, then a drop, bar 0.3", [0.6, 0.25, 0.9, 0.2]),
    ("a rise above the first confidence, then a fall, bar 0.25", [0.5, 0.9, 0.4, 0.2, 0.8]),
    ("never below half, bar 0.3", [0.6, 0.5, 0.45, 0.31, 0.35]),
    ("a confident round that falls at once, bar 0.49", [0.98, 0.97, 0.3, 0.9]),
    ("one token only", [0.1]),
]
STOP_CASES = [Case(f"confidences {seq}: {name}", (seq,), _drafted(_relative_drop, seq)) for name, seq in STOP_SEQUENCES]


def relative_drop_rule(answer: Any) -> CheckReport:
    """Exercise 2: your `DraftStopRule` (the class or an instance) must stop a round right after the first token
    whose confidence is below half the round's first confidence. Driven as `DraftModelDrafter` drives it: after
    each drafted token, ``should_stop(confidences so far)``; compared by the number of tokens the round drafts."""
    rule = answer() if isinstance(answer, type) and issubclass(answer, DraftStopRule) else answer
    if not isinstance(rule, DraftStopRule):
        return CheckReport("relative_drop_rule", 1, 1, "the argument", (
            f"check.relative_drop_rule takes your DraftStopRule subclass (or an instance of it), got "
            f"{type(answer).__name__}: write `class RelativeDrop(DraftStopRule)` with a should_stop method."))

    mistakes = [(lambda seq, wrong=wrong: _drafted(wrong, seq), hint) for wrong, hint in STOP_MISTAKES]

    driven = lambda seq: _drafted(rule.should_stop, seq)  # noqa: E731 - as run_cases drives it

    def judge(case: Case, got: Any) -> str | None:
        if got == "None":
            return ("should_stop returned None: return the comparison itself (True: stop after this token, "
                    "False: draft another).")
        if got == case.expected:
            return None
        hint = find_mistake(got, case.args, case.expected, mistakes, lambda a, b: a == b, driven, STOP_CASES)
        return f"Expected the round to draft {case.expected} tokens, got {got}." + (f"\nHint: {hint}" if hint else "")

    return run_cases("relative_drop_rule", driven, STOP_CASES, judge)


# --- exercise 3: does the threshold depend on the machine? ---------------------------------------------------------


def _rows(method: str, speedups: dict[int, float]) -> list[dict]:
    return [{"method": method, "batch": batch, "speedup": s} for batch, s in speedups.items()]


_BASE, _DRAFT, _LOOKUP = "batched-autoregressive", "batched-draft-model[gamma=3]", "batched-prompt-lookup[gamma=4]"


def _sweep(*groups: list[dict]) -> list[dict]:
    return [row for group in groups for row in group]


THRESHOLD_CASES = [
    Case("wins up to batch 4, loses from 8",
         (_sweep(_rows(_BASE, {b: 1.0 for b in (1, 2, 4, 8, 16)}),
                 _rows(_DRAFT, {1: 1.3, 2: 1.25, 4: 1.1, 8: 0.96, 16: 0.8})), _DRAFT)),
    Case("wins at 1 and 2, loses at 4, wins again at 8 (noise), loses at 16",
         (_rows(_DRAFT, {1: 1.2, 2: 1.1, 4: 0.98, 8: 1.02, 16: 0.9}), _DRAFT)),
    Case("a speed-up of exactly 1.0 at batch 4", (_rows(_DRAFT, {1: 1.2, 2: 1.1, 4: 1.0, 8: 0.9}), _DRAFT)),
    Case("rows not sorted by batch size",
         ([{"method": _DRAFT, "batch": b, "speedup": s} for b, s in ((8, 0.97), (1, 1.3), (4, 1.05), (2, 1.2),
                                                                     (16, 0.8))], _DRAFT)),
    Case("two methods in one sweep: the question is about prompt lookup",
         (_sweep(_rows(_DRAFT, {1: 1.3, 2: 1.2, 4: 1.1, 8: 1.05, 16: 0.9}),
                 _rows(_LOOKUP, {1: 1.05, 2: 0.99, 4: 1.01, 8: 0.97, 16: 0.9})), _LOOKUP)),
    Case("slower than plain batching even at batch 1", (_rows(_LOOKUP, {1: 0.97, 2: 0.95, 4: 0.9}), _LOOKUP)),
]
THRESHOLD_CASES = [Case(case.name, case.args, choose_threshold(*case.args)) for case in THRESHOLD_CASES]


def _mine(rows: list[dict], method: str) -> list[dict]:
    return sorted((r for r in rows if r["method"] == method), key=lambda r: r["batch"])


def _in_given_order(rows: list[dict], method: str) -> int | None:
    threshold = None
    for row in (r for r in rows if r["method"] == method):
        if row["speedup"] <= 1.0:
            break
        threshold = row["batch"]
    return threshold


THRESHOLD_MISTAKES = [  # the more specific mistake first where two answer alike
    (lambda rows, m: choose_threshold([dict(r, speedup=r["speedup"] + 1e-9) for r in rows], m),
     "A speed-up of exactly 1.0 is no gain: speculation must *beat* plain batching (speed-up > 1)."),
    (lambda rows, m: max((r["batch"] for r in _mine(rows, m) if r["speedup"] > 1), default=None),
     "That is the largest batch size where speculation won, after it had already lost at a smaller one. The "
     "threshold is the largest size up to which it won at *every* measured size: stop at the first loss."),
    (lambda rows, m: next((r["batch"] for r in _mine(rows, m) if r["speedup"] <= 1), None),
     "That is the first batch size where speculation *lost*: the threshold is the last size before it, where it "
     "still won (disable_by_batch_size keeps speculating up to and including the threshold)."),
    (_in_given_order, "Sort the rows by batch size first: a sweep need not list them in order."),
    (lambda rows, m: choose_threshold([dict(r, method=m) for r in rows], m),
     "Use the rows of `method` only: the sweep holds other methods' rows too."),
    (lambda rows, m: choose_threshold(rows, m) or 0,
     "When speculation loses even at the smallest batch size there is no threshold: return None (never speculate)."),
    (lambda rows, m: next((r["speedup"] for r in reversed(_mine(rows, m)) if r["batch"] == choose_threshold(rows, m)),
                          None),
     "That is the speed-up at the threshold; return the batch size itself (the row's \"batch\")."),
    (lambda rows, m: next((i for i, r in enumerate(_mine(rows, m)) if r["batch"] == choose_threshold(rows, m)), None),
     "That is the position of the threshold's row among the sorted rows; return its batch size (row[\"batch\"])."),
    (lambda rows, m: sum(1 for r in _mine(rows, m) if r["batch"] <= (choose_threshold(rows, m) or 0)) or None,
     "That is how many batch sizes speculation won at, not the largest of them: return row[\"batch\"]."),
]


def disable_threshold(learner: Callable) -> CheckReport:
    """Exercise 3: ``learner(rows, method)`` (rows as in the stored batch sweeps: dicts with "method", "batch",
    "speedup") must return the largest batch size up to which ``method`` beat plain batching at every measured
    size, or None, as ``choose_threshold`` does; on hand-made sweeps."""

    def judge(case: Case, got: Any) -> str | None:
        if got == case.expected and type(got) is type(case.expected):
            return None
        same = lambda a, b: a == b and type(a) is type(b)  # noqa: E731 - None and 0 differ
        return mismatch(case.expected, got, find_mistake(got, case.args, case.expected, THRESHOLD_MISTAKES, same,
                                                         learner, THRESHOLD_CASES))

    return run_cases("disable_threshold", learner, THRESHOLD_CASES, judge)


# --- exercise 4: averages hide slow requests -----------------------------------------------------------------------


def _percentile(values: list[float], p: float) -> float:
    return latency_percentiles(values, (p,))[p]


def _at_rank(values: list[float], p: float, rank: Callable[[float, int], float]) -> float:
    ordered = sorted(values)
    return ordered[min(max(int(rank(p, len(ordered))), 0), len(ordered) - 1)]


_NO_INTERPOLATION = ("You returned one of the values (the one at the rank rounded down, or the nearest). Interpolate "
                     "linearly between the two neighbours, v[lo] + (r - lo) * (v[lo + 1] - v[lo]) with "
                     "r = p / 100 * (n - 1) and lo = floor(r): NumPy's default, and the library's.")

PERCENTILE_MISTAKES = [
    (lambda v, p: _at_rank(v, p, lambda p, n: p / 100 * (n - 1)), _NO_INTERPOLATION),
    (lambda v, p: _at_rank(v, p, lambda p, n: round(p / 100 * (n - 1))), _NO_INTERPOLATION),
    (lambda v, p: _interpolated(sorted(v), p / 100 * len(v)),
     "The rank of percentile p among n sorted values is p / 100 * (n - 1) (0 is the smallest, n - 1 the largest), "
     "not p / 100 * n; then interpolate between the two neighbours of that rank, rather than rounding it up."),
    (lambda v, p: _interpolated(list(v), p / 100 * (len(v) - 1)),
     "Sort the values first: a percentile is read off the sorted list."),
    (lambda v, p: sum(v) / len(v), "That is the mean. The 95th percentile is the value that 95 in 100 of the gaps stay below "
                                   "(with linear interpolation between neighbours)."),
    (lambda v, p: _percentile(v, 50), "That is the median (p50), whatever p: read the rank from p, "
                                      "r = p / 100 * (n - 1)."),
    (lambda v, p: _interpolated(sorted(v), p * (len(v) - 1)),
     "You returned the largest value: your rank went past the end. p is given from 0 to 100, so divide it by 100, "
     "r = p / 100 * (n - 1)."),
    (lambda v, p: _swapped_weights(sorted(v), p / 100 * (len(v) - 1)),
     "Your interpolation weights are swapped: the fraction r - lo goes to the *upper* neighbour, "
     "v[lo] + (r - lo) * (v[lo + 1] - v[lo])."),
    (lambda v, p: statistics.quantiles(v, n=100)[int(p) - 1] if 0 < p < 100 and p == int(p) else None,
     "That is statistics.quantiles' default, method=\"exclusive\" (rank p / 100 * (n + 1)). The bench, like "
     "NumPy's default, uses the inclusive rank p / 100 * (n - 1): method=\"inclusive\"."),
]


def _swapped_weights(ordered: list[float], rank: float) -> float:
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (high - rank) * (ordered[high] - ordered[low]) if high > low else ordered[low]


def _interpolated(ordered: list[float], rank: float) -> float:
    rank = min(max(rank, 0.0), len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (rank - low) * (ordered[high] - ordered[low])


_GAPS = [0.031, 0.029, 0.045, 0.030, 0.033, 0.052, 0.028, 0.034, 0.031, 0.090, 0.030, 0.032]

PERCENTILE_CASES = [
    Case("p95 of 12 inter-token gaps (unsorted, one slow burst)", (_GAPS, 95)),
    Case("p50 of an even number of gaps", ([0.04, 0.01, 0.03, 0.02], 50)),
    Case("p95 of five gaps", ([0.030, 0.029, 0.045, 0.031, 0.033], 95)),
    Case("p0 and the smallest value", ([0.5, 0.2, 0.9], 0)),
    Case("p100 and the largest value", ([0.5, 0.2, 0.9], 100)),
    Case("one gap only", ([0.042], 95)),
    Case("p90 with repeated values", ([0.03, 0.03, 0.03, 0.07, 0.03, 0.11], 90)),
]
PERCENTILE_CASES = [Case(case.name, case.args, _percentile(*case.args)) for case in PERCENTILE_CASES]


def percentile(learner: Callable) -> CheckReport:
    """Exercise 4: ``learner(values, p)`` must return the p-th percentile of ``values`` with linear interpolation
    (``trace.latency_percentiles``, NumPy's default), on hidden latency lists."""

    def judge(case: Case, got: Any) -> str | None:
        if not is_number(got):
            return f"Expected a number (seconds), got {type(got).__name__}."
        if close(got, case.expected, rel_tol=1e-9):
            return None
        hint = find_mistake(got, case.args, case.expected, PERCENTILE_MISTAKES,
                            lambda a, b: is_number(a) and is_number(b) and close(a, b, rel_tol=1e-9), learner,
                            PERCENTILE_CASES)
        return mismatch(case.expected, got, hint)

    return run_cases("percentile", learner, PERCENTILE_CASES, judge)
