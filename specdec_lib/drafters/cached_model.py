"""A model, its KV cache and the token ids the cache holds: the state every model-based drafter keeps.

A drafter's model reads the committed sequence once and then only what is new, so it keeps a KV cache across
rounds; after each round the cache must be rolled back past the drafts the target rejected. `CachedModel` does
that bookkeeping in one place:

    ids:    [x_1 ... x_C]                   the ids whose keys/values are in the cache (C = `length`)
    sync:   crop to the longest prefix of ids that agrees with the new context, return what the cache lacks
    feed:   one forward over new ids after the cache, append them, return the logits of the last position
    crop:   keep the first n ids (the rollback)
    compact: keep the first n ids and then chosen later ones (the rollback after a token tree)

Only ids after `trusted` (those fed since the drafter last confirmed them with `trust`) are compared in `sync`,
so a round costs O(new ids), not O(sequence length), while a caller that forgot to roll back is still caught.
"""

import torch
from transformers import PreTrainedModel

from ..core.caches import PreallocatedCache, compact_cache, crop_cache, new_cache
from ..core.forward import context_length, forward_with_cache


class CachedModel:
    """``model`` with its KV cache (``kind``: ``"dynamic"`` or ``"preallocated"``, see `new_cache`) and the ids in it.

    Call `reset` at the start of every generation (a first `sync` without one resets for the whole context). The
    ids live in a ``LongTensor[max_len]`` buffer on the model's device, so appending drafted tokens never moves
    them to the host.
    """

    def __init__(self, model: PreTrainedModel, kind: str = "dynamic") -> None:
        self.model, self.kind = model, kind
        self.max_positions = context_length(model)
        self.cache = None
        self._ids = torch.empty(0, dtype=torch.long, device=model.device)
        self.length = 0  # C: ids in the cache
        self.trusted = 0  # ids[:trusted] are known to agree with the caller's context

    def reset(self, max_len: int | None = None) -> None:
        """Empty the cache for a new generation that needs at most ``max_len`` positions (default: the context).

        A pre-allocated cache is reused when its storage is large enough (emptying it only moves its pointer)."""
        max_len = self.max_positions if max_len is None else min(int(max_len), self.max_positions)
        if isinstance(self.cache, PreallocatedCache) and self.cache.layers[0].max_len >= max_len:
            crop_cache(self.cache, 0)
        else:
            self.cache = new_cache(self.model, self.kind, max_len=max_len)
        if self._ids.numel() < max_len:
            self._ids = torch.empty(max_len, dtype=torch.long, device=self.model.device)
        self.length = self.trusted = 0

    @property
    def ids(self) -> torch.Tensor:
        """``LongTensor[C]``: the ids whose keys and values the cache holds (a view)."""
        return self._ids[: self.length]

    def crop(self, keep: int) -> None:
        """Roll back to the first ``keep`` ids (no-op if the cache holds no more)."""
        if keep < self.length:
            crop_cache(self.cache, keep)
            self.length = keep
        self.trusted = min(self.trusted, self.length)

    def compact(self, keep_from: int, keep: torch.Tensor) -> None:
        """Keep the first ``keep_from`` ids and then those at positions ``keep: LongTensor[n]`` (increasing, all
        ``>= keep_from``): the rollback after a token tree, whose accepted path sits between rejected siblings."""
        keep = keep.to(self._ids.device)
        compact_cache(self.cache, keep_from, keep)
        self._ids[keep_from : keep_from + keep.numel()] = self._ids[keep].clone()
        self.length = keep_from + keep.numel()
        self.trusted = min(self.trusted, keep_from)

    def trust(self, count: int) -> None:
        """Vouch that the first ``count`` held ids agree with every context `sync` will see (after a rollback)."""
        self.trusted = min(count, self.length)

    def sync(self, context: torch.Tensor) -> torch.Tensor:
        """Roll back to the longest prefix of the held ids that agrees with ``context: LongTensor[L]`` (at most
        ``L - 1`` ids, so that at least one is left to feed) and return the ids the cache lacks, ``context[C:]``."""
        if self.cache is None:
            self.reset()
        limit = min(self.length, context.shape[0] - 1)
        start = min(self.trusted, limit)
        keep = limit
        if limit > start:
            mismatch = (self._ids[start:limit] != context[start:limit]).nonzero()
            if mismatch.numel():
                keep = start + int(mismatch[0, 0])
        self.crop(keep)
        return context[self.length :]

    def feed(self, ids: torch.Tensor) -> torch.Tensor:
        """Run the model on ``ids: LongTensor[T]`` after the cache; returns the float32 logits ``[V]`` that follow."""
        logits = forward_with_cache(self.model, ids.view(1, -1), self.cache, logits_to_keep=1)[0, -1]
        self._append(ids)
        return logits

    def feed_tree(self, ids: torch.Tensor, parents: list[int], first: int) -> torch.Tensor:
        """Run the model on tree positions ``first .. N`` (``ids: LongTensor[N + 1 - first]``; the root and the
        ``first - 1`` nodes before them are the cache's last ids), with the tree's positions and attention mask
        (`specdec_lib.core.trees`). Returns the float32 logits ``[N + 1 - first, V]``, one row per fed position."""
        logits = forward_with_cache(self.model, ids.view(1, -1), self.cache, tree_parents=parents, tree_first=first)[0]
        self._append(ids)
        return logits

    def _append(self, ids: torch.Tensor) -> None:
        count = ids.shape[0]
        if self.length + count > self._ids.numel():  # a caller that outgrew its reset(max_len)
            extra = torch.empty(count + self._ids.numel(), dtype=torch.long, device=self._ids.device)
            self._ids = torch.cat([self._ids, extra])
        self._ids[self.length : self.length + count] = ids
        self.length += count
