"""The clock, the per-row traces and the KV-cache peaks of one generation, written beside the round engine.

The engine calls a `Recorder` at its phase boundaries and nothing else; everything that times, counts or measures
memory lives here. Host synchronisations (what a GPU waits for) per round: one, just before the verification
forward, so that drafting time and verifying time can be told apart; the other clock reads follow the read-back of
the verdict, which already waited, so they do not wait again:

    round_start                      the previous round's end (no clock read; the first round: the start)
    drafted()        wait + clock    drafting ends here (and the draft's KV cache is measured, with record_memory)
    verified()       clock           the verdict was read back: the target's forward and the decision are done
    round_done()     clock           rollback and the drafter's accept are counted in the next round's drafting

A round's ``draft_time`` is (drafted - round_start) + (round end - verified), its ``verify_time`` verified -
drafted, and its emitted tokens became available at ``verified``.
"""

from __future__ import annotations

import time

import torch

from .devices import synchronize
from .memory import cache_bytes
from .trace import RoundRecord, Trace


class Recorder:
    """Per-row `Trace` s of a generation of ``batch`` rows on ``device`` (module docstring). ``record_memory``: also
    measure the bytes the target's KV cache (``"target"``, after each forward, drafts included) and the drafter's
    (``"draft"``, for drafters exposing a ``cache``) allocate, keeping the peaks in every trace's ``peak_kv_bytes``;
    off by default, because it walks every cache layer twice a round."""

    def __init__(self, device: torch.device, batch: int, *, record_memory: bool = False) -> None:
        self.device, self.record_memory = device, record_memory
        synchronize(device)  # the clock starts once the device has finished queued work
        self.start = time.perf_counter()
        self.traces = [Trace(start_time=self.start) for _ in range(batch)]
        self.round_start = self.drafted_at = self.verified_at = 0.0

    def now(self, *, wait: bool = False) -> float:
        """Seconds since the start; ``wait=True`` first waits for the device, so GPU work is counted when it ends."""
        if wait:
            synchronize(self.device)
        return time.perf_counter() - self.start

    def _note_memory(self, rows, drafter) -> None:
        peaks = {}
        if rows is not None and rows.cache is not None:
            peaks["target"] = cache_bytes(rows.cache).allocated
        if getattr(drafter, "cache", None) is not None:
            peaks["draft"] = cache_bytes(drafter.cache).allocated
        for trace in self.traces:
            for name, allocated in peaks.items():
                trace.note_kv_bytes(name, allocated)

    def drafted(self, drafter) -> None:
        """Drafting has ended: the round's one wait for the device."""
        if self.record_memory:
            self._note_memory(None, drafter)
        self.drafted_at = self.now(wait=True)

    def verified(self, rows) -> None:
        """The verdict was read back (the target's forward is done); the cache still holds the drafts: its peak."""
        self.verified_at = self.now()
        if self.record_memory:
            self._note_memory(rows, None)

    def round_done(self, rounds: dict[int, RoundRecord], draft_forwards: int) -> None:
        """The round is over (caches rolled back, the drafter told): each row's record (``rounds``: row index ->
        what it did, from the engine's commit) gets the round's times and draft forwards and joins the row's trace."""
        end = self.now()
        draft_time = (self.drafted_at - self.round_start) + (end - self.verified_at)
        verify_time = self.verified_at - self.drafted_at
        for row, record in rounds.items():
            record.draft_time, record.verify_time, record.draft_forwards = draft_time, verify_time, draft_forwards
            trace = self.traces[row]
            if not trace.rounds:  # the first round read the prompt: its end is the time to the first token
                trace.prefill_time = self.verified_at
            trace.add_round(record, self.verified_at)
        self.round_start = end
