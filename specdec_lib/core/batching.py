"""Batches of prompts: left padding, one KV cache for B rows with a mask of real slots, and the batched baseline.

The rest of the library decodes one sequence at a time. Serving decodes many: one forward over ``B`` rows costs
little more than over one on a GPU (and per-forward overhead is shared on a CPU). This module holds the machinery
every batched method shares, and the plain batched baseline (`batched_autoregressive_generate`) that batched
speculative decoding (`specdec_lib.core.batched_speculative`) is measured against.

**Left padding.** Prompts of different lengths are padded on the left, so that every row's last prompt token sits
in the last column and one ``logits_to_keep=1`` forward gives every row's first new token:

    prompts   [5 17 42 3]   [9 4]              input_ids [B=2, T=4]   attention_mask [2, 4]   position_ids [2, 4]
    padded    [5 17 42 3]                      5 17 42 3              1 1 1 1                 0 1 2 3
              [P  P  9 4]                      P  P  9 4              0 0 1 1                 0 0 0 1

Position ids are ``cumsum(mask) - 1`` per row (clamped at 0 on the padding, which no real token attends to), as
transformers computes them: a row's real tokens get positions ``0, 1, ...`` whatever padding precedes them.

**`BatchedKV`: slots and holes.** One transformers ``DynamicCache`` holds ``S`` *slots* per row (the batch is a
tensor, so every row has the same number); ``mask: BoolTensor[B, S]`` says which slots hold a real token of that
row. A slot whose mask is 0 (a *hole*: left padding, a rejected draft, padding of a ragged block) is never attended
to, and position ids count real slots only, so a row's tokens get exactly the positions (and rotary phases) they
would get alone. Rolling a row back marks its last real slots as holes (`BatchedKV.truncate`); slots that are holes
in every row are removed from the cache (`crop_cache` for a tail, `compact_cache` otherwise), so the cache does not
grow with rejected drafts. Finished rows are dropped from the batch (`BatchedKV.select`), so later forwards run on
the active rows only.

**Where the forward lives.** `specdec_lib.core.forward.forward_with_cache` is batch-1 by contract (its positions come
from the cache length); `batched_forward` is its batched sibling, passing the mask and per-row positions, with the
cache keyword read by the same `forward_keywords`.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from transformers import PreTrainedModel
from transformers.cache_utils import Cache

from .errors import InputError
from .caches import cache_length, compact_cache, crop_cache, new_cache
from .forward import check_fits_context, check_input_ids, forward_keywords, unwrap_compiled
from .sampling import GREEDY, SamplingConfig, logits_to_probs, make_generator, sample_token
from .speculative import check_sampling, first_stop
from .stopping import AUTO, stop_token_ids
from .trace import Trace, inter_token_latencies

PAD_ID = 0  # the id fed into holes; any id the model can read would do, since no real token attends to a hole


def as_prompt_lists(model: PreTrainedModel, prompts: Sequence[torch.Tensor], max_new_tokens: int) -> list[list[int]]:
    """Validate ``prompts`` (a non-empty list of ``LongTensor[T_i]`` or ``[1, T_i]``, ids in ``model``'s vocabulary,
    each fitting its context with ``max_new_tokens`` more) and return them as lists of ids."""
    if isinstance(prompts, torch.Tensor) or not isinstance(prompts, Sequence):
        raise InputError(
            f"prompts must be a list of LongTensor[T] (or [1, T]) prompts, one per row, got {type(prompts).__name__}. "
            "For an unpadded [B, T] tensor pass list(input_ids)."
        )
    if len(prompts) == 0:
        raise InputError("The list of prompts is empty: give at least one prompt (LongTensor[T] or [1, T]).")
    rows = []
    for index, prompt in enumerate(prompts):
        if isinstance(prompt, torch.Tensor) and not (prompt.ndim == 1 or (prompt.ndim == 2 and prompt.shape[0] == 1)):
            raise InputError(
                f"Prompt {index} has shape {list(prompt.shape)}; each prompt must be one row, LongTensor[T] or [1, T]."
            )
        ids = prompt.reshape(1, -1) if isinstance(prompt, torch.Tensor) else prompt
        check_input_ids(ids, model)
        check_fits_context(model, ids.shape[1], max_new_tokens)
        rows.append(ids[0].tolist())
    return rows


def left_pad(prompts: Sequence[Sequence[int] | torch.Tensor], pad_id: int = PAD_ID,
             device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad B prompts (lists of ids, ``LongTensor[T_i]`` or ``[1, T_i]``) to ``input_ids: LongTensor[B, T]``
    and ``attention_mask: LongTensor[B, T]`` (1: real token, 0: padding), ``T = max T_i``."""
    rows = [p.reshape(-1).tolist() if isinstance(p, torch.Tensor) else list(p) for p in prompts]
    width = max(len(row) for row in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros(len(rows), width, dtype=torch.long)
    for b, row in enumerate(rows):
        if row:
            input_ids[b, width - len(row):] = torch.tensor(row, dtype=torch.long)
            attention_mask[b, width - len(row):] = 1
    return input_ids.to(device), attention_mask.to(device)


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """``LongTensor[B, S]``: each slot's position, the number of real slots before it in its row
    (``cumsum(mask) - 1``, 0 on leading padding)."""
    return (attention_mask.long().cumsum(dim=-1) - 1).clamp_min(0)


def batched_forward(model: PreTrainedModel, input_ids: torch.Tensor, cache: Cache, attention_mask: torch.Tensor,
                    position_ids: torch.Tensor, logits_to_keep: int) -> torch.Tensor:
    """Run ``model`` on ``input_ids: LongTensor[B, T]`` appended to ``cache`` (S slots per row), with
    ``attention_mask: [B, S + T]`` (1 where a slot holds a real token of that row) and ``position_ids: [B, T]``.
    Returns float32 logits ``[B, logits_to_keep, V]`` for the last columns."""
    keywords = forward_keywords(type(unwrap_compiled(model)))
    kwargs: dict[str, object] = {keywords.cache: cache, "use_cache": True}
    if keywords.cache_position:
        past = cache_length(cache)
        kwargs["cache_position"] = torch.arange(past, past + input_ids.shape[1], device=input_ids.device)
    if keywords.logits_to_keep:
        kwargs["logits_to_keep"] = logits_to_keep
    output = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, **kwargs)
    return output.logits[:, -logits_to_keep:].float()


class BatchedKV:
    """A model's KV cache for a batch of rows, with the mask of which slots are real (module docstring).

    ``mask: BoolTensor[B, S]`` (S = slots in the cache), ``real: LongTensor[B]`` real slots per row (= the number
    of that row's tokens the cache holds, = the position its next token takes).
    """

    def __init__(self, model: PreTrainedModel, batch_size: int) -> None:
        self.model = model
        self.cache = new_cache(model)
        self.mask = torch.zeros(batch_size, 0, dtype=torch.bool, device=model.device)
        self.real = torch.zeros(batch_size, dtype=torch.long, device=model.device)

    def append(self, input_ids: torch.Tensor, valid: torch.Tensor, logits_to_keep: int = 1) -> torch.Tensor:
        """Feed ``input_ids: LongTensor[B, T]`` into T new slots; ``valid: BoolTensor[B, T]`` marks the real ones
        (the others become holes). Returns float32 logits ``[B, logits_to_keep, V]`` of the last columns."""
        mask = torch.cat([self.mask, valid], dim=1)  # [B, S + T]
        positions = position_ids_from_mask(mask)[:, -input_ids.shape[1]:]  # [B, T]: real tokens before each slot
        logits = batched_forward(self.model, input_ids, self.cache, mask.long(), positions, logits_to_keep)
        self.mask, self.real = mask, self.real + valid.sum(dim=1)
        return logits

    def truncate(self, keep: torch.Tensor) -> None:
        """Keep the first ``keep[b]`` real slots of row b (``keep: LongTensor[B]``; no-op where it holds no more):
        the later ones become holes. The rollback past rejected drafts."""
        rank = self.mask.long().cumsum(dim=1)  # [B, S]: 1-based rank of each real slot in its row
        self.mask = self.mask & (rank <= keep[:, None])
        self.real = torch.minimum(self.real, keep)
        self._drop_empty_slots()

    def select(self, rows: torch.Tensor) -> None:
        """Keep only the rows ``rows: LongTensor[B']`` (in that order): finished rows leave the batch."""
        self.cache.batch_select_indices(rows)
        self.mask, self.real = self.mask[rows], self.real[rows]
        self._drop_empty_slots()

    def _drop_empty_slots(self) -> None:
        """Remove the slots that are holes in every row: a crop when they are all at the end, else a compaction."""
        used = self.mask.any(dim=0)  # [S]
        if bool(used.all()):
            return
        kept = used.nonzero()[:, 0]  # [S'] increasing
        if int(kept[-1]) + 1 == kept.numel():  # only a tail of empty slots (every active row holds its prompt)
            crop_cache(self.cache, kept.numel())
        else:
            compact_cache(self.cache, 0, kept)
        self.mask = self.mask[:, kept]


@dataclass(frozen=True)
class ForwardRecord:
    """One target forward of a batched generation: how many rows it ran on, and draft tokens it verified."""

    rows: int
    drafted: int = 0


@dataclass
class BatchedResult:
    """Tokens and timing of a batched generation, per row in the order of the prompts.

    ``tokens[b]`` the new tokens of row b; ``token_times[b][i]`` seconds from the start until token i of row b was
    available (the tokens of one round share a time); ``wall_time`` seconds until the last row finished;
    ``forwards`` one `ForwardRecord` per target forward (the prefill first). Speculative runs also fill, per row,
    ``accepted`` / ``drafted`` (draft tokens accepted / verified) and ``rounds`` (target forwards after the prefill
    the row took part in, plain steps included); None for the baseline.
    """

    tokens: list[list[int]]
    token_times: list[list[float]]
    wall_time: float
    forwards: list[ForwardRecord]
    method: str
    accepted: list[int] | None = None
    drafted: list[int] | None = None
    rounds: list[int] | None = None

    @property
    def target_forwards(self) -> int:
        """Forwards of the target model, prefill included (each runs on every active row at once)."""
        return len(self.forwards)

    @property
    def tokens_per_second(self) -> float | None:
        """Throughput of the whole batch: all rows' new tokens / wall seconds (None if undefined)."""
        total = sum(len(row) for row in self.tokens)
        return total / self.wall_time if total and self.wall_time > 0 else None

    def time_to_first_token(self) -> list[float | None]:
        """Per row: seconds until its first new token (the prefill's), None for a row with no tokens."""
        return [times[0] if times else None for times in self.token_times]

    def inter_token_latencies(self) -> list[list[float]]:
        """Per row: gaps between its consecutive distinct token times (`specdec_lib.core.trace.inter_token_latencies`:
        tokens of one round arrive together and count as one arrival)."""
        return [inter_token_latencies(Trace(start_time=0.0, token_times=times)) for times in self.token_times]

    def acceptance_rate(self) -> list[float | None]:
        """Per row: accepted / drafted (None for a row that verified no draft, or for the baseline)."""
        if self.accepted is None or self.drafted is None:
            return [None] * len(self.tokens)
        return [a / d if d else None for a, d in zip(self.accepted, self.drafted)]


@dataclass
class BatchRun:
    """The bookkeeping of one batched generation: what each row committed, when, and which rows still run.

    ``sequences[b]`` prompt + new tokens of row b (prompt order); ``active`` the rows still generating, in the
    order of the batch dimension of the caches.
    """

    prompts: list[list[int]]
    max_new_tokens: int
    stop_ids: frozenset[int]
    device: torch.device
    trace: Trace = field(init=False)
    sequences: list[list[int]] = field(init=False)
    token_times: list[list[float]] = field(init=False)
    active: list[int] = field(init=False)

    def __post_init__(self) -> None:
        self.sequences = [list(p) for p in self.prompts]
        self.token_times = [[] for _ in self.prompts]
        self.active = list(range(len(self.prompts)))
        self.trace = Trace.start(self.device)  # the clock starts after the device finished queued work

    def now(self) -> float:
        """Seconds since the start (after synchronizing the device, so GPU work is counted when it ends)."""
        return self.trace.elapsed(self.device)

    def remaining(self, row: int) -> int:
        """How many more tokens row ``row`` may emit."""
        return self.max_new_tokens - (len(self.sequences[row]) - len(self.prompts[row]))

    def commit(self, row: int, tokens: list[int], at: float) -> bool:
        """Append ``tokens`` to row ``row`` (cut after the first stop id, and at ``max_new_tokens``), available
        ``at`` seconds after the start. True when the row has finished."""
        tokens = tokens[: self.remaining(row)]
        stop = first_stop(tokens, self.stop_ids) if self.stop_ids else None
        if stop is not None:
            tokens = tokens[: stop + 1]
        self.sequences[row].extend(tokens)
        self.token_times[row].extend([at] * len(tokens))
        return stop is not None or self.remaining(row) == 0

    def retire(self, finished: list[bool], *states) -> None:
        """Drop the rows flagged in ``finished`` (aligned with ``active``) from ``active`` and from every state
        (a `BatchedKV` or a batched drafter: anything with ``select(rows)``)."""
        if not any(finished):
            return
        keep = [i for i, done in enumerate(finished) if not done]
        self.active = [self.active[i] for i in keep]
        if keep:
            rows = torch.tensor(keep, dtype=torch.long, device=self.device)
            for state in states:
                state.select(rows)

    def new_tokens(self) -> list[list[int]]:
        """Per row, in prompt order: the tokens generated after its prompt."""
        return [seq[len(p):] for seq, p in zip(self.sequences, self.prompts)]


def first_tokens(state: BatchedKV, run: BatchRun, sampling: SamplingConfig,
                 generator: torch.Generator | None) -> list[bool]:
    """The prefill: every prompt, left-padded, in one forward; commits each row's first token. Returns the rows
    that finished already (aligned with ``run.active``)."""
    input_ids, attention_mask = left_pad(run.prompts, device=run.device)  # [B, T], [B, T]
    logits = state.append(input_ids, attention_mask.bool(), logits_to_keep=1)  # [B, 1, V]
    tokens = sample_token(logits_to_probs(logits[:, 0], sampling), generator).tolist()  # B ids
    at = run.now()
    return [run.commit(row, [token], at) for row, token in zip(run.active, tokens)]


def batched_autoregressive_generate(
    model: PreTrainedModel,
    prompts: Sequence[torch.Tensor],
    *,
    max_new_tokens: int,
    sampling: SamplingConfig = GREEDY,
    eos_token_id: int | Sequence[int] | str | None = AUTO,
    seed: int | None = None,
) -> BatchedResult:
    """Plain batched decoding: all prompts (``LongTensor[T_i]`` or ``[1, T_i]``) at once, one token per row per
    forward, with one KV cache for the batch (`BatchedKV`), the attention mask and per-row position ids.

    Each row's tokens are what ``autoregressive_generate(model, prompt, ...)`` gives it alone (greedy: token for
    token; sampling: in distribution, from one ``seed``-ed generator shared by the rows in order). A row stops after
    ``max_new_tokens`` tokens or right after a stop id (``eos_token_id`` as in `specdec_lib.core.stopping`); finished rows
    are **dropped from the batch** (their cache rows too), so later forwards run on the active rows only.
    """
    rows = as_prompt_lists(model, prompts, max_new_tokens)
    check_sampling(sampling)
    generator = make_generator(seed, model.device)
    run = BatchRun(rows, max_new_tokens, stop_token_ids(model, eos_token_id), model.device)
    forwards = [ForwardRecord(len(rows))]
    with torch.inference_mode():
        state = BatchedKV(model, len(rows))
        run.retire(first_tokens(state, run, sampling, generator), state)
        while run.active:
            last = torch.tensor([[run.sequences[row][-1]] for row in run.active], device=model.device)  # [B', 1]
            logits = state.append(last, torch.ones_like(last, dtype=torch.bool))  # [B', 1, V]
            forwards.append(ForwardRecord(len(run.active)))
            tokens = sample_token(logits_to_probs(logits[:, 0], sampling), generator).tolist()
            at = run.now()
            run.retire([run.commit(row, [token], at) for row, token in zip(run.active, tokens)], state)
    return BatchedResult(run.new_tokens(), run.token_times, run.now(), forwards, method="batched-autoregressive")
