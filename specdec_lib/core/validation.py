"""The checks at the library's edge: numbers and whole numbers (`check_number`, `check_count`), sampling and
verification, devices, prompts, drafters.

Every public function checks what it was given before the first forward, with an error that says what was wrong
and how to fix it (`specdec_lib.core.errors`); nothing further down re-checks (each round, the round engine checks
only what the drafter returned: `specdec_lib.core.run.Run.checked`). The checks live here, in one place, so every
decoder refuses the same inputs with the same words.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import torch
from transformers import PreTrainedModel

from .errors import ConfigError, ContextOverflowError, InputError


def is_number(value: object) -> bool:
    """A real number: an ``int``, a ``float`` (or another `numbers.Real`), not a ``bool`` (``True`` is a typo, not 1)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_whole(value: object) -> bool:
    """An ``int`` that is not a ``bool`` (``True`` is a typo for 1, not a count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _within(value: float, minimum: float | None, maximum: float | None, open_low: bool) -> bool:
    """``minimum <= value <= maximum`` (``minimum < value`` with ``open_low``); a missing bound does not limit."""
    above = minimum is None or (value > minimum if open_low else value >= minimum)
    return above and (maximum is None or value <= maximum)


def _refuse(name: str, kind: str, value: object, minimum: float | None, maximum: float | None, open_low: bool,
            hint: str) -> None:
    """Raise the `ConfigError` of a refused setting: what it must be, what it got, how to fix it."""
    if minimum is not None and maximum is not None:
        bounds = f" in ({minimum}, {maximum}]" if open_low else f" between {minimum} and {maximum}"
    elif minimum is not None:
        bounds = f" {'>' if open_low else '>='} {minimum}"
    else:
        bounds = "" if maximum is None else f" <= {maximum}"
    raise ConfigError(f"{name} must be {kind}{bounds}, got {value!r}." + (f" {hint}" if hint else ""))


def check_number(name: str, value: object, *, minimum: float | None = None, maximum: float | None = None,
                 open_low: bool = False, finite: bool = True, hint: str = "") -> float:
    """``value`` as a float, after refusing anything but a real number (`is_number`: a bool is refused) in
    ``[minimum, maximum]`` (``(minimum, maximum]`` with ``open_low``), finite unless ``finite=False``. ``name`` says
    what the number is, ``hint`` how to choose one."""
    if not is_number(value) or (finite and not math.isfinite(value)) or not _within(value, minimum, maximum, open_low):
        bounded = minimum is not None and maximum is not None  # both bounds: finite goes without saying
        _refuse(name, "a finite number" if finite and not bounded else "a number", value, minimum, maximum, open_low,
                hint)
    return float(value)


def check_count(name: str, value: object, *, minimum: int = 0, maximum: int | None = None, hint: str = "") -> int:
    """``value`` after refusing anything but a whole number (`is_whole`) in ``[minimum, maximum]``: `check_number`'s
    rule for counts. ``name`` says what it counts."""
    if not is_whole(value) or not _within(value, minimum, maximum, open_low=False):
        _refuse(name, "an integer", value, minimum, maximum, False, hint)
    return value


def check_gamma(gamma: object) -> None:
    """Refuse a draft length ``gamma`` that is not an integer >= 1."""
    check_count("gamma (the number of draft tokens per round)", gamma, minimum=1,
                hint="Typical values are 2 to 8; use autoregressive_generate for plain decoding.")


def check_lenience(lenience: object) -> float:
    """Refuse a lenience that is not a finite number > 0 (`specdec_lib.core.verify.verify_relaxed`; 1 is exact
    verification)."""
    return check_number("lenience", lenience, minimum=0, open_low=True,
                        hint="1 is exact verification; e.g. 2 accepts min(1, 2 p/q) of the drafts (more tokens per "
                             "round, but NOT the target's distribution).")


def check_same_device(target_device: torch.device | str, drafter_device: torch.device | str | None) -> None:
    """Refuse a drafter whose model sits on another device than the target (None: a drafter with no model)."""
    if drafter_device is None:
        return
    target_device, drafter_device = torch.device(target_device), torch.device(drafter_device)
    if target_device != drafter_device:
        raise ConfigError(
            f"The target model is on {target_device} but the drafter's model is on {drafter_device}. Put both "
            f"on one device, e.g. draft_model.to(target.device) (or load them with load_pair(device=...))."
        )


def context_length(model: PreTrainedModel) -> int:
    """The most positions ``model`` was built for (``config.max_position_embeddings``)."""
    length = getattr(model.config, "max_position_embeddings", None)
    if length is None:
        raise ConfigError(
            f"{type(model).__name__}'s config has no max_position_embeddings, so its context length is unknown. "
            "Use a model whose config sets it (every Llama/Qwen2 config does)."
        )
    return int(length)


def check_input_ids(input_ids: torch.Tensor, model: PreTrainedModel | None = None) -> None:
    """Refuse token ids the library cannot use, with a message saying how to fix them.

    Expects a `torch.LongTensor` of shape ``[1, T]`` with ``T >= 1``. With ``model`` given, also checks that
    every id indexes the model's embedding table (a bad id would otherwise fail deep inside torch).
    """
    if not isinstance(input_ids, torch.Tensor):
        raise InputError(
            f"input_ids must be a torch.LongTensor of shape [1, T], got {type(input_ids).__name__}. "
            "Use tokenizer(text, return_tensors='pt').input_ids or torch.tensor([ids])."
        )
    if input_ids.dtype != torch.long:
        raise InputError(f"input_ids must have dtype torch.long (int64), got {input_ids.dtype}. Use input_ids.long().")
    if input_ids.ndim != 2:
        hint = " Add the batch dimension with input_ids.unsqueeze(0)." if input_ids.ndim == 1 else ""
        raise InputError(
            f"input_ids must have 2 dimensions [batch=1, T], got shape {list(input_ids.shape)}.{hint}"
        )
    if input_ids.shape[0] != 1:
        raise InputError(
            f"Only batch size 1 is supported here, got a batch of {input_ids.shape[0]} sequences. Generate one "
            "prompt at a time (e.g. loop over input_ids[i : i + 1]), or pass the prompts as a list to the batched "
            "decoders (batched_speculative_generate, batched_autoregressive_generate)."
        )
    if input_ids.shape[1] == 0:
        raise InputError("The prompt is empty (0 tokens). Give at least one token, e.g. the tokenizer's BOS token.")
    if model is not None:
        vocab_size = model.get_input_embeddings().num_embeddings
        low, high = int(input_ids.min()), int(input_ids.max())
        if low < 0 or high >= vocab_size:
            raise InputError(
                f"input_ids contains token id {low if low < 0 else high}, outside the model's vocabulary "
                f"[0, {vocab_size}). Encode the text with this model's own tokenizer."
            )


def check_fits_context(model: PreTrainedModel, prompt_length: int, max_new_tokens: int) -> None:
    """Raise `ContextOverflowError` unless ``prompt_length + max_new_tokens <= context_length(model)``."""
    limit = context_length(model)
    if prompt_length + max_new_tokens > limit:
        raise ContextOverflowError(
            f"The prompt ({prompt_length} tokens) plus max_new_tokens ({max_new_tokens}) = "
            f"{prompt_length + max_new_tokens} tokens exceeds the model's context of {limit} tokens. "
            f"Shorten the prompt or lower max_new_tokens to at most {max(limit - prompt_length, 0)}."
        )


def check_generation_inputs(model: PreTrainedModel, input_ids: torch.Tensor, max_new_tokens: int) -> None:
    """All checks a one-row generation runs before its first forward: ids, ``max_new_tokens >= 1``, context."""
    check_input_ids(input_ids, model)
    check_count("max_new_tokens", max_new_tokens, minimum=1, hint="Ask for at least one new token.")
    check_fits_context(model, input_ids.shape[1], max_new_tokens)


def check_prompts(model: PreTrainedModel, prompts: Sequence[torch.Tensor], max_new_tokens: int) -> list[torch.Tensor]:
    """Validate a batch of prompts (a non-empty list of ``LongTensor[T_i]`` or ``[1, T_i]``, ids in ``model``'s
    vocabulary, each fitting its context with ``max_new_tokens`` more) and return them as ``[1, T_i]`` each."""
    if isinstance(prompts, torch.Tensor) or not isinstance(prompts, Sequence):
        raise InputError(
            f"prompts must be a list of LongTensor[T] (or [1, T]) prompts, one per row, got {type(prompts).__name__}. "
            "For an unpadded [B, T] tensor pass list(input_ids)."
        )
    if len(prompts) == 0:
        raise InputError("The list of prompts is empty: give at least one prompt (LongTensor[T] or [1, T]).")
    check_count("max_new_tokens", max_new_tokens, minimum=1, hint="Ask for at least one new token.")
    rows = []
    for index, prompt in enumerate(prompts):
        if isinstance(prompt, torch.Tensor) and not (prompt.ndim == 1 or (prompt.ndim == 2 and prompt.shape[0] == 1)):
            raise InputError(
                f"Prompt {index} has shape {list(prompt.shape)}; each prompt must be one row, LongTensor[T] or [1, T]."
            )
        ids = prompt.reshape(1, -1) if isinstance(prompt, torch.Tensor) else prompt
        check_input_ids(ids, model)
        check_fits_context(model, ids.shape[1], max_new_tokens)
        rows.append(ids)
    return rows


def check_drafter(drafter: object, *, batch: int, tree: bool) -> None:
    """Refuse an object that is not a drafter, and a drafter asked for a shape it cannot draft."""
    if not all(callable(getattr(drafter, method, None)) for method in ("begin", "propose", "accept")):
        raise ConfigError(
            f"drafter must be a Drafter with begin/propose/accept methods (e.g. DraftModelDrafter(draft_model)), "
            f"got {type(drafter).__name__}."
        )
    name = type(drafter).__name__
    if batch > 1 and not getattr(drafter, "batches", False):
        raise ConfigError(f"{name} drafts for one sequence at a time, and this batch has {batch} rows. Batch "
                          "drafters: DraftModelDrafter, PromptLookupDrafter (or decode the prompts one by one).")
    if tree and not getattr(drafter, "trees", False):
        raise ConfigError(f"{name} cannot draft token trees. Draft a tree with DraftModelDrafter, or draft a chain "
                          "(speculative_generate).")
