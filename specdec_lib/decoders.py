"""The decoders the course teaches, each the round engine (`specdec_lib.core.engine.generate`) with its drafter and
settings: the target alone, speculative decoding (a chain of drafts), token trees, Jacobi decoding, and batches.
They sit above `core` and `drafters` (they choose a drafter for the engine), as the package's entry points.

Every one has the same stopping rules and result type (`specdec_lib.core.result.GenerationResult`): it stops after
exactly ``max_new_tokens`` tokens (the last rounds draft fewer, never emit more) or right after an end-of-sequence
token, even an accepted draft in the middle of a round. ``eos_token_id``: ``"auto"`` (default) stops at the model's
own EOS like transformers' ``generate``; an id or a list of ids; None never stops early (`specdec_lib.core.stopping`).
``seed`` makes a sampled run reproducible: same seed, same tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from transformers import PreTrainedModel

from .core.drafting import Drafter, TargetAlone
from .core.engine import generate
from .core.errors import ConfigError
from .core.result import GenerationResult
from .core.run import Settings
from .core.sampling import GREEDY, SamplingConfig
from .core.stopping import AUTO
from .core.trees import DynamicTree, TreeShape, check_tree_kind
from .core.validation import check_count, check_gamma, check_input_ids
from .drafters.draft_model import DraftModelDrafter
from .drafters.jacobi import JacobiDrafter
from .drafters.prompt_lookup import PromptLookupDrafter


def _one_row(input_ids: torch.Tensor) -> list[torch.Tensor]:
    check_input_ids(input_ids)
    return [input_ids]


def autoregressive_generate(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    *,
    max_new_tokens: int,
    sampling: SamplingConfig = GREEDY,
    eos_token_id: int | Sequence[int] | str | None = AUTO,
    seed: int | None = None,
    use_cache: bool = True,
) -> GenerationResult:
    """The reference every speed-up is measured against: ``model`` alone, one forward per new token after
    ``input_ids: LongTensor[1, T]``, each token sampled from ``logits_to_probs(logits, sampling)`` (greedy by
    default, which matches ``model.generate(do_sample=False)`` token for token). ``use_cache=False`` re-reads the
    whole sequence every step, which shows what the KV cache saves: the cost of step t grows with t.

    The result's trace has one round per target forward (``drafted=0, accepted=0, emitted=1``); ``method`` is
    ``"autoregressive"`` (``"autoregressive-nocache"`` without the cache)."""
    settings = Settings(max_new_tokens, sampling=sampling, cache_kind="dynamic" if use_cache else "none")
    return generate(model, TargetAlone(), _one_row(input_ids), settings, seed=seed, eos_token_id=eos_token_id,
                    method="autoregressive" if use_cache else "autoregressive-nocache")


def speculative_generate(
    target: PreTrainedModel,
    drafter: Drafter,
    input_ids: torch.Tensor,
    *,
    gamma: int,
    max_new_tokens: int,
    sampling: SamplingConfig = GREEDY,
    eos_token_id: int | Sequence[int] | str | None = AUTO,
    seed: int | None = None,
    verification: Literal["exact", "block", "relaxed"] = "exact",
    lenience: float | None = None,
    cache_kind: str = "dynamic",
    record_memory: bool = False,
) -> GenerationResult:
    """Speculative decoding of ``input_ids: LongTensor[1, T]``: ``drafter`` proposes up to ``gamma`` tokens a round,
    ``target`` verifies them in one forward (module docstring of `specdec_lib.core.engine`).

    - Greedy (the default): `verify_greedy`; the output is token-identical to ``autoregressive_generate(target,
      ...)``.
    - Sampling (``SamplingConfig(temperature=..., top_k=..., top_p=...)``): `verify_exact`, rejection sampling
      against ``p = logits_to_probs(target_logits, sampling)``; the output is distributed exactly like
      ``autoregressive_generate(target, ..., sampling=sampling)``, provided the drafter reports the q it really
      sampled from.
    - ``verification="block"`` (sampling): block verification (Sun et al. 2025), the accepted prefix decided
      jointly: the target's distribution again, and never fewer accepted tokens in expectation. Greedy: as exact.
    - ``verification="relaxed"`` with ``lenience=l`` (sampling only) accepts with ``min(1, l p / q)``. **It does NOT
      preserve the target's distribution**; it exists to measure that trade-off.

    The trace has one `RoundRecord` per target forward, the first one reading the prompt (``kind="prefill"``
    when it verified no drafts: a drafter that reads the target drafts from the second round); a round that
    verified drafts says in ``kind`` whether the target's token was recovered or a bonus; ``draft_tokens`` holds
    what was drafted. ``cache_kind``: the target's KV cache, ``"dynamic"`` or ``"preallocated"`` (sized to the
    generation); the tokens are the same. ``record_memory=True`` keeps the KV caches' peak bytes in
    ``trace.peak_kv_bytes`` (``"target"``, and ``"draft"`` for drafters exposing a ``cache``)."""
    check_gamma(gamma)
    settings = Settings(max_new_tokens, gamma=gamma, sampling=sampling, verification=verification,
                        lenience=lenience, cache_kind=cache_kind)
    name = getattr(drafter, "name", type(drafter).__name__)
    return generate(target, drafter, _one_row(input_ids), settings, seed=seed, eos_token_id=eos_token_id,
                    record_memory=record_memory, method=f"speculative[{name}]")


def tree_speculative_generate(
    target: PreTrainedModel,
    drafter: Drafter,
    input_ids: torch.Tensor,
    *,
    shape: TreeShape | DynamicTree,
    max_new_tokens: int,
    sampling: SamplingConfig = GREEDY,
    eos_token_id: int | Sequence[int] | str | None = AUTO,
    seed: int | None = None,
    cache_kind: str = "dynamic",
) -> GenerationResult:
    """Speculative decoding with token trees: each round ``drafter`` proposes a tree of ``shape`` (cut to fewer
    depths near the end of the budget or the context) and the target verifies every branch in one forward, with
    the tree's positions and attention mask; the accepted path is kept (`specdec_lib.core.trees`). ``shape``: a
    static `TreeShape`, or a `DynamicTree` the drafter grows each round by its own confidence (EAGLE-2). A
    chain-shaped tree, ``TreeShape((1,) * k)``, is verified as the chain it is. Greedy output is token-identical to the target
    alone; with sampling, verifying the (deterministic) candidates as point masses keeps the target's distribution.
    The trace's ``drafted`` counts a tree's nodes."""
    check_tree_kind(shape)
    settings = Settings(max_new_tokens, gamma=shape.depth, sampling=sampling, tree=shape, cache_kind=cache_kind)
    name = getattr(drafter, "name", type(drafter).__name__)
    return generate(target, drafter, _one_row(input_ids), settings, seed=seed, eos_token_id=eos_token_id,
                    method=f"tree-speculative[{name}]")


def jacobi_generate(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    *,
    max_new_tokens: int,
    gamma: int = 4,
    eos_token_id: int | Sequence[int] | str | None = AUTO,
) -> GenerationResult:
    """Greedy decoding of ``input_ids: LongTensor[1, T]`` by Jacobi iteration (`specdec_lib.drafters.jacobi`): the
    engine with the model's own last forward as the drafter, ``gamma`` guesses a round (its draft length). Token-identical to
    ``autoregressive_generate(model, input_ids, ...)``; each round's guesses count as ``drafted`` and the converged
    ones as ``accepted``, with no draft forwards."""
    check_gamma(gamma)
    settings = Settings(max_new_tokens, gamma=gamma)
    return generate(model, JacobiDrafter(), _one_row(input_ids), settings, eos_token_id=eos_token_id,
                    method=f"jacobi[gamma={gamma}]")


def batched_autoregressive_generate(
    model: PreTrainedModel,
    prompts: Sequence[torch.Tensor],
    *,
    max_new_tokens: int,
    sampling: SamplingConfig = GREEDY,
    eos_token_id: int | Sequence[int] | str | None = AUTO,
    seed: int | None = None,
) -> GenerationResult:
    """Plain batched decoding of ``prompts`` (``LongTensor[T_i]`` or ``[1, T_i]``): one token per row per forward,
    one KV cache for the batch (`specdec_lib.core.rows`). Each row's tokens are what ``autoregressive_generate``
    gives it alone (greedy: token for token; sampling: in distribution, one seeded generator for all rows);
    finished rows leave the batch."""
    return generate(model, TargetAlone(), prompts, Settings(max_new_tokens, sampling=sampling), seed=seed,
                    eos_token_id=eos_token_id, method="batched-autoregressive")


def batch_drafter(drafter: object) -> Drafter:
    """``"prompt-lookup"``, a draft model (``PreTrainedModel`` on the target's tokenizer) or a batch `Drafter`."""
    if isinstance(drafter, PreTrainedModel):
        return DraftModelDrafter(drafter)
    if isinstance(drafter, str) and drafter == "prompt-lookup":
        return PromptLookupDrafter()
    if isinstance(drafter, Drafter):
        return drafter
    raise ConfigError(
        f"drafter must be 'prompt-lookup', a draft model (a PreTrainedModel on the target's tokenizer) or a "
        f"Drafter that drafts for batches (DraftModelDrafter(model), PromptLookupDrafter()), got {drafter!r}."
    )


def batched_speculative_generate(
    target: PreTrainedModel,
    drafter: Drafter | PreTrainedModel | str,
    prompts: Sequence[torch.Tensor],
    *,
    gamma: int,
    max_new_tokens: int,
    sampling: SamplingConfig = GREEDY,
    eos_token_id: int | Sequence[int] | str | None = AUTO,
    seed: int | None = None,
    verification: Literal["exact", "block", "relaxed"] = "exact",
    lenience: float | None = None,
    disable_by_batch_size: int | None = None,
) -> GenerationResult:
    """Speculative decoding of several prompts at once: one target forward verifies every row's drafts, rows
    accept different numbers of drafts (their caches keep rejected positions as holes, `specdec_lib.core.rows`),
    and finished rows leave the batch. ``drafter``: a draft model, ``"prompt-lookup"`` or a batch `Drafter`;
    ``verification`` and ``lenience`` as in `speculative_generate`. ``disable_by_batch_size=N`` (vLLM's): while more than N rows are active, rounds draft nothing and are plain
    batched steps. Greedy: every row is token-identical to the target alone on its prompt; sampling: distributed
    like it."""
    check_gamma(gamma)
    drafter = batch_drafter(drafter)
    settings = Settings(max_new_tokens, gamma=gamma, sampling=sampling, verification=verification, lenience=lenience,
                        disable_by_batch_size=disable_by_batch_size)
    return generate(target, drafter, prompts, settings, seed=seed, eos_token_id=eos_token_id,
                    method=f"batched-speculative[{drafter.name}]")
