"""A draft model, its KV cache for B rows and the token ids each row's cache holds: the state every model drafter
keeps between rounds.

A drafter's model reads the committed tokens once and then only what is new, so it keeps a KV cache across rounds
(`specdec_lib.core.rows.CachedRows`); after each round the cache must be rolled back past the drafts the target
rejected. `CachedModel` does that bookkeeping in one place:

    ids      row b's cache holds ids[b, :held[b]]
    sync     roll each row back to the longest prefix of what it holds that agrees with the row's committed tokens;
             return, per row, the committed tokens its cache lacks
    feed     one forward over each row's missing tokens (right-aligned in one [B, P] block, the left padding holes)
    step     one forward over one more token per row (a row that needs no more gets a hole)
    crop     row b keeps its first keep[b] ids (the rollback); keep_path: the rollback after a token tree

Only ids after ``trusted[b]`` (those fed since the drafter last confirmed them with `trust`) are compared in `sync`,
so a round costs O(new ids), not O(sequence length), while a caller that forgot to roll back is still caught.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel

from ..core.drafting import Context
from ..core.errors import InputError
from ..core.rows import PAD_ID, CachedRows, left_pad
from ..core.validation import context_length


class CachedModel:
    """``model`` with its KV cache for B rows (``kind``: ``"dynamic"`` or ``"preallocated"``, one row) and the ids in
    it. Call `reset` at the start of every generation."""

    def __init__(self, model: PreTrainedModel, kind: str = "dynamic") -> None:
        self.model, self.kind = model, kind
        self.max_positions = context_length(model)
        self.vocab_size = model.get_input_embeddings().num_embeddings  # ids the model can read
        self.rows: CachedRows | None = None
        self.ids = torch.empty(1, 0, dtype=torch.long, device=model.device)
        self.held: list[int] = []
        self.trusted: list[int] = []

    @property
    def cache(self):
        """The transformers cache (read-only use: memory accounting, tests)."""
        return None if self.rows is None else self.rows.cache

    def reset(self, batch: int = 1, max_len: int | None = None) -> None:
        """Empty the cache for a new generation of ``batch`` rows needing at most ``max_len`` positions."""
        max_len = self.max_positions if max_len is None else min(int(max_len), self.max_positions)
        rows = self.rows
        if rows is not None and rows.batch == batch == 1 and (rows.capacity or 0) >= max_len:
            rows.rewind()  # a pre-allocated cache large enough: keep its storage
        else:
            self.rows = CachedRows(self.model, batch, kind=self.kind if batch == 1 else "dynamic", max_len=max_len)
        self.ids = torch.full((batch, max_len), PAD_ID, dtype=torch.long, device=self.model.device)
        self.held, self.trusted = [0] * batch, [0] * batch

    def sync(self, context: Context, *, check_ids: bool = True) -> list[torch.Tensor]:
        """Roll each row back to the longest prefix of its held ids that agrees with its committed tokens (at most
        ``L_b - 1`` of them, so that at least one is left to feed) and return what each row's cache lacks,
        ``LongTensor[P_b]`` with ``P_b >= 1``. ``check_ids``: refuse ids the model cannot read (skip it when every
        id the target produces is one this model has: the check reads a number back from the device)."""
        if self.rows is None or self.rows.batch != context.batch:
            self.reset(context.batch)
        keep = []
        for b in range(context.batch):
            row = context.row(b).to(self.ids.device)
            limit = min(self.held[b], row.shape[0] - 1)
            start = min(self.trusted[b], limit)
            agreed = limit
            if limit > start:
                mismatch = (self.ids[b, start:limit] != row[start:limit]).nonzero()
                if mismatch.numel():
                    agreed = start + int(mismatch[0, 0])
            keep.append(agreed)
        self.crop(keep)
        pending = [context.row(b)[self.held[b]:].to(self.ids.device) for b in range(context.batch)]
        top = max(int(ids.max()) for ids in pending) if check_ids else -1
        if top >= self.vocab_size:
            raise InputError(f"The sequence contains token id {top}, outside the draft model's vocabulary of "
                             f"{self.vocab_size}. The draft model must cover every id the target can produce.")
        return pending

    def feed(self, pending: Sequence[torch.Tensor]) -> torch.Tensor:
        """One forward over each row's ``pending`` ids after its cache; float32 logits ``[B, V]`` after each row's
        last one (rows' blocks right-aligned, so their last tokens share the last column)."""
        block, valid = left_pad(pending)  # [B, P], [B, P] | None: every row's last id in the last column
        logits, _ = self.rows.forward(block, valid, logits_to_keep=1)
        for b, ids in enumerate(pending):
            self._append(b, ids)
        return logits[:, -1]

    def step(self, tokens: torch.Tensor, needed: Sequence[bool]) -> torch.Tensor:
        """One forward over ``tokens: LongTensor[B]``, one per row; rows whose ``needed`` is False get a hole (they
        drafted all they were asked for). Float32 logits ``[B, V]``."""
        valid = None if all(needed) else torch.tensor(needed, device=self.ids.device)[:, None]
        logits, _ = self.rows.forward(tokens[:, None], valid, logits_to_keep=1)
        for b, need in enumerate(needed):
            if need:
                self._append(b, tokens[b : b + 1])
        return logits[:, -1]

    def feed_tree(self, ids: torch.Tensor, parents: Sequence[int], first: int) -> torch.Tensor:
        """(one row) Tree positions ``first .. N`` (``ids: LongTensor[N + 1 - first]``; the root and the ``first -
        1`` nodes before them are the cache's last ids), with the tree's positions and mask. Float32 logits
        ``[N + 1 - first, V]``, one row per fed position."""
        logits, _ = self.rows.forward(ids[None], tree_parents=parents, tree_first=first)
        self._append(0, ids)
        return logits[0]

    def crop(self, keep: Sequence[int]) -> None:
        """Row b keeps its first ``keep[b]`` ids (nothing changes where it holds no more)."""
        keep = [min(k, held) for k, held in zip(keep, self.held)]
        if keep != self.held:
            self.rows.truncate(keep)
            self.held = keep
        self.trusted = [min(t, h) for t, h in zip(self.trusted, self.held)]

    def keep_path(self, keep_from: int, path_slots: Sequence[int]) -> None:
        """(one row) Keep the first ``keep_from`` ids and then those at ``path_slots`` (increasing): the rollback
        after a token tree, whose accepted path sits between rejected siblings."""
        self.rows.keep_path(keep_from, path_slots)
        if path_slots:
            self.ids[0, keep_from : keep_from + len(path_slots)] = self.ids[0, list(path_slots)].clone()
        self.held = [keep_from + len(path_slots)]
        self.trusted = [min(self.trusted[0], keep_from)]

    def trust(self, counts: Sequence[int]) -> None:
        """Vouch that the first ``counts[b]`` held ids of row b agree with every context `sync` will see."""
        self.trusted = [min(count, held) for count, held in zip(counts, self.held)]

    def select(self, rows: torch.Tensor) -> None:
        """Keep only the rows ``rows: LongTensor[B']`` (the others finished)."""
        self.rows.select(rows)
        kept = rows.tolist()
        self.ids = self.ids[rows]
        self.held = [self.held[b] for b in kept]
        self.trusted = [self.trusted[b] for b in kept]

    def _append(self, b: int, ids: torch.Tensor) -> None:
        count = ids.shape[0]
        if self.held[b] + count > self.ids.shape[1]:  # a caller that outgrew its reset(max_len)
            extra = torch.full((self.ids.shape[0], count + self.ids.shape[1]), PAD_ID, dtype=torch.long,
                               device=self.ids.device)
            self.ids = torch.cat([self.ids, extra], dim=1)
        self.ids[b, self.held[b] : self.held[b] + count] = ids
        self.held[b] += count
