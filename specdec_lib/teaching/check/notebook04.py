"""Checks of notebook 04's exercises (cross-tokenizer assisted decoding): boundary alignment, lookbehind, intersection.

- ``my_continuation(my_continuation)``: the learner's target ids continuing a context with a text, against
  `continuation_ids` on tokenizer A (the embedded target's, loaded once) on hidden boundaries: a word or a number
  growing across it, indentation merging with a newline, an empty continuation, ...;
- ``lookbehind_effect(window_text)``: the learner's lookbehind window (the text of the last ``lookbehind`` target
  ids, started on a whole character) against `target_window`, on hidden id sequences;
- ``intersection_ceiling(intersection_ceiling)``: the fraction of the target's tokens inside the vocabulary
  intersection, on hand-made token lists; ``intersection_gap("b")``: why the token-by-token drafter's alpha stays
  far below that ceiling.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import torch
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from ...drafters.cross_tokenizer import (REPLACEMENT, continuation_ids, decode, encode, naive_continuation_ids,
                                         target_window)
from ...core.paths import data_dir
from ...core.validation import is_whole
from .core import Case, CheckReport, check_choice, close, describe, is_number, mismatch, run_cases

# --- exercise 1: align by hand ------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def tokenizer_a() -> PreTrainedTokenizerBase:
    """Tokenizer A, the embedded target's (byte-level BPE), loaded once (a fraction of a second, no model)."""
    return AutoTokenizer.from_pretrained(data_dir() / "models" / "target")


CONTINUATIONS = [
    ("a word growing across the boundary", "x = sel", "f.value"),
    ("a call cut inside its name", "for i in ra", "nge(10):"),
    ("indentation after a newline", "def f(x):\n", "        return x"),
    ("a run of spaces continued by more spaces", "    ", "  return"),
    ("a dunder name cut in two", "def __in", "it__(self):"),
    ("a number growing across the boundary", "x = 1234", "5678"),
    ("a blank line, then indentation", "    if x:\n", "\n        pass"),
    ("an empty continuation", "return x", ""),
    ("an empty context", "", "import os"),
    ("a word the joint encoding splits differently", "x = sel", "fie(1)"),  # "selfie": encoding "fie(1)" alone fails
]


def _continuation_cases() -> list[Case]:
    tok = tokenizer_a()
    return [Case(f"{context!r} + {words!r}, {name}", (context, words), continuation_ids(tok, context, words)[0])
            for name, context, words in CONTINUATIONS]


def _as_ids(got: Any) -> list[int] | None:
    """A list of ints from a list / tuple / 1-D tensor of token ids, else None."""
    if isinstance(got, torch.Tensor):
        got = got.flatten().tolist() if got.dim() <= 2 else None
    if not isinstance(got, (list, tuple)) or not all(is_whole(i) for i in got):
        return None
    return list(got)


def _judge_continuation(case: Case, got: Any) -> str | None:
    tok = tokenizer_a()
    context, words = case.args
    expected = case.expected
    if isinstance(got, tuple) and len(got) == 2 and isinstance(got[0], list) and isinstance(got[1], list):
        return ("You returned a pair of lists; return only the target ids (continuation_ids returns "
                "(ids, character ends), the exercise asks for the ids).")
    ids = _as_ids(got)
    if ids is None and isinstance(got, (list, tuple)) and got and all(isinstance(i, str) for i in got):
        return (f"Expected a list of token ids (ints), got the token strings {describe(got)}.\nHint: return the "
                "ids (the encoding's input_ids), not tok.tokenize(...) or convert_ids_to_tokens(...).")
    if ids is None:
        return f"Expected a list of token ids (ints), got {describe(got)}."
    if ids == expected:
        return None
    shown = tok.convert_ids_to_tokens(expected), tok.convert_ids_to_tokens(ids)
    context_ids, _ = encode(tok, context)
    joint, spans = encode(tok, context + words)
    boundary = len(context)
    after = [i for i, (start, _) in zip(joint, spans) if start >= boundary]
    whole = [i for i, (_, end) in zip(joint, spans) if end > boundary]
    if context and (ids == joint or ids == context_ids + expected):
        hint = ("your ids start with the context's own tokens: the committed context is already in the target's "
                "cache, so return only the ids that continue it (from the boundary at len(context) on).")
    elif ids == naive_continuation_ids(tok, context_ids, context, words):
        hint = (f"you dropped as many tokens as the context has alone ({len(context_ids)}). Encoded together, the "
                "boundary merged differently, so that cut repeats or skips characters. Cut by character offsets "
                "instead: keep the tokens that start at or after len(context).")
    elif ids == after:
        hint = ("you kept the tokens that start at or after the boundary but dropped the one that straddles it; its "
                "part after the boundary (the text between len(context) and the next token's start) must be encoded "
                "and proposed first, or the proposal skips those characters.")
    elif ids == encode(tok, words)[0]:
        hint = ("you encoded the draft text alone. The target tokenizes the committed context and the new text "
                "together, and across a boundary inside a word it may split the new characters differently: take "
                "the tokens of the joint encoding that start at or after len(context).")
    elif ids == whole:
        hint = ("you kept the token that straddles the boundary whole: it starts inside the context, so its first "
                "characters repeat committed text. Replace it by the encoding of its part after len(context).")
    else:
        text = decode(tok, context_ids + ids)
        if text != context + words:
            hint = (f"the context's own ids followed by yours decode to {text[len(context):]!r} after the context, "
                    f"not {words!r}: the proposal must continue the committed text with exactly the draft text.")
        else:
            hint = ("the text is right but the split is not the target tokenizer's: take the tokens of the joint "
                    "encoding from the first one starting at or after len(context), and encode only the straddling "
                    "part on its own.")
    return f"Expected {shown[0]}, got {shown[1]}.\nHint: {hint}"


def my_continuation(learner: Any) -> CheckReport:
    """Check ``my_continuation(context, words) -> list[int]``: tokenizer A's ids that continue ``context`` with
    exactly ``words``, split as A splits ``context + words`` after the boundary (`continuation_ids`)."""
    return run_cases("my_continuation", learner, _continuation_cases(), _judge_continuation)


# --- exercise 2: how much lookbehind? -----------------------------------------------------------------------------

WINDOWS = [
    ("three ids of plain code", "print('naive') ; y = x .T", 3),
    ("the last id is the last byte of a character split into three", "x = f(a)  # 漢字", 1),
    ("a window that starts on the middle byte of a character", "x = f(a)  # 漢字", 4),
    ("a window starting at an indentation token", "s = 'é'\n    return s", 3),
    ("an accented character (two byte tokens) before the window", "name = 'café'", 2),
    ("a window longer than the sequence", "def f(x):\n    return x", 50),
]


def _window_cases() -> list[Case]:
    tok = tokenizer_a()
    cases = []
    for name, text, lookbehind in WINDOWS:
        ids, _ = encode(tok, text)
        cases.append(Case(f"{name}: lookbehind {lookbehind} on {text!r}", (ids, lookbehind),
                          target_window(tok, ids, lookbehind)))
    return cases


def _judge_window(case: Case, got: Any) -> str | None:
    tok = tokenizer_a()
    ids, lookbehind = case.args
    expected = case.expected
    if got == expected:
        return None
    if _as_ids(got) is not None and not isinstance(got, str):
        return f"Expected the window's text (a str), got the ids {describe(got)}: decode them (decode(tok_a, ids))."
    if not isinstance(got, str):
        return f"Expected the window's text (a str), got {describe(got)}."
    text = decode(tok, ids)
    plain = decode(tok, ids[-lookbehind:])
    if got.startswith(REPLACEMENT):
        hint = ("your window starts in the middle of a character that A writes as several byte tokens, so its text "
                "starts with '\ufffd'. Step back: take one more id on the left until the text decodes cleanly.")
    elif got == text and len(ids) > lookbehind:
        hint = (f"that is the whole text ({len(ids)} ids); the window is the text of the last {lookbehind} ids only "
                "(a little more if they start inside a character).")
    elif got == plain.strip() or got == expected.strip():
        hint = ("keep the window's spaces and newlines: a leading space decides how the next word is tokenized "
                "(' return' is one token, 'Ġreturn').")
    elif expected.endswith(got) and got != expected:
        hint = ("your window ends right but starts too late: it holds fewer than `lookbehind` ids, or it moved "
                "forward past the first bytes of a character. Step back (to the left) until the window starts on a "
                "whole character, never forward.")
    elif got.endswith(expected) and got != expected:
        hint = ("your window starts too early: take the last `lookbehind` ids, and step further back only while the "
                "window would start inside a character.")
    else:
        hint = "the window is decode(ids[start:]) for the largest start <= len(ids) - lookbehind whose text is clean."
    return mismatch(expected, got, hint)


def lookbehind_effect(learner: Any) -> CheckReport:
    """Check ``window_text(ids, lookbehind) -> str``: the text of the last ``lookbehind`` of the target ids ``ids``
    (tokenizer A), started one id earlier while it would begin inside a character split into byte tokens, the whole
    text when there are no more ids than that (`target_window`)."""
    return run_cases("lookbehind_effect", learner, _window_cases(), _judge_window)


# --- exercise 3: the ceiling of the intersection ------------------------------------------------------------------


def _ceiling_cases() -> list[Case]:
    """``(continuations, target_ids)``: token lists per prompt and the intersection's target ids (a LongTensor, as
    `vocabulary_intersection` returns them); expected: the pooled fraction of tokens inside."""
    cases = [("two prompts of unequal length", [[1, 2, 3, 2, 2, 7], [5, 9]], [2, 5, 9]),
             ("repeated tokens count every time", [[4, 4, 4, 4, 1]], [4, 8]),
             ("nothing inside the intersection", [[3, 6], [6]], [0, 1, 2]),
             ("a prompt that produced no token (an immediate EOS)", [[0, 1, 2, 3], []], [0, 3]),
             ("every token inside", [[10, 11], [12, 10, 11]], list(range(10, 20)))]
    out = []
    for name, continuations, shared in cases:
        tokens = [t for tokens in continuations for t in tokens]
        fraction = sum(t in shared for t in tokens) / len(tokens)
        out.append(Case(name, (continuations, torch.tensor(shared, dtype=torch.long)), fraction))
    return out


def _judge_ceiling(case: Case, got: Any) -> str | None:
    continuations, target_ids = case.args
    expected = case.expected
    if not is_number(got):
        return f"Expected a fraction (a number), got {describe(got)}."
    value = float(got)
    if close(value, expected):
        return None
    shared = set(target_ids.tolist())
    tokens = [t for tokens in continuations for t in tokens]
    distinct = set(tokens)
    per_prompt = [sum(t in shared for t in c) / len(c) for c in continuations if c]
    slips = [(100 * expected, "that is a percentage; return a fraction between 0 and 1."),
             (1 - expected, "that is the fraction *outside* the intersection (the tokens that can never be drafted)."),
             (len(distinct & shared) / len(distinct), "you counted distinct tokens; count every occurrence (a token "
                                                      "the target emits ten times is ten chances to draft it)."),
             (sum(per_prompt) / len(per_prompt) if per_prompt else None,
              "you averaged the per-prompt fractions; pool the tokens of all prompts first (prompts of different "
              "lengths must not weigh the same)."),
             (sum(t in shared for t in tokens) / len(continuations), "you divided by the number of prompts; divide "
                                                                     "by the number of tokens."),
             (sum(t in shared for t in tokens), "that is how many tokens are inside, a count: divide it by the "
                                                "number of tokens of all the prompts."),
             (sum(t in shared for t in tokens) / len(shared), "you divided by the size of the intersection; divide "
                                                              "by the number of tokens the target produced (the "
                                                              "question is about its tokens, not the vocabulary)."),
             (len(tokens) / sum(t in shared for t in tokens) if expected else None,
              "your fraction is upside down: tokens inside the intersection over all the tokens, not the reverse.")]
    for wrong, hint in slips:
        if wrong is not None and not close(wrong, expected) and close(value, wrong):
            return mismatch(expected, value, hint)
    return mismatch(expected, value, "the fraction of all the tokens (pooled over the prompts) whose id is in "
                                     "target_ids.")


def intersection_ceiling(learner: Any) -> CheckReport:
    """Check ``intersection_ceiling(continuations, target_ids) -> float``: of all the tokens in ``continuations``
    (a list of token-id lists, one per prompt), the fraction whose id is in ``target_ids`` (the intersection's
    target ids, a LongTensor)."""
    return run_cases("intersection_ceiling", learner, _ceiling_cases(), _judge_ceiling)


def intersection_gap(answer: Any) -> CheckReport:
    """Most of the target's greedy code tokens lie in the intersection (the notebook prints the share), yet the
    token-by-token drafter's greedy alpha is far lower. Why so far below?

    (a) the ceiling is computed wrongly: tokens inside the intersection cannot be drafted either;
    (b) inside the intersection a token is only *possible*: the draft must also rank it first, while it writes in
        the target's segmentation (target tokens fed back as draft ids), which it was never trained on, and its
        mass outside the intersection is thrown away;
    (c) sampling noise: the sampling drafter still samples under the greedy config;
    (d) the alpha of the text round trip is higher only because it proposes more tokens per round.
    """
    return check_choice("intersection_gap", answer, "b", {
        "a": "A token of the intersection has the same text in both vocabularies, so the drafter can propose it; that "
             "share is a real ceiling, the share of the target's tokens the drafter could ever propose.",
        "b": "Yes. The ceiling says which tokens are reachable, not which the draft picks. Drafting token by token in "
             "the target's segmentation, the draft reads splits it never saw in training (it would write "
             "'▁▁▁▁▁▁▁▁' and 'return', not '▁return' after a newline), and where its own best token lies outside the "
             "intersection the mass is dropped and the rest renormalised. The text round trip lets it write its own "
             "tokenization, hence its higher greedy alpha. Both sample exactly (point masses are exact); what the "
             "intersection's q buys is acceptance when sampling, min(1, p/q) instead of p(x).",
        "c": "GREEDY is temperature 0: the drafter takes the argmax of the masked logits, and the target verifies "
             "greedily; there is no randomness in these runs (the outputs equal the target's, every time).",
        "d": "alpha is a ratio, accepted over examined drafts: proposing more tokens per round does not raise it. Both "
             "drafters propose at most gamma target tokens per round.",
    })
