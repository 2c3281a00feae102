"""Checks of notebook 09's exercises (lossless in floating point): a fork's verdict, and what "lossless" promises.

- ``fork_verdict(my_fork_verdict)``: the learner's ``(logits [N, V], reference [N], candidate [N], dtype) ->
  "identical" | "near-tie" | "disagreement"`` against `specdec_lib.core.forks.judge_fork` on hand-made logits: an
  exact tie, one bfloat16 step judged in bfloat16 and in float32, a clear disagreement, a bug after a near-tie;
- ``lossless_promise("b")``: why float16, as wide as bfloat16, keeps the greedy promise so much better: its finer
  grid (fewer ties) and smaller drift.
"""

from __future__ import annotations

from typing import Any

import torch

from ...core.forks import judge_fork
from ...core.numerics import near_tie_tolerance, spacing
from .core import Case, CheckReport, check_choice, find_mistake, mismatch, run_cases

VERDICTS = ("identical", "near-tie", "disagreement")


def _logits(second: float, *, later: float | None = None) -> torch.Tensor:
    """[3, 6] logits, token 2 on top (8.0) everywhere; token 3 at ``second`` at position 1; token 4 at ``later``
    at position 2."""
    logits = torch.zeros(3, 6)
    logits[:, 2] = 8.0
    logits[1, 3] = second
    if later is not None:
        logits[2, 4] = later
    return logits


def _reference_verdict(logits: torch.Tensor, reference: torch.Tensor, candidate: torch.Tensor,
                       dtype: torch.dtype) -> str:
    if torch.equal(reference, candidate):
        return "identical"
    return judge_fork(logits, reference, candidate, dtype).verdict


_REF, _FORK = torch.tensor([2, 2, 2]), torch.tensor([2, 3, 2])
_CASES = [
    ("the same tokens", (_logits(1.0), _REF, _REF.clone(), torch.bfloat16)),
    ("an exact tie at the fork, bfloat16", (_logits(8.0), _REF, _FORK, torch.bfloat16)),
    ("one bfloat16 step at the fork, judged in bfloat16", (_logits(8.0 - spacing(torch.bfloat16, 8.0)), _REF, _FORK,
                                                           torch.bfloat16)),
    ("the same step, judged in float32", (_logits(8.0 - spacing(torch.bfloat16, 8.0)), _REF, _FORK, torch.float32)),
    ("two nats at the fork", (_logits(6.0), _REF, _FORK, torch.float16)),
    ("an exact tie at the fork, then a token three nats down", (_logits(8.0, later=5.0), _REF,
                                                                torch.tensor([2, 3, 4]), torch.bfloat16)),
]


def _fork_cases() -> list[Case]:
    return [Case(name, args, _reference_verdict(*args)) for name, args in _CASES]


def _first_fork_only(logits, reference, candidate, dtype) -> str:
    if torch.equal(reference, candidate):
        return "identical"
    i = int((reference != candidate).nonzero()[0, 0])
    margin = float(logits[i, reference[i]] - logits[i, candidate[i]])
    return "near-tie" if margin <= near_tie_tolerance(dtype, float(logits[i].max())) else "disagreement"


def _any_fork_is_a_bug(logits, reference, candidate, dtype) -> str:
    return "identical" if torch.equal(reference, candidate) else "disagreement"


def _fixed_tolerance(logits, reference, candidate, dtype) -> str:
    if torch.equal(reference, candidate):
        return "identical"
    gaps = logits.max(dim=-1).values - logits.gather(1, candidate[:, None])[:, 0]
    return "near-tie" if bool((gaps <= 0.25).all()) else "disagreement"


_MISTAKES = [
    (_any_fork_is_a_bug, "A fork is not yet a bug: where the target's top two logits are within the dtype's rounding "
                         "of each other, both tokens are its greedy choice. Compare the margin with "
                         "near_tie_tolerance(dtype, top logit)."),
    (_first_fork_only, "After the first fork the candidate continues on its own prefix: every later token must still "
                       "be the target's choice up to the tolerance (the every-position check), or a bug hides behind "
                       "a harmless first fork."),
    (_fixed_tolerance, "The tolerance depends on the dtype: a gap that is one rounding step in bfloat16 is tens of "
                       "thousands of steps in float32. Use near_tie_tolerance(dtype, top logit)."),
]


def fork_verdict(learner: Any) -> CheckReport:
    """Grade ``learner(logits, reference, candidate, dtype)`` (module docstring) on the hidden cases."""
    cases = _fork_cases()

    def judge(case: Case, got: Any) -> str | None:
        if got not in VERDICTS:
            return f"Expected one of {', '.join(repr(v) for v in VERDICTS)}, got {got!r}."
        if got == case.expected:
            return None
        hint = find_mistake(got, case.args, case.expected, _MISTAKES, lambda a, b: a == b, learner, cases)
        return mismatch(case.expected, got, hint)

    return run_cases("fork_verdict", learner, cases, judge)


_PROMISE = {
    "a": "No. The weights, activations and logits are stored and multiplied in float16: the bench's float16 rows have "
         "their own tolerance and their own drift between the two shapes, unlike float32's. What float16 changes is "
         "how its 16 bits are split.",
    "b": "Yes. A fork needs two things at once: a position where the top two logits are within rounding of each "
         "other, and a drift between the two shapes of computation that crosses that margin. float16's three extra "
         "significant bits make its grid 8 times finer at the same logit, so exact ties become rare and near-ties "
         "fewer (count them), and the drift, a step or so of that finer grid, is smaller in nats. bfloat16 keeps "
         "float32's range and pays for it in precision; that is why it is the dtype that forks.",
    "c": "No. A fork is any change of token against the target's own greedy output; the bench counts every one, and "
         "only then judges it a near-tie or a disagreement. float16's runs did not change a token.",
    "d": "No. The bench's drift column is not zero for float16: a (k + 1)-token forward and k + 1 one-token steps "
         "round differently in every dtype. float16's drift is simply too small, against its finer grid, to reorder "
         "the top two logits on these runs.",
}


def lossless_promise(answer: Any) -> CheckReport:
    """Exercise 2 (multiple choice): float16 and bfloat16 both store 16 bits, yet bfloat16 forks far more often in
    the numerics bench. Why? (a) float16 is float32 in disguise; (b) float16's 11 significant bits make its grid 8
    times finer: fewer exact and near ties, a smaller drift in nats, and a fork needs both; (c) float16 forks as
    often, but its forks count as identical; (d) in float16 the two shapes run the same kernels and round alike."""
    return check_choice("lossless_promise", answer, "b", _PROMISE)
