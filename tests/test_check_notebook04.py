"""The self-checks of notebook 04 (specdec_lib.teaching.check.notebook04): the solutions pass, typical mistakes get a hint."""

import pytest

from specdec_lib import check
from specdec_lib.teaching.check.notebook04 import tokenizer_a
from specdec_lib.drafters.cross_tokenizer import continuation_ids, decode, encode, target_window

TOK_A = tokenizer_a()

# --- exercise 1: my_continuation ----------------------------------------------------------------------------------


def offsets(context, words):
    encoding = TOK_A(context + words, add_special_tokens=False, return_offsets_mapping=True)
    return encoding["input_ids"], encoding["offset_mapping"]


def solution_continuation(context, words):
    ids, spans = offsets(context, words)
    first = next((i for i, (start, _) in enumerate(spans) if start >= len(context)), len(ids))
    head_end = spans[first][0] if first < len(ids) else len(context + words)
    head = words[: head_end - len(context)]
    return (TOK_A(head, add_special_tokens=False)["input_ids"] if head else []) + ids[first:]


def naive(context, words):
    return offsets(context, words)[0][len(TOK_A(context, add_special_tokens=False)["input_ids"]):]


def straddler_dropped(context, words):
    ids, spans = offsets(context, words)
    return [i for i, (start, _) in zip(ids, spans) if start >= len(context)]


def straddler_kept_whole(context, words):
    ids, spans = offsets(context, words)
    return [i for i, (_, end) in zip(ids, spans) if end > len(context)]


def head_not_shifted(context, words):
    """Off by the context's length: cuts the straddling part out of ``words`` at the joint text's offset."""
    ids, spans = offsets(context, words)
    first = next((i for i, (start, _) in enumerate(spans) if start >= len(context)), len(ids))
    head_end = spans[first][0] if first < len(ids) else len(context + words)
    head = TOK_A(words[:head_end], add_special_tokens=False)["input_ids"] if head_end > len(context) else []
    return head + ids[first:]


def test_the_solution_and_the_library_pass_my_continuation():
    assert check.my_continuation(solution_continuation)
    assert check.my_continuation(lambda context, words: continuation_ids(TOK_A, context, words)[0])
    assert repr(check.my_continuation(solution_continuation)) == "✅ my_continuation: all 10 hidden cases pass."


@pytest.mark.parametrize("wrong, words", [
    (naive, "you dropped as many tokens as the context has alone"),
    (straddler_dropped, "dropped the one that straddles it"),
    (straddler_kept_whole, "you kept the token that straddles the boundary whole"),
    (head_not_shifted, "decode to"),
    (lambda context, words: continuation_ids(TOK_A, context, words), "return only the target ids"),
    (lambda context, words: offsets(context, words)[0], "your ids start with the context's own tokens"),
    (lambda context, words: TOK_A(context, add_special_tokens=False)["input_ids"]
     + solution_continuation(context, words), "your ids start with the context's own tokens"),
    (lambda context, words: TOK_A.convert_ids_to_tokens(solution_continuation(context, words)), "the token strings"),
    (lambda context, words: TOK_A(words, add_special_tokens=False)["input_ids"], "you encoded the draft text alone"),
])
def test_typical_mistakes_of_my_continuation_get_their_hint(wrong, words):
    report = check.my_continuation(wrong)
    assert not report
    assert words in repr(report), repr(report)


def test_a_my_continuation_stub():
    def stub(context, words):
        raise NotImplementedError  # your code here

    assert "still raises NotImplementedError" in repr(check.my_continuation(stub))
    assert "takes your function itself" in repr(check.my_continuation(encode(TOK_A, "x")[0]))


# --- exercise 2: the lookbehind window -----------------------------------------------------------------------------


def solution_window(ids, lookbehind):
    text = decode(TOK_A, ids)
    start = max(0, len(ids) - lookbehind)
    while start > 0 and (decode(TOK_A, ids[start:]).startswith("\ufffd")
                         or not text.endswith(decode(TOK_A, ids[start:]))):
        start -= 1  # never start inside a character split into byte tokens
    return decode(TOK_A, ids[start:])


def stepped_forward(ids, lookbehind):
    start = max(0, len(ids) - lookbehind)
    while start < len(ids) and decode(TOK_A, ids[start:]).startswith("\ufffd"):
        start += 1
    return decode(TOK_A, ids[start:])


def test_the_solution_and_the_library_pass_lookbehind_effect():
    assert check.lookbehind_effect(solution_window)
    assert check.lookbehind_effect(lambda ids, lookbehind: target_window(TOK_A, ids, lookbehind))
    assert repr(check.lookbehind_effect(solution_window)) == "✅ lookbehind_effect: all 6 hidden cases pass."


@pytest.mark.parametrize("wrong, words", [
    (lambda ids, lookbehind: decode(TOK_A, ids[-lookbehind:]), "starts with '\ufffd'. Step back"),  # the shortcut
    (lambda ids, lookbehind: decode(TOK_A, ids), "that is the whole text"),
    (stepped_forward, "never forward"),
    (lambda ids, lookbehind: decode(TOK_A, ids[-lookbehind - 1:]), "your window starts too early"),
    (lambda ids, lookbehind: solution_window(ids, lookbehind).strip(), "keep the window's spaces"),
    (lambda ids, lookbehind: ids[-lookbehind:], "got the ids"),
])
def test_typical_mistakes_of_the_window_get_their_hint(wrong, words):
    report = check.lookbehind_effect(wrong)
    assert not report
    assert words in repr(report), repr(report)


def test_intersection_gap_choices():
    assert check.intersection_gap("b") and check.intersection_gap("(B)")
    assert "what the intersection's q buys is acceptance" in repr(check.intersection_gap("b"))
    for wrong in "acd":
        assert f"answer fails.\n   Not ({wrong})." in repr(check.intersection_gap(wrong))
    assert "Answer with one of 'a', 'b', 'c', 'd'" in repr(check.intersection_gap(None))


# --- exercise 3: the ceiling of the intersection ------------------------------------------------------------------


def solution_ceiling(continuations, target_ids):
    shared = set(target_ids.tolist())
    tokens = [t for tokens in continuations for t in tokens]
    return sum(t in shared for t in tokens) / len(tokens)


def per_prompt_mean(continuations, target_ids):
    shared = set(target_ids.tolist())
    fractions = [sum(t in shared for t in c) / len(c) for c in continuations if c]
    return sum(fractions) / len(fractions)


def distinct_tokens(continuations, target_ids):
    tokens = {t for c in continuations for t in c}
    return len(tokens & set(target_ids.tolist())) / len(tokens)


def test_the_solution_passes_intersection_ceiling():
    assert check.intersection_ceiling(solution_ceiling)
    assert check.intersection_ceiling(
        lambda continuations, target_ids: float(sum(sum(t in target_ids for t in c) for c in continuations))
        / sum(len(c) for c in continuations))  # membership on the tensor itself works too


@pytest.mark.parametrize("wrong, words", [
    (per_prompt_mean, "you averaged the per-prompt fractions"),
    (distinct_tokens, "you counted distinct tokens"),
    (lambda c, t: 1 - solution_ceiling(c, t), "the fraction *outside* the intersection"),
    (lambda c, t: 100 * solution_ceiling(c, t), "that is a percentage"),
    (lambda c, t: sum(x in set(t.tolist()) for tokens in c for x in tokens), "that is how many tokens are inside"),
    (lambda c, t: sum(x in set(t.tolist()) for tokens in c for x in tokens) / len(t),
     "you divided by the size of the intersection"),
    (lambda c, t: 1 / solution_ceiling(c, t), "your fraction is upside down"),
])
def test_typical_mistakes_of_intersection_ceiling_get_their_hint(wrong, words):
    report = check.intersection_ceiling(wrong)
    assert not report
    assert words in repr(report), repr(report)
