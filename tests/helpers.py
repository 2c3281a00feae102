"""What the test modules share: tiny models, reference decoders, the sampling-statistics harness with its power,
Markov-chain targets, and drafters that are wrong on purpose. Test modules import from here, never from each other.

Tiny random models (vocab 64, 2 layers, hidden 32) stand in for real ones wherever a test checks the library's
logic (caches, positions, sampling, loading), which does not depend on trained weights.

**Power.** A statistical test is only as strong as the deviation it can see. A chi-square test over ``m`` cells at
level ``alpha`` detects a deviation ``d = p1 - p0`` with the noncentrality ``lambda = n sum d^2 / p0``, and by
Cauchy-Schwarz (``sum p0 = 1``) ``lambda >= 4 n TV(p0, p1)^2`` for n draws: so `detectable_tv` is the smallest total
variation distance that *any* deviation must have to be caught with the given power, whatever its shape (a
deviation concentrated on likely cells is caught well below it). Each statistical test states its draws next to
this number and asserts the statement with `detectable_tv`, so a reader sees why it has that many draws and the
claim cannot drift from the code.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path

import scipy.stats
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedModel, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from specdec_lib import autoregressive_generate, speculative_generate
from specdec_lib.core.drafting import Draft, WrappedDrafter
from specdec_lib.core.sampling import GREEDY, SamplingConfig, logits_to_probs

# ---------------------------------------------------------------------------------------------------- tiny models

TINY_VOCAB = 64
TINY_CONTEXT = 128

TOKENIZER_CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "for item in items:\n    print(item)\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n",
    "import os\nimport sys\nif __name__ == '__main__':\n    main()\n",
]


def build_tiny_model(
    architecture: str = "llama", *, seed: int = 0, num_layers: int = 2, vocab_size: int = TINY_VOCAB
) -> PreTrainedModel:
    """A random-weight causal LM (hidden 32, 4 heads, 2 KV heads, context 128), float32, eval mode."""
    config_class, model_class = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM)}[
        architecture
    ]
    config = config_class(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=TINY_CONTEXT,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=1,
    )
    torch.manual_seed(seed)
    return model_class(config).eval()


def build_tiny_tokenizer(kind: str = "a") -> PreTrainedTokenizerFast:
    """A BPE tokenizer trained on a few lines of Python: kind "a" (byte-level, like GPT-2) or "b" (metaspace).

    The two kinds split text differently and have different token strings, like tokenizers A and B of the
    embedded family; both have at most `TINY_VOCAB` tokens, ids 0 and 1 being ``<bos>`` and ``<eos>``.
    """
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>" if kind == "b" else None))
    if kind == "a":
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
        tokenizer.decoder = decoders.Metaspace()
    special_tokens = ["<bos>", "<eos>", "<unk>"]
    trainer = trainers.BpeTrainer(vocab_size=TINY_VOCAB, special_tokens=special_tokens, show_progress=False)
    tokenizer.train_from_iterator(TOKENIZER_CORPUS, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>")


def save_tiny_model(folder: Path, architecture: str = "llama", tokenizer_kind: str = "a", *, seed: int = 0) -> Path:
    """Save a tiny model (fp16 safetensors, like the embedded family) and its tokenizer to ``folder``."""
    tokenizer = build_tiny_tokenizer(tokenizer_kind)
    model = build_tiny_model(architecture, seed=seed, vocab_size=len(tokenizer))
    model.half().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def sharpen(model: PreTrainedModel, factor: float = 30.0) -> PreTrainedModel:
    """Scale the LM head in place: peaked next-token distributions, like a trained model's (random tiny models are
    nearly uniform, so every sampled draft would be accepted and nothing would be rejected or rolled back)."""
    with torch.no_grad():
        model.lm_head.weight.mul_(factor)
    return model


def first_layer_draft(target: PreTrainedModel) -> PreTrainedModel:
    """A draft made of a copy of ``target`` keeping only its first layer: it agrees with the target often."""
    draft = copy.deepcopy(target)
    draft.model.layers = draft.model.layers[:1]
    draft.config.num_hidden_layers = 1
    return draft


def sharp_pair(seed: int = 0, factor: float = 30.0) -> tuple[PreTrainedModel, PreTrainedModel]:
    """A sharpened 2-layer tiny target and a draft made of its first layer: acceptance about 0.5 to 0.7 at T = 1,
    so sampled rounds accept many drafts and recover many tokens (both paths of the verifier run)."""
    target = sharpen(build_tiny_model("llama", seed=seed, num_layers=2), factor)
    return target, first_layer_draft(target)


def transplant_intersection(source: PreTrainedModel, draft: PreTrainedModel, source_tokenizer, draft_tokenizer) -> None:
    """Copy ``source``'s embedding and head rows to ``draft``'s ids of the same strings (vocabulary intersection),
    so a draft on another tokenizer still agrees with the source model."""
    from specdec_lib.core.vocab import vocabulary_intersection

    source_ids, draft_ids = vocabulary_intersection(source_tokenizer, draft_tokenizer)
    with torch.no_grad():
        draft.model.embed_tokens.weight[draft_ids] = source.model.embed_tokens.weight[source_ids]
        draft.lm_head.weight[draft_ids] = source.lm_head.weight[source_ids]


# ------------------------------------------------------------------------------------------------------ references


def hf_greedy(model: PreTrainedModel, ids: torch.Tensor, max_new_tokens: int, eos_token_id: int | None = None) -> list[int]:
    """transformers' own greedy decoding, the reference every greedy method must equal token for token."""
    with torch.no_grad():
        out = model.generate(
            ids,
            do_sample=False,
            max_new_tokens=max_new_tokens,
            eos_token_id=eos_token_id,
            pad_token_id=model.config.pad_token_id,
            attention_mask=torch.ones_like(ids),
        )
    return out[0, ids.shape[1] :].tolist()


def greedy_tokens(model: PreTrainedModel, ids: torch.Tensor, max_new_tokens: int, eos_token_id=None) -> list[int]:
    """The target alone, greedy (our baseline; `test_baseline` checks it against `hf_greedy`)."""
    return autoregressive_generate(model, ids, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id).new_token_list


# ----------------------------------------------------------------------------------------------- power of a test

SIGNIFICANCE = 0.001  # a correct sampler fails a test this strict once in a thousand seeds; ours are fixed
POWER = 0.9


@functools.lru_cache(maxsize=None)
def noncentrality_for_power(dof: int, alpha: float = SIGNIFICANCE, power: float = POWER) -> float:
    """The noncentrality lambda at which a chi-square statistic with ``dof`` degrees of freedom exceeds its level-
    ``alpha`` critical value with probability ``power`` (bisection on scipy's noncentral chi-square)."""
    critical = scipy.stats.chi2.isf(alpha, dof)
    low, high = 0.0, 1.0
    while scipy.stats.ncx2.sf(critical, dof, high) < power:
        high *= 2
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if scipy.stats.ncx2.sf(critical, dof, middle) < power else (low, middle)
    return high


def detectable_tv(draws: int, cells: int, alpha: float = SIGNIFICANCE, power: float = POWER,
                  two_sample: bool = False) -> float:
    """The smallest TV distance a chi-square test over ``cells`` categories at level ``alpha`` catches with
    probability ``power`` from ``draws`` samples, whatever the deviation's shape (module docstring). A two-sample
    (homogeneity) test with ``draws`` samples on each side has half the noncentrality."""
    lam = noncentrality_for_power(cells - 1, alpha, power)
    return (lam / ((2 if two_sample else 4) * draws)) ** 0.5


def draws_to_detect(tv: float, cells: int, alpha: float = SIGNIFICANCE, power: float = POWER) -> int:
    """The fewest draws with `detectable_tv` at most ``tv`` (one-sample test)."""
    lam = noncentrality_for_power(cells - 1, alpha, power)
    return int(lam / (4 * tv * tv)) + 1


def rejection_power(probs: list[float], law: list[float], draws: int, alpha: float = SIGNIFICANCE) -> float:
    """The probability that the chi-square goodness-of-fit test of ``draws`` samples against ``probs`` rejects at
    level ``alpha`` when the samples follow ``law`` instead: the noncentral chi-square with ``len(probs) - 1``
    degrees of freedom and ``lambda = draws sum_c (law_c - probs_c)^2 / probs_c`` (module docstring)."""
    dof = len(probs) - 1
    noncentrality = draws * sum((b - a) ** 2 / a for a, b in zip(probs, law) if a > 0)
    return float(scipy.stats.ncx2.sf(scipy.stats.chi2.isf(alpha, dof), dof, noncentrality))


# ------------------------------------------------------------------------- sampling end to end: the chi-square harness

SETTINGS = {
    "T=1.0": SamplingConfig(temperature=1.0),
    "T=0.7, top_p=0.9": SamplingConfig(temperature=0.7, top_p=0.9),
    "T=1.5, top_k=20": SamplingConfig(temperature=1.5, top_k=20),
}
PROMPT = torch.tensor([[0, 5, 17]])  # a tiny-model prompt
# After [0, 20, 63] the sharp tiny target (`sharp_pair`) is peaked (15 outcomes expected 5 times in 300 draws at
# T = 0.7, top_p = 0.9) and its first-layer draft is accepted about half the time, so a misreported q moves the
# tested law far: chosen among 190 random prompts [0, a, b] for the noncentrality per draw of those bugs (0.38 for
# the untempered q at T = 0.7, top_p = 0.9, against 0.10 after PROMPT, which would need 4 times the draws).
PEAKED_PROMPT = torch.tensor([[0, 20, 63]])
NEW_TOKENS, GAMMA, TESTED = 4, 3, 3  # tokens 2 and 3 are drafts of one round (k = 2), token 4 may be its bonus


def exact_joint(model, prompt_ids: torch.Tensor, sampling: SamplingConfig, widths: tuple[int, ...]) -> dict:
    """Exact ``P(x_1 .. x_m)`` under ``model`` alone for the outcomes of a beam: at step j, the ``widths[j]`` most
    likely tokens after each kept prefix (``P = p(x_1) p(x_2 | x_1) ...``, one batched forward per step)."""
    beam = {(): 1.0}
    for width in widths:
        prefixes = list(beam)
        continuations = torch.tensor(prefixes, dtype=torch.long).view(len(prefixes), -1)  # [beam, j]
        batch = torch.cat([prompt_ids.repeat(len(prefixes), 1), continuations], dim=1)
        with torch.inference_mode():
            probs = logits_to_probs(model(input_ids=batch).logits[:, -1], sampling)  # [beam, V]
        top = probs.topk(width, dim=-1)
        beam = {prefix + (token,): beam[prefix] * value
                for prefix, values, tokens in zip(prefixes, top.values.tolist(), top.indices.tolist())
                for value, token in zip(values, tokens) if value > 0}
    return beam


def categories_for(joint: dict, draws: int) -> tuple[list[tuple], list[float]]:
    """The outcomes expected at least 5 times in ``draws`` (most likely first) and their probabilities, plus the
    probability of "everything else" as the last entry."""
    kept = sorted((c for c, prob in joint.items() if prob * draws >= 5), key=lambda c: -joint[c])
    probs = [joint[c] for c in kept]
    return kept, probs + [max(0.0, 1.0 - sum(probs))]


def speculative_samples(target, drafter, prompt_ids, sampling, draws, seed=0, generate=speculative_generate,
                        **options) -> tuple[list[tuple], float]:
    """The first `TESTED` tokens of ``draws`` seeded runs of ``generate`` (default `speculative_generate` with
    gamma `GAMMA`, `NEW_TOKENS` tokens), and the acceptance rate over all of them."""
    options = {"gamma": GAMMA, **options} if generate is speculative_generate else options
    samples, drafted, accepted = [], 0, 0
    for i in range(draws):
        result = generate(target, drafter, prompt_ids, max_new_tokens=NEW_TOKENS, sampling=sampling, seed=seed + i,
                          **options)
        samples.append(tuple(result.new_token_list[:TESTED]))
        drafted += sum(r.drafted for r in result.trace.rounds)
        accepted += sum(r.accepted for r in result.trace.rounds)
    return samples, accepted / max(drafted, 1)


def target_samples(target, prompt_ids, sampling, draws, seed=10**6, tokens: int = TESTED) -> list[tuple]:
    """The first ``tokens`` tokens of ``draws`` seeded runs of the target alone."""
    return [tuple(autoregressive_generate(target, prompt_ids, max_new_tokens=tokens, sampling=sampling,
                                          seed=seed + i).new_token_list) for i in range(draws)]


# ------------------------------------------------------------------------------ greedy equivalence, tiny models

def assert_greedy_equivalent(target, make_drafter, input_ids, *, gammas=(1, 2, 4, 8), lengths=(24,),
                             eos_token_id=None):
    """`speculative_generate` with a fresh ``make_drafter()`` equals `autoregressive_generate` token for token for
    every gamma and length; returns the drafts accepted over all runs (so a caller can check drafting happened)."""
    accepted = 0
    for max_new_tokens in lengths:
        expected = autoregressive_generate(target, input_ids, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id)
        for gamma in gammas:
            result = speculative_generate(target, make_drafter(), input_ids, gamma=gamma,
                                          max_new_tokens=max_new_tokens, eos_token_id=eos_token_id)
            assert result.new_token_list == expected.new_token_list, (input_ids.tolist(), gamma, max_new_tokens)
            accepted += sum(record.accepted for record in result.trace.rounds)
    return accepted


def tiny_prompts(count: int, seed: int = 0) -> list[torch.Tensor]:
    """Prompts for the tiny models (vocab 64): random ones, and ones made of a repeated random phrase."""
    generator = torch.Generator().manual_seed(seed)
    prompts = []
    for i in range(count):
        phrase = torch.randint(2, 64, (int(torch.randint(3, 9, (1,), generator=generator)),), generator=generator)
        prompts.append((phrase.repeat(3) if i % 2 else phrase).view(1, -1))
    return prompts


def eos_cases(target, prompt: torch.Tensor, make_drafter, *, gamma: int = 4, length: int = 40):
    """Stop-token checks: the target's greedy text after ``prompt`` falls into a loop; with the first ``length``
    tokens of it pasted into the prompt, the drafter proposes spans of the loop. Each token of the loop in turn is
    made the EOS id: the output must equal the baseline's (stopping right after the first EOS). Returns how many
    runs ended on an EOS the drafter had proposed (an accepted draft, not the target's own token)."""
    greedy = autoregressive_generate(target, prompt, max_new_tokens=2 * length, eos_token_id=None).new_token_list
    context = torch.cat([prompt, torch.tensor([greedy[:length]])], dim=1)
    drafted_eos = 0
    for eos in sorted(set(greedy[length:])):
        expected = autoregressive_generate(target, context, max_new_tokens=length, eos_token_id=eos)
        result = speculative_generate(target, make_drafter(), context, gamma=gamma, max_new_tokens=length,
                                      eos_token_id=eos)
        assert result.new_token_list == expected.new_token_list, eos
        assert result.new_token_list.count(eos) == 1 and result.new_token_list[-1] == eos
        last = result.trace.rounds[-1]
        drafted_eos += last.emitted <= last.accepted  # generation ended inside the accepted drafts
    return drafted_eos


def repeating_prompt(target) -> torch.Tensor:
    """A prompt that ends where it began: ``[0, 5, 17] + greedy continuation + [0, 5, 17]``. After it, the target's
    likely first tokens occur in the prompt, so a drafter that copies from the context (prompt lookup, suffix
    decoding) proposes a continuation in most sampled runs."""
    start = torch.tensor([[0, 5, 17]])
    greedy = autoregressive_generate(target, start, max_new_tokens=10, eos_token_id=None).new_tokens
    return torch.cat([start, greedy.view(1, -1), start], dim=1)


# ----------------------------------------------------------------------------------- Markov-chain targets, batched


def random_chains(vocab: int, seed: int, sharpness: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Peaked random transition matrices ``P(next | previous)`` (the target) and ``Q`` (the draft's own chain),
    ``[vocab, vocab]`` each."""
    generator = torch.Generator().manual_seed(seed)
    return tuple(torch.softmax(torch.randn(vocab, vocab, generator=generator) * sharpness, -1) for _ in range(2))


def count_transitions(previous: torch.Tensor, emitted: torch.Tensor, kept: torch.Tensor, vocab: int) -> torch.Tensor:
    """Transition counts ``[vocab, vocab]`` of B streams that emitted ``emitted: [B, E]`` (``kept: [B, E]`` marks the
    real ones, a prefix of each row) after their last token ``previous: [B]``."""
    before = torch.cat([previous[:, None], emitted[:, :-1]], dim=1)  # [B, E]: the token each emitted one follows
    pairs = (before * vocab + emitted)[kept]
    return torch.bincount(pairs, minlength=vocab * vocab).view(vocab, vocab)


def chain_transition_counts(verify, target_chain: torch.Tensor, draft_chain: torch.Tensor, *, gamma: int,
                            streams: int, rounds: int, seed: int = 0) -> torch.Tensor:
    """Speculative decoding of a Markov-chain target, ``streams`` independent streams at once for ``rounds`` rounds:
    each round the draft chain samples ``gamma`` tokens per stream, ``verify(p [B, gamma + 1, V], q [B, gamma,
    V], drafts [B, gamma], None, generator)`` (a verifier returning a `Verdict`, e.g. `verify_exact`) keeps some, and
    rows p_i / q_i follow the drafted path. Returns the transition counts ``[V, V]``; when the verifier is exact,
    row a is a multinomial sample of ``target_chain[a]``."""
    vocab = target_chain.shape[0]
    generator = torch.Generator().manual_seed(seed)
    last = torch.zeros(streams, dtype=torch.long)
    counts = torch.zeros(vocab, vocab, dtype=torch.long)
    for _ in range(rounds):
        path, q_rows = [last], []
        for _ in range(gamma):
            q_rows.append(draft_chain[path[-1]])  # [B, V]
            path.append(torch.multinomial(q_rows[-1], 1, generator=generator)[:, 0])
        path_t = torch.stack(path, dim=1)  # [B, gamma + 1]
        verdict = verify(target_chain[path_t], torch.stack(q_rows, dim=1), path_t[:, 1:], None, generator)
        emitted = torch.cat([path_t[:, 1:], path_t.new_zeros(streams, 1)], dim=1)  # [B, gamma + 1]
        emitted[torch.arange(streams), verdict.accepted] = verdict.next_token
        kept = torch.arange(gamma + 1) <= verdict.accepted[:, None]
        counts += count_transitions(last, emitted, kept, vocab)
        last = emitted[torch.arange(streams), verdict.accepted]
    return counts


def transition_p_values(counts: torch.Tensor, target_chain: torch.Tensor) -> list[float]:
    """One chi-square p-value per row a: do the transitions out of a follow ``target_chain[a]``?"""
    from specdec_lib.core.stats import chi_square_gof

    return [chi_square_gof(counts[a].tolist(), target_chain[a].tolist()).p_value for a in range(counts.shape[0])]


def one_position_law(p: torch.Tensor, q_sampled: torch.Tensor, q_reported: torch.Tensor,
                     lenience: float = 1.0) -> torch.Tensor:
    """The exact law ``[..., V]`` of the token one verified position emits when its draft is drawn from
    ``q_sampled`` and verified against ``q_reported`` (which must be > 0 wherever ``q_sampled`` is): x is accepted
    with probability ``q_s(x) min(1, l p(x) / q_r(x))``, and the rejected mass is spread over the residual
    ``norm(max(p - q_r, 0))``. It is p exactly when ``q_r = q_s`` and ``l = 1``; anything else is the output law of
    a broken guarantee."""
    from specdec_lib.core.verify import residual_distribution

    assert bool((q_reported > 0)[q_sampled > 0].all()), "a drawable draft is reported with q = 0: the run would raise"
    accepted = torch.where(q_sampled > 0, q_sampled * torch.clamp(lenience * p / q_reported, max=1.0), 0.0)
    return accepted + (1 - accepted.sum(dim=-1, keepdim=True)) * residual_distribution(p, q_reported)


def expected_transitions(round_law, vocab: int, rounds: int) -> torch.Tensor:
    """Exact expected transition counts ``[V, V]`` (float64) of one stream over ``rounds`` rounds from token 0 (where
    the sampled streams start), when a round after last token a emits the tuple s with probability
    ``round_law(a)[s]``: the law of each round's starting token is propagated through the chain of rounds."""
    per_round = torch.zeros(vocab, vocab, vocab, dtype=torch.float64)  # [a, b, c]: E[b -> c in a round after a]
    ends = torch.zeros(vocab, vocab, dtype=torch.float64)  # [a, y]: P(a round after a ends with y)
    for a in range(vocab):
        for emitted, probability in round_law(a).items():
            for before, after in zip((a,) + emitted, emitted):
                per_round[a, before, after] += probability
            ends[a, emitted[-1]] += probability
    state = torch.nn.functional.one_hot(torch.tensor(0), vocab).double()  # the first round starts at 0
    total = torch.zeros(vocab, vocab, dtype=torch.float64)
    for _ in range(rounds):
        total += torch.einsum("a,abc->bc", state, per_round)
        state = state @ ends
    return total


def row_laws(counts: torch.Tensor) -> torch.Tensor:
    """Each row of a transition-count matrix ``[V, V]`` normalised to a law."""
    return counts / counts.sum(dim=1, keepdim=True)


# ------------------------------------------------------------------------------- drafters that are wrong on purpose


def untempered(probs: torch.Tensor, temperature: float) -> torch.Tensor:
    """``softmax(T log softmax(l / T)) = softmax(l)``: the temperature-1 distribution behind a tempered q (exact when
    no top-k or top-p filter zeroed entries)."""
    return torch.softmax(temperature * probs.log(), dim=-1)


class UntemperedQ(WrappedDrafter):
    """The bug class real systems shipped: draws each draft at the requested temperature, but reports the
    temperature-1 softmax as its q. Wraps any drafter that samples with a distribution."""

    def propose(self, context, sampling, generator) -> Draft:
        draft = self.inner.propose(context, sampling, generator)
        if draft.probs is not None:
            draft.probs = untempered(draft.probs, sampling.temperature)
        return draft


class GreedyDraftsAsPointMasses(WrappedDrafter):
    """Drafts the inner drafter's argmax tokens while sampling and reports ``probs=None`` (point masses, like prompt
    lookup): still exact, with fewer tokens accepted (``p(x) <= min(1, p(x) / q(x))``)."""

    def propose(self, context, sampling, generator) -> Draft:
        draft = self.inner.propose(context, GREEDY, generator)
        return Draft(draft.tokens, None, draft.forwards)


class Counting(WrappedDrafter):
    """Counts the rounds the inner drafter proposed something in (to prove a test really drafted)."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.proposing_rounds = 0

    def propose(self, context, sampling, generator) -> Draft:
        draft = self.inner.propose(context, sampling, generator)
        self.proposing_rounds += len(draft) > 0
        return draft


@functools.cache
def load_bootstrap():
    """scripts/bootstrap.py as a module (it is a script, not part of the package: it runs before anything is
    installed)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bootstrap", Path(__file__).resolve().parents[1] / "scripts" / "bootstrap.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
