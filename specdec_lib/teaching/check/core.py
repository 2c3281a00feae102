"""What every exercise check shares: run hidden cases on the learner's answer and turn a wrong one into a hint.

An exercise check (``specdec_lib.teaching.check.<exercise>``) takes the learner's function or value, runs cases the
notebook does not show, and returns a :class:`CheckReport`. Its one-line ``repr`` is what the notebook cell shows:

    ✅ top_k_probs: all 6 hidden cases pass.
    ❌ top_k_probs: hidden case 3 of 6 (k = 1 on a row with a tie) fails: expected ..., got ....
       Hint: ...

A check never lets a learner's exception escape as a traceback: a stub that still raises ``NotImplementedError``
and any other error are reported as the case they happened on, with the error's one-line message. The report is
also truthy when the answer passes, so ``assert check.top_k_probs(top_k_probs)`` works in tests and solutions.
"""

from __future__ import annotations

import copy
import math
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ...core import validation


@dataclass(frozen=True)
class Case:
    """One hidden case: ``name`` (what a hint calls it), the positional ``args`` and the ``expected`` answer."""

    name: str
    args: tuple
    expected: Any = None


@dataclass(frozen=True)
class CheckReport:
    """The outcome of one exercise check.

    ``problem`` is None when the answer passed; otherwise it says which case failed, expected against got, and
    what that mistake usually means. ``note`` is shown after a pass (e.g. why a multiple-choice answer is right).
    """

    exercise: str
    cases: int
    failed_case: int | None = None
    case_name: str = ""
    problem: str | None = None
    note: str = ""

    @property
    def passed(self) -> bool:
        return self.problem is None

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        if self.passed:
            head = f"✅ {self.exercise}: " + ("correct." if self.cases == 1 else f"all {self.cases} hidden cases pass.")
            return head + (f"\n   {self.note}" if self.note else "")
        where = f"hidden case {self.failed_case} of {self.cases} ({self.case_name})" if self.cases > 1 else "answer"
        return f"❌ {self.exercise}: {where} fails.\n   " + self.problem.replace("\n", "\n   ")

    __str__ = __repr__


def describe(value: Any, digits: int = 4) -> str:
    """A short, readable rendering of a number, tensor, tuple or list for a hint (tensors rounded, with shape)."""
    if isinstance(value, torch.Tensor):
        if value.numel() > 12:
            return f"a tensor of shape {list(value.shape)} ({value.dtype})"
        shown = value.detach().cpu()
        shown = shown.double().round(decimals=digits).tolist() if shown.is_floating_point() else shown.tolist()
        return f"tensor({shown})"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    if isinstance(value, (tuple, list)):
        inner = ", ".join(describe(item, digits) for item in value)
        return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
    return repr(value)


def mismatch(expected: Any, got: Any, hint: str = "") -> str:
    """The standard wrong-answer message: expected against got, then the hint (if any) on its own line."""
    text = f"Expected {describe(expected)}, got {describe(got)}."
    return text + (f"\nHint: {hint}" if hint else "")


def tensor_problem(got: Any, expected: torch.Tensor, atol: float = 1e-5) -> str | None:
    """Why ``got`` is not ``expected`` as a tensor (type, shape, or values beyond ``atol``), or None if it is."""
    if not isinstance(got, torch.Tensor):
        return f"Expected a torch.Tensor of shape {list(expected.shape)}, got {type(got).__name__}."
    if got.shape != expected.shape:
        return f"Expected shape {list(expected.shape)}, got shape {list(got.shape)}."
    if not torch.allclose(got.detach().cpu().double(), expected.double(), atol=atol, rtol=0):
        return mismatch(expected, got)
    return None


def is_number(value: Any) -> bool:
    """Whether ``value`` is a real number a check can grade: the library's `is_number` (an int or float, not a
    bool), or a one-element tensor."""
    if isinstance(value, torch.Tensor):
        return value.numel() == 1
    return validation.is_number(value)


def close(got: Any, expected: float, rel_tol: float = 1e-6, abs_tol: float = 1e-9) -> bool:
    """Whether ``got`` is a real number within the tolerances of ``expected``."""
    try:
        return math.isclose(float(got), expected, rel_tol=rel_tol, abs_tol=abs_tol)
    except (TypeError, ValueError):
        return False


def _raised(error: BaseException) -> str:
    """The one-line report of an exception the learner's code raised, with the line of theirs it came from."""
    if isinstance(error, NotImplementedError):
        return ("Your function still raises NotImplementedError: replace the `raise NotImplementedError` line of the "
                "starter with your code.")
    frames = traceback.extract_tb(error.__traceback__)
    theirs = [frame for frame in frames if "specdec_lib" not in frame.filename]
    where = f" (at line {theirs[-1].lineno} of your code: `{theirs[-1].line}`)" if theirs and theirs[-1].line else ""
    return f"Your function raised {type(error).__name__}: {error}{where}."


def find_mistake(got: Any, args: tuple, expected: Any, mistakes: Sequence[tuple[Callable, str]],
                 same: Callable[[Any, Any], bool], learner: Callable | None = None,
                 cases: Sequence[Case] = ()) -> str:
    """The hint of the first of ``mistakes`` (``(function, hint)`` pairs, each called like the learner's function
    on ``args``) whose answer is ``got`` but not ``expected``; "" when none is (then expected against got is all
    a hint can say).

    Two mistakes can give the same wrong answer on one case. Given the ``learner``'s function and all the
    ``cases``, the hint is that of the matching mistake that answers like the learner on the most cases (the
    first listed among equals), so one case's coincidence does not name the wrong mistake."""
    matching = []
    for mistake, hint in mistakes:
        try:
            theirs = mistake(*args)
        except Exception:  # noqa: BLE001 - a mistake that cannot run on this case is simply not this one
            continue
        if same(theirs, got) and not same(theirs, expected):
            matching.append((mistake, hint))
    if len(matching) < 2 or learner is None or not cases:
        return matching[0][1] if matching else ""
    answers = []
    for case in cases:
        try:
            answers.append((True, learner(*copy.deepcopy(case.args))))
        except Exception:  # noqa: BLE001 - a case the learner cannot run agrees with no mistake
            answers.append((False, None))

    def agreement(mistake: Callable) -> int:
        count = 0
        for case, (ran, answer) in zip(cases, answers):
            try:
                count += ran and same(mistake(*copy.deepcopy(case.args)), answer)
            except Exception:  # noqa: BLE001
                pass
        return count

    best = max(range(len(matching)), key=lambda index: (agreement(matching[index][0]), -index))
    return matching[best][1]


def run_cases(
    exercise: str,
    learner: Any,
    cases: Sequence[Case],
    judge: Callable[[Case, Any], str | None],
) -> CheckReport:
    """Call ``learner(*case.args)`` on every case (on copies of the arguments) and let ``judge`` grade each answer.

    ``judge(case, got)`` returns None for a right answer or the message for a wrong one (use :func:`mismatch`).
    The first failing case ends the check: one specific hint beats a list of symptoms of the same mistake.
    """
    if not callable(learner):
        return CheckReport(exercise, 1, 1, "the argument", (
            f"check.{exercise} takes your function itself, e.g. check.{exercise}(my_function), not its result "
            f"({type(learner).__name__})."))
    for number, case in enumerate(cases, start=1):
        try:
            got = learner(*copy.deepcopy(case.args))
        except Exception as error:  # noqa: BLE001 - any learner error becomes a hint, never a traceback
            problem = _raised(error)
        else:
            problem = judge(case, got)
        if problem is not None:
            return CheckReport(exercise, len(cases), number, case.name, problem)
    return CheckReport(exercise, len(cases))


def check_value(
    exercise: str,
    got: Any,
    expected: float,
    *,
    rel_tol: float,
    too_low: str = "",
    too_high: str = "",
    note: str = "",
) -> CheckReport:
    """Grade a number the learner computed against the one the check computes from the same data.

    ``too_low`` / ``too_high`` are the hints for an answer below / above the tolerance band (e.g. a unit slip).
    """
    if not is_number(got):
        return CheckReport(exercise, 1, 1, "the answer", f"Expected a number, got {type(got).__name__}.")
    value = float(got)
    if close(value, expected, rel_tol=rel_tol):
        return CheckReport(exercise, 1, note=note)
    hint = too_low if value < expected else too_high
    return CheckReport(exercise, 1, 1, "the answer", mismatch(expected, value, hint))


def check_choice(
    exercise: str,
    answer: Any,
    correct: str,
    feedback: Mapping[str, str],
) -> CheckReport:
    """Grade a multiple-choice answer (a letter); every option's ``feedback`` explains why it is right or wrong.

    The feedback of the correct option is shown as the pass note, so the learner who guessed also learns why.
    """
    options = sorted(feedback)
    letter = answer.strip().lower().strip("()") if isinstance(answer, str) else answer
    if letter not in feedback:
        listed = ", ".join(repr(option) for option in options)
        return CheckReport(exercise, 1, 1, "the answer", f"Answer with one of {listed} (a string), got {answer!r}.")
    if letter == correct:
        return CheckReport(exercise, 1, note=feedback[letter])
    return CheckReport(exercise, 1, 1, "the answer", f"Not ({letter}). {feedback[letter]}")
