"""Notebook 05's exercise checks on hand-written answers: the solutions pass, the usual mistakes get their hint."""

import pytest

from specdec_lib import check
from specdec_lib.teaching.check.notebook05 import EXIT_FEEDBACK

# --- exercise 1: the most recent match -------------------------------------------------------------------------


def lookup(tokens, k, max_ngram=3, *, latest=True, tail=1, longest_first=True, keep_match=False, cap=True):
    """The solution's loop, with one thing changed at a time to make the usual mistakes."""
    top = min(max_ngram, len(tokens) - 1)
    sizes = range(top, 0, -1) if longest_first else range(1, top + 1)
    for n in sizes:
        suffix = tokens[-n:]
        starts = range(len(tokens) - n - tail, -1, -1) if latest else range(len(tokens) - n)
        for start in starts:
            if tokens[start : start + n] == suffix:
                begin = start if keep_match else start + n
                return tokens[begin : begin + k] if cap else tokens[begin:]
    return []


def test_the_solution_passes():
    report = check.latest_prompt_lookup(lookup)
    assert report, repr(report)
    assert repr(report).startswith("✅ latest_prompt_lookup: all ")


@pytest.mark.parametrize("mistake, words", [
    (dict(latest=False), "*first* (leftmost) occurrence"),
    (dict(tail=0), "is always the suffix itself"),
    (dict(longest_first=False), "shortest n first"),
    (dict(keep_match=True), "starts with the matched n-gram itself"),
    (dict(cap=False), "longer than k"),
])
def test_each_usual_mistake_gets_its_hint(mistake, words):
    report = check.latest_prompt_lookup(lambda tokens, k, max_ngram=3: lookup(tokens, k, max_ngram, **mistake))
    assert not report and words in repr(report), repr(report)


@pytest.mark.parametrize("sizes, words", [
    (lambda top: range(top - 1, 0, -1), "never tries n = max_ngram"),
    (lambda top: range(top, 1, -1), "never tries n = 1"),
    (lambda top: range(top + 1, 0, -1), "starts one too high"),
])
def test_an_off_by_one_n_range_gets_its_own_hint(sizes, words):
    def off_by_one(tokens, k, max_ngram=3):
        for n in sizes(min(max_ngram, len(tokens) - 1)):
            if not 0 < n < len(tokens):
                continue
            for start in range(len(tokens) - n - 1, -1, -1):
                if tokens[start : start + n] == tokens[-n:]:
                    return tokens[start + n : start + n + k]
        return []

    report = check.latest_prompt_lookup(off_by_one)
    assert not report and words in repr(report) and "is always the suffix itself" not in repr(report), repr(report)


@pytest.mark.parametrize("mistake, words", [
    (dict(tail=2), "starts one position too early"),
    (dict(start_stop=0), "never looks at start position 0"),
])
def test_an_off_by_one_scan_gets_its_own_hint(mistake, words):
    def scan(tokens, k, max_ngram=3):
        tail, stop = mistake.get("tail", 1), mistake.get("start_stop", -1)
        for n in range(min(max_ngram, len(tokens) - 1), 0, -1):
            for start in range(len(tokens) - n - tail, stop, -1):
                if tokens[start : start + n] == tokens[-n:]:
                    return tokens[start + n : start + n + k]
        return []

    report = check.latest_prompt_lookup(scan)
    assert not report and words in repr(report), repr(report)


def test_the_stub_a_crash_and_a_wrong_type_are_messages():
    def stub(tokens, k, max_ngram=3):
        raise NotImplementedError  # your code here

    assert "still raises NotImplementedError" in repr(check.latest_prompt_lookup(stub))
    assert "raised IndexError" in repr(check.latest_prompt_lookup(lambda tokens, k, max_ngram=3: tokens[len(tokens)]))
    assert "Expected a list of token ids, got str" in repr(check.latest_prompt_lookup(lambda t, k, m=3: "x"))


# --- exercise 2: gamma for a drafter that is free --------------------------------------------------------------


def speedup(rounds, verify_cost):
    return sum(emitted for _, emitted in rounds) / sum(verify_cost[drafted + 1] for drafted, _ in rounds)


def test_the_speedup_solution_passes():
    assert check.free_draft_speedup(speedup)


@pytest.mark.parametrize("wrong, words", [
    (lambda rounds, v: sum(e for _, e in rounds) / len(rounds), "That is tokens per target forward"),
    (lambda rounds, v: sum(e for _, e in rounds) / (len(rounds) * v[max(d for d, _ in rounds) + 1]),
     "longest draft's cost"),
    (lambda rounds, v: sum(e for _, e in rounds) / sum(v[max(d, 1)] for d, _ in rounds), "not verify_cost[d]"),
    (lambda rounds, v: sum(e / v[d + 1] for d, e in rounds) / len(rounds), "averaged the rounds' own ratios"),
    (lambda rounds, v: sum(v[d + 1] for d, _ in rounds) / sum(e for _, e in rounds), "the inverse of the speed-up"),
])
def test_wrong_speedups_get_their_hint(wrong, words):
    report = check.free_draft_speedup(wrong)
    assert not report and words in repr(report), repr(report)


def test_v_of_d_without_the_plus_one_fails_on_a_round_that_drafted_nothing_and_gets_its_hint():
    report = check.free_draft_speedup(lambda rounds, v: sum(e for _, e in rounds) / sum(v[d] for d, _ in rounds))
    assert not report and "raised KeyError: 0" in repr(report)
    assert "verifies d + 1 positions, the target's own last token" in repr(report)


@pytest.mark.parametrize("wrong, words", [
    (lambda rounds, v: sum(e - 1 for _, e in rounds) / sum(v[d + 1] for d, _ in rounds),
     "You left out the target's own token"),
    (lambda rounds, v: sum(d for d, _ in rounds) / sum(v[d + 1] for d, _ in rounds), "You counted the drafted tokens"),
])
def test_speedups_that_count_the_wrong_tokens_get_their_hint(wrong, words):
    report = check.free_draft_speedup(wrong)
    assert not report and words in repr(report), repr(report)


def test_the_speedup_stub_says_so():
    def stub(rounds, verify_cost):
        raise NotImplementedError  # your code here

    assert "still raises NotImplementedError" in repr(check.free_draft_speedup(stub))


# --- exercise 3: which exit? -------------------------------------------------------------------------------------


def test_which_exit_right_and_wrong_options():
    right = check.which_exit("b")
    assert right and "shallow exit that was trained" in repr(right)
    assert "may agree more" not in repr(right)  # the solution's run: the untrained deeper exits agree less
    for wrong in sorted(set(EXIT_FEEDBACK) - {"b"}):
        report = check.which_exit(wrong)
        assert not report and repr(report).startswith(f"❌ which_exit: answer fails.\n   Not ({wrong}).")
    assert "Answer with one of 'a', 'b', 'c', 'd'" in repr(check.which_exit(None))


def test_the_exit_feedback_types_no_number_the_model_decides():
    import re

    # the weights ratios and acceptances of each exit belong to the learner's run, printed there, not typed here
    assert not any(re.search(r"\d\.\d", text) for text in EXIT_FEEDBACK.values()), EXIT_FEEDBACK


# --- exercise 4: acceptance by draft position ----------------------------------------------------------------


def by_position(rounds):
    longest = max((drafted for drafted, _ in rounds), default=0)
    return [sum(accepted >= j for drafted, accepted in rounds if drafted >= j) / sum(drafted >= j for drafted, _ in rounds)
            for j in range(1, longest + 1)]


def test_the_position_solution_passes():
    report = check.acceptance_by_position(by_position)
    assert report and repr(report).startswith("✅ acceptance_by_position: all 4 hidden cases pass"), repr(report)


@pytest.mark.parametrize("wrong, words", [
    (lambda rounds: [sum(a > j for _, a in rounds) / len(rounds) for j in range(max(d for d, _ in rounds))],
     "You divided by every round"),
    (lambda rounds: [sum(a == j + 1 for d, a in rounds if d > j) / sum(d > j for d, _ in rounds)
                     for j in range(max(d for d, _ in rounds))], "accepted exactly j + 1 drafts"),
    (lambda rounds: [sum(a > j for d, a in rounds if d > j) / max(1, sum(a > j - 1 for d, a in rounds if d > j))
                     for j in range(max(d for d, _ in rounds))], "a conditional rate"),
    (lambda rounds: by_position(rounds)[:-1], "one entry per position up to the longest draft"),
    (lambda rounds: 0.5, "Expected a list with one share per draft position"),
])
def test_wrong_positions_get_their_hint(wrong, words):
    report = check.acceptance_by_position(wrong)
    assert not report and words in repr(report), repr(report)
