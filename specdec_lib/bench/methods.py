"""The benchmark's methods: every way to decode it compares, behind one interface (`Method.generate`).

Five ways to decode with the same target model and the same `SamplingConfig` (``GenerationSpec.sampling``):

    autoregressive   our baseline: the target alone, one cached forward per token (`autoregressive_generate`)
    speculative      our speculative decoding with the pair's draft model, for each gamma (`speculative_generate`;
                     greedy verification, or exact rejection-sampling verification when sampling)
    lean             greedy only: the minimal speculative loop in plain transformers (`specdec_lib.core.minimal`:
                     one `DynamicCache` per model, no trace, no checks), for each gamma. It decodes exactly like
                     ``speculative`` (the same rounds), so ``ours / lean`` is what the library's loop costs above
                     the bare algorithm (``over_lean`` in `specdec_lib.bench.report`)
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

transformers' methods live in `specdec_lib.bench.hf`; `specdec_lib.bench.build_methods` assembles the rows. Every method stops at the same EOS (``GenerationSpec``;
None: never early, every method generates exactly ``max_new_tokens``).

**Greedy** (the default): every method must emit the baseline's tokens, which the ``identical`` column checks.

**Sampling** (temperature > 0): every method samples from the same processed distribution, but from its own random
stream (ours draw drafts, acceptance tests and recovered tokens from one generator, transformers uses the global
RNG in its own order), so tokens cannot match and ``identical`` is ``NOT_APPLICABLE``. That the methods' outputs are
*distributed* like the target's own samples is a statistical claim, tested by tests/test_sampling_distribution.py
and shown in notebook 02, not by a benchmark. The seeds are the protocol's (`specdec_lib.bench.protocol.run_seed`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from ..decoders import autoregressive_generate
from ..drafters import CrossTokenizerDrafter, CrossVocabularySamplingDrafter
from ..core.drafting import Drafter
from ..core.errors import ConfigError
from ..core.minimal import lean_generate
from ..core.pair import ModelPair
from ..core.sampling import GREEDY, SamplingConfig
from ..core.validation import check_gamma
from ..decoders import speculative_generate
from ..core.result import GenerationResult

BASELINE = "autoregressive"
SPECULATIVE = "speculative"
LEAN = "lean"
HF_ASSISTED = "hf-assisted"
HF_ASSISTED_HEURISTIC = "hf-assisted-heuristic"
HF_ASSISTED_DEFAULT = "hf-assisted-default"
HF_GREEDY = "hf-greedy"
HF_SAMPLE = "hf-sample"
SPECULATIVE_BLOCK = "speculative-block"
SPECULATIVE_CROSS = "speculative-cross"
HF_ASSISTED_CROSS = "hf-assisted-cross"
HF_PROMPT_LOOKUP = "hf-prompt-lookup"
HF_EARLY_EXIT = "hf-early-exit"


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


class Method:
    """One way to decode. Subclasses implement `generate`; ``key`` names the row (``name[gamma=g]``)."""

    name: str = "method"
    gamma: int | None = None
    source: str = ""  # where the row's forwards and acceptance come from: "trace" or "forward counts"
    draft_role: str = "draft"  # which model of `measure`'s ``count_models`` is this method's draft
    # forward counts: every target forward is a verification round (mean acceptance length = tokens / forwards)
    counts_rounds: bool = True
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
    verification = "exact"  # token-wise rejection sampling when sampling (greedy: argmax matching)

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
            verification=self.verification,
        )
        return result.new_token_list, result


class SpeculativeBlock(Speculative):
    """Our speculative decoding with block verification (row ``speculative-block``, sampling only: at temperature
    0 it coincides with the ``speculative`` row): the same drafter, the accepted prefix decided jointly."""

    name, verification = SPECULATIVE_BLOCK, "block"


class SpeculativeCross(Speculative):
    """Our speculative decoding with a draft on another tokenizer (row ``speculative-cross``): the drafter is a
    `CrossTokenizerDrafter` (greedy) or a `CrossVocabularySamplingDrafter` (sampling, exact verification)."""

    name = SPECULATIVE_CROSS


class Lean(Method):
    """The ``lean`` reference row (greedy only): `lean_generate` with the pair's draft model. Forward counts give
    its tokens per target forward; its acceptance columns stay blank (its rounds are ours: same drafts, same
    verdicts)."""

    name, source, counts_rounds, counts_acceptance = LEAN, "forward counts", False, False

    def __init__(self, target: PreTrainedModel, draft: PreTrainedModel, gamma: int, spec: GenerationSpec) -> None:
        check_gamma(gamma)
        if not spec.sampling.is_greedy:
            raise ConfigError("The lean reference loop decodes greedily only; with sampling, leave it out.")
        self.target, self.draft, self.gamma, self.spec = target, draft, gamma, spec

    def generate(self, input_ids: torch.Tensor, seed: int | None = None) -> tuple[list[int], GenerationResult | None]:
        tokens = lean_generate(
            self.target,
            self.draft,
            input_ids.to(self.target.device),
            gamma=self.gamma,
            max_new_tokens=self.spec.max_new_tokens,
            eos_token_id=self.spec.eos_token_id,
        )
        return tokens, None


def cross_drafter(cross: ModelPair, sampling: SamplingConfig) -> Drafter:
    """The drafter of the ``speculative-cross`` rows: greedy `CrossTokenizerDrafter` (text round trip), or with
    sampling `CrossVocabularySamplingDrafter`, whose q over the target's ids (the vocabulary intersection) buys
    acceptance: verification accepts a draft x with min(1, p(x)/q(x)) instead of a point mass's p(x). Either is exact
    (the text round trip's drafts are point masses), so the sampling row measures the better-accepted one."""
    if sampling.is_greedy:
        return CrossTokenizerDrafter.for_pair(cross)
    return CrossVocabularySamplingDrafter.for_pair(cross)


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
