"""The exercise-check machinery (specdec_lib.teaching.check.core) on hand-made answers: a pass, a wrong value, a stub, a crash."""

import torch

from specdec_lib.teaching.check.core import Case, check_choice, check_value, mismatch, run_cases, tensor_problem

CASES = [Case("two plus two", (2, 2), 4), Case("negative numbers", (-1, -3), -4)]


def judge(case, got):
    return None if got == case.expected else mismatch(case.expected, got, "did you subtract?")


def test_a_right_function_passes_every_case():
    report = run_cases("add", lambda a, b: a + b, CASES, judge)
    assert report.passed and bool(report)
    assert repr(report) == "✅ add: all 2 hidden cases pass."


def test_a_wrong_function_names_the_case_expected_got_and_the_hint():
    report = run_cases("add", lambda a, b: a - b, CASES, judge)
    assert not report
    assert repr(report) == ("❌ add: hidden case 1 of 2 (two plus two) fails.\n"
                            "   Expected 4, got 0.\n   Hint: did you subtract?")


def test_a_stub_and_a_crash_become_messages_not_tracebacks():
    def stub(a, b):
        raise NotImplementedError  # your code here

    def crash(a, b):
        return [a][b]

    assert "still raises NotImplementedError" in repr(run_cases("add", stub, CASES, judge))
    crashed = repr(run_cases("add", crash, CASES, judge))
    assert "raised IndexError: list index out of range" in crashed and "`return [a][b]`" in crashed


def test_passing_a_result_instead_of_the_function_is_explained():
    assert "takes your function itself" in repr(run_cases("add", 4, CASES, judge))


def test_the_arguments_are_copies_so_a_learner_cannot_corrupt_later_cases():
    shared = torch.zeros(3)
    cases = [Case("first", (shared,), 0.0), Case("second", (shared,), 0.0)]

    def mutating(x):
        value = float(x.sum())
        x += 1
        return value

    assert run_cases("sum", mutating, cases, lambda case, got: None if got == case.expected else "changed")


def test_tensor_problem_reports_type_shape_and_values():
    expected = torch.tensor([0.25, 0.75])
    assert tensor_problem(expected.clone(), expected) is None
    assert "got list" in tensor_problem([0.25, 0.75], expected)
    assert "got shape [1, 2]" in tensor_problem(expected[None], expected)
    assert "Expected tensor([0.25, 0.75]), got tensor([0.75, 0.25])" in tensor_problem(expected.flip(0), expected)


def test_check_value_uses_the_hint_for_the_side_it_missed():
    assert check_value("slope", 2.0, 2.0, rel_tol=0.01)
    low = repr(check_value("slope", 0.002, 2.0, rel_tol=0.01, too_low="seconds, not ms?", too_high="ms?"))
    assert "Hint: seconds, not ms?" in low
    assert "Expected a number, got str" in repr(check_value("slope", "2", 2.0, rel_tol=0.01))


def test_check_choice_explains_the_right_answer_and_each_wrong_one():
    feedback = {"a": "A cache cannot do that.", "b": "Yes: one forward checks them all."}
    right = check_choice("why", "(B)", "b", feedback)
    assert right and repr(right) == "✅ why: correct.\n   Yes: one forward checks them all."
    assert repr(check_choice("why", "a", "b", feedback)) == "❌ why: answer fails.\n   Not (a). A cache cannot do that."
    assert "Answer with one of 'a', 'b'" in repr(check_choice("why", "c", "b", feedback))


def test_find_mistake_names_the_mistake_whose_answer_the_learner_gave():
    from specdec_lib.teaching.check.core import find_mistake

    mistakes = [(lambda a, b: a - b, "you subtracted"), (lambda a, b: a * b, "you multiplied")]
    same = lambda x, y: x == y  # noqa: E731
    assert find_mistake(6, (2, 3), 5, mistakes, same) == "you multiplied"
    assert find_mistake(7, (2, 3), 5, mistakes, same) == ""  # no known mistake answers 7
    assert find_mistake(4, (2, 2), 4, mistakes, same) == ""  # 2 * 2 is right here: not a mistake on this case
