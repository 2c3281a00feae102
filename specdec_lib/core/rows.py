"""A model and its KV cache for B rows: the state the round engine keeps for the target, and the model drafters for
their draft model.

Speculative decoding appends a block of tokens to a model's cache in one forward, then rolls the cache back past
the first rejected draft; in a batch every row keeps a different number. `CachedRows` does that bookkeeping once:

    cache      one transformers Cache of S slots per row (the batch is one tensor, so every row has S slots)
    mask       BoolTensor[B, S]: which slots hold a real token of that row; None while every slot of every row
               does (one row, or rows that never diverged), and the forward is then the plain causal one
    forward    append T slots per row; ``valid: BoolTensor[B, T]`` marks the real ones, the others are holes
    (prefill)  B copies of one prompt (n samples of it) are read once, and the keys and values copied to every row
    roll_back  row b keeps its first ``keep[b]`` real slots (`truncate`): the rollback past rejected drafts; after
               a token tree (one row), the accepted path first moves next to the committed slots (`keep_path`)
    select     only some rows go on (finished rows leave the batch)

**Slots and holes.** A *hole* is a slot whose mask is 0: left padding of a shorter prompt, a rejected draft, the
padding of a shorter draft. No real token attends to a hole, and positions count real slots only (``cumsum(mask) -
1``), so each row's tokens get exactly the positions, hence the rotary phases, they would get alone:

    prompts   [5 17 42 3]   [9 4]          mask [1 1 1 1]   positions 0 1 2 3
                                                [0 0 1 1]             0 0 0 1     (padding: position 0, never read)
    a round   c d1 d2       z e1 --         row 1 keeps d1, row 2 rejects e1: the later slots of each become holes

Slots that are holes in every row are removed (a crop at the tail, a compaction otherwise), so the cache grows by
the longest block kept per round, not by the widest draft. ``kind="none"`` keeps no cache at all: every forward
re-reads the whole sequence (the baseline that shows what a KV cache saves). Positions and masks are built by
`specdec_lib.core.forward.forward_with_cache` (holes included: this class passes it which slots are real).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel

from .caches import cache_length, compact_cache, crop_cache, new_cache, repeat_rows, rows_repeatable
from .errors import ConfigError
from .forward import forward_with_cache

PAD_ID = 0  # the id fed into holes; any id the model can read would do, since no real token attends to a hole
ROW_KINDS = ("dynamic", "preallocated", "none")


def left_pad(prompts: Sequence[torch.Tensor], pad_id: int = PAD_ID) -> tuple[torch.Tensor, torch.Tensor | None]:
    """B prompts (``LongTensor[T_b]`` or ``[1, T_b]``) left-padded to ``input_ids: LongTensor[B, T]``, ``T = max T_b``
    (every last prompt token in the last column, so one ``logits_to_keep=1`` forward gives every row's next token),
    and ``valid: BoolTensor[B, T]`` (False on the padding; None when no row is padded)."""
    rows = [prompt.reshape(-1) for prompt in prompts]
    width = max(row.shape[0] for row in rows)
    if all(row.shape[0] == width for row in rows):
        return torch.stack(rows), None
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long, device=rows[0].device)
    for b, row in enumerate(rows):
        input_ids[b, width - row.shape[0]:] = row
    lengths = torch.tensor([row.shape[0] for row in rows], device=rows[0].device)
    return input_ids, torch.arange(width, device=rows[0].device) >= width - lengths[:, None]


class CachedRows:
    """``model`` with a KV cache for ``batch`` rows (module docstring). ``kind``: ``"dynamic"`` (default),
    ``"preallocated"`` (one row; ``max_len`` slots allocated now, `specdec_lib.core.caches`) or ``"none"`` (one row,
    no cache: every forward re-reads the whole sequence)."""

    def __init__(self, model: PreTrainedModel, batch: int = 1, *, kind: str = "dynamic",
                 max_len: int | None = None) -> None:
        if kind not in ROW_KINDS:
            raise ConfigError(f"cache kind must be one of {ROW_KINDS}, got {kind!r}.")
        if kind != "dynamic" and batch != 1:
            raise ConfigError(f"A {kind!r} cache holds one row; use cache_kind='dynamic' for a batch of {batch}.")
        self.model, self.batch, self.kind = model, batch, kind
        self.cache = None if kind == "none" else new_cache(model, kind, max_len=max_len)
        self.fed = torch.empty(1, 0, dtype=torch.long, device=model.device)  # kind "none": what was read so far
        self.mask: torch.Tensor | None = None  # [B, S] once some row holds a hole

    @property
    def capacity(self) -> int | None:
        """The slots a pre-allocated cache holds (None: a dynamic cache grows, no cache holds nothing)."""
        return self.cache.layers[0].max_len if self.kind == "preallocated" else None

    def rewind(self) -> None:
        """Forget every slot (a new generation reusing the storage: a pre-allocated cache only moves its pointer)."""
        if self.cache is not None and self.slots:
            crop_cache(self.cache, 0)
        self.fed, self.mask = self.fed[:, :0], None

    @property
    def slots(self) -> int:
        """S: slots per row (real or holes)."""
        return self.fed.shape[1] if self.cache is None else cache_length(self.cache)

    @property
    def real(self) -> torch.Tensor:
        """``LongTensor[B]``: the real slots of each row (= that row's tokens in the cache = its next position)."""
        if self.mask is None:
            return torch.full((self.batch,), self.slots, dtype=torch.long, device=self.model.device)
        return self.mask.sum(dim=1)

    def forward(self, input_ids: torch.Tensor, valid: torch.Tensor | None = None, *, logits_to_keep: int | None = None,
                tree_parents: Sequence[int] | None = None, tree_first: int = 0,
                hidden: Sequence[int] | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`forward_with_cache` on this cache: append ``input_ids: LongTensor[B, T]`` (``valid: BoolTensor[B, T]``:
        the real tokens, None: all of them) and return float32 logits ``[B, T_keep, V]`` of the last
        ``logits_to_keep`` columns (all T when None) and, with ``hidden``, the hidden states at those layers (``[B,
        T, len(hidden) * D]``, else None). ``tree_parents``, ``tree_first``: a token tree (one row), as in
        `forward_with_cache`. What is kept here is which slots are holes; the positions and masks that follow from
        them are built there."""
        batch, width = input_ids.shape
        if self.cache is None:  # no cache: read everything again, keep the logits of the new positions
            self.fed = torch.cat([self.fed, input_ids], dim=1)
            logits, states = self._run(self.fed, logits_to_keep=logits_to_keep or width, hidden=hidden)
            return logits, None if states is None else states[:, -width:]
        if (batch > 1 and self.slots == 0 and valid is None and tree_parents is None and rows_repeatable(self.cache)
                and bool((input_ids == input_ids[:1]).all())):
            return self._prefill_once(input_ids, logits_to_keep, hidden)
        if self.mask is not None or (valid is not None and not bool(valid.all())):  # some slot is a hole
            previous = self.mask if self.mask is not None else input_ids.new_ones(batch, self.slots, dtype=torch.bool)
            new = input_ids.new_ones(batch, width, dtype=torch.bool) if valid is None else valid
            self.mask = torch.cat([previous, new], dim=1)  # [B, S + T]
        return self._run(input_ids, logits_to_keep=logits_to_keep, attention_mask=self.mask, tree_parents=tree_parents,
                         tree_first=tree_first, hidden=hidden)

    def _run(self, input_ids: torch.Tensor, *, hidden: Sequence[int] | None,
             **options) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`forward_with_cache` on this model and cache, as ``(logits, hidden states or None)``."""
        output = forward_with_cache(self.model, input_ids, self.cache, hidden=hidden, **options)
        return output if hidden else (output, None)

    def _prefill_once(self, input_ids: torch.Tensor, logits_to_keep: int | None,
                      hidden: Sequence[int] | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Prefill B identical rows ``input_ids: [B, T]`` by one forward of the first and copies of its keys, values,
        logits and hidden states: the numbers a B-row forward computes (every row reads the same tokens at the same
        positions), for 1/B of its cost."""
        batch = input_ids.shape[0]
        logits, states = self._run(input_ids[:1], logits_to_keep=logits_to_keep, hidden=hidden)
        repeat_rows(self.cache, batch)
        return logits.expand(batch, -1, -1).contiguous(), None if states is None else states.expand(batch, -1, -1)

    def roll_back(self, keep: Sequence[int], tree_path: tuple[int, Sequence[int]] | None = None) -> None:
        """After a round: row b keeps its first ``keep[b]`` real slots. ``tree_path=(first, slots)``: the round
        verified a token tree (one row) and the accepted path's entries sit at ``slots`` between rejected
        siblings: they move to ``first ..`` before the crop."""
        if tree_path is not None:
            self.keep_path(*tree_path)
        self.truncate(keep)

    def truncate(self, keep: Sequence[int] | torch.Tensor) -> None:
        """Row b keeps its first ``keep[b]`` real slots; later ones become holes (nothing changes where it holds no
        more). Rows without holes that keep the same count (always the case for one row): a plain crop."""
        if self.mask is None:
            counts = keep.tolist() if isinstance(keep, torch.Tensor) else list(keep)
            if len(set(counts)) == 1:
                if counts[0] < self.slots:
                    if self.cache is None:
                        self.fed = self.fed[:, : counts[0]]
                    else:
                        crop_cache(self.cache, counts[0])
                return
            self.mask = torch.ones(self.batch, self.slots, dtype=torch.bool, device=self.model.device)
        keep = torch.as_tensor(keep, device=self.mask.device)
        rank = self.mask.long().cumsum(dim=1)  # [B, S]: 1-based rank of each real slot in its row
        self.mask = self.mask & (rank <= keep[:, None])
        self._drop_empty_slots()

    def keep_path(self, keep_from: int, path_slots: Sequence[int]) -> None:
        """(one row) Keep the first ``keep_from`` slots and then the slots ``path_slots`` (increasing, all ``>=
        keep_from``), moved to ``keep_from ..``: the rollback after a token tree (`caches.compact_cache`, which moves
        only the path's entries)."""
        compact_cache(self.cache, keep_from, torch.tensor(list(path_slots), dtype=torch.long))

    def select(self, rows: torch.Tensor) -> None:
        """Keep only the rows ``rows: LongTensor[B']`` (batch indices, in order)."""
        self.cache.batch_select_indices(rows)
        self.batch = rows.numel()
        if self.mask is not None:
            self.mask = self.mask[rows]
            self._drop_empty_slots()

    def _drop_empty_slots(self) -> None:
        """Remove the slots that are holes in every row (a crop when they are all at the end, else a compaction);
        with no hole left, forget the mask (back to the plain causal forward)."""
        used = self.mask.any(dim=0)  # [S]
        if not bool(used.all()):
            kept = used.nonzero()[:, 0]  # [S'] increasing
            if int(kept[-1]) + 1 == kept.numel():  # only a tail of empty slots
                crop_cache(self.cache, kept.numel())
            else:
                compact_cache(self.cache, 0, kept)
            self.mask = self.mask[:, kept]
        if bool(self.mask.all()):
            self.mask = None
