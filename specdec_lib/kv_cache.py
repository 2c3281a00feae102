"""A pre-allocated KV cache whose rollback only moves a length pointer.

transformers' `DynamicCache` grows every layer with ``torch.cat`` (a new, larger tensor per forward) and rolls
back by slicing. The classic alternative, used by serving engines, allocates each layer's storage **once**, for
the model's whole context, and keeps a **length pointer**:

    storage (per layer, keys and values):  [1, kv_heads, max_len, head_dim]   allocated once
    in use:                                [:, :, :length]                   a view, no copy
    append T tokens:                       storage[:, :, length:length + T] = new;  length += T
    rollback to n tokens:                  length = n        (the stale rows stay, the next append overwrites them)

`PreallocatedCache` is a transformers `Cache` made of `PreallocatedLayer` s (a `DynamicLayer` subclass written
against the 5.24 layer API: ``update`` / ``get_seq_length`` / ``get_mask_sizes`` / ``crop``), so it plugs into
`specdec_lib.modeling.forward_with_cache` like a `DynamicCache`: build it with ``new_cache(model, kind="preallocated")``.
"""

import torch
from transformers import PreTrainedModel
from transformers.cache_utils import Cache, DynamicLayer

from .errors import ConfigError, ContextOverflowError
from .modeling import context_length


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

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0  # (kv_length, kv_offset) seen by the forward being prepared

    def get_max_length(self) -> int:
        return self.max_len

    def crop(self, tokens_to_remove: int) -> None:
        """Rollback: move the pointer back ``-tokens_to_remove`` tokens (a negative count, the form `crop_cache` uses)."""
        if tokens_to_remove > 0:
            raise ConfigError(
                f"PreallocatedLayer.crop takes a negative count of tokens to remove, got {tokens_to_remove}. "
                "Roll back with specdec_lib.modeling.crop_cache(cache, length)."
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
        """A cache for ``model`` with storage for ``max_len`` (default: the whole context) allocated now."""
        shape = kv_shape(model)
        max_len = shape["context"] if max_len is None else int(max_len)
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
