"""Where the time goes: extra passes, after the timed repeats, with every model forward timed by hooks.

**Profile** (`profile_method`): one more pass of our best gamma with every draft and target forward timed by hooks
(`time_forwards`) splits its time into draft forwards, target forwards (verification) and the rest (the acceptance
test, cache bookkeeping, Python). The traces cannot give that split: their rounds tile the whole loop, so
bookkeeping is folded into their draft and verify phases.

**Drafter overhead** (`drafter_overhead`; column ``ovh/rnd``, only when a cross pair is given): one more pass of each
of our speculative methods (same-tokenizer and cross) with the drafter wrapped in `TimedDrafter`, which times its
public ``propose`` and ``accept`` calls (device synchronized at both ends), while `time_forwards` times every
forward of the draft model inside them. ``overhead = propose + accept - draft forwards``, per round (one
``propose`` per verification round). For ``speculative-cross`` that is the text translation (decode the committed
target ids, re-encode them for the draft with the lookbehind window, decode the draft's tokens, re-encode them for
the target with the boundary alignment) plus the bookkeeping every drafter has (argmax, cache crops); for
``speculative`` it is that bookkeeping alone, so the difference of the two is the translation's cost. The forward
intervals lie inside the propose intervals, so the overhead is never negative.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

from ..core.devices import synchronize
from ..core.drafting import Context, Draft, Drafter, WrappedDrafter
from ..core.sampling import SamplingConfig
from .methods import Method, Speculative
from .protocol import timed_run


@contextmanager
def time_forwards(models: dict[str, torch.nn.Module], device: torch.device | str) -> Iterator[dict[str, float]]:
    """Sum the seconds spent inside each model's forward (``{role: seconds}``, live), with a pre-hook and a hook
    around every call (the device synchronized at both ends); the hooks are removed on exit."""
    seconds = {role: 0.0 for role in models}
    started: dict[str, float] = {}
    handles = []
    for role, model in models.items():

        def before(module, args, role=role):  # noqa: ARG001
            synchronize(device)
            started[role] = time.perf_counter()

        def after(module, args, output, role=role):  # noqa: ARG001
            synchronize(device)
            seconds[role] += time.perf_counter() - started[role]

        handles += [model.register_forward_pre_hook(before), model.register_forward_hook(after)]
    try:
        yield seconds
    finally:
        for handle in handles:
            handle.remove()


def profile_method(
    method: Method,
    prompts: Sequence[torch.Tensor],
    *,
    draft: torch.nn.Module,
    target: torch.nn.Module,
    device: torch.device | str = "cpu",
    seeds: Sequence[int | None] | None = None,
) -> dict:
    """Where ``method``'s time goes: one extra pass over ``prompts`` with every forward of ``draft`` and ``target``
    timed by hooks. ``other = total - draft - verify`` is everything outside the two models' forwards: the
    acceptance test, argmax (or the sampling draws), cache crops, concatenations, Python overhead (and the hooks'
    own few microseconds). ``seeds``: one per prompt (sampling), or None.
    """
    device = torch.device(device)
    seeds = list(seeds) if seeds is not None else [None] * len(prompts)
    total = 0.0
    with torch.inference_mode(), time_forwards({"draft": draft, "target": target}, device) as seconds:
        for input_ids, seed in zip(prompts, seeds):
            total += timed_run(method, input_ids, device, seed).seconds
    draft_s, verify_s = seconds["draft"], seconds["target"]
    other_s = total - draft_s - verify_s
    return {
        "method": method.name,
        "gamma": method.gamma,
        "total_s": total,
        "draft_s": draft_s,
        "verify_s": verify_s,
        "other_s": other_s,
        "draft_pct": 100 * draft_s / total if total > 0 else None,
        "verify_pct": 100 * verify_s / total if total > 0 else None,
        "other_pct": 100 * other_s / total if total > 0 else None,
    }


class TimedDrafter(WrappedDrafter):
    """A thin wrapper that times another drafter's public calls: seconds inside ``propose`` and ``accept`` (device
    synchronized before and after each), and the number of ``propose`` calls (one per round that may draft).
    ``calls`` keeps every proposal as ``(seconds, drafted tokens, first of its generation)``: the first proposal
    that drafts also reads the whole prompt (a draft model's tokens, EAGLE's features of it), a prefill rather than
    a draft step; earlier empty proposals (a drafter that reads the target waits for its first forward) count as
    first too. Every other call and attribute
    (``cache``, ``model``) is the wrapped drafter's."""

    def __init__(self, inner: Drafter, device: torch.device | str = "cpu") -> None:
        super().__init__(inner)
        self.sync_device = torch.device(device)
        self.accept_seconds = 0.0
        self.calls: list[tuple[float, int, bool]] = []
        self._first = True

    @property
    def propose_seconds(self) -> float:
        return sum(seconds for seconds, _, _ in self.calls)

    @property
    def proposals(self) -> int:
        return len(self.calls)

    def begin(self, context: Context, **limits) -> None:
        self._first = True
        self.inner.begin(context, **limits)

    def propose(self, context: Context, sampling: SamplingConfig, generator: torch.Generator | None) -> Draft:
        synchronize(self.sync_device)
        start = time.perf_counter()
        draft = self.inner.propose(context, sampling, generator)
        synchronize(self.sync_device)
        self.calls.append((time.perf_counter() - start, len(draft), self._first))
        self._first = self._first and len(draft) == 0  # until one drafts (a drafter reading the target waits a round)
        return draft

    def accept(self, context: Context) -> None:
        synchronize(self.sync_device)
        start = time.perf_counter()
        self.inner.accept(context)
        synchronize(self.sync_device)
        self.accept_seconds += time.perf_counter() - start


def drafter_overhead(
    method: Speculative,
    prompts: Sequence[torch.Tensor],
    *,
    device: torch.device | str = "cpu",
    seeds: Sequence[int | None] | None = None,
) -> dict:
    """The drafter's time outside its draft model's forwards, per round: one extra pass of ``method`` over
    ``prompts`` with its drafter wrapped in `TimedDrafter` and the draft model's forwards timed by `time_forwards`
    (module docstring). Returns seconds and ``overhead_ms_per_round``."""
    device = torch.device(device)
    seeds = list(seeds) if seeds is not None else [None] * len(prompts)
    timed = TimedDrafter(method.drafter, device)
    probe = copy.copy(method)
    probe.drafter = timed
    with torch.inference_mode(), time_forwards({"draft": method.drafter.model}, device) as seconds:
        for input_ids, seed in zip(prompts, seeds):
            timed_run(probe, input_ids, device, seed)
    drafter_s = timed.propose_seconds + timed.accept_seconds
    forward_s = seconds["draft"]
    overhead_s = drafter_s - forward_s
    rounds = timed.proposals
    return {
        "method": "propose + accept (TimedDrafter) - draft-model forwards (time_forwards hooks), one extra pass",
        "rounds": rounds,
        "drafter_s": drafter_s,
        "propose_s": timed.propose_seconds,
        "accept_s": timed.accept_seconds,
        "draft_forward_s": forward_s,
        "overhead_s": overhead_s,
        "overhead_ms_per_round": 1000 * overhead_s / rounds if rounds else None,
        "draft_forward_ms_per_round": 1000 * forward_s / rounds if rounds else None,
    }
