"""Measure decoding methods side by side on the same prompts (the numbers behind ``python -m specdec_lib bench``).

Four ways to decode with the same target model and the same `SamplingConfig` (``GenerationSpec.sampling``):

    autoregressive   our baseline: the target alone, one cached forward per token (`autoregressive_generate`)
    speculative      our speculative decoding with the pair's draft model, for each gamma (`speculative_generate`;
                     greedy verification, or exact rejection-sampling verification when sampling)
    hf-assisted      transformers' assisted generation, ``target.generate(assistant_model=draft)``, draft length
                     fixed to gamma (``num_assistant_tokens=gamma``, schedule ``"constant"``, no confidence stop)
    hf-greedy        transformers' plain ``target.generate(do_sample=False)``: the framework's own greedy loop;
    (hf-sample)      with sampling, ``target.generate(do_sample=True, temperature, top_k, top_p)`` instead

With a *cross* pair (``run_benchmark(..., cross=...)``: the same target object with a draft on another tokenizer,
e.g. ``draft_b`` of the ``embedded-cross`` preset), two more methods per gamma:

    speculative-cross  our speculative decoding with that draft: `CrossTokenizerDrafter` (greedy: text round trip,
                       boundary alignment) or, with sampling, `CrossVocabularySamplingDrafter` (exact verification
                       inside the vocabulary intersection)
    hf-assisted-cross  transformers' universal assisted decoding, ``target.generate(assistant_model=draft,
                       tokenizer=..., assistant_tokenizer=...)``, gamma draft tokens per round; greedy only (with
                       sampling the row is left out)

**Greedy** (the default): every method must emit the baseline's tokens, which the ``identical`` column checks.

**Sampling** (temperature > 0): every method samples from the same processed distribution, but from its own random
stream (ours draw drafts, acceptance tests and recovered tokens from one generator, transformers uses the global
RNG in its own order), so tokens cannot match and ``identical`` is `NOT_APPLICABLE`. That the methods' outputs are
*distributed* like the target's own samples is a statistical claim, tested by tests/test_sampling_distribution.py
and shown in notebook 02, not by a benchmark. Every (pass, prompt) gets a deterministic seed (`run_seed` of the
base seed, the pass and the prompt; the same for every method), so a rerun with the same base seed reproduces our
methods' tokens exactly (transformers' methods are seeded through ``torch.manual_seed``, reproducible on CPU).

Timing protocol (machines are noisy, so drift must hit every method alike):

1. **warm-up**: one untimed pass of every method over every prompt. It also fixes the reference tokens (the
   baseline's) and counts each method's model forwards with forward hooks, which is how transformers' methods get
   their tokens per target forward (the timed runs carry no hooks).
2. **repeats**: for each repeat, for each prompt, every method runs back to back (interleaved; the order rotates
   with the prompt and the repeat so that no method always runs first). Each generation is timed as a whole, with
   ``devices.synchronize`` before and after.
3. **throughput**: per repeat, tokens/s = all new tokens / all seconds over the prompts; the row shows the median over
   repeats. **speed-up**: per repeat, the method's tokens/s over the baseline's in the *same* repeat; median over
   repeats.

Derived columns (`build_report`), for our speculative rows:

- tokens per target forward and acceptance rate come from the traces (`trace.summarize` semantics);
- **c** (draft cost / target cost) comes from the same timed traces: median over rounds of
  ``draft_time / draft_forwards`` (what one drafted token really costs our loop, proposing and bookkeeping
  included), over the median ``verify_time`` of the baseline's decoding rounds (one target forward per token,
  prefill excluded). It is measured in the same interleaved runs, so it sees the same machine load;
- **alpha** is the per-token acceptance under which Leviathan et al.'s model gives the measured tokens per
  *verification* round (`theory.alpha_from_tokens_per_round`; the prefill round, which verifies nothing, is left
  out), and **predicted** is `theory.expected_speedup(alpha, gamma, c)`. measured / predicted below 1 is the cost
  the model ignores: verifying gamma + 1 positions costs more than one, and Python bookkeeping.

For hf-assisted, tokens per target forward, acceptance and alpha come from the warm-up's forward counts: every
target forward is a verification (the first one also reads the prompt), one draft forward drafts one token, so
``accepted = tokens - target forwards`` (exact unless an EOS cut a round short) and ``drafted = draft forwards``.
This holds with sampling too: transformers' speculative sampling also emits ``accepted + 1`` tokens per round.
Its per-forward times are not observable without hooks in the timed runs, so its c and prediction stay blank.

**Drafter overhead** (`drafter_overhead`; column ``ovh/rnd``, only when a cross pair is given): after the repeats,
one more pass of each of our speculative methods (same-tokenizer and cross) with the drafter wrapped in
`TimedDrafter`, which times its public ``propose`` and ``accept`` calls (device synchronized at both ends), while
`time_forwards` times every forward of the draft model inside them. ``overhead = propose + accept - draft forwards``,
per round (one ``propose`` per verification round). For ``speculative-cross`` that is the text translation (decode
the committed target ids, re-encode them for the draft with the lookbehind window, decode the draft's tokens,
re-encode them for the target with the boundary alignment) plus the bookkeeping every drafter has (argmax, cache
crops); for ``speculative`` it is that bookkeeping alone, so the difference of the two is the translation's cost. The forward
intervals lie inside the propose intervals, so the overhead is never negative.

**Profile** (`profile_method`): after the repeats, one more pass of our best gamma with every draft and target
forward timed by hooks splits its time into draft forwards, target forwards (verification) and the rest (the
acceptance test, cache bookkeeping, Python). The traces cannot give that split: their rounds tile the whole loop,
so bookkeeping is folded into their draft and verify phases.
"""

from __future__ import annotations

import copy
import hashlib
import statistics
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from .baseline import autoregressive_generate
from .devices import synchronize
from .drafters import (
    CrossTokenizerDrafter,
    CrossVocabularySamplingDrafter,
    DraftModelDrafter,
)
from .drafters.base import Draft, Drafter
from .errors import ConfigError
from .models import ModelPair
from .sampling import GREEDY, SamplingConfig
from .speculative import check_gamma, speculative_generate
from .theory import alpha_from_tokens_per_round, expected_speedup
from .trace import GenerationResult

BASELINE = "autoregressive"
SPECULATIVE = "speculative"
HF_ASSISTED = "hf-assisted"
HF_GREEDY = "hf-greedy"
HF_SAMPLE = "hf-sample"
SPECULATIVE_CROSS = "speculative-cross"
HF_ASSISTED_CROSS = "hf-assisted-cross"

#: What the ``identical`` column holds in a sampling run: token equality with the baseline cannot hold there.
NOT_APPLICABLE = "n/a (sampling)"

#: The columns of a report row, in table order (`bench.format_table` prints exactly these).
ROW_COLUMNS = (
    "method",
    "gamma",
    "tokens_per_s",
    "speedup",
    "tokens_per_target_forward",
    "acceptance_rate",
    "drafter_overhead_ms",
    "c",
    "alpha",
    "predicted_speedup",
    "measured_over_predicted",
    "identical",
)


# --------------------------------------------------------------------------- methods


@dataclass(frozen=True)
class GenerationSpec:
    """What every method is asked for: the same length limit, end-of-sequence token and sampling settings."""

    max_new_tokens: int
    eos_token_id: int | None = None  # None: never stop early (every method alike)
    pad_token_id: int | None = None  # only for transformers' generate (silences its warning); defaults to EOS
    sampling: SamplingConfig = GREEDY  # temperature 0: greedy; otherwise temperature, top-k, top-p

    def __post_init__(self) -> None:
        if not isinstance(self.sampling, SamplingConfig):
            raise ConfigError(f"sampling must be a SamplingConfig, got {type(self.sampling).__name__}.")


def run_seed(base_seed: int, pass_index: int, prompt_index: int) -> int:
    """The seed of one generation: pass 0 is the warm-up, pass r + 1 the r-th timed repeat (the profile pass comes
    after them). Hashed, so that base seeds 0 and 1 share no stream; in [0, 2**63), which torch accepts."""
    text = f"specdec-bench/{base_seed}/{pass_index}/{prompt_index}".encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big") % 2**63


class Method:
    """One way to decode. Subclasses implement `generate`; ``key`` names the row (``name[gamma=g]``)."""

    name: str = "method"
    gamma: int | None = None
    source: str = ""  # where the row's tokens-per-forward and acceptance come from ("trace", "forward counts")
    draft_role: str = "draft"  # which model of `measure`'s ``count_models`` is this method's draft
    counts_acceptance: bool = True  # forward counts give accepted / drafted (False: drafts counted in other units)

    @property
    def key(self) -> str:
        return self.name if self.gamma is None else f"{self.name}[gamma={self.gamma}]"

    def generate(self, input_ids: torch.Tensor, seed: int | None = None) -> tuple[list[int], GenerationResult | None]:
        """The new tokens after ``input_ids: LongTensor[1, T]``, and our `GenerationResult` when there is one.
        ``seed`` seeds this generation's sampling (ignored when greedy; None: unseeded)."""
        raise NotImplementedError


class Autoregressive(Method):
    name, source = BASELINE, "trace"

    def __init__(self, target: PreTrainedModel, spec: GenerationSpec) -> None:
        self.target, self.spec = target, spec

    def generate(self, input_ids: torch.Tensor, seed: int | None = None) -> tuple[list[int], GenerationResult | None]:
        result = autoregressive_generate(
            self.target,
            input_ids,
            max_new_tokens=self.spec.max_new_tokens,
            eos_token_id=self.spec.eos_token_id,
            sampling=self.spec.sampling,
            seed=None if self.spec.sampling.is_greedy else seed,
        )
        return result.new_token_list, result


class Speculative(Method):
    name, source = SPECULATIVE, "trace"

    def __init__(self, target: PreTrainedModel, drafter: Drafter, gamma: int, spec: GenerationSpec) -> None:
        check_gamma(gamma)
        self.target, self.drafter, self.gamma, self.spec = target, drafter, gamma, spec

    def generate(self, input_ids: torch.Tensor, seed: int | None = None) -> tuple[list[int], GenerationResult | None]:
        result = speculative_generate(
            self.target,
            self.drafter,
            input_ids,
            gamma=self.gamma,
            max_new_tokens=self.spec.max_new_tokens,
            eos_token_id=self.spec.eos_token_id,
            sampling=self.spec.sampling,
            seed=None if self.spec.sampling.is_greedy else seed,
            verification="exact",
        )
        return result.new_token_list, result


class SpeculativeCross(Speculative):
    """Our speculative decoding with a draft on another tokenizer (row ``speculative-cross``): the drafter is a
    `CrossTokenizerDrafter` (greedy) or a `CrossVocabularySamplingDrafter` (sampling, exact verification)."""

    name = SPECULATIVE_CROSS


def cross_drafter(cross: ModelPair, sampling: SamplingConfig) -> Drafter:
    """The drafter of the ``speculative-cross`` rows: greedy `CrossTokenizerDrafter` (text round trip), or with
    sampling `CrossVocabularySamplingDrafter`, whose q is over the target's ids so that exact verification keeps
    the target's distribution."""
    if sampling.is_greedy:
        return CrossTokenizerDrafter.for_pair(cross)
    return CrossVocabularySamplingDrafter.for_pair(cross)


def hf_sampling_kwargs(sampling: SamplingConfig) -> dict:
    """``generate`` arguments that sample from the same distribution as `logits_to_probs(logits, sampling)`.

    transformers applies temperature, then top-k, then top-p, like `logits_to_probs`. Every filter is set
    explicitly, off included: ``generate`` fills unset values from the model's generation config, then from its
    global defaults (5.24, ``GenerationConfig._get_default_generation_params``), where **top_k is 50**, not off.
    So top_k=0 (transformers' "off"), top_p=1.0, and the other warpers off (typical_p=1.0, min_p/top_h None,
    epsilon/eta cutoff 0, repetition penalty 1.0). Greedy: ``do_sample=False``.
    """
    if sampling.is_greedy:
        return {"do_sample": False}
    return {
        "do_sample": True,
        "temperature": float(sampling.temperature),
        "top_k": int(sampling.top_k),  # 0 = off in both libraries
        "top_p": float(sampling.top_p),  # 1.0 = off in both libraries
        "typical_p": 1.0,
        "min_p": None,
        "top_h": None,
        "epsilon_cutoff": 0.0,
        "eta_cutoff": 0.0,
        "repetition_penalty": 1.0,
    }


def _hf_generate_kwargs(input_ids: torch.Tensor, spec: GenerationSpec) -> dict:
    """``generate`` arguments that stop exactly where our functions stop (same length, same EOS) and decode like
    them (greedy, or sampling with the same settings: `hf_sampling_kwargs`)."""
    pad = spec.pad_token_id if spec.pad_token_id is not None else spec.eos_token_id
    kwargs: dict = {
        "attention_mask": torch.ones_like(input_ids),
        **hf_sampling_kwargs(spec.sampling),
        "num_beams": 1,
        "max_new_tokens": spec.max_new_tokens,
    }
    if spec.eos_token_id is not None:
        kwargs["eos_token_id"] = spec.eos_token_id
    if pad is not None:
        kwargs["pad_token_id"] = pad
    return kwargs


def _seed_transformers(spec: GenerationSpec, seed: int | None) -> None:
    """transformers samples from torch's global RNG: seed it for this generation (sampling only)."""
    if seed is not None and not spec.sampling.is_greedy:
        torch.manual_seed(seed)


class HFGenerate(Method):
    """transformers' plain ``target.generate``: greedy (row ``hf-greedy``) or sampling (row ``hf-sample``)."""

    source = "forward counts"

    def __init__(self, target: PreTrainedModel, spec: GenerationSpec) -> None:
        self.target, self.spec = target, spec
        self.name = HF_GREEDY if spec.sampling.is_greedy else HF_SAMPLE
        self._target_config = _config_for(target, spec)

    def generate(self, input_ids: torch.Tensor, seed: int | None = None) -> tuple[list[int], GenerationResult | None]:
        input_ids = input_ids.to(self.target.device)
        _seed_transformers(self.spec, seed)
        with _swapped_generation_config(self.target, self._target_config):
            output = self.target.generate(input_ids, **_hf_generate_kwargs(input_ids, self.spec))
        return output[0, input_ids.shape[1] :].tolist(), None


def _config_for(model: PreTrainedModel, spec: GenerationSpec, **changes: object):
    """A copy of ``model.generation_config`` with ``changes``; when ``spec`` has no EOS, also without the model's
    default EOS (``generate`` fills an unset ``eos_token_id`` from it, so passing None is not enough)."""
    config = copy.deepcopy(model.generation_config)
    if spec.eos_token_id is None:
        config.eos_token_id = None
    for name, value in changes.items():
        setattr(config, name, value)
    return config


@contextmanager
def _swapped_generation_config(model: PreTrainedModel, config) -> Iterator[None]:
    """Use ``config`` as ``model.generation_config`` inside the block (a reference swap: nothing copied while
    timing), then restore the original object."""
    saved = model.generation_config
    model.generation_config = config
    try:
        yield
    finally:
        model.generation_config = saved


def assistant_config(draft: PreTrainedModel, gamma: int, spec: GenerationSpec):
    """The draft's generation config that makes transformers' assisted generation draft exactly ``gamma`` tokens
    per round, like our loop.

    transformers (5.24, ``AssistedCandidateGenerator``) reads three settings from the *assistant's*
    ``generation_config``: ``num_assistant_tokens`` (draft length, default 20), ``num_assistant_tokens_schedule``
    (default ``"constant"``; ``"heuristic"`` would grow/shrink it between rounds and even between calls) and
    ``assistant_confidence_threshold`` (default 0.4: stop drafting early when the draft's top probability drops
    below it; 0 disables that stop, while None would be replaced by the 0.4 default). transformers itself gives
    the assistant the target's EOS.
    """
    return _config_for(
        draft,
        spec,
        num_assistant_tokens=gamma,
        num_assistant_tokens_schedule="constant",
        assistant_confidence_threshold=0.0,
    )


class HFAssisted(Method):
    name, source = HF_ASSISTED, "forward counts"

    def __init__(self, target: PreTrainedModel, draft: PreTrainedModel, gamma: int, spec: GenerationSpec) -> None:
        check_gamma(gamma)
        self.target, self.draft, self.gamma, self.spec = target, draft, gamma, spec
        self._target_config = _config_for(target, spec)
        self._draft_config = assistant_config(draft, gamma, spec)

    def generate(self, input_ids: torch.Tensor, seed: int | None = None) -> tuple[list[int], GenerationResult | None]:
        """``target.generate(assistant_model=draft)``; the draft's own generation config is restored afterwards.
        With sampling, transformers passes the target's sampling settings to the draft's ``generate`` and verifies
        by speculative sampling (its ``_speculative_sampling``)."""
        input_ids = input_ids.to(self.target.device)
        _seed_transformers(self.spec, seed)
        with (
            _swapped_generation_config(self.target, self._target_config),
            _swapped_generation_config(self.draft, self._draft_config),
        ):
            output = self.target.generate(
                input_ids, assistant_model=self.draft, **self._extra_kwargs(), **_hf_generate_kwargs(input_ids, self.spec)
            )
        return output[0, input_ids.shape[1] :].tolist(), None

    def _extra_kwargs(self) -> dict:
        """More ``generate`` arguments for subclasses (the tokenizers, for universal assisted decoding)."""
        return {}


class HFAssistedCross(HFAssisted):
    """transformers' universal assisted decoding (UAD): ``target.generate(assistant_model=draft, tokenizer=target's,
    assistant_tokenizer=draft's)``, which translates through text each round
    (``AssistedCandidateGeneratorDifferentTokenizers``); the draft drafts ``gamma`` of *its* tokens per round
    (`assistant_config`). Greedy only here.

    Tokens per target forward come from forward counts as for hf-assisted; acceptance and alpha stay blank: its
    drafts are counted in draft tokens (forwards of the draft) but accepted in target tokens, so their ratio is no
    acceptance rate."""

    name, draft_role, counts_acceptance = HF_ASSISTED_CROSS, "cross_draft", False

    def __init__(self, cross: ModelPair, gamma: int, spec: GenerationSpec) -> None:
        if not spec.sampling.is_greedy:
            raise ConfigError(
                "hf-assisted-cross (transformers' universal assisted decoding) is benchmarked greedily only; "
                "with sampling, leave it out (speculative-cross samples exactly through the vocabulary intersection)."
            )
        target_vocab = cross.target.config.get_text_config().vocab_size
        if target_vocab == cross.draft.config.get_text_config().vocab_size:
            raise ConfigError(
                f"transformers (5.24) chooses universal assisted decoding by vocabulary *size*: target and draft "
                f"both have {target_vocab} embedding rows, so it refuses assistant_tokenizer. hf-assisted-cross "
                "cannot run on this pair; leave transformers' methods out (--no-transformers)."
            )
        super().__init__(cross.target, cross.draft, gamma, spec)
        self.target_tokenizer, self.draft_tokenizer = cross.target_tokenizer, cross.draft_tokenizer

    def _extra_kwargs(self) -> dict:
        return {"tokenizer": self.target_tokenizer, "assistant_tokenizer": self.draft_tokenizer}


def check_cross_pair(pair: ModelPair, cross: ModelPair) -> None:
    """Refuse a cross pair that does not share ``pair``'s target *object* (one target in memory, the same
    weights for every row) or whose draft does not need translating (same tokenizer: use ``speculative``)."""
    if not isinstance(cross, ModelPair):
        raise ConfigError(f"cross must be a ModelPair (the same target with a draft on another tokenizer), got {type(cross).__name__}.")
    if cross.target is not pair.target:
        raise ConfigError(
            "The cross pair must share the benchmark pair's target object (cross.target is pair.target): one "
            "target in memory, and every row verified by the same weights. Build it as "
            "ModelPair(pair.target, draft_b, pair.target_tokenizer, draft_b_tokenizer, ...)."
        )
    if cross.same_tokenizer:
        raise ConfigError(
            "The cross pair's draft shares the target's tokenizer: nothing to translate. Its rows would be the "
            "ordinary speculative rows; give a draft on another tokenizer (e.g. draft_b of 'embedded-cross')."
        )


def resolve_eos(pair: ModelPair) -> int | None:
    """The EOS every method stops at: the target tokenizer's, else the target's generation config's (if one id)."""
    eos = pair.target_tokenizer.eos_token_id
    if eos is None:
        eos = getattr(pair.target.generation_config, "eos_token_id", None)
        if isinstance(eos, (list, tuple)):
            eos = eos[0] if len(eos) == 1 else None
    return eos


def build_methods(
    pair: ModelPair,
    gammas: Sequence[int],
    spec: GenerationSpec,
    *,
    transformers: bool = True,
    cross: ModelPair | None = None,
) -> list[Method]:
    """The benchmark's methods for ``pair``: baseline, hf-greedy (hf-sample when ``spec`` samples), ours for each
    gamma, [ours with the cross draft for each gamma], hf-assisted for each gamma, [hf-assisted-cross for each
    gamma, greedy only].

    ``transformers=False`` leaves out transformers' methods. One `DraftModelDrafter` serves every gamma (it
    resets its cache at each generation); building it checks that the pair shares a tokenizer. ``cross``: the same
    target with a draft on another tokenizer (`check_cross_pair`); one `cross_drafter` serves every gamma.
    """
    if not gammas:
        raise ConfigError("gammas is empty: give at least one draft length, e.g. (2, 4).")
    for gamma in gammas:
        check_gamma(gamma)
    drafter = DraftModelDrafter.for_pair(pair)
    methods: list[Method] = [Autoregressive(pair.target, spec)]
    if transformers:
        methods.append(HFGenerate(pair.target, spec))
    methods += [Speculative(pair.target, drafter, gamma, spec) for gamma in gammas]
    if cross is not None:
        check_cross_pair(pair, cross)
        translating = cross_drafter(cross, spec.sampling)
        methods += [SpeculativeCross(pair.target, translating, gamma, spec) for gamma in gammas]
    if transformers:
        methods += [HFAssisted(pair.target, pair.draft, gamma, spec) for gamma in gammas]
        if cross is not None and spec.sampling.is_greedy:
            methods += [HFAssistedCross(cross, gamma, spec) for gamma in gammas]
    return methods


# --------------------------------------------------------------------------- measuring


@contextmanager
def count_forwards(models: dict[str, torch.nn.Module]) -> Iterator[dict[str, int]]:
    """Count calls of each model's forward (``{role: count}``, live) with forward pre-hooks, removed on exit."""
    counts = {role: 0 for role in models}
    handles = []
    for role, model in models.items():

        def hook(module, args, role=role):  # noqa: ARG001 (signature fixed by torch)
            counts[role] += 1

        handles.append(model.register_forward_pre_hook(hook))
    try:
        yield counts
    finally:
        for handle in handles:
            handle.remove()


@dataclass
class Run:
    """One generation: its new tokens, its wall time, and our trace when the method has one."""

    tokens: list[int]
    seconds: float
    result: GenerationResult | None = None

    @property
    def new_tokens(self) -> int:
        return len(self.tokens)


@dataclass
class Measurements:
    """Everything `measure` recorded; `build_report` turns it into rows."""

    methods: list[Method]
    reference: list[list[int]]  # [prompt] the baseline's tokens in the warm-up pass
    warmup: dict[str, list[Run]]  # key -> [prompt]
    timed: dict[str, list[list[Run]]]  # key -> [repeat][prompt]
    forward_counts: dict[str, dict[str, int]]  # key -> {"target": n, "draft": n} over the warm-up pass
    sampling: SamplingConfig = GREEDY  # greedy: `identical` is checked; sampling: it is `NOT_APPLICABLE`
    seeds: list[list[int]] | None = None  # [pass][prompt] (pass 0: warm-up, r + 1: repeat r); None: unseeded


def _timed(method: Method, input_ids: torch.Tensor, device: torch.device, seed: int | None = None) -> Run:
    synchronize(device)
    start = time.perf_counter()
    tokens, result = method.generate(input_ids, seed)
    synchronize(device)
    return Run(tokens, time.perf_counter() - start, result)


def measure(
    methods: Sequence[Method],
    prompts: Sequence[torch.Tensor],
    *,
    repeats: int,
    device: torch.device | str = "cpu",
    count_models: dict[str, torch.nn.Module] | None = None,
    progress: bool = True,
    sampling: SamplingConfig = GREEDY,
    seed: int | None = None,
) -> Measurements:
    """Run the protocol of the module docstring: a warm-up pass (with forward counts of ``count_models``, e.g.
    ``{"target": ..., "draft": ...}``), then ``repeats`` interleaved timed passes over ``prompts`` (each
    ``LongTensor[1, T]``). The first method is the baseline every other is compared with.

    ``sampling`` says how the methods decode (it decides what ``identical`` means in `build_report`; the methods
    carry their own copy in their `GenerationSpec`). ``seed``: the base seed; generation (pass, prompt) gets
    ``run_seed(seed, pass, prompt)``, every method the same one. None: unseeded (greedy needs no seed).
    """
    from tqdm.auto import tqdm

    if not methods:
        raise ConfigError("No methods to benchmark.")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ConfigError(f"repeats must be an integer >= 1, got {repeats!r}.")
    if not prompts:
        raise ConfigError("No prompts to benchmark: give at least one.")
    methods = list(methods)
    keys = [method.key for method in methods]
    if len(set(keys)) != len(keys):
        raise ConfigError(f"Two methods share a name: {keys}.")
    if not isinstance(sampling, SamplingConfig):
        raise ConfigError(f"sampling must be a SamplingConfig, got {type(sampling).__name__}.")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ConfigError(f"seed must be an integer or None, got {seed!r}.")
    device = torch.device(device)
    count_models = count_models or {}
    seeds = None
    if seed is not None:
        seeds = [[run_seed(seed, pass_index, i) for i in range(len(prompts))] for pass_index in range(repeats + 1)]

    def seed_of(pass_index: int, prompt_index: int) -> int | None:
        return None if seeds is None else seeds[pass_index][prompt_index]

    bar = tqdm(total=(repeats + 1) * len(prompts) * len(methods), desc="warm-up", disable=not progress, leave=False)

    warmup: dict[str, list[Run]] = {key: [] for key in keys}
    forward_counts: dict[str, dict[str, int]] = {key: {role: 0 for role in count_models} for key in keys}
    timed: dict[str, list[list[Run]]] = {key: [] for key in keys}
    try:
        with torch.inference_mode():
            for index, input_ids in enumerate(prompts):
                for method in methods:
                    with count_forwards(count_models) as counts:
                        warmup[method.key].append(_timed(method, input_ids, device, seed_of(0, index)))
                    for role, count in counts.items():
                        forward_counts[method.key][role] += count
                    bar.update()
            for repeat in range(repeats):
                bar.set_description(f"repeat {repeat + 1}/{repeats}")
                for key in keys:
                    timed[key].append([])
                for index, input_ids in enumerate(prompts):
                    shift = (repeat + index) % len(methods)  # rotate who runs first
                    for method in methods[shift:] + methods[:shift]:
                        timed[method.key][repeat].append(
                            _timed(method, input_ids, device, seed_of(repeat + 1, index))
                        )
                        bar.update()
    finally:
        bar.close()
    return Measurements(
        methods=methods,
        reference=[run.tokens for run in warmup[keys[0]]],
        warmup=warmup,
        timed=timed,
        forward_counts=forward_counts,
        sampling=sampling,
        seeds=seeds,
    )


# --------------------------------------------------------------------------- report


@dataclass
class Report:
    """Rows (one per method and gamma, columns `ROW_COLUMNS` plus details), raw times, the profile of our
    best gamma (`profile_method`; None until one is run), and the seeds used (``[pass][prompt]``, None if unseeded)."""

    rows: list[dict]
    profile: dict | None
    raw: dict[str, dict]
    seeds: list[list[int]] | None = None

    def row(self, method: str, gamma: int | None = None) -> dict:
        """The row of ``method`` (and ``gamma``); KeyError if absent."""
        for row in self.rows:
            if row["method"] == method and row["gamma"] == gamma:
                return row
        raise KeyError((method, gamma))


def _tokens_per_second(runs: list[Run]) -> float | None:
    seconds = sum(run.seconds for run in runs)
    return sum(run.new_tokens for run in runs) / seconds if seconds > 0 else None


def _median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _alpha(tokens_per_round: float | None, gamma: int | None) -> float | None:
    if tokens_per_round is None or not gamma:
        return None
    return alpha_from_tokens_per_round(min(max(float(tokens_per_round), 1.0), gamma + 1.0), gamma)


def _trace_numbers(runs: list[Run]) -> dict:
    """Forwards, acceptance and tokens per (verification) round summed over our traces of one pass."""
    rounds = [result.trace.rounds for run in runs if (result := run.result) is not None]
    tokens = sum(run.new_tokens for run in runs)
    target_forwards = sum(len(r) for r in rounds)
    verification = [record for r in rounds for record in r[1:]]  # the prefill round verifies nothing
    drafted = sum(record.drafted for record in verification)
    return {
        "new_tokens": tokens,
        "target_forwards": target_forwards,
        "draft_forwards": sum(record.draft_forwards for r in rounds for record in r),
        "tokens_per_target_forward": tokens / target_forwards if target_forwards else None,
        "acceptance_rate": sum(record.accepted for record in verification) / drafted if drafted else None,
        "tokens_per_verification_round": (
            sum(record.emitted for record in verification) / len(verification) if verification else None
        ),
    }


def _count_numbers(runs: list[Run], counts: dict[str, int], method: Method) -> dict:
    """The same numbers from the warm-up's forward counts (transformers' methods, which have no trace)."""
    tokens = sum(run.new_tokens for run in runs)
    target_forwards = counts.get("target")
    draft_forwards = counts.get(method.draft_role) if method.gamma is not None else 0
    per_forward = tokens / target_forwards if target_forwards else None
    acceptance = None
    if method.gamma is not None and method.counts_acceptance and target_forwards and draft_forwards:
        acceptance = max(tokens - target_forwards, 0) / draft_forwards
    return {
        "new_tokens": tokens,
        "target_forwards": target_forwards,
        "draft_forwards": draft_forwards,
        "tokens_per_target_forward": per_forward,
        "acceptance_rate": acceptance,
        "tokens_per_verification_round": per_forward if method.gamma is not None else None,
    }


def _baseline_forward_seconds(runs: list[list[Run]]) -> float | None:
    """Median seconds of one target forward of the baseline: its decoding rounds (prefill excluded)."""
    times = [record.verify_time for repeat in runs for run in repeat if run.result for record in run.result.trace.rounds[1:]]
    return _median(times)


def _draft_token_seconds(runs: list[list[Run]]) -> float | None:
    """Median over our rounds of draft time per draft forward (what one drafted token costs, bookkeeping included)."""
    times = [
        record.draft_time / record.draft_forwards
        for repeat in runs
        for run in repeat
        if run.result
        for record in run.result.trace.rounds
        if record.draft_forwards > 0
    ]
    return _median(times)


def build_report(measurements: Measurements) -> Report:
    """Rows of `ROW_COLUMNS` (plus details) for every method, and raw times (the profile is `profile_method`'s)."""
    methods = measurements.methods
    baseline = methods[0]
    reference = measurements.reference
    base_runs = measurements.timed[baseline.key]
    repeats = len(base_runs)
    base_tps = [_tokens_per_second(base_runs[r]) for r in range(repeats)]
    target_seconds = _baseline_forward_seconds(base_runs)

    rows: list[dict] = []
    raw: dict[str, dict] = {}
    for method in methods:
        timed = measurements.timed[method.key]
        warm = measurements.warmup[method.key]
        tps = [_tokens_per_second(timed[r]) for r in range(repeats)]
        ratios = [t / b if t is not None and b else None for t, b in zip(tps, base_tps)]
        every_run = [warm] + timed
        if measurements.sampling.is_greedy:
            per_prompt = [all(passes[i].tokens == reference[i] for passes in every_run) for i in range(len(reference))]
            identical: bool | str = all(per_prompt)
        else:  # different random streams: equality in distribution is the tests' job, not the benchmark's
            per_prompt, identical = None, NOT_APPLICABLE

        if method.source == "trace":
            numbers = _trace_numbers(timed[0])
        else:
            numbers = _count_numbers(warm, measurements.forward_counts[method.key], method)
        alpha = _alpha(numbers["tokens_per_verification_round"], method.gamma) if method.counts_acceptance else None

        c = predicted = None
        if method.source == "trace" and method.gamma is not None:
            draft_seconds = _draft_token_seconds(timed)
            if draft_seconds is not None and target_seconds:
                c = draft_seconds / target_seconds
        if alpha is not None and c:
            predicted = expected_speedup(alpha, method.gamma, c)
        speedup = _median(ratios)

        rows.append(
            {
                "method": method.name,
                "gamma": method.gamma,
                "tokens_per_s": _median(tps),
                "speedup": speedup,
                "tokens_per_target_forward": numbers["tokens_per_target_forward"],
                "acceptance_rate": numbers["acceptance_rate"],
                "drafter_overhead_ms": None,  # `drafter_overhead`'s (run_benchmark fills it for our rows)
                "c": c,
                "alpha": alpha,
                "predicted_speedup": predicted,
                "measured_over_predicted": speedup / predicted if speedup is not None and predicted else None,
                "identical": identical,
                # details (JSON only)
                "key": method.key,
                "counts_from": method.source,
                "identical_per_prompt": per_prompt,
                "tokens_per_s_per_repeat": tps,
                "speedup_per_repeat": ratios,
                "new_tokens": numbers["new_tokens"],
                "target_forwards": numbers["target_forwards"],
                "draft_forwards": numbers["draft_forwards"],
                "tokens_per_verification_round": numbers["tokens_per_verification_round"],
                "drafter_overhead": None,
            }
        )
        raw[method.key] = {
            "seconds": [[run.seconds for run in repeat] for repeat in timed],
            "new_tokens": [[run.new_tokens for run in repeat] for repeat in timed],
            "warmup_seconds": [run.seconds for run in warm],
        }

    return Report(rows=rows, profile=None, raw=raw, seeds=measurements.seeds)


@contextmanager
def time_forwards(models: dict[str, torch.nn.Module], device: torch.device | str) -> Iterator[dict[str, float]]:
    """Sum the seconds spent inside each model's forward (``{role: seconds}``, live), with a pre-hook and a hook
    around every call (the device synchronized at both ends); the hooks are removed on exit."""
    seconds = {role: 0.0 for role in models}
    started: dict[str, float] = {}
    handles = []
    for role, model in models.items():

        def before(module, args, role=role):  # noqa: ARG001
            synchronize(device)
            started[role] = time.perf_counter()

        def after(module, args, output, role=role):  # noqa: ARG001
            synchronize(device)
            seconds[role] += time.perf_counter() - started[role]

        handles += [model.register_forward_pre_hook(before), model.register_forward_hook(after)]
    try:
        yield seconds
    finally:
        for handle in handles:
            handle.remove()


def profile_method(
    method: Method,
    prompts: Sequence[torch.Tensor],
    *,
    draft: torch.nn.Module,
    target: torch.nn.Module,
    device: torch.device | str = "cpu",
    seeds: Sequence[int | None] | None = None,
) -> dict:
    """Where ``method``'s time goes: one extra pass over ``prompts`` with every forward of ``draft`` and ``target``
    timed by hooks. ``other = total - draft - verify`` is everything outside the two models' forwards: the
    acceptance test, argmax (or the sampling draws), cache crops, concatenations, Python overhead (and the hooks'
    own few microseconds). ``seeds``: one per prompt (sampling), or None.
    """
    device = torch.device(device)
    seeds = list(seeds) if seeds is not None else [None] * len(prompts)
    total = 0.0
    with torch.inference_mode(), time_forwards({"draft": draft, "target": target}, device) as seconds:
        for input_ids, seed in zip(prompts, seeds):
            total += _timed(method, input_ids, device, seed).seconds
    draft_s, verify_s = seconds["draft"], seconds["target"]
    other_s = total - draft_s - verify_s
    return {
        "method": method.name,
        "gamma": method.gamma,
        "total_s": total,
        "draft_s": draft_s,
        "verify_s": verify_s,
        "other_s": other_s,
        "draft_pct": 100 * draft_s / total if total > 0 else None,
        "verify_pct": 100 * verify_s / total if total > 0 else None,
        "other_pct": 100 * other_s / total if total > 0 else None,
    }


class TimedDrafter(Drafter):
    """A thin wrapper that times another drafter's public calls: seconds inside ``propose`` and ``accept`` (device
    synchronized before and after each), and the number of ``propose`` calls (one per verification round). Every
    other attribute (``cache``, ``model``) is the wrapped drafter's."""

    def __init__(self, inner: Drafter, device: torch.device | str = "cpu") -> None:
        self.inner, self.sync_device = inner, torch.device(device)
        self.propose_seconds = self.accept_seconds = 0.0
        self.proposals = 0

    name = property(lambda self: self.inner.name)  # type: ignore[assignment]
    device = property(lambda self: self.inner.device)  # type: ignore[assignment]

    def __getattr__(self, attribute: str):  # only called for attributes this wrapper lacks
        if attribute == "inner":
            raise AttributeError(attribute)
        return getattr(self.inner, attribute)

    def begin(self, input_ids: torch.Tensor, **limits) -> None:
        self.inner.begin(input_ids, **limits)

    def propose(
        self, sequence: torch.Tensor, k: int, sampling: SamplingConfig, generator: torch.Generator | None
    ) -> Draft:
        synchronize(self.sync_device)
        start = time.perf_counter()
        draft = self.inner.propose(sequence, k, sampling, generator)
        synchronize(self.sync_device)
        self.propose_seconds += time.perf_counter() - start
        self.proposals += 1
        return draft

    def accept(self, sequence_length: int) -> None:
        synchronize(self.sync_device)
        start = time.perf_counter()
        self.inner.accept(sequence_length)
        synchronize(self.sync_device)
        self.accept_seconds += time.perf_counter() - start


def drafter_overhead(
    method: Speculative,
    prompts: Sequence[torch.Tensor],
    *,
    device: torch.device | str = "cpu",
    seeds: Sequence[int | None] | None = None,
) -> dict:
    """The drafter's time outside its draft model's forwards, per round: one extra pass of ``method`` over
    ``prompts`` with its drafter wrapped in `TimedDrafter` and the draft model's forwards timed by `time_forwards`
    (module docstring, "Drafter overhead"). Returns seconds and ``overhead_ms_per_round``."""
    device = torch.device(device)
    seeds = list(seeds) if seeds is not None else [None] * len(prompts)
    timed = TimedDrafter(method.drafter, device)
    probe = copy.copy(method)
    probe.drafter = timed
    with torch.inference_mode(), time_forwards({"draft": method.drafter.model}, device) as seconds:
        for input_ids, seed in zip(prompts, seeds):
            _timed(probe, input_ids, device, seed)
    drafter_s = timed.propose_seconds + timed.accept_seconds
    forward_s = seconds["draft"]
    overhead_s = drafter_s - forward_s
    rounds = timed.proposals
    return {
        "method": "propose + accept (TimedDrafter) - draft-model forwards (time_forwards hooks), one extra pass",
        "rounds": rounds,
        "drafter_s": drafter_s,
        "propose_s": timed.propose_seconds,
        "accept_s": timed.accept_seconds,
        "draft_forward_s": forward_s,
        "overhead_s": overhead_s,
        "overhead_ms_per_round": 1000 * overhead_s / rounds if rounds else None,
        "draft_forward_ms_per_round": 1000 * forward_s / rounds if rounds else None,
    }


def best_speculative(report: Report) -> dict | None:
    """Our speculative row with the highest median speed-up (None if there is none)."""
    ours = [row for row in report.rows if row["method"] == SPECULATIVE and row["speedup"] is not None]
    return max(ours, key=lambda row: row["speedup"]) if ours else None


# --------------------------------------------------------------------------- all together


def run_benchmark(
    pair: ModelPair,
    prompts: Sequence[torch.Tensor],
    *,
    gammas: Sequence[int],
    max_new_tokens: int,
    repeats: int,
    transformers: bool = True,
    progress: bool = True,
    sampling: SamplingConfig = GREEDY,
    seed: int | None = 0,
    cross: ModelPair | None = None,
    overhead: bool | None = None,
) -> Report:
    """Benchmark ``pair`` on ``prompts`` (``LongTensor[1, T]`` each, target token ids): `build_methods`, `measure`,
    `build_report`, then `profile_method` at our best gamma. Every method stops at the same EOS (`resolve_eos`)
    or after ``max_new_tokens``, and decodes with ``sampling`` (greedy by default). With sampling, ``seed`` is the
    base seed of `run_seed` (the profile pass is pass ``repeats + 1``); greedy runs use no seed.

    ``cross``: the same target object with a draft on another tokenizer; adds the ``speculative-cross`` (and,
    greedy, ``hf-assisted-cross``) rows. ``overhead``: measure `drafter_overhead` for each of our speculative rows
    (pass ``repeats + 2``); None: only when ``cross`` is given."""
    spec = GenerationSpec(max_new_tokens, resolve_eos(pair), pair.target_tokenizer.pad_token_id, sampling)
    seed = None if sampling.is_greedy else seed
    methods = build_methods(pair, gammas, spec, transformers=transformers, cross=cross)
    prompts = [p.to(pair.device) for p in prompts]
    count_models = {"target": pair.target, "draft": pair.draft}
    if cross is not None:
        count_models["cross_draft"] = cross.draft
    measurements = measure(
        methods,
        prompts,
        repeats=repeats,
        device=pair.device,
        count_models=count_models,
        progress=progress,
        sampling=sampling,
        seed=seed,
    )
    report = build_report(measurements)
    if overhead is None:
        overhead = cross is not None
    if overhead:
        seeds = None if seed is None else [run_seed(seed, repeats + 2, i) for i in range(len(prompts))]
        for method in methods:
            if isinstance(method, Speculative):
                numbers = drafter_overhead(method, prompts, device=pair.device, seeds=seeds)
                row = next(row for row in report.rows if row["key"] == method.key)
                row["drafter_overhead"] = numbers
                row["drafter_overhead_ms"] = numbers["overhead_ms_per_round"]
    best = best_speculative(report)
    if best is not None:
        method = next(method for method in methods if method.key == best["key"])
        seeds = None if seed is None else [run_seed(seed, repeats + 1, i) for i in range(len(prompts))]
        report.profile = profile_method(
            method, prompts, draft=pair.draft, target=pair.target, device=pair.device, seeds=seeds
        )
    return report
