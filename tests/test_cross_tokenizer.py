"""Cross-tokenizer drafting: vocabularies compared by normalised strings, the text round trip and its boundary
alignment, greedy equivalence on the embedded cross pair (ours and transformers' universal assisted decoding),
exact sampling through the vocabulary intersection, and the edge cases (unicode, whitespace, EOS, k = 0,
byte-fallback fragments)."""

import warnings

import pytest
import torch

from helpers import build_tiny_model, build_tiny_tokenizer, first_layer_draft, sharpen, transplant_intersection
from specdec_lib import (
    GREEDY,
    CrossTokenizerDrafter,
    CrossVocabularySamplingDrafter,
    DraftModelDrafter,
    SamplingConfig,
    autoregressive_generate,
    load_pair,
    load_prompts,
    speculative_generate,
)
from specdec_lib.drafters.cross_tokenizer import continuation_ids, decode, encode, naive_continuation_ids
from specdec_lib.errors import ConfigError
from specdec_lib.stats import bucket_counts, chi_square_gof
from specdec_lib.vocab import compare_vocabularies, spelling_scheme, token_bytes, vocabulary_intersection
from test_sampling_distribution import categories_for, exact_joint, speculative_samples

TASKS = ("code", "prose", "grounded")
NEW_TOKENS = 24
GAMMAS = (1, 3, 5)


@pytest.fixture(scope="module")
def cross_pair():
    return load_pair("embedded-cross", device="cpu")


@pytest.fixture(scope="module")
def same_pair():
    return load_pair("embedded", device="cpu")


def greedy_reference(pair, ids, max_new_tokens=NEW_TOKENS):
    eos = pair.target_tokenizer.eos_token_id
    return autoregressive_generate(pair.target, ids, max_new_tokens=max_new_tokens, eos_token_id=eos).new_token_list


def run_cross(pair, drafter, ids, gamma, max_new_tokens=NEW_TOKENS):
    eos = pair.target_tokenizer.eos_token_id
    return speculative_generate(pair.target, drafter, ids, gamma=gamma, max_new_tokens=max_new_tokens,
                                eos_token_id=eos)


# ---------------------------------------------------------------- vocabularies, by normalised strings


def test_token_bytes_normalises_space_markers_and_byte_fallback():
    assert token_bytes("Ġreturn", "byte-level") == b" return" == token_bytes("\u2581return", "metaspace")
    assert token_bytes("Ċĉ", "byte-level") == b"\n\t"
    assert token_bytes("<0xE6>", "metaspace") == b"\xe6" == token_bytes("æ", "byte-level")
    assert token_bytes("æ", "metaspace") == "æ".encode()  # a learned character is its UTF-8 bytes, not one byte


def test_vocabulary_intersection_on_the_embedded_tokenizers(cross_pair):
    target_tok, draft_tok = cross_pair.target_tokenizer, cross_pair.draft_tokenizer
    assert (spelling_scheme(target_tok), spelling_scheme(draft_tok)) == ("byte-level", "metaspace")
    target_ids, draft_ids = vocabulary_intersection(target_tok, draft_tok)
    assert target_ids.shape == draft_ids.shape and len(set(target_ids.tolist())) == len(set(draft_ids.tolist()))
    assert len(set(target_ids.tolist())) == target_ids.numel()  # one-to-one
    target_strings = target_tok.convert_ids_to_tokens(target_ids.tolist())
    draft_strings = draft_tok.convert_ids_to_tokens(draft_ids.tolist())
    pairs = dict(zip(target_strings, draft_strings))
    assert pairs["Ġreturn"] == "\u2581return" and pairs["<|endoftext|>"] == "<|endoftext|>"
    assert pairs["æ"] == "<0xE6>"  # byte-fallback token <-> the byte-level token of the same byte
    for t, d in zip(target_ids.tolist()[1:], draft_ids.tolist()[1:]):  # every pair decodes to the same text
        assert decode(target_tok, [t]) == decode(draft_tok, [d]) or decode(target_tok, [t]) == "\ufffd"
    report = compare_vocabularies(target_tok, draft_tok)
    assert report.kind == "different" and report.normalized_overlap == target_ids.numel() > report.overlap


def test_plain_dicts_have_no_normalised_overlap():
    assert compare_vocabularies({"a": 0}, {"a": 0}).normalized_overlap is None


# ---------------------------------------------------------------- the boundary alignment


def test_continuation_ids_continue_the_committed_tokens_exactly(cross_pair):
    tok = cross_pair.target_tokenizer
    cases = [("x = sel", "f.value"), ("def f(x):\n", "        return x"), ("    ", "  return"), ("a = 1", "")]
    misaligned = 0
    for context, text in cases:
        context_ids, _ = encode(tok, context)
        aligned, ends = continuation_ids(tok, context, text)
        assert decode(tok, context_ids + aligned) == context + text, (context, text)
        assert ends == sorted(ends) and (not ends or ends[-1] == len(text))
        naive = naive_continuation_ids(tok, context_ids, context, text)
        misaligned += decode(tok, context_ids + naive) != context + text
    assert misaligned >= 2  # the naive cut repeats or drops characters at a merging boundary


# ---------------------------------------------------------------- greedy equivalence on the embedded pair


@pytest.mark.parametrize("task", TASKS)
def test_greedy_cross_tokenizer_equals_the_target_and_transformers_uad(cross_pair, task):
    """8 prompts x gamma in {1, 3, 5} x 24 tokens: ours equals the target's greedy output, and so does
    transformers' universal assisted decoding (target.generate(assistant_model=..., assistant_tokenizer=...))."""
    drafter = CrossTokenizerDrafter.for_pair(cross_pair)
    target_tok, eos = cross_pair.target_tokenizer, cross_pair.target_tokenizer.eos_token_id
    for prompt in load_prompts(task, limit=8):
        ids = target_tok(prompt.prompt, return_tensors="pt").input_ids
        expected = greedy_reference(cross_pair, ids)
        for gamma in GAMMAS:
            assert run_cross(cross_pair, drafter, ids, gamma).new_token_list == expected, (prompt.id, gamma)
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            uad = cross_pair.target.generate(
                ids, attention_mask=torch.ones_like(ids), assistant_model=cross_pair.draft, tokenizer=target_tok,
                assistant_tokenizer=cross_pair.draft_tokenizer, do_sample=False, max_new_tokens=NEW_TOKENS,
                eos_token_id=eos, pad_token_id=eos,
            )
        assert uad[0, ids.shape[1] :].tolist() == expected, prompt.id


def test_cross_acceptance_against_the_same_tokenizer_draft(cross_pair, same_pair, capsys):
    """Recorded for the notebook and the report: acceptance on the first 8 code prompts, gamma 4, 48 tokens."""
    cross, same = CrossTokenizerDrafter.for_pair(cross_pair), DraftModelDrafter.for_pair(same_pair)
    totals = {"cross": [0, 0], "same": [0, 0]}
    for prompt in load_prompts("code", limit=8):
        ids = cross_pair.target_tokenizer(prompt.prompt, return_tensors="pt").input_ids
        for name, pair, drafter in (("cross", cross_pair, cross), ("same", same_pair, same)):
            rounds = run_cross(pair, drafter, ids, 4, max_new_tokens=48).trace.rounds
            totals[name][0] += sum(r.accepted for r in rounds)
            totals[name][1] += sum(r.drafted for r in rounds)
    rates = {name: accepted / drafted for name, (accepted, drafted) in totals.items()}
    with capsys.disabled():
        print(f"\ncode acceptance, gamma 4: cross-tokenizer {rates['cross']:.3f}, same tokenizer {rates['same']:.3f}")
    assert 0.1 < rates["cross"] < rates["same"]


# ---------------------------------------------------------------- edge cases

HARD_TEXTS = [
    "def naïve_ünïcode_handler(x):\n    return x",
    "name = '漢字'  # 漢字のテスト\nprint(name",
    "smile = '😀🎉'\nprint(smile",
    "x  =   1\t\t# runs   of    spaces\n\ty =",
    "def f():\n    if a:\n        if b:\n            if c:\n                if d:\n                    return",
    "result = some_very_long_identifier_name_that_no_tokenizer_has_seen_before_xyz(",
]


def test_text_split_very_differently_still_equals_the_target(cross_pair):
    drafter = CrossTokenizerDrafter.for_pair(cross_pair)
    for text in HARD_TEXTS:
        ids = cross_pair.target_tokenizer(text, return_tensors="pt").input_ids
        expected = greedy_reference(cross_pair, ids)
        for gamma in (2, 5):
            assert run_cross(cross_pair, drafter, ids, gamma).new_token_list == expected, (text, gamma)


def test_a_prompt_ending_mid_character(cross_pair):
    """The target's sequence ends inside '漢' (1 of its 3 byte tokens): decoding gives '�'; nothing breaks."""
    tok = cross_pair.target_tokenizer
    ids = tok("x = '漢", return_tensors="pt").input_ids[:, :-2]
    assert decode(tok, ids[0].tolist()).endswith("\ufffd")
    drafter = CrossTokenizerDrafter.for_pair(cross_pair)
    assert len(drafter.propose(ids, 4, GREEDY, None)) == 0
    assert run_cross(cross_pair, drafter, ids, 3).new_token_list == greedy_reference(cross_pair, ids)


class FragmentDrafter(CrossTokenizerDrafter):
    """Drafts the first two byte-fallback tokens of '漢' (an incomplete character), then the given tail."""

    def _draft_greedy(self, context, k):
        self._sync(context)
        fragment = self.draft_tokenizer.convert_tokens_to_ids(["<0xE6>", "<0xBC>"])
        return fragment[:k], 0


class EosDrafter(CrossTokenizerDrafter):
    def _draft_greedy(self, context, k):
        return [], 1  # the draft's first token was its EOS


@pytest.mark.parametrize("drafter_class", [FragmentDrafter, EosDrafter])
def test_degenerate_drafts_propose_nothing_harmful(cross_pair, drafter_class):
    drafter = drafter_class.for_pair(cross_pair)
    ids = cross_pair.target_tokenizer("value = '", return_tensors="pt").input_ids
    draft = drafter.propose(ids, 4, GREEDY, None)
    assert "\ufffd" not in decode(cross_pair.target_tokenizer, draft.tokens.tolist())
    assert len(draft) == 0
    assert run_cross(cross_pair, drafter, ids, 3).new_token_list == greedy_reference(cross_pair, ids)


def test_k_zero_and_wrong_settings(cross_pair):
    drafter = CrossTokenizerDrafter.for_pair(cross_pair)
    ids = cross_pair.target_tokenizer("def f(x):", return_tensors="pt").input_ids
    drafter.begin(ids)
    assert len(drafter.propose(ids, 0, GREEDY, None)) == 0
    with pytest.raises(ConfigError, match="CrossVocabularySamplingDrafter"):
        drafter.propose(ids, 3, SamplingConfig(temperature=1.0), None)
    with pytest.raises(ConfigError, match="lookbehind"):
        CrossTokenizerDrafter.for_pair(cross_pair, lookbehind=0)


def test_the_draft_cache_is_rolled_back_to_its_valid_prefix(cross_pair):
    """After every round the draft's cache holds a prefix of the draft tokenization of the committed text."""

    class Checked(CrossTokenizerDrafter):
        def propose(self, sequence, k, sampling, generator):
            text = decode(self.target_tokenizer, sequence[0].tolist())
            canonical, _ = encode(self.draft_tokenizer, text)
            draft = super().propose(sequence, k, sampling, generator)
            self.checks.append(self._context.ids == canonical)
            return draft

        def accept(self, sequence_length):
            super().accept(sequence_length)
            held = self.state.ids.tolist()
            assert held == self._context.ids[: len(held)] or self._last is None

    drafter = Checked.for_pair(cross_pair)
    drafter.checks = []
    ids = cross_pair.target_tokenizer(load_prompts("code", limit=1)[0].prompt, return_tensors="pt").input_ids
    assert run_cross(cross_pair, drafter, ids, 4).new_token_list == greedy_reference(cross_pair, ids)
    assert sum(drafter.checks) >= 0.8 * len(drafter.checks)  # the lookbehind re-encoding is (almost) canonical


# ---------------------------------------------------------------- exact sampling through the intersection


@pytest.fixture(scope="module")
def tiny_cross():
    """A sharpened tiny target on tiny tokenizer "a" (byte-level) and a tiny draft on tokenizer "b" (metaspace):
    the target's first layer with its embedding and head rows moved to the draft ids of the same strings, so the
    two agree often (random independent models would almost never: acceptance about 0.03)."""
    tok_a, tok_b = build_tiny_tokenizer("a"), build_tiny_tokenizer("b")
    target = sharpen(build_tiny_model("llama", seed=0, num_layers=2))
    draft = first_layer_draft(target)
    transplant_intersection(target, draft, tok_a, tok_b)
    return target, draft, tok_a, tok_b


class WrongIdSpaceDrafter(CrossVocabularySamplingDrafter):
    """The bug: samples correctly but reports q indexed by *draft* ids instead of target ids."""

    def target_distribution(self, draft_logits, sampling):
        q_target = super().target_distribution(draft_logits, sampling)
        q_draft = torch.zeros_like(q_target)
        q_draft[self.draft_ids] = q_target[self.target_ids]
        self.reported.append(q_draft)
        return q_target

    def propose(self, sequence, k, sampling, generator):
        self.reported = []
        draft = super().propose(sequence, k, sampling, generator)
        if len(draft):
            draft.probs = torch.stack(self.reported)
        return draft


def test_q_is_over_target_ids_and_zero_outside_the_intersection(tiny_cross):
    target, draft, tok_a, tok_b = tiny_cross
    drafter = CrossVocabularySamplingDrafter(draft, tok_b, tok_a, target_vocab_size=64)
    ids = tok_a("def add(a, b):", return_tensors="pt").input_ids
    drafter.begin(ids)
    result = drafter.propose(ids, 3, SamplingConfig(temperature=1.0), torch.Generator().manual_seed(0))
    assert result.probs.shape == (len(result), 64)
    assert torch.allclose(result.probs.sum(-1), torch.ones(len(result)))
    outside = torch.ones(64, dtype=torch.bool)
    outside[drafter.target_ids] = False
    assert float(result.probs[:, outside].sum()) == 0
    assert set(result.tokens.tolist()) <= set(drafter.target_ids.tolist())


def test_cross_vocabulary_sampling_keeps_the_target_distribution(tiny_cross):
    target, draft, tok_a, tok_b = tiny_cross
    prompt = tok_a("def add(a, b):", return_tensors="pt").input_ids
    sampling, draws = SamplingConfig(temperature=1.0), 600
    categories, probs = categories_for(exact_joint(target, prompt, sampling, (8, 6, 4)), draws)
    honest = CrossVocabularySamplingDrafter(draft, tok_b, tok_a, target_vocab_size=64)
    samples, alpha = speculative_samples(target, honest, prompt, sampling, draws)
    test = chi_square_gof(bucket_counts(samples, categories), probs)
    assert test.passes(0.001) and test.cells >= 6, test
    print(f"\nalpha {alpha:.3f}, p {test.p_value:.3g}")
    assert 0.05 < alpha < 0.95, alpha  # acceptance and recovery both happen
    # q in the draft's id space gives some drafted target ids q = 0: verification refuses it before it can shift
    # the distribution (it used to be caught only by the chi-square test, p < 1e-6)
    wrong = WrongIdSpaceDrafter(draft, tok_b, tok_a, target_vocab_size=64)
    with pytest.raises(ConfigError, match="probability q = 0"):
        speculative_samples(target, wrong, prompt, sampling, draws)


def test_cross_vocabulary_greedy_equals_the_target_on_the_embedded_pair(cross_pair):
    drafter = CrossVocabularySamplingDrafter.for_pair(cross_pair)
    assert drafter.intersection_size == vocabulary_intersection(
        cross_pair.target_tokenizer, cross_pair.draft_tokenizer)[0].numel()
    for prompt in load_prompts("code", limit=3) + [type("P", (), {"prompt": HARD_TEXTS[1]})()]:
        ids = cross_pair.target_tokenizer(prompt.prompt, return_tensors="pt").input_ids
        assert run_cross(cross_pair, drafter, ids, 3).new_token_list == greedy_reference(cross_pair, ids)
