"""vocab.py: vocabularies are compared by token strings (same / padded / different), never by size."""

import pytest

from helpers import build_tiny_tokenizer
from specdec_lib.core.errors import ConfigError
from specdec_lib.core.vocab import compare_vocabularies, require_same_tokenizer, require_vocab_covers


@pytest.fixture(scope="module")
def tokenizer_a():
    return build_tiny_tokenizer("a")


@pytest.fixture(scope="module")
def tokenizer_b():
    return build_tiny_tokenizer("b")


def test_identical_tokenizers_are_same(tokenizer_a):
    report = compare_vocabularies(tokenizer_a, build_tiny_tokenizer("a"))
    assert report.kind == "same" and report.compatible
    assert report.overlap == report.size_a == report.size_b == len(tokenizer_a)


def test_extra_tokens_make_padded(tokenizer_a):
    extended = build_tiny_tokenizer("a")
    extended.add_tokens(["<tool_call>", "<extra_1>"])
    report = compare_vocabularies(tokenizer_a, extended)
    assert report.kind == "padded" and report.compatible
    assert (report.size_a, report.size_b, report.overlap) == (len(tokenizer_a), len(tokenizer_a) + 2, len(tokenizer_a))
    assert compare_vocabularies(extended, tokenizer_a).kind == "padded"  # symmetric


def test_different_schemes_are_different(tokenizer_a, tokenizer_b):
    report = compare_vocabularies(tokenizer_a, tokenizer_b)
    assert report.kind == "different" and not report.compatible
    assert report.overlap < min(report.size_a, report.size_b)


def test_same_size_but_permuted_ids_is_different():
    # equal sizes and equal token strings prove nothing: the ids must agree too
    assert compare_vocabularies({"a": 0, "b": 1, "c": 2}, {"a": 0, "b": 2, "c": 1}).kind == "different"


def test_extra_token_reusing_an_id_is_different():
    assert compare_vocabularies({"a": 0, "b": 1}, {"a": 0, "b": 1, "x": 2}).kind == "padded"
    assert compare_vocabularies({"a": 0, "b": 1}, {"a": 0, "b": 1, "x": 1}).kind == "different"


def test_require_same_tokenizer_names_the_cross_tokenizer_drafter(tokenizer_a, tokenizer_b):
    assert require_same_tokenizer(tokenizer_a, build_tiny_tokenizer("a")).kind == "same"
    with pytest.raises(ConfigError, match="CrossTokenizerDrafter"):
        require_same_tokenizer(tokenizer_a, tokenizer_b)


def test_require_vocab_covers(make_tiny_model, tokenizer_a):
    require_vocab_covers(make_tiny_model(vocab_size=len(tokenizer_a)), tokenizer_a)
    require_vocab_covers(make_tiny_model(vocab_size=len(tokenizer_a) + 8), tokenizer_a)  # padded embeddings: fine
    with pytest.raises(ConfigError, match="embeddings"):
        require_vocab_covers(make_tiny_model(vocab_size=len(tokenizer_a) - 1), tokenizer_a)


def test_non_tokenizer_is_explained():
    with pytest.raises(ConfigError, match="get_vocab"):
        compare_vocabularies(42, {"a": 0})
