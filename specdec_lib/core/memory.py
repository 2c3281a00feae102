"""Memory accounting: what the weights and the KV caches of the target *and the draft* hold, in bytes.

Speculative decoding is not free in memory: the draft model's weights and its own KV cache sit next to the
target's. For a decoder with ``layers`` layers, ``kv_heads`` key/value heads of size ``head_dim``, one token
costs in the KV cache

    bytes per token = 2 (keys and values) * layers * kv_heads * head_dim * bytes per element

so a cache for the whole context costs ``context * bytes per token``; a pre-allocated cache holds that from the
start, a `DynamicCache` grows towards it.
"""

from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from .caches import kv_shape


def weight_bytes(model: PreTrainedModel) -> int:
    """Bytes held by ``model``'s parameters and buffers (tied weights counted once)."""
    seen: set[int] = set()
    total = 0
    for tensor in list(model.parameters()) + list(model.buffers()):
        if tensor.data_ptr() in seen:
            continue
        seen.add(tensor.data_ptr())
        total += tensor.numel() * tensor.element_size()
    return total


def _kv_tensors(cache) -> list[torch.Tensor]:
    tensors = []
    for layer in getattr(cache, "layers", []):
        for name in ("keys", "values"):
            tensor = getattr(layer, name, None)
            if isinstance(tensor, torch.Tensor):
                tensors.append(tensor)
    return tensors


@dataclass(frozen=True)
class CacheBytes:
    """``in_use``: bytes of the keys/values the cache currently exposes (its length); ``allocated``: bytes of the
    storage behind them (a pre-allocated cache's full buffers; a cropped DynamicCache's views keep their old,
    larger tensor alive until the next forward replaces it)."""

    in_use: int
    allocated: int


def cache_bytes(cache) -> CacheBytes:
    """Bytes held by the key and value tensors of ``cache`` (a `DynamicCache`, `PreallocatedCache`, ...)."""
    in_use = 0
    storages: dict[int, int] = {}
    for layer in getattr(cache, "layers", []):
        for name in ("key_storage", "value_storage"):  # pre-allocated layers: the buffers themselves
            tensor = getattr(layer, name, None)
            if isinstance(tensor, torch.Tensor):
                storage = tensor.untyped_storage()
                storages[storage.data_ptr()] = storage.nbytes()
    for tensor in _kv_tensors(cache):
        in_use += tensor.numel() * tensor.element_size()
        if tensor.numel():
            storage = tensor.untyped_storage()
            storages.setdefault(storage.data_ptr(), storage.nbytes())
    return CacheBytes(in_use=in_use, allocated=sum(storages.values()))


def kv_bytes_per_token(model: PreTrainedModel, dtype: torch.dtype | None = None) -> int:
    """KV-cache bytes one token costs in ``model``: ``2 * layers * kv_heads * head_dim * element size``."""
    shape = kv_shape(model)
    dtype = dtype or next(model.parameters()).dtype
    element = torch.empty((), dtype=dtype).element_size()
    return 2 * shape["layers"] * shape["kv_heads"] * shape["head_dim"] * element


def kv_cache_bytes_at(model: PreTrainedModel, tokens: int | None = None) -> int:
    """KV-cache bytes for ``tokens`` positions of ``model`` (default: its whole context)."""
    tokens = kv_shape(model)["context"] if tokens is None else tokens
    return tokens * kv_bytes_per_token(model)


@dataclass(frozen=True)
class MemoryReport:
    """Bytes of the weights and of a full-context KV cache for the target and the draft."""

    target_weights: int
    draft_weights: int
    target_cache: int
    draft_cache: int
    tokens: int  # positions the caches are sized for

    @property
    def target_total(self) -> int:
        return self.target_weights + self.target_cache

    @property
    def draft_total(self) -> int:
        return self.draft_weights + self.draft_cache

    @property
    def total(self) -> int:
        return self.target_total + self.draft_total

    @property
    def draft_overhead(self) -> float:
        """What the draft adds on top of the target alone, as a fraction of the target's bytes."""
        return self.draft_total / self.target_total

    def rows(self) -> list[dict[str, object]]:
        """The report as table rows (model, weights, KV cache, total in bytes)."""
        return [
            {"model": "target", "weights": self.target_weights, "kv_cache": self.target_cache, "total": self.target_total},
            {"model": "draft", "weights": self.draft_weights, "kv_cache": self.draft_cache, "total": self.draft_total},
            {"model": "both", "weights": self.target_weights + self.draft_weights,
             "kv_cache": self.target_cache + self.draft_cache, "total": self.total},
        ]


def memory_report(target: PreTrainedModel, draft: PreTrainedModel, tokens: int | None = None) -> MemoryReport:
    """Weights plus KV caches for ``tokens`` positions (default: the target's whole context) of both models."""
    tokens = kv_shape(target)["context"] if tokens is None else tokens
    return MemoryReport(
        target_weights=weight_bytes(target),
        draft_weights=weight_bytes(draft),
        target_cache=kv_cache_bytes_at(target, tokens),
        draft_cache=kv_cache_bytes_at(draft, tokens),
        tokens=tokens,
    )


def format_bytes(count: float) -> str:
    """``1536`` -> ``'1.5 KiB'`` (binary units)."""
    if abs(count) < 1024:
        return f"{count:.0f} B"
    for unit in ("KiB", "MiB", "GiB"):
        count /= 1024
        if abs(count) < 1024 or unit == "GiB":
            return f"{count:.1f} {unit}"
