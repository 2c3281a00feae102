"""Where a speculative output leaves the target's own greedy output, and whether rounding can explain it.

In exact arithmetic greedy speculative decoding writes the target's own greedy tokens. In floating point the
verification forward over ``[x_L, d_1 .. d_k]`` rounds differently from the one-token steps of the target alone
(`specdec_lib.core.numerics`), so at a near-tie of the target's top two logits the two may choose different tokens
and the outputs *fork*. Three checks tell a fork that rounding explains from a bug:

    explain_fork           (`judge_fork` on logits alone) the first fork, the target's margin there under the one-token computation and under the
                           verification forward's shape, and an every-position check of the candidate: along the
                           candidate's own prefix, one token at a time, each of its tokens must be the target's top
                           choice or within the dtype's near-tie tolerance of it.
                               verdict "identical"     no fork
                                       "near-tie"      every candidate token is a valid greedy choice up to rounding
                                       "disagreement"  some candidate token is clearly not the target's choice: a bug
    replay_verification    the check that holds in any dtype: run the generation's verification forwards again, as
                           the round engine ran them, and require every emitted token to be the argmax of the logits
                           the verification computed.
    assert_same_greedy     what the notebooks assert: identical in float32; in other dtypes, identical or forked
                           only at near-ties, printing what it found.

The *one-token computation* is the target alone: a prefill of the prompt, then one forward per token on a KV cache
(what `specdec_lib.autoregressive_generate` computes). A sampled run cannot be judged this way: its exactness is a
statement about distributions, checked statistically (`specdec_lib.core.stats`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

import torch
from transformers import PreTrainedModel

from .errors import ConfigError, InputError
from .numerics import dtype_name, is_exact_dtype, near_tie_tolerance
from .result import GenerationResult
from .rows import CachedRows
from .validation import check_generation_inputs, is_whole

Verdict = Literal["identical", "near-tie", "disagreement"]
VERIFY_BLOCK = 8  # the verification shape where no trace says what the round was: x_L and seven drafted tokens


@dataclass(frozen=True)
class TokenGap:
    """One candidate token judged by the one-token computation: ``gap = z[best] - z[token] >= 0`` (0 when the token
    is the target's argmax), beside the dtype's near-tie ``tolerance`` at ``z[best]``."""

    position: int  # among the new tokens
    token: int
    best: int  # the target's argmax there (ties: the lowest id)
    gap: float
    tolerance: float

    @property
    def within(self) -> bool:
        return self.gap <= self.tolerance


@dataclass(frozen=True)
class ForkReport:
    """`explain_fork`'s answer (module docstring). Positions count new tokens (0: the first generated token).

    ``margin``: ``z[reference token] - z[candidate token]`` at the fork under the one-token computation (>= 0: the
    reference chose the argmax); ``verification_margin``: the same difference under the verification forward's shape
    (<= 0 when that forward preferred the candidate's token), computed as ``verification_shape`` says.
    ``worst``: the candidate token furthest below the target's top choice (the every-position check)."""

    verdict: Verdict
    dtype: str
    new_tokens: int
    position: int | None = None
    reference_token: int | None = None
    candidate_token: int | None = None
    margin: float | None = None
    verification_margin: float | None = None
    verification_shape: str | None = None
    tolerance: float | None = None
    worst: TokenGap | None = None

    def __str__(self) -> str:
        if self.verdict == "identical":
            return f"identical ({self.new_tokens} new tokens, {self.dtype})"
        text = (f"{self.verdict}: forks at new token {self.position} ({self.reference_token} -> "
                f"{self.candidate_token}), margin {self.margin:.4g} under one-token steps, "
                f"{self.verification_margin:.4g} under {self.verification_shape}; tolerance {self.tolerance:.3g} "
                f"({self.dtype})")
        if self.worst is not None and self.worst.position != self.position and self.worst.gap > 0:
            text += (f"; worst token {self.worst.position}: {self.worst.gap:.4g} below the target's top choice "
                     f"(tolerance {self.worst.tolerance:.3g})")
        return text


@dataclass(frozen=True)
class _Output:
    """A sequence to judge: ``ids: LongTensor[T + N]`` (prompt first) and the result it came from, if any."""

    ids: torch.Tensor
    prompt_length: int
    result: GenerationResult | None = None


def _as_output(output: object, prompt: torch.Tensor | int | None, what: str) -> _Output:
    """Accept a one-row `GenerationResult`, a ``LongTensor[1, T + N]`` or ``[T + N]`` (with ``prompt``: its ids or
    length T), or the new tokens as a list of ints (with ``prompt``: its ids)."""
    if isinstance(output, GenerationResult):
        if output.batch != 1:
            raise InputError(f"{what} is a result of {output.batch} rows; judge one row at a time: pass "
                             f"result.sequences[b] with prompt=result.prompt_lengths[b].")
        return _Output(output.sequence[0], output.prompt_length, output)
    if prompt is None:
        raise InputError(f"{what} is not a GenerationResult, so explain_fork needs the prompt: pass prompt=input_ids "
                         "(or its length, with full token tensors).")
    if isinstance(output, (list, tuple)):
        if not isinstance(prompt, torch.Tensor):
            raise InputError(f"{what} is a list of new tokens: pass prompt=input_ids (the prompt's ids, "
                             "LongTensor[1, T]), not its length.")
        if not all(is_whole(token) for token in output):
            raise InputError(f"{what} must be a list of token ids (ints), got {output!r:.80}.")
        ids = prompt.reshape(-1)
        new = torch.tensor(list(output), dtype=torch.long, device=ids.device)
        return _Output(torch.cat([ids, new]), ids.numel())
    if isinstance(output, torch.Tensor) and output.dtype == torch.long and output.ndim in (1, 2):
        if output.ndim == 2 and output.shape[0] != 1:
            raise InputError(f"{what} must be one row, LongTensor[1, T + N], got shape {list(output.shape)}.")
        length = prompt.numel() if isinstance(prompt, torch.Tensor) else prompt
        if not is_whole(length) or not 1 <= length <= output.numel():
            raise InputError(f"prompt must be the prompt's ids or its length, within {what}'s {output.numel()} "
                             f"tokens, got {prompt!r:.80}.")
        return _Output(output.reshape(-1), length)
    raise InputError(f"{what} must be a GenerationResult, a LongTensor[1, T + N] of token ids or a list of new "
                     f"token ids, got {type(output).__name__}.")


def one_token_logits(target: PreTrainedModel, ids: torch.Tensor, prompt_length: int) -> torch.Tensor:
    """float32 logits ``[N, V]`` that the target alone computes for each of the N new tokens of ``ids:
    LongTensor[T + N]``: a prefill of the T prompt tokens, then one forward per token on its KV cache."""
    return _one_token_steps(target, ids, prompt_length, ids.numel() - prompt_length)[1]


def greedy_with_logits(target: PreTrainedModel, input_ids: torch.Tensor,
                       max_new_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The target alone, greedy, keeping the logits it decided on: after ``input_ids: LongTensor[1, T]``, N =
    ``max_new_tokens`` one-token steps, each token the argmax of the step's logits (ties: the lowest id), never
    stopping early. Returns ``(ids: LongTensor[T + N], logits: float32 [N, V])`` (row i predicts new token i): the
    ids of ``autoregressive_generate(target, input_ids, max_new_tokens=N, eos_token_id=None)`` and the logits of
    ``one_token_logits(target, ids, T)``, in one pass instead of two."""
    check_generation_inputs(target, input_ids, max_new_tokens)
    return _one_token_steps(target, input_ids[0], input_ids.shape[1], max_new_tokens)


def _one_token_steps(target: PreTrainedModel, ids: torch.Tensor, prompt_length: int,
                     new_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The target alone's loop: a prefill of ``ids[:prompt_length]``, then one forward per token on its KV cache,
    reading the tokens of ``ids: LongTensor[T + n]`` while it has them and the argmax of the last logits beyond.
    Returns ``(ids: LongTensor[T + new_tokens], float32 logits [new_tokens, V])``."""
    rows = CachedRows(target)
    with torch.inference_mode():
        logits = [rows.forward(ids[None, :prompt_length], logits_to_keep=1)[0][0, -1]]
        for position in range(prompt_length, prompt_length + new_tokens):
            if position == ids.numel():  # past the given tokens: the target's own greedy choice
                ids = torch.cat([ids, logits[-1].argmax().view(1)])
            if len(logits) < new_tokens:
                logits.append(rows.forward(ids[None, position:position + 1])[0][0, -1])
    return ids, torch.stack(logits)


def token_gaps(logits: torch.Tensor, tokens: torch.Tensor, dtype: torch.dtype) -> list[TokenGap]:
    """Judge ``tokens: LongTensor[N]`` against ``logits: [N, V]``: each one's gap below the top logit and the
    near-tie tolerance of ``dtype`` at that top logit."""
    top, best = logits.max(dim=-1)
    chosen = logits.gather(1, tokens[:, None])[:, 0]
    return [TokenGap(i, int(tokens[i]), int(best[i]), float(top[i] - chosen[i]),
                     near_tie_tolerance(dtype, float(top[i]))) for i in range(tokens.numel())]


@dataclass(frozen=True)
class ReplayedRound:
    """One verification forward of a generation, run again: it read ``inputs`` (what the target's cache lacked, the
    prompt in the first round and ``x_L`` after it, then the drafts ``d_1 .. d_k``) and produced ``logits: [k + 1,
    V]``; its ``emitted`` tokens start at new token ``first``."""

    first: int
    inputs: list[int]
    logits: torch.Tensor
    emitted: list[int]


@dataclass(frozen=True)
class Replay:
    """`replay_verification`'s answer: the rounds, and every emitted token that is not the argmax of the logits its
    round computed (``violations``: position among the new tokens, emitted token, argmax)."""

    rounds: list[ReplayedRound]
    violations: list[tuple[int, int, int]]

    @property
    def ok(self) -> bool:
        return not self.violations

    def round_of(self, position: int) -> tuple[ReplayedRound, int]:
        """The round that emitted new token ``position``, and that token's row in the round's logits."""
        for replayed in self.rounds:
            if replayed.first <= position < replayed.first + len(replayed.emitted):
                return replayed, position - replayed.first
        raise ConfigError(f"No replayed round emitted new token {position}.")


def _replayable(result: GenerationResult) -> bool:
    """Whether `replay_verification` runs ``result``'s forwards as they ran: one row, a chain, on a KV cache."""
    return not result.method.startswith(("tree-", "batched-")) and not result.method.endswith("nocache")


def replay_verification(target: PreTrainedModel, result: GenerationResult) -> Replay:
    """Run the target's forwards of a one-row greedy chain generation (the target alone, or speculative with any
    drafter) again, in the shapes the round engine ran them: per round one forward over what the cache lacks (the
    prompt in the first round, ``x_L`` after it) and the round's drafts (the trace's ``draft_tokens``), on a dynamic
    KV cache rolled back to the committed tokens. On a deterministic device these are the logits the generation computed, bit for bit, in any dtype, so
    every emitted token must be their argmax; `Replay.violations` lists those that are not (a bug, whatever the
    dtype). Token trees, batches and runs without a KV cache are refused: their forwards read tree masks, other rows
    or the whole sequence. A drafter that runs the verification itself in layer slices (early exit, which shares
    the target's cache) gets the same shape replayed, not the same arithmetic."""
    if not isinstance(result, GenerationResult) or result.batch != 1:
        raise InputError("replay_verification replays one row: pass the GenerationResult of a one-row generation.")
    if not _replayable(result):
        raise ConfigError(f"replay_verification replays chains on a KV cache; a {result.method} generation's forwards "
                          "read a token tree, other rows or no cache. Judge its tokens with explain_fork instead.")
    rounds = result.trace.rounds
    ids = result.sequence[0]
    start = result.prompt_length
    if sum(record.emitted for record in rounds) != ids.numel() - start:
        raise ConfigError("The result's trace does not account for its tokens (its rounds emit "
                          f"{sum(r.emitted for r in rounds)} tokens, the sequence has {ids.numel() - start}).")
    rows = CachedRows(target)
    replayed, violations, committed = [], [], start
    with torch.inference_mode():
        for index, record in enumerate(rounds):
            fed = ids[:start] if index == 0 else ids[committed - 1:committed]  # what the cache lacks
            drafts = torch.tensor(record.draft_tokens, dtype=torch.long, device=ids.device)
            inputs = torch.cat([fed, drafts])
            logits = rows.forward(inputs[None], logits_to_keep=1 + drafts.numel())[0][0]  # [k + 1, V]
            emitted = ids[committed:committed + record.emitted]
            choice = logits[:record.emitted].argmax(dim=-1)
            for row in (emitted != choice).nonzero()[:, 0].tolist():
                violations.append((committed - start + row, int(emitted[row]), int(choice[row])))
            replayed.append(ReplayedRound(committed - start, inputs.tolist(), logits, emitted.tolist()))
            committed += record.emitted
            rows.truncate([committed - 1])
    return Replay(replayed, violations)


def _verification_margin(target: PreTrainedModel, candidate: _Output, position: int, reference_token: int,
                         candidate_token: int) -> tuple[float, str]:
    """``z[reference] - z[candidate]`` at new token ``position`` under the verification forward's shape: the
    candidate's replayed round when its result can be replayed, else a block of `VERIFY_BLOCK` tokens from
    ``x_L`` (the token before the fork) on a cache of the tokens before it."""
    result = candidate.result
    if result is not None and result.batch == 1 and _replayable(result) and result.trace.rounds:
        replay = replay_verification(target, result)
        replayed, row = replay.round_of(position)
        logits = replayed.logits[row]
        width = len(replayed.inputs)
        shape = (f"its prompt's forward ({width} tokens, replayed)" if replayed.first == 0 else
                 f"its verification forward ({width} token{'' if width == 1 else 's'}, replayed)")
    else:
        at = candidate.prompt_length + position - 1  # x_L: the last token before the fork
        rows = CachedRows(target)
        with torch.inference_mode():
            rows.forward(candidate.ids[None, :at])
            block = candidate.ids[None, at:at + VERIFY_BLOCK]
            logits = rows.forward(block, logits_to_keep=block.shape[1])[0][0, 0]
        shape = f"a block forward of {block.shape[1]} tokens"
    return float(logits[reference_token] - logits[candidate_token]), shape


def explain_fork(target: PreTrainedModel, reference: object, candidate: object, *,
                 prompt: torch.Tensor | int | None = None) -> ForkReport:
    """Compare ``candidate`` with ``reference`` (the target's own greedy output) and say whether they are
    identical, fork at a near-tie, or disagree (module docstring).

    Each of ``reference`` and ``candidate`` is a one-row `GenerationResult`, a token tensor ``LongTensor[1, T + N]``
    (or ``[T + N]``) with ``prompt`` its ids or its length T, or a list of the N new token ids with ``prompt`` its
    ids ``LongTensor[1, T]``. A candidate result of a chain generation is replayed for the verification margin; any
    other candidate gets a block forward of the same shape. The tolerance is the near-tie tolerance of the target's
    dtype at its top logit (`specdec_lib.core.numerics.near_tie_tolerance`)."""
    ref = _as_output(reference, prompt, "reference")
    cand = _as_output(candidate, prompt, "candidate")
    if ref.prompt_length != cand.prompt_length or not torch.equal(ref.ids[:ref.prompt_length].cpu(),
                                                                  cand.ids[:cand.prompt_length].cpu()):
        raise InputError("reference and candidate continue different prompts; compare outputs of the same prompt.")
    dtype = target.dtype
    start = ref.prompt_length
    shared = min(ref.ids.numel(), cand.ids.numel())
    new_tokens = cand.ids.numel() - start
    if torch.equal(ref.ids[:shared].cpu(), cand.ids[:shared].cpu()):
        if ref.ids.numel() == cand.ids.numel():
            return ForkReport("identical", dtype_name(dtype), new_tokens)
        raise InputError(f"reference and candidate agree on every shared token but have {ref.ids.numel() - start} "
                         f"and {new_tokens} new tokens; compare generations of the same length (the same "
                         "max_new_tokens and stop rule).")
    logits = one_token_logits(target, cand.ids.to(target.device), start)  # [N, V]
    report = judge_fork(logits, ref.ids[start:], cand.ids[start:], dtype)
    verification_margin, shape = _verification_margin(target, cand, report.position, report.reference_token,
                                                      report.candidate_token)
    return dataclasses.replace(report, verification_margin=verification_margin, verification_shape=shape)


def judge_fork(logits: torch.Tensor, reference: torch.Tensor, candidate: torch.Tensor,
               dtype: torch.dtype) -> ForkReport:
    """The verdict on logits alone (pure: no model). ``logits: [N, V]`` are the target's one-token logits along
    the candidate (row i predicts new token i after the candidate's first i tokens), ``reference: LongTensor[N_r]``
    and ``candidate: LongTensor[N]`` the new tokens, which differ somewhere in their shared length.

    At the first fork i: ``margin = z_i[reference_i] - z_i[candidate_i]``. "near-tie" when ``|margin|`` (a reference
    that is not the target's choice is caught too) and every candidate token's gap below the top logit are within
    `near_tie_tolerance` of ``dtype``; else "disagreement"."""
    shared = min(reference.numel(), candidate.numel())
    differs = (reference[:shared].cpu() != candidate[:shared].cpu()).nonzero()
    if differs.numel() == 0:
        raise InputError("reference and candidate do not fork within their shared tokens; nothing to judge.")
    if tuple(logits.shape[:1]) != (candidate.numel(),) or logits.ndim != 2:
        raise InputError(f"logits must be [N, V] with one row per candidate token (N = {candidate.numel()}), got "
                         f"{list(logits.shape)}.")
    position = int(differs[0, 0])
    gaps = token_gaps(logits, candidate.to(logits.device), dtype)
    reference_token, candidate_token = int(reference[position]), int(candidate[position])
    margin = float(logits[position, reference_token] - logits[position, candidate_token])
    tolerance = gaps[position].tolerance
    worst = max(gaps, key=lambda gap: gap.gap / gap.tolerance)
    near = abs(margin) <= tolerance and all(gap.within for gap in gaps)  # |margin|: a wrong reference is caught too
    return ForkReport("near-tie" if near else "disagreement", dtype_name(dtype), candidate.numel(), position,
                      reference_token, candidate_token, margin, tolerance=tolerance, worst=worst)


def assert_same_greedy(target: PreTrainedModel, prompt: torch.Tensor, reference: object, *candidates: object,
                       label: str = "") -> list[ForkReport]:
    """What a notebook asserts of greedy outputs: each of ``candidates`` equals ``reference`` (the target's own
    greedy output of ``prompt``), token for token, when ``target`` computes in float32; in another dtype, each is
    identical or forks only at near-ties (`explain_fork`), and what was found is printed. Raises `AssertionError`
    with the fork's report otherwise. Outputs as in `explain_fork`; returns the reports."""
    dtype = target.dtype
    reports = [explain_fork(target, reference, candidate, prompt=prompt) for candidate in candidates]
    prefix = f"{label}: " if label else ""
    for report in reports:
        if report.verdict == "disagreement" or (report.verdict != "identical" and is_exact_dtype(dtype)):
            raise AssertionError(f"{prefix}the output is not the target's own greedy output: {report}")
    if not is_exact_dtype(dtype):
        forked = [str(report) for report in reports if report.verdict == "near-tie"]
        print(f"{prefix}{dtype_name(dtype)}: {len(reports) - len(forked)} of {len(reports)} identical to the "
              "target's own greedy output" + (f"; the others fork at near-ties: {'; '.join(forked)}" if forked else ""))
    return reports
