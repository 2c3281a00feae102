"""Cross-tokenizer drafting: vocabularies compared by normalised strings, the text round trip and its boundary
alignment, greedy equivalence on the embedded cross pair (ours and transformers' universal assisted decoding),
exact sampling with the text round trip's point-mass drafts and through the vocabulary intersection's q, and the
edge cases (unicode, whitespace, EOS, k = 0, byte-fallback fragments).

The fast suite compares with the target on one prompt per set (each gamma once) and on each hard text once; every
prompt x every gamma, both gammas on every hard text and the acceptance comparison with the same-tokenizer draft
are marked ``slow``.
"""

import warnings

import pytest
import torch

from helpers import (SIGNIFICANCE, build_tiny_model, build_tiny_tokenizer, categories_for, detectable_tv, exact_joint,
                     first_layer_draft, greedy_tokens, sharpen, speculative_samples, transplant_intersection)
from specdec_lib.core.drafting import Context
from specdec_lib import (
    GREEDY,
    CrossTokenizerDrafter,
    CrossVocabularySamplingDrafter,
    DraftModelDrafter,
    SamplingConfig,
    load_prompts,
    speculative_generate,
)
from specdec_lib.drafters.cross_tokenizer import continuation_ids, decode, encode, naive_continuation_ids, target_window
from specdec_lib.core.errors import ConfigError
from specdec_lib.core.stats import bucket_counts, chi_square_gof
from specdec_lib.core.vocab import compare_vocabularies, spelling_scheme, token_bytes, vocabulary_intersection

TASKS = ("code", "prose", "grounded")
NEW_TOKENS = 24  # the slow tests' length
FAST_TOKENS = 16  # the fast tests' length on prompts of the sets
SHORT = 8  # on the hard texts and the degenerate cases: what is hard about them is met in the first rounds
GAMMAS = (1, 3, 5)
CHOSEN = (("code", 3), ("prose", 5), ("grounded", 1))  # the fast suite's prompt per set: each gamma once


@pytest.fixture(scope="module")
def target_greedy(embedded_cross_pair):
    """``target_greedy(ids, max_new_tokens=NEW_TOKENS)``: the target's own greedy continuation of ``ids``, stopping
    at its EOS. Tests share prompts, so each is decoded once per module at the longest length asked so far (a
    shorter continuation is a prefix of a longer one)."""
    eos, known = embedded_cross_pair.target_tokenizer.eos_token_id, {}

    def continuation(ids: torch.Tensor, max_new_tokens: int = NEW_TOKENS) -> list[int]:
        key = tuple(ids[0].tolist())
        if known.get(key, (0, []))[0] < max_new_tokens:
            known[key] = max_new_tokens, greedy_tokens(embedded_cross_pair.target, ids, max_new_tokens, eos)
        return known[key][1][:max_new_tokens]

    return continuation


def encoded(pair, text: str) -> torch.Tensor:
    """``text`` in the target's ids, ``LongTensor[1, T]``."""
    return pair.target_tokenizer(text, return_tensors="pt").input_ids


def run_cross(pair, drafter, ids, gamma, max_new_tokens=NEW_TOKENS):
    eos = pair.target_tokenizer.eos_token_id
    return speculative_generate(pair.target, drafter, ids, gamma=gamma, max_new_tokens=max_new_tokens,
                                eos_token_id=eos)


def universal_assisted_greedy(pair, ids, max_new_tokens=NEW_TOKENS) -> list[int]:
    """transformers' universal assisted decoding: ``target.generate(assistant_model=..., assistant_tokenizer=...)``."""
    eos = pair.target_tokenizer.eos_token_id
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        out = pair.target.generate(
            ids, attention_mask=torch.ones_like(ids), assistant_model=pair.draft, tokenizer=pair.target_tokenizer,
            assistant_tokenizer=pair.draft_tokenizer, do_sample=False, max_new_tokens=max_new_tokens,
            eos_token_id=eos, pad_token_id=eos,
        )
    return out[0, ids.shape[1] :].tolist()


# ---------------------------------------------------------------- vocabularies, by normalised strings


def test_token_bytes_normalises_space_markers_and_byte_fallback():
    assert token_bytes("Ġreturn", "byte-level") == b" return" == token_bytes("\u2581return", "metaspace")
    assert token_bytes("Ċĉ", "byte-level") == b"\n\t"
    assert token_bytes("<0xE6>", "metaspace") == b"\xe6" == token_bytes("æ", "byte-level")
    assert token_bytes("æ", "metaspace") == "æ".encode()  # a learned character is its UTF-8 bytes, not one byte


def test_vocabulary_intersection_on_the_embedded_tokenizers(embedded_cross_pair):
    target_tok, draft_tok = embedded_cross_pair.target_tokenizer, embedded_cross_pair.draft_tokenizer
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


def test_continuation_ids_continue_the_committed_tokens_exactly(embedded_cross_pair):
    tok = embedded_cross_pair.target_tokenizer
    cases = [("x = sel", "f.value"), ("def f(x):\n", "        return x"), ("    ", "  return"), ("a = 1", ""),
             # the joint encoding moves the boundary: the committed indentation "\n    " becomes "\n   " + " def",
             # the committed " ar" becomes " a" + "round" (the tokens to keep are not the context's own count)
             ("class Point:\n    ", "def norm(self):"), ("stripped of whitespace ar", "ound both parts")]
    misaligned = 0
    for context, text in cases:
        context_ids, _ = encode(tok, context)
        aligned, ends = continuation_ids(tok, context, text)
        assert decode(tok, context_ids + aligned) == context + text, (context, text)
        assert ends == sorted(ends) and (not ends or ends[-1] == len(text))
        naive = naive_continuation_ids(tok, context_ids, context, text)
        misaligned += decode(tok, context_ids + naive) != context + text
    assert misaligned >= 2  # the naive cut repeats or drops characters at a merging boundary


def test_the_target_window_starts_on_a_whole_character(embedded_cross_pair):
    """The last ``lookbehind`` ids' text, started earlier where it would begin inside a character split into bytes
    (A writes "漢" as three byte tokens); the whole text when the window is longer than the sequence."""
    tok = embedded_cross_pair.target_tokenizer
    ids, _ = encode(tok, "x = f(a)  # 漢字")
    assert tok.convert_ids_to_tokens(ids[-6:]) == ["æ", "¼", "¢", "å", "Ń", "Ĺ"]
    assert target_window(tok, ids, 1) == "字" == target_window(tok, ids, 3)  # one id alone is part of "字"
    assert target_window(tok, ids, 4) == "漢字"
    assert target_window(tok, ids, 7) == " 漢字"
    assert target_window(tok, ids, 100) == decode(tok, ids)


# ---------------------------------------------------------------- greedy equivalence on the embedded pair


def test_greedy_cross_tokenizer_equals_the_target_and_transformers_uad_on_a_prompt_per_set(
    embedded_cross_pair, encoded_prompts, target_greedy
):
    """`CHOSEN`: the first prompt of each set, each gamma once, `FAST_TOKENS` tokens: ours equals the target's
    greedy output, and so does transformers' universal assisted decoding; the drafts are useful too, not only
    harmless (a broken translation would be rejected every time and still pass the token check)."""
    drafter = CrossTokenizerDrafter.for_pair(embedded_cross_pair)
    accepted = drafted = 0
    for task, gamma in CHOSEN:
        pid, ids = encoded_prompts[task][0]
        expected = target_greedy(ids, FAST_TOKENS)
        result = run_cross(embedded_cross_pair, drafter, ids, gamma, max_new_tokens=FAST_TOKENS)
        assert result.new_token_list == expected, (pid, gamma)
        assert universal_assisted_greedy(embedded_cross_pair, ids, FAST_TOKENS) == expected, pid
        accepted += sum(r.accepted for r in result.trace.rounds)
        drafted += sum(r.drafted for r in result.trace.rounds)
    assert accepted > 0.1 * drafted


@pytest.mark.slow
@pytest.mark.parametrize("task", TASKS)
def test_cross_drafters_equal_the_target_and_transformers_uad_on_every_prompt(embedded_cross_pair, target_greedy,
                                                                              task):
    """8 prompts x gamma in {1, 3, 5} x 24 tokens: ours equals the target's greedy output, and so do the
    cross-vocabulary drafter drafting greedily (gamma 3) and transformers' universal assisted decoding."""
    drafter = CrossTokenizerDrafter.for_pair(embedded_cross_pair)
    vocabulary_drafter = CrossVocabularySamplingDrafter.for_pair(embedded_cross_pair)
    for prompt in load_prompts(task, limit=8):
        ids = encoded(embedded_cross_pair, prompt.prompt)
        expected = target_greedy(ids)
        for gamma in GAMMAS:
            assert run_cross(embedded_cross_pair, drafter, ids, gamma).new_token_list == expected, (prompt.id, gamma)
        assert run_cross(embedded_cross_pair, vocabulary_drafter, ids, 3).new_token_list == expected, prompt.id
        assert universal_assisted_greedy(embedded_cross_pair, ids) == expected, prompt.id


@pytest.mark.slow
def test_cross_acceptance_against_the_same_tokenizer_draft(embedded_cross_pair, embedded_pair, capsys):
    """Recorded for the notebook and the report: acceptance on the first 8 code prompts, gamma 4, 48 tokens."""
    cross = CrossTokenizerDrafter.for_pair(embedded_cross_pair)
    same = DraftModelDrafter.for_pair(embedded_pair)
    totals = {"cross": [0, 0], "same": [0, 0]}
    for prompt in load_prompts("code", limit=8):
        ids = encoded(embedded_cross_pair, prompt.prompt)
        for name, pair, drafter in (("cross", embedded_cross_pair, cross), ("same", embedded_pair, same)):
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
HARD_GAMMAS = (2, 5)


def test_text_split_very_differently_still_equals_the_target(embedded_cross_pair, target_greedy):
    """Each hard text once, the gammas taking turns, `SHORT` tokens; both gammas and `NEW_TOKENS`: slow."""
    drafter = CrossTokenizerDrafter.for_pair(embedded_cross_pair)
    for index, text in enumerate(HARD_TEXTS):
        ids, gamma = encoded(embedded_cross_pair, text), HARD_GAMMAS[index % len(HARD_GAMMAS)]
        result = run_cross(embedded_cross_pair, drafter, ids, gamma, max_new_tokens=SHORT)
        assert result.new_token_list == target_greedy(ids, SHORT), (text, gamma)


@pytest.mark.slow
def test_text_split_very_differently_still_equals_the_target_at_every_gamma(embedded_cross_pair, target_greedy):
    drafter = CrossTokenizerDrafter.for_pair(embedded_cross_pair)
    for text in HARD_TEXTS:
        ids = encoded(embedded_cross_pair, text)
        for gamma in HARD_GAMMAS:
            result = run_cross(embedded_cross_pair, drafter, ids, gamma)
            assert result.new_token_list == target_greedy(ids), (text, gamma)


def test_a_prompt_ending_mid_character(embedded_cross_pair, target_greedy):
    """The target's sequence ends inside '漢' (1 of its 3 byte tokens): decoding gives '�'; nothing breaks."""
    tok = embedded_cross_pair.target_tokenizer
    ids = encoded(embedded_cross_pair, "x = '漢")[:, :-2]
    assert decode(tok, ids[0].tolist()).endswith("\ufffd")
    drafter = CrossTokenizerDrafter.for_pair(embedded_cross_pair)
    assert len(drafter.propose(Context.of(ids, 4), GREEDY, None)) == 0
    result = run_cross(embedded_cross_pair, drafter, ids, 3, max_new_tokens=SHORT)
    assert result.new_token_list == target_greedy(ids, SHORT)


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
def test_degenerate_drafts_propose_nothing_harmful(embedded_cross_pair, target_greedy, drafter_class):
    drafter = drafter_class.for_pair(embedded_cross_pair)
    ids = encoded(embedded_cross_pair, "value = '")
    draft = drafter.propose(Context.of(ids, 4), GREEDY, None)
    assert "\ufffd" not in decode(embedded_cross_pair.target_tokenizer, draft.row().tolist())
    assert len(draft) == 0
    result = run_cross(embedded_cross_pair, drafter, ids, 3, max_new_tokens=SHORT)
    assert result.new_token_list == target_greedy(ids, SHORT)


def test_k_zero_and_wrong_settings(embedded_cross_pair):
    drafter = CrossTokenizerDrafter.for_pair(embedded_cross_pair)
    ids = encoded(embedded_cross_pair, "def f(x):")
    drafter.begin(Context.of(ids))
    assert len(drafter.propose(Context.of(ids, 0), GREEDY, None)) == 0
    sampled = drafter.propose(Context.of(ids, 3), SamplingConfig(temperature=1.0), None)
    greedy = drafter.propose(Context.of(ids, 3), GREEDY, None)
    assert sampled.probs is None and torch.equal(sampled.tokens, greedy.tokens)  # point masses, at any temperature
    with pytest.raises(ConfigError, match="lookbehind"):
        CrossTokenizerDrafter.for_pair(embedded_cross_pair, lookbehind=0)


def test_the_draft_cache_is_rolled_back_to_its_valid_prefix(embedded_cross_pair, encoded_prompts, target_greedy):
    """After every round the draft's cache holds a prefix of the draft tokenization of the committed text."""

    class Checked(CrossTokenizerDrafter):
        def propose(self, context, sampling, generator):
            sequence = context.sequence
            text = decode(self.target_tokenizer, sequence[0].tolist())
            canonical, _ = encode(self.draft_tokenizer, text)
            draft = super().propose(context, sampling, generator)
            self.checks.append(self._context.ids == canonical)
            return draft

        def accept(self, context):
            super().accept(context)
            held = self.state.ids.tolist()
            assert held == self._context.ids[: len(held)] or self._last is None

    drafter = Checked.for_pair(embedded_cross_pair)
    drafter.checks = []
    ids = encoded_prompts["code"][0][1]
    result = run_cross(embedded_cross_pair, drafter, ids, 4, max_new_tokens=FAST_TOKENS)
    assert result.new_token_list == target_greedy(ids, FAST_TOKENS)
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

    def propose(self, context, sampling, generator):
        self.reported = []
        draft = super().propose(context, sampling, generator)
        if len(draft):
            draft.probs = torch.stack(self.reported)
        return draft


def test_q_is_over_target_ids_and_zero_outside_the_intersection(tiny_cross):
    """Exact checks of the reported q: a q not renormalised over the intersection, or leaking mass outside it,
    fails here whatever its effect on the sampled tokens (too small for the chi-square test below)."""
    target, draft, tok_a, tok_b = tiny_cross
    drafter = CrossVocabularySamplingDrafter(draft, tok_b, tok_a, target_vocab_size=64)
    ids = tok_a("def add(a, b):", return_tensors="pt").input_ids
    drafter.begin(Context.of(ids))
    result = drafter.propose(Context.of(ids, 3), SamplingConfig(temperature=1.0), torch.Generator().manual_seed(0))
    q = result.probs[0]  # [k, V]: the one row's distributions
    assert q.shape == (len(result), 64)
    assert torch.allclose(q.sum(-1), torch.ones(len(result)))
    outside = torch.ones(64, dtype=torch.bool)
    outside[drafter.target_ids] = False
    assert float(q[:, outside].sum()) == 0
    assert set(result.row().tolist()) <= set(drafter.target_ids.tolist())


# The chi-square test below must catch a gross end-to-end failure, e.g. a q reported for another position or in
# the wrong id space, which moves the first three tokens' distribution by far more than this TV distance (subtler q
# errors are caught exactly by the test above). SAMPLING_DRAWS is sized to it with `detectable_tv`.
SAMPLING_EFFECT_TV = 0.2
SAMPLING_DRAWS = 200


def test_cross_vocabulary_sampling_keeps_the_target_distribution(tiny_cross):
    target, draft, tok_a, tok_b = tiny_cross
    prompt = tok_a("def add(a, b):", return_tensors="pt").input_ids
    sampling = SamplingConfig(temperature=1.0)
    categories, probs = categories_for(exact_joint(target, prompt, sampling, (8, 6, 4)), SAMPLING_DRAWS)
    assert detectable_tv(SAMPLING_DRAWS, len(probs)) <= SAMPLING_EFFECT_TV  # the power statement above
    honest = CrossVocabularySamplingDrafter(draft, tok_b, tok_a, target_vocab_size=64)
    samples, alpha = speculative_samples(target, honest, prompt, sampling, SAMPLING_DRAWS)
    test = chi_square_gof(bucket_counts(samples, categories), probs)
    assert test.passes(0.001) and test.cells >= 6, test
    assert 0.05 < alpha < 0.95, alpha  # acceptance and recovery both happen
    # q in the draft's id space gives some drafted target ids q = 0: verification refuses it before it can shift
    # the distribution (it used to be caught only by the chi-square test, p < 1e-6)
    wrong = WrongIdSpaceDrafter(draft, tok_b, tok_a, target_vocab_size=64)
    with pytest.raises(ConfigError, match="probability q = 0"):
        speculative_samples(target, wrong, prompt, sampling, SAMPLING_DRAWS)


def test_point_mass_drafts_across_tokenizers_keep_the_target_distribution(tiny_cross):
    """The text round trip samples exactly as prompt lookup does: its greedy drafts are reported as point masses
    (probs=None), exact verification accepts a draft x with probability p(x) and otherwise draws from p without x,
    so the emitted tokens follow the target's law (whatever chose x: a point mass is exact for any draft). The same
    prompt, draws and power as the intersection drafter's test above (any TV >= SAMPLING_EFFECT_TV over the tested
    cells is caught), with both acceptance and recovery in the runs, and the drafts really point masses."""
    target, draft, tok_a, tok_b = tiny_cross
    prompt = tok_a("def add(a, b):", return_tensors="pt").input_ids
    sampling = SamplingConfig(temperature=1.0)
    categories, probs = categories_for(exact_joint(target, prompt, sampling, (8, 6, 4)), SAMPLING_DRAWS)
    assert detectable_tv(SAMPLING_DRAWS, len(probs)) <= SAMPLING_EFFECT_TV  # the power statement above
    drafter = CrossTokenizerDrafter(draft, tok_b, tok_a)
    samples, acceptance = speculative_samples(target, drafter, prompt, sampling, SAMPLING_DRAWS)
    test = chi_square_gof(bucket_counts(samples, categories), probs)
    assert test.passes(SIGNIFICANCE) and test.cells >= 6, test
    assert 0.02 < acceptance < 0.95, acceptance  # acceptance and recovery both happen (dozens of each)
    drafter.begin(Context.of(prompt))
    assert drafter.propose(Context.of(prompt, 3), sampling, torch.Generator().manual_seed(0)).probs is None


def test_cross_vocabulary_greedy_equals_the_target_on_the_embedded_pair(embedded_cross_pair, encoded_prompts,
                                                                        target_greedy):
    """A code prompt and a hard text at gamma 3; the first 8 prompts of each set: slow."""
    drafter = CrossVocabularySamplingDrafter.for_pair(embedded_cross_pair)
    assert drafter.intersection_size == vocabulary_intersection(
        embedded_cross_pair.target_tokenizer, embedded_cross_pair.draft_tokenizer)[0].numel()
    for ids, max_new_tokens in ((encoded_prompts["code"][0][1], FAST_TOKENS),
                                (encoded(embedded_cross_pair, HARD_TEXTS[1]), SHORT)):
        result = run_cross(embedded_cross_pair, drafter, ids, 3, max_new_tokens=max_new_tokens)
        assert result.new_token_list == target_greedy(ids, max_new_tokens)
