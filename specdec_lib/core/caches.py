"""KV caches: creating them, their length, and rolling them back past rejected drafts (or refusing to).

Speculative decoding appends a whole block of drafted tokens to the target's cache in one forward, then *rolls the
cache back* past the first rejected one. Every cache in the library is made by `new_cache`, measured by
`cache_length` and rolled back by `crop_cache` (or, after a token tree, `compact_cache`: keep a prefix and then
chosen later entries), because transformers changed this API between 5.x releases:
``DynamicCache.crop(max_length)`` with a positive length raises in 5.24, while ``crop(-n)`` (remove the last n
tokens) works in every version, so rollback is written with a negative count. `crop_cache` refuses, with a message
naming the fix, any cache that cannot restore its earlier state exactly.

Two kinds of cache (``new_cache(model, kind)``):

- ``"dynamic"``: transformers' `DynamicCache`, which grows every layer with ``torch.cat`` (a new, larger tensor per
  forward) and rolls back by slicing. Sliding-window layers are put in transformers' *past recording* mode
  (``activate_past_recording``, what its own assisted generation does), so that they keep the keys a rollback
  needs until the next crop.
- ``"preallocated"``: `PreallocatedCache`, which allocates each layer's storage **once** and keeps a **length
  pointer**, as serving engines do (transformers' `StaticCache` layers work the same way; ours is a small,
  readable one written against the 5.24 layer API):

      storage (per layer, keys and values):  [1, kv_heads, max_len, head_dim]   allocated once
      in use:                                [:, :, :length]                   a view, no copy
      append T tokens:                       storage[:, :, length:length + T] = new;  length += T
      rollback to n tokens:                  length = n        (the stale rows stay, the next append overwrites them)

  It is sized to what one generation needs (prompt + max_new_tokens + gamma + 1 positions), not to the model's
  whole context: a buffer sized to the context holds ``2 * layers * kv_heads * head_dim * context`` values per
  sequence (`specdec_lib.core.memory.kv_bytes_per_token` gives the bytes per position), most of which a short
  generation never uses.

`PreallocatedCache` is a transformers `Cache` made of `PreallocatedLayer` s (a `DynamicLayer` subclass:
``update`` / ``get_seq_length`` / ``get_mask_sizes`` / ``crop``), so it plugs into
`specdec_lib.core.forward.forward_with_cache` like a `DynamicCache`.
"""

import inspect

import torch
from transformers import DynamicCache, PreTrainedModel
from transformers.cache_utils import Cache, DynamicLayer

from .errors import ConfigError, ContextOverflowError
from .validation import context_length

CACHE_KINDS = ("dynamic", "preallocated")


def new_cache(model: PreTrainedModel, kind: str = "dynamic", *, max_len: int | None = None) -> Cache:
    """An empty KV cache for ``model``: ``kind="dynamic"`` (default) or ``"preallocated"`` (module docstring).

    ``max_len``: the positions a pre-allocated cache allocates now (default: the model's whole context; a
    generation passes what it needs, prompt + max_new_tokens + gamma + 1). A dynamic cache ignores it (it grows).
    Both kinds give the same logits through `forward_with_cache`.
    """
    if kind == "preallocated":
        return PreallocatedCache.for_model(model, max_len)
    if kind != "dynamic":
        raise ConfigError(f"cache kind must be one of {CACHE_KINDS}, got {kind!r}.")
    if "config" in inspect.signature(DynamicCache.__init__).parameters:
        cache = DynamicCache(config=model.config)
    else:  # pragma: no cover (transformers releases whose DynamicCache takes no config)
        cache = DynamicCache()
    if hasattr(cache, "activate_past_recording"):  # sliding layers keep what a rollback needs (in transformers 5.24)
        cache.activate_past_recording()
    return cache


def cache_length(cache: Cache) -> int:
    """Number of tokens whose keys and values are stored in ``cache`` (positions seen, for a sliding layer)."""
    return int(cache.get_seq_length())


def cache_kind(cache: Cache) -> str:
    """A short description of ``cache`` for messages: its class and the classes of its layers."""
    layer_kinds = sorted({type(layer).__name__ for layer in getattr(cache, "layers", [])})
    return f"{type(cache).__name__}({', '.join(layer_kinds)})" if layer_kinds else type(cache).__name__


def _rollback_problem(cache: Cache, remove: int) -> str | None:
    """Why removing the last ``remove`` tokens from ``cache`` cannot restore its earlier state (None: it can).

    - a layer transformers marks as not croppable (quantized layers, linear-attention/recurrent states, a static
      sliding layer longer than its window) has thrown information away;
    - a sliding-window layer (``is_sliding``) keeps only its last ``window - 1`` tokens after a crop. In past
      recording mode (`new_cache` turns it on) it also keeps every token added since the last crop, so a rollback
      of up to that many tokens is exact; without it, once it has dropped older keys a rollback would leave the
      next token's window short. transformers' own `DynamicSlidingWindowLayer` reports ``is_croppable=True`` in
      both cases, so this is checked from what the layer holds.
    """
    for index, layer in enumerate(getattr(cache, "layers", [])):
        if not getattr(layer, "is_croppable", True):
            return f"layer {index} ({type(layer).__name__}) cannot be cropped (transformers marks it is_croppable=False)"
        if getattr(layer, "is_sliding", False) and remove > 0:
            stored = 0 if getattr(layer, "keys", None) is None or layer.keys.numel() == 0 else layer.keys.shape[-2]
            seen = int(layer.get_seq_length())
            window = getattr(layer, "sliding_window", None)
            if stored >= seen:
                continue  # nothing dropped yet
            spare = stored - (window - 1) if getattr(layer, "record_past", False) and window else 0
            if remove > spare:
                return (
                    f"layer {index} ({type(layer).__name__}) is a sliding-window layer (window {window}) that has "
                    f"seen {seen} tokens but keeps only the last {stored}; removing {remove} would leave the next "
                    f"tokens without keys it has already dropped"
                )
    return None


def crop_cache(cache: Cache, length: int) -> None:
    """Roll ``cache`` back in place to its first ``length`` tokens (the rollback after a rejected draft).

    Written as ``crop(-(current - length))`` (remove that many tokens), the form every transformers 5.x accepts.
    Refuses (`ConfigError`) a cache that cannot restore its earlier state — a sliding-window layer that dropped
    keys the rollback needs, a quantized or recurrent cache — instead of failing deep inside transformers or
    decoding wrongly.
    """
    current = cache_length(cache)
    if length < 0 or length > current:
        raise ConfigError(
            f"Cannot crop the KV cache to {length} tokens: it holds {current}. "
            f"A crop can only keep between 0 and {current} tokens (it removes tokens, never adds them)."
        )
    if length < current:
        problem = _rollback_problem(cache, current - length)
        if problem is not None:
            raise ConfigError(
                f"Cannot roll the {cache_kind(cache)} back from {current} to {length} tokens: {problem}. "
                "Speculative decoding needs a cache that can drop rejected drafts exactly: build it with "
                "specdec_lib.core.caches.new_cache(model), which puts sliding-window layers in transformers' past "
                "recording mode (activate_past_recording), or use the pre-allocated pointer cache "
                "(new_cache(model, kind='preallocated')). Changing the model's sliding_window would change the model."
            )
        cache.crop(-(current - length))


def rows_repeatable(cache: Cache) -> bool:
    """Whether `repeat_rows` can copy ``cache``'s rows: every layer a plain full-attention `DynamicLayer` (it stores
    nothing but its keys and values; sliding-window and other layers keep more state)."""
    layers = getattr(cache, "layers", [])
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


def repeat_rows(cache: Cache, batch: int) -> None:
    """Turn a cache holding one row into ``batch`` copies of it (every layer's ``[1, H, S, D]`` keys and values
    become ``[batch, H, S, D]``): B identical prompts prefilled once. Only where `rows_repeatable`."""
    for layer in cache.layers:
        layer.keys = layer.keys.expand(batch, -1, -1, -1).contiguous()
        layer.values = layer.values.expand(batch, -1, -1, -1).contiguous()


def compact_cache(cache: Cache, keep_from: int, keep: torch.Tensor) -> None:
    """Keep the first ``keep_from`` tokens and then only the entries at ``keep`` (in order): the rollback after a
    token tree's verification, where the accepted path's keys sit between rejected siblings.

    ``keep: LongTensor[n]``, positions >= ``keep_from``, increasing (a path's nodes, in order). Afterwards the
    cache holds ``keep_from + n`` tokens: entry ``keep_from + j`` is the old entry ``keep[j]``. Keys carry their
    rotary position from the forward that wrote them, so a node kept at its tree depth's position is where its
    own chain would have put it. Only the kept entries move (O(n) per layer, whatever the cache holds). Refuses
    sliding-window and uncroppable layers (their stored rows are not positions).
    """
    current = cache_length(cache)
    keep = keep.to(torch.long).flatten().cpu()
    if keep.numel() and (int(keep.min()) < keep_from or int(keep.max()) >= current or bool((keep.diff() <= 0).any())):
        raise ConfigError(
            f"compact_cache keeps positions in [{keep_from}, {current}) in increasing order, got {keep.tolist()}."
        )
    for index, layer in enumerate(getattr(cache, "layers", [])):
        if getattr(layer, "is_sliding", False) or not getattr(layer, "is_croppable", True):
            raise ConfigError(
                f"Cannot compact layer {index} ({type(layer).__name__}) of the {cache_kind(cache)}: a sliding-window "
                "or uncroppable layer does not store one row per position. Token trees need full-attention layers."
            )
    for layer in cache.layers:
        if isinstance(layer, PreallocatedLayer):
            layer.compact(keep_from, keep)
        else:  # move only the kept entries into place, then cut the tail: O(kept), whatever the cache holds
            index = keep.to(layer.keys.device)
            end = keep_from + index.numel()
            layer.keys[..., keep_from:end, :] = layer.keys.index_select(-2, index)
            layer.values[..., keep_from:end, :] = layer.values.index_select(-2, index)
            layer.keys, layer.values = layer.keys[..., :end, :], layer.values[..., :end, :]


class PreallocatedLayer(DynamicLayer):
    """One layer's keys and values in storage ``[batch, kv_heads, max_len, head_dim]`` plus a length pointer.

    ``self.keys`` / ``self.values`` are always the views ``storage[:, :, :length]`` (what transformers and the
    memory accounting read); ``self.key_storage`` / ``self.value_storage`` are the allocated tensors.
    """

    is_sliding = False
    is_croppable = True
    is_compileable = False

    def __init__(self, max_len: int) -> None:
        super().__init__()
        if max_len < 1:
            raise ConfigError(f"A pre-allocated cache needs max_len >= 1 positions, got {max_len}.")
        self.max_len = max_len
        self.length = 0  # the pointer: tokens in use
        self.key_storage: torch.Tensor | None = None
        self.value_storage: torch.Tensor | None = None

    def allocate(self, batch: int, kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device) -> None:
        """Allocate the storage for ``max_len`` positions now (otherwise done by the first `update`)."""
        shape = (batch, kv_heads, self.max_len, head_dim)
        self.device = torch.device(device)
        self.key_storage = torch.zeros(shape, dtype=dtype, device=self.device)
        self.value_storage = torch.zeros(shape, dtype=dtype, device=self.device)
        self.length = 0
        self._refresh_views()
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        batch, kv_heads, _, head_dim = key_states.shape
        self.allocate(batch, kv_heads, head_dim, key_states.dtype, key_states.device)

    def _refresh_views(self) -> None:
        self.keys = self.key_storage[:, :, : self.length]  # [B, H_kv, length, D] views, no copy
        self.values = self.value_storage[:, :, : self.length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Write the new ``[B, H_kv, T, D]`` keys/values at the pointer, advance it, return the in-use views."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        new = key_states.shape[-2]
        if self.length + new > self.max_len:
            raise ContextOverflowError(
                f"The pre-allocated KV cache holds {self.max_len} positions; {self.length} are in use and "
                f"{new} more do not fit. Allocate it for a longer context (max_len) or generate fewer tokens."
            )
        self.key_storage[:, :, self.length : self.length + new] = key_states
        self.value_storage[:, :, self.length : self.length + new] = value_states
        self.length += new
        self._refresh_views()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def compact(self, keep_from: int, keep: torch.Tensor) -> None:
        """Move the rows at ``keep`` to ``keep_from ..`` and point the length after them (`compact_cache`)."""
        index = keep.to(self.key_storage.device)
        kept = index.numel()
        self.key_storage[:, :, keep_from : keep_from + kept] = self.key_storage.index_select(2, index)
        self.value_storage[:, :, keep_from : keep_from + kept] = self.value_storage.index_select(2, index)
        self.length = keep_from + kept
        self._refresh_views()

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0  # (kv_length, kv_offset) seen by the forward being prepared

    def get_max_length(self) -> int:
        return self.max_len

    def crop(self, tokens_to_remove: int) -> None:
        """Rollback: move the pointer back ``-tokens_to_remove`` tokens (a negative count, the form `crop_cache` uses)."""
        if tokens_to_remove > 0:
            raise ConfigError(
                f"PreallocatedLayer.crop takes a negative count of tokens to remove, got {tokens_to_remove}. "
                "Roll back with specdec_lib.core.caches.crop_cache(cache, length)."
            )
        self.length = max(self.length - abs(tokens_to_remove), 0)
        if self.is_initialized:
            self._refresh_views()

    def reset(self) -> None:
        self.length = 0
        if self.is_initialized:
            self._refresh_views()

    def batch_repeat_interleave(self, repeats: int) -> None:
        raise ConfigError("PreallocatedCache supports batch size 1 only (no beam search).")

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        raise ConfigError("PreallocatedCache supports batch size 1 only (no beam search).")


class PreallocatedCache(Cache):
    """A KV cache allocated once for ``max_len`` positions per layer; `crop` only moves the length pointers.

    ``PreallocatedCache(num_layers, max_len)`` allocates lazily on the first forward; `for_model` allocates
    eagerly from the model config (``[1, kv_heads, context, head_dim]`` per layer, keys and values).
    """

    def __init__(self, num_layers: int, max_len: int) -> None:
        super().__init__(layers=[PreallocatedLayer(max_len) for _ in range(num_layers)])

    @classmethod
    def for_model(cls, model: PreTrainedModel, max_len: int | None = None) -> "PreallocatedCache":
        """A cache for ``model`` with storage for ``max_len`` slots (default: the whole context) allocated now. Slots,
        not positions: a token tree's forward writes one slot per node, although its nodes share positions."""
        shape = kv_shape(model)
        max_len = shape["context"] if max_len is None else int(max_len)  # slots: a token tree takes more than positions
        cache = cls(shape["layers"], max_len)
        dtype = next(model.parameters()).dtype
        for layer in cache.layers:
            layer.allocate(1, shape["kv_heads"], shape["head_dim"], dtype, model.device)
        return cache

    @property
    def length(self) -> int:
        """The pointer: tokens in use (the same in every layer)."""
        return self.layers[0].length if self.layers else 0

    def __iter__(self):
        for layer in self.layers:
            yield layer.keys, layer.values, None


def kv_shape(model: PreTrainedModel) -> dict[str, int]:
    """Layers, KV heads, head dim and context of ``model``: one layer's keys are ``[1, kv_heads, T, head_dim]``."""
    config = model.config.get_text_config(decoder=True) if hasattr(model.config, "get_text_config") else model.config
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return {"layers": config.num_hidden_layers, "kv_heads": kv_heads, "head_dim": head_dim,
            "context": context_length(model)}
