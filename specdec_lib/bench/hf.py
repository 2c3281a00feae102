"""transformers' own methods in the benchmark: plain ``generate`` and assisted generation (same-tokenizer and
universal, across tokenizers), asked for exactly what our methods are asked for (`GenerationSpec`).

Three things make ``generate`` comparable with our loops: its stopping rule (the same ``max_new_tokens`` and EOS;
with no EOS the model's default EOS is removed from a copy of its generation config, `_config_for`), its decoding
(`hf_sampling_kwargs`: every sampling filter set explicitly, off included) and, for assisted generation, the draft
length (`assistant_config`: exactly gamma draft tokens per round). The configs are built once per method and
swapped in by reference around each call (`_swapped_generation_config`), so nothing is copied while timing.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from transformers import GenerationConfig, PreTrainedModel

from ..core.errors import ConfigError
from ..core.pair import ModelPair
from ..core.sampling import SamplingConfig
from ..core.validation import check_gamma
from ..core.result import GenerationResult
from .methods import (
    HF_ASSISTED,
    HF_ASSISTED_CROSS,
    HF_ASSISTED_DEFAULT,
    HF_ASSISTED_HEURISTIC,
    HF_EARLY_EXIT,
    HF_GREEDY,
    HF_PROMPT_LOOKUP,
    HF_SAMPLE,
    GenerationSpec,
    Method,
)


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
            output = self.target.generate(input_ids, **self._extra_kwargs(), **_hf_generate_kwargs(input_ids, self.spec))
        return output[0, input_ids.shape[1] :].tolist(), None

    def _extra_kwargs(self) -> dict:
        """More ``generate`` arguments for the subclasses that draft inside ``generate`` (none here)."""
        return {}


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


#: How transformers' assisted generation picks its draft length: the row name of each schedule.
ASSISTED_SCHEDULES = {"constant": HF_ASSISTED, "heuristic": HF_ASSISTED_HEURISTIC, "default": HF_ASSISTED_DEFAULT}


def assistant_config(draft: PreTrainedModel, gamma: int, spec: GenerationSpec, schedule: str = "constant"):
    """The draft's generation config for transformers' assisted generation: with ``schedule="constant"`` it drafts
    exactly ``gamma`` tokens per round, like our loop.

    transformers (5.24, ``AssistedCandidateGenerator``) reads three settings from the *assistant's*
    ``generation_config``: ``num_assistant_tokens`` (draft length, default 20), ``num_assistant_tokens_schedule``
    (default ``"constant"``; ``"heuristic"`` grows it by 2 after a round whose drafts were all accepted and
    shrinks it by 1 otherwise, and keeps the value between calls) and ``assistant_confidence_threshold`` (default
    0.4: stop drafting early when the draft's top probability drops below it; 0 disables that stop, while None
    would be replaced by the 0.4 default). ``"heuristic"`` starts at ``gamma`` without the confidence stop;
    ``"default"`` leaves all three at the draft's own settings (what ``generate(assistant_model=draft)`` does
    untouched; ``gamma`` is ignored). transformers itself gives the assistant the target's EOS.
    """
    if schedule == "default":
        return _config_for(draft, spec)
    return _config_for(
        draft,
        spec,
        num_assistant_tokens=gamma,
        num_assistant_tokens_schedule=schedule,
        assistant_confidence_threshold=0.0,
    )


class HFAssisted(Method):
    """transformers' assisted generation with a draft model: row ``hf-assisted`` (exactly gamma drafts per round),
    ``hf-assisted-heuristic`` or ``hf-assisted-default`` (`assistant_config`'s schedules; the latter's gamma is
    the draft's configured maximum)."""

    name, source = HF_ASSISTED, "forward counts"

    def __init__(self, target: PreTrainedModel, draft: PreTrainedModel, gamma: int, spec: GenerationSpec,
                 schedule: str = "constant") -> None:
        if schedule not in ASSISTED_SCHEDULES:
            raise ConfigError(f"schedule must be one of {', '.join(ASSISTED_SCHEDULES)}, got {schedule!r}.")
        if schedule == "default":  # the draft's own maximum, else transformers' (5.24: 20)
            gamma = (draft.generation_config.num_assistant_tokens
                     or GenerationConfig._get_default_generation_params()["num_assistant_tokens"])
        check_gamma(gamma)
        self.target, self.draft, self.gamma, self.spec = target, draft, gamma, spec
        if schedule != "constant":  # (the cross-tokenizer subclass keeps its own name)
            self.name = ASSISTED_SCHEDULES[schedule]
        self._target_config = _config_for(target, spec)
        self._draft_config = assistant_config(draft, gamma, spec, schedule)

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

    Tokens per target forward and the mean acceptance length come from forward counts as for hf-assisted; the
    acceptance rate and alpha stay blank: its drafts are counted in draft tokens (forwards of the draft) but
    accepted in target tokens, so their ratio is no acceptance rate."""

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


class HFPromptLookup(HFGenerate):
    """transformers' prompt lookup, ``target.generate(prompt_lookup_num_tokens=gamma)`` (row ``hf-prompt-lookup``):
    its `PromptLookupCandidateGenerator` copies up to gamma tokens after the first earlier match of the last
    1 .. ``max_matching_ngram_size`` tokens (longest n first; transformers' default 2). No draft model: forward
    counts see only the target."""

    # its drafts are no model's forwards: tokens per target forward only (no acceptance rate, no alpha)
    name, draft_role, counts_acceptance = HF_PROMPT_LOOKUP, "none", False

    def __init__(self, target: PreTrainedModel, gamma: int, spec: GenerationSpec, max_ngram: int = 2) -> None:
        check_gamma(gamma)
        super().__init__(target, spec)
        self.name, self.gamma, self.max_ngram = HF_PROMPT_LOOKUP, gamma, max_ngram

    def _extra_kwargs(self) -> dict:
        return {"prompt_lookup_num_tokens": self.gamma, "max_matching_ngram_size": self.max_ngram}


class HFEarlyExit(HFGenerate):
    """transformers' self-speculative decoding, ``target.generate(assistant_early_exit=E)`` (row ``hf-early-exit``):
    its `EarlyExitCandidateGenerator` drafts gamma tokens with the first E layers (it shrinks
    ``config.num_hidden_layers`` around the assistant's own ``generate``), sharing the *weights* with the target
    but not the cache: verification runs all layers again on the drafts. Draft length fixed to gamma as for
    hf-assisted (`assistant_config` on the target's own generation config)."""

    # the target's forward count includes the drafting passes: speed only, no acceptance numbers
    name, draft_role, counts_rounds, counts_acceptance = HF_EARLY_EXIT, "none", False, False

    def __init__(self, target: PreTrainedModel, exit_layer: int, gamma: int, spec: GenerationSpec) -> None:
        check_gamma(gamma)
        super().__init__(target, spec)
        self.name, self.exit_layer, self.gamma = HF_EARLY_EXIT, exit_layer, gamma
        self._target_config = assistant_config(target, gamma, spec)

    def _extra_kwargs(self) -> dict:
        return {"assistant_early_exit": self.exit_layer}


def is_transformers(row: dict) -> bool:
    """Whether a bench row is transformers' ``generate`` (its names start with ``hf-``)."""
    return row["method"].startswith("hf-")


def fastest_against_transformers(rows: Sequence[dict]) -> tuple[dict, dict | None, float | None]:
    """``(ours, theirs, ours / theirs)`` among drafting ``rows`` (no baseline): the fastest of our rows, the fastest
    of transformers' (None: the run timed none) and the ratio of their speed-ups, both over the same baseline in the
    same run (None without transformers' rows)."""
    ours = max((row for row in rows if not is_transformers(row)), key=lambda row: row["speedup"])
    theirs = max((row for row in rows if is_transformers(row)), key=lambda row: row["speedup"], default=None)
    return ours, theirs, None if theirs is None else ours["speedup"] / theirs["speedup"]
