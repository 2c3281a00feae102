"""The one place that runs a model forward (`run_model`), the one-row convenience around it (`forward_with_cache`),
and the layer-slice helpers self-speculative drafting needs.

Speculative decoding lives on the KV cache: the target scores a whole block of drafted tokens in one forward
appended to its cache, then *rolls the cache back* past the first rejected token. Every forward in the library
goes through `run_model`, because transformers moved this API between 5.x releases: the forward's cache keyword is
``cache=`` in 5.24 but ``past_key_values=`` in 5.17 (and in 4.57 ``cache=`` is silently swallowed by ``**kwargs``!),
so the keyword is read from the forward's signature, never assumed. A ``torch.compile`` d model (an
``OptimizedModule`` whose forward is ``(*args, **kwargs)``) is looked through to the module it wraps.

Caches themselves (creation, length, rollback and its refusals) belong to `specdec_lib.core.caches`; a model with
its cache for B rows, to `specdec_lib.core.rows`.
"""

import functools
import inspect
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel
from transformers.cache_utils import Cache

from .errors import ConfigError, ContextOverflowError
from .trees import node_depths, tree_attention_mask, tree_position_ids
from .validation import check_input_ids, context_length


LAST_HIDDEN = (-1,)  # the last layer's output after the final norm: what Medusa heads and EAGLE-1 read


def select_hidden(states: Sequence[torch.Tensor], layers: Sequence[int]) -> torch.Tensor:
    """transformers' ``hidden_states`` (``[B, T, D]`` each; 0: the embeddings, i: after layer i, -1: after the
    final norm) at ``layers``, side by side: ``[B, T, len(layers) * D]``."""
    return states[layers[0]] if len(layers) == 1 else torch.cat([states[i] for i in layers], dim=-1)


@dataclass(frozen=True)
class _ForwardKeywords:
    """How a model class's ``forward`` wants to be called (read once per class from its signature)."""

    cache: str  # "cache" (transformers 5.24) or "past_key_values" (5.17)
    cache_position: bool  # older 5.x take explicit cache positions for the attention mask
    logits_to_keep: bool  # compute the LM head only on the last k positions


@functools.lru_cache(maxsize=None)
def forward_keywords(model_class: type) -> _ForwardKeywords:
    """Inspect ``model_class.forward`` for the names of its cache arguments (cached: signatures don't change).

    ``forward_keywords(type(unwrap_compiled(model))).cache`` is the keyword to pass a cache to ``model(...)``."""
    parameters = inspect.signature(model_class.forward).parameters  # follows functools.wraps decorators
    if "cache" in parameters:
        cache_keyword = "cache"
    elif "past_key_values" in parameters:
        cache_keyword = "past_key_values"
    else:
        raise ConfigError(
            f"{model_class.__name__}.forward accepts neither `cache` nor `past_key_values`, so it cannot be run "
            "with a KV cache. Use a causal language model from transformers >= 5.17 (e.g. LlamaForCausalLM)."
        )
    return _ForwardKeywords(cache_keyword, "cache_position" in parameters, "logits_to_keep" in parameters)


def unwrap_compiled(model: torch.nn.Module) -> torch.nn.Module:
    """The module a ``torch.compile(model)`` wrapper (``OptimizedModule``) compiles; ``model`` itself otherwise.

    Its signature, config and embeddings are the wrapped model's; calls still go through the compiled wrapper."""
    return model._modules.get("_orig_mod", model)  # a dict lookup: a missing attribute costs Module.__getattr__ a raise


def run_model(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    cache: Cache | None,
    *,
    position_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    logits_to_keep: int | None = None,
    hidden: Sequence[int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run ``model`` on ``input_ids: LongTensor[B, T]`` appended to ``cache`` (None: no cache, T is everything).

    ``position_ids: [B, T]``; ``attention_mask``: None (the model's own causal mask), ``[B, S + T]`` (1 where a slot
    holds a real token of that row, `specdec_lib.core.rows`) or an additive 4-D mask (a token tree). Returns float32
    logits ``[B, T_keep, V]`` of the last ``T_keep = logits_to_keep`` positions (all T when None: keeping only the
    needed rows skips most of the LM head, the largest matrix in small models) and, with ``hidden``, hidden states
    at every new position, ``[B, T, len(hidden) * D]`` (else None): transformers' ``hidden_states[i]`` for each i
    in ``hidden``, side by side (0: the embeddings, i: after layer i, -1: after the final norm, the LM head's input).
    Runs under whatever grad mode the caller set (generation uses inference_mode)."""
    keywords = forward_keywords(type(unwrap_compiled(model)))
    kwargs: dict[str, object] = {"position_ids": position_ids, "use_cache": cache is not None}
    if attention_mask is not None:
        kwargs["attention_mask"] = attention_mask
    if cache is not None:
        kwargs[keywords.cache] = cache
        if keywords.cache_position:  # older 5.x: the cache slots the new tokens take
            past = int(cache.get_seq_length())
            kwargs["cache_position"] = torch.arange(past, past + input_ids.shape[1], device=input_ids.device)
    if logits_to_keep is not None and keywords.logits_to_keep:
        kwargs["logits_to_keep"] = logits_to_keep
    if hidden:
        kwargs["output_hidden_states"] = True
    output = model(input_ids=input_ids, **kwargs)
    logits = output.logits
    if logits_to_keep is not None and not keywords.logits_to_keep:  # the model computed every position's logits
        logits = logits[:, -logits_to_keep:]
    return logits.float(), select_hidden(output.hidden_states, hidden) if hidden else None


def forward_with_cache(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    cache: Cache | None,
    *,
    logits_to_keep: int | None = None,
    tree_parents: Sequence[int] | None = None,
    tree_first: int = 0,
    return_hidden: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Run ``model`` on new tokens ``input_ids: LongTensor[1, T]`` appended after the tokens in ``cache`` (one row).

    The new tokens take positions ``L, ..., L + T - 1`` where ``L = cache_length(cache)``; positions are passed
    explicitly, so they stay right after a `crop_cache` rollback. ``cache`` is extended in place by T tokens.
    With ``tree_parents`` (the N parent indices of a token tree, `specdec_lib.core.trees`) the input is the tree's
    positions ``tree_first .. N`` (0: the root, 1 + i: node i; the earlier ones are the cache's last entries):
    each gets the position ``root + depth`` and the tree attention mask (prefix, ancestors, itself) instead of
    the causal one. The cache stores the T entries in input order (it grows by T *slots*, while the deepest node
    takes only the position ``root + depth``: near the end of the context a tree fits where a chain of N would not).
    With ``cache=None`` the model runs without a cache on the full sequence (positions ``0 ... T - 1``): the
    "no KV cache" baseline.

    Returns float32 logits ``[1, T_keep, V]`` for the last ``T_keep = logits_to_keep`` positions (all ``T`` when
    None). With ``return_hidden=True`` it returns ``(logits, hidden)``, ``hidden: [1, T, D]`` the last layer's output
    after the final norm (the LM head's input) at *every* new position: what Medusa heads and EAGLE drafters read.
    """
    check_input_ids(input_ids)
    new_tokens = input_ids.shape[1]
    if logits_to_keep is not None and not 1 <= logits_to_keep <= new_tokens:
        raise ConfigError(
            f"logits_to_keep must be between 1 and the number of new tokens ({new_tokens}), got {logits_to_keep}. "
            "Pass None to keep the logits of every position."
        )
    past = 0 if cache is None else int(cache.get_seq_length())
    limit = context_length(model)
    mask = None
    if tree_parents is not None:
        if len(tree_parents) + 1 - tree_first != new_tokens or tree_first > past:
            raise ConfigError(
                f"A tree forward from tree position {tree_first} over a tree of {len(tree_parents)} nodes reads "
                f"{len(tree_parents) + 1 - tree_first} tokens after at least {tree_first} cached ones; got "
                f"{new_tokens} tokens after {past}.")
        root = past - tree_first  # the root's cache slot, and its position
        last_position = root + max(node_depths(tree_parents), default=0)
        positions = tree_position_ids(tree_parents, root, tree_first, input_ids.device)  # [1, T]
        mask = tree_attention_mask(tree_parents, root, tree_first, dtype=next(model.parameters()).dtype,
                                   device=input_ids.device)  # [1, 1, T, past + T]
    else:
        last_position = past + new_tokens - 1
        positions = torch.arange(past, past + new_tokens, device=input_ids.device).unsqueeze(0)  # [1, T]
    if last_position >= limit:
        raise ContextOverflowError(
            f"Cannot run {new_tokens} new tokens after {past} cached ones: position {last_position} is past "
            f"the model's context of {limit}. Shorten the prompt or generate fewer tokens."
        )
    logits, hidden = run_model(model, input_ids, cache, position_ids=positions, attention_mask=mask,
                               logits_to_keep=logits_to_keep, hidden=LAST_HIDDEN if return_hidden else None)
    return (logits, hidden) if return_hidden else logits


def _decoder(model: PreTrainedModel) -> torch.nn.Module:
    """The decoder stack (``embed_tokens``, ``layers``, ``norm``, ``rotary_emb``) of a Llama-like causal LM."""
    decoder = unwrap_compiled(model).get_decoder()
    missing = [name for name in ("embed_tokens", "layers", "norm", "rotary_emb") if not hasattr(decoder, name)]
    if missing:
        raise ConfigError(
            f"{type(model).__name__} has no {', '.join(missing)} on its decoder: running a slice of its layers "
            "(self-speculative early exit) needs a Llama-like decoder (Llama, Qwen2, Mistral, ...)."
        )
    return decoder


def num_layers(model: PreTrainedModel) -> int:
    """How many decoder layers ``model`` has."""
    return len(_decoder(model).layers)


def embed(model: PreTrainedModel, input_ids: torch.Tensor) -> torch.Tensor:
    """Token embeddings ``[1, T, D]`` of ``input_ids: LongTensor[1, T]`` (the input of decoder layer 0)."""
    return _decoder(model).embed_tokens(input_ids)


def run_layers(model: PreTrainedModel, hidden: torch.Tensor, cache: Cache, start: int, stop: int, *,
               positions: torch.Tensor | None = None, allowed: torch.Tensor | None = None) -> torch.Tensor:
    """Run decoder layers ``start .. stop - 1`` of ``model`` on ``hidden: [B, T, D]``, appending to their KV cache.

    The T new tokens take positions ``P .. P + T - 1`` where ``P`` is layer ``start``'s cache length: in
    self-speculative decoding the shallow layers run ahead of the deep ones (they have cached the drafts the
    deep layers have not verified yet), so every layer slice reads its own length, and all layers in
    ``start .. stop - 1`` must hold the same number of tokens. Returns ``[B, T, D]``, *before* the final norm.

    ``positions: LongTensor[1, T]`` and ``allowed: BoolTensor[T, S + T]`` (which of the S cached and T new slots
    each new token attends to) replace the causal defaults: training-time test runs an EAGLE layer's later draft
    steps after the earlier ones' slots, at the positions they draft for (`specdec_tools.training.heads`).
    """
    decoder = _decoder(model)
    if not 0 <= start < stop <= len(decoder.layers):
        raise ConfigError(f"Layers {start}..{stop - 1} are not a slice of the model's {len(decoder.layers)} layers.")
    past = int(cache.get_seq_length(start))
    new_tokens = hidden.shape[1]
    if positions is None:
        positions = torch.arange(past, past + new_tokens, device=hidden.device).unsqueeze(0)  # [1, T]
        last = past + new_tokens - 1
    else:
        last = int(positions.max())
    if last >= context_length(model):
        raise ContextOverflowError(
            f"Cannot run {hidden.shape[1]} new tokens after {past} cached ones: the model's context is "
            f"{context_length(model)}. Shorten the prompt or generate fewer tokens."
        )
    if allowed is None and new_tokens > 1:  # causal over the new block: no key in a query's future
        allowed = torch.ones(new_tokens, past + new_tokens, dtype=torch.bool, device=hidden.device).tril(past)
    mask = None  # one new token attends to every cached one: no mask needed
    if allowed is not None:  # additive [1, 1, T, S + T]: the dtype's minimum where a key is not allowed
        mask = torch.zeros(allowed.shape, dtype=hidden.dtype, device=hidden.device)
        mask = mask.masked_fill(~allowed, torch.finfo(hidden.dtype).min)[None, None]
    rotary = decoder.rotary_emb(hidden, position_ids=positions)  # (cos, sin) for these positions
    keywords = forward_keywords(type(decoder.layers[start]))
    for layer in decoder.layers[start:stop]:
        hidden = layer(hidden, attention_mask=mask, position_ids=positions, position_embeddings=rotary,
                       use_cache=True, **{keywords.cache: cache}, cache_position=positions[0])
    return hidden


def lm_head_logits(model: PreTrainedModel, hidden: torch.Tensor) -> torch.Tensor:
    """float32 logits ``[1, T, V]`` from a hidden state ``[1, T, D]`` taken *before* the final norm (any layer's
    output): the final norm, then the LM head. For an intermediate layer this is the early-exit head the
    embedded target was trained with (`specdec_tools.training.model_training.lm_loss` adds its loss)."""
    return unwrap_compiled(model).get_output_embeddings()(_decoder(model).norm(hidden)).float()
