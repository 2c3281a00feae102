"""The one forward of the library (`forward_with_cache`) and the layer-slice helpers self-speculative drafting needs.

Speculative decoding lives on the KV cache: the target scores a whole block of drafted tokens in one forward
appended to its cache, then *rolls the cache back* past the first rejected token. Every model forward of the library
goes through `forward_with_cache`, which builds what the model reads besides the tokens, in one place:

    a chain       positions S .. S + T - 1 after the S cached slots; the model's own causal mask
    ragged rows   ``attention_mask: [B, S + T]`` marks the slots that hold a real token of each row (left padding,
                  rejected drafts, shorter drafts are *holes*); a token's position counts the real slots before it
                  (`positions_from_mask`), so each row gets the positions, hence the rotary phases, it would get
                  alone, and no real token attends to a hole
    a token tree  node i at the root's position + its depth, attending to the prefix, its ancestors and itself
                  (`specdec_lib.core.trees.tree_position_ids`, `specdec_lib.core.trees.tree_attention_mask`)

A model with its cache for B rows, and the bookkeeping of which slots are holes, is `specdec_lib.core.rows.CachedRows`
(its ``forward`` is this function on its cache); caches themselves (creation, length, rollback and its refusals)
belong to `specdec_lib.core.caches`.

transformers moved the forward's API between 5.x releases: the cache keyword is ``cache=`` in 5.24 but
``past_key_values=`` in 5.17 (and in 4.57 ``cache=`` is silently swallowed by ``**kwargs``!), so the keyword is read
from the forward's signature (`forward_keywords`), never assumed. A ``torch.compile`` d model (an ``OptimizedModule``
whose forward is ``(*args, **kwargs)``) is looked through to the module it wraps.
"""

import functools
import inspect
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel
from transformers.cache_utils import Cache

from .errors import ConfigError, ContextOverflowError, InputError
from .trees import node_depths, tree_attention_mask, tree_position_ids
from .validation import context_length


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


def positions_from_mask(mask: torch.Tensor) -> torch.Tensor:
    """``LongTensor[B, S]``: each slot's position, the number of real slots before it in its row (``cumsum(mask) -
    1``, 0 on leading holes) for ``mask: BoolTensor[B, S]`` (True where a slot holds a real token of that row)."""
    return (mask.long().cumsum(dim=-1) - 1).clamp_min(0)


@functools.lru_cache(maxsize=None)
def _counting(length: int, device: torch.device) -> torch.Tensor:
    """``0 .. length - 1`` on ``device``, made once: a chain's positions are a view of it (a fresh ``arange`` per
    forward is a new allocation every draft step). Made outside inference mode, so a forward under autograd can
    read it too."""
    with torch.inference_mode(False):
        return torch.arange(length, device=device)


def forward_with_cache(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    cache: Cache | None,
    *,
    logits_to_keep: int | None = None,
    attention_mask: torch.Tensor | None = None,
    tree_parents: Sequence[int] | None = None,
    tree_first: int = 0,
    hidden: Sequence[int] | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Run ``model`` on new tokens ``input_ids: LongTensor[B, T]`` appended after the S slots in ``cache`` (which
    grows in place by T slots per row); with ``cache=None`` on the full sequences without a cache (positions ``0 ..
    T - 1``: the "no KV cache" baseline). Positions are passed explicitly, so they stay right after a `crop_cache`
    rollback. What the model reads besides the tokens (module docstring):

    - by default a chain: positions ``S .. S + T - 1`` and the model's causal mask;
    - ``attention_mask: BoolTensor[B, S + T]`` (True where a slot, cached or new, holds a real token of that row):
      ragged rows; each token's position counts the real slots before it;
    - ``tree_parents`` (the N parent indices of a token tree, one row, `specdec_lib.core.trees`): the input is the
      tree's positions ``tree_first .. N`` (0: the root, 1 + i: node i; the earlier ones are the cache's last
      slots); each gets the position ``root + depth`` and the tree attention mask (prefix, ancestors, itself). The
      cache stores the T entries in input order (it grows by T *slots*, while the deepest node takes only the
      position ``root + depth``: near the end of the context a tree fits where a chain of N would not).

    Returns float32 logits ``[B, T_keep, V]`` for the last ``T_keep = logits_to_keep`` positions (all T when None:
    keeping only the needed rows skips most of the LM head, the largest matrix in small models). With ``hidden``
    (layer indices, e.g. `LAST_HIDDEN`) it returns ``(logits, states)``, ``states: [B, T, len(hidden) * D]`` at
    *every* new position: transformers' ``hidden_states[i]`` for each i in ``hidden``, side by side (0: the
    embeddings, i: after layer i, -1: after the final norm, the LM head's input; what Medusa heads and EAGLE
    read). Runs under whatever grad mode the caller set (generation uses inference_mode)."""
    if not (isinstance(input_ids, torch.Tensor) and input_ids.dtype == torch.long and input_ids.ndim == 2
            and input_ids.shape[1] > 0):
        got = (f"{input_ids.dtype} of shape {list(input_ids.shape)}" if isinstance(input_ids, torch.Tensor)
               else type(input_ids).__name__)
        raise InputError(f"input_ids must be a torch.LongTensor [B, T] with T >= 1 (the new tokens of each row), got "
                         f"{got}. Use tokenizer(text, return_tensors='pt').input_ids or torch.tensor([ids]).")
    batch, width = input_ids.shape
    if logits_to_keep is not None and not 1 <= logits_to_keep <= width:
        raise ConfigError(
            f"logits_to_keep must be between 1 and the number of new tokens ({width}), got {logits_to_keep}. "
            "Pass None to keep the logits of every position."
        )
    past = 0 if cache is None else int(cache.get_seq_length())
    limit, device = context_length(model), input_ids.device
    positions, mask = None, None  # None: a chain's positions (below) and the model's own causal mask
    last = past + width - 1  # the last position read (for ragged rows a bound: holes take no position)
    if tree_parents is not None:
        if len(tree_parents) + 1 - tree_first != width or tree_first > past or batch != 1 or attention_mask is not None:
            raise ConfigError(
                f"A tree forward from tree position {tree_first} over a tree of {len(tree_parents)} nodes reads "
                f"{len(tree_parents) + 1 - tree_first} tokens of one row (no attention_mask) after at least "
                f"{tree_first} cached ones; got {batch} row(s) of {width} tokens after {past}.")
        root = past - tree_first  # the root's cache slot, and its position
        last = root + max(node_depths(tree_parents), default=0)
        positions = tree_position_ids(tree_parents, root, tree_first, device)  # [1, T]
        mask = tree_attention_mask(tree_parents, root, tree_first, dtype=next(model.parameters()).dtype,
                                   device=device)  # [1, 1, T, S + T]
    elif attention_mask is not None:
        if tuple(attention_mask.shape) != (batch, past + width):
            raise ConfigError(f"attention_mask must be [B, S + T] = [{batch}, {past + width}] (the cached slots, then "
                              f"the new ones), got {list(attention_mask.shape)}.")
        positions = positions_from_mask(attention_mask)[:, -width:]  # [B, T]
        mask = attention_mask.long()
        if last >= limit:  # the bound is past the context: read the exact last position back
            last = int(positions.max())
    if last >= limit:
        raise ContextOverflowError(
            f"Cannot run {width} new tokens after {past} cached ones: position {last} is past the model's context "
            f"of {limit}. Shorten the prompt or generate fewer tokens."
        )
    if positions is None:  # a chain: every row's next positions, a view of 0 .. limit - 1
        positions = _counting(limit, device)[None, past : past + width]
        if batch > 1:
            positions = positions.expand(batch, width)

    keywords = forward_keywords(type(unwrap_compiled(model)))
    kwargs: dict[str, object] = {"position_ids": positions, "use_cache": cache is not None}
    if mask is not None:
        kwargs["attention_mask"] = mask
    if cache is not None:
        kwargs[keywords.cache] = cache
        if keywords.cache_position:  # older 5.x: the cache slots the new tokens take
            kwargs["cache_position"] = torch.arange(past, past + width, device=device)
    if logits_to_keep is not None and keywords.logits_to_keep:
        kwargs["logits_to_keep"] = logits_to_keep
    if hidden:
        kwargs["output_hidden_states"] = True
    output = model(input_ids=input_ids, **kwargs)
    logits = output.logits
    if logits_to_keep is not None and not keywords.logits_to_keep:  # the model computed every position's logits
        logits = logits[:, -logits_to_keep:]
    logits = logits.float()
    return (logits, select_hidden(output.hidden_states, hidden)) if hidden else logits


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
