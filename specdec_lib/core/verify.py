"""Verification: which drafted tokens does the target keep, and what does it add? Pure functions, no model.

One target forward over ``[last committed token, d_1, ..., d_k]`` gives ``k + 1`` rows of logits: row i is
the target's next-token prediction after ``d_1 .. d_i`` (row 0: after the committed sequence). Comparing the
drafts with these rows decides the round, in one vocabulary used everywhere in the library (as in vLLM):

- **accepted** tokens: the longest prefix of the draft the target agrees with;
- a **recovered** (corrected) token: at the first rejected position, the target's own choice replaces the draft;
- a **bonus** token: when every draft token is accepted, row k still predicts one more token for free.

So a round always emits ``accepted + 1`` tokens (from one target forward), between 1 and ``k + 1``.

Greedy decoding verifies by comparing argmaxes (`verify_greedy`). Sampling verifies by modified rejection sampling
(`verify_exact`), which keeps the target's output distribution exactly, or by block verification
(`specdec_lib.core.block_verify`), which decides the accepted prefix jointly. `verify_relaxed` accepts more drafts and is **not**
distribution-preserving: it exists to measure what breaking the guarantee costs.

**Shapes.** Each rule exists for one round (``p: [k + 1, V]``, ``draft_tokens: [k]``, returning a `VerifyResult`)
and for a batch of B rounds at once (``p: [B, K + 1, V]``, ``draft_tokens: [B, K]``, returning a `BatchVerdict`),
vLLM's layout. In a batch, row b drafted ``num_drafts[b] <= K`` tokens (ragged: the rest of its row is padding,
never accepted) and its bonus row is ``p[b, num_drafts[b]]``. The one-round form is the batch of one (same code,
same random draws), so the batched decoder, the single-sequence decoder and the statistical tests all exercise one
implementation.
"""

from dataclasses import dataclass
from typing import Literal

import torch

from .errors import ConfigError
from .validation import check_lenience

Kind = Literal["recovered", "bonus"]


@dataclass(frozen=True)
class VerifyResult:
    """The outcome of one round of verification, greedy (`verify_greedy`) or sampling (`verify_exact`, ...).

    ``num_accepted`` n: the draft tokens ``draft_tokens[:n]`` the target keeps (0 <= n <= k);
    ``next_token``: the token the target appends after them;
    ``kind``: ``"recovered"`` when a draft was rejected (n < k: the target's own choice there, drawn from the
    residual ``norm(max(p_n - q_n, 0))`` when sampling) or ``"bonus"`` when all k were accepted (the target's next
    token after them, for free).
    The round emits ``draft_tokens[:n] + [next_token]``: ``emitted = n + 1`` tokens.
    """

    num_accepted: int
    next_token: int
    kind: Kind

    @property
    def emitted(self) -> int:
        """Tokens this round appends: the accepted drafts plus the recovered or bonus token."""
        return self.num_accepted + 1


@dataclass(frozen=True)
class BatchVerdict:
    """The outcome of verifying B rounds at once: ``num_accepted: LongTensor[B]`` (n_b), ``next_tokens:
    LongTensor[B]`` (the recovered or bonus token of each row) and ``bonus: BoolTensor[B]`` (n_b equals the row's
    number of drafts). Tensors stay on the device; `results` reads them back in one transfer."""

    num_accepted: torch.Tensor
    next_tokens: torch.Tensor
    bonus: torch.Tensor

    def results(self) -> list[VerifyResult]:
        """One `VerifyResult` per row (one host synchronisation for the whole batch)."""
        rows = torch.stack([self.num_accepted, self.next_tokens, self.bonus.long()], dim=1).tolist()
        return [VerifyResult(n, token, "bonus" if bonus else "recovered") for n, token, bonus in rows]


# ---------------------------------------------------------------------------------------------------- input checks


def _shape(value: object) -> object:
    return list(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__


def _check_token_dtype(draft_tokens: torch.Tensor) -> None:
    if draft_tokens.is_floating_point() or draft_tokens.dtype == torch.bool:
        raise ConfigError(f"draft_tokens must hold integer token ids, got dtype {draft_tokens.dtype}.")


def _check_probabilities(name: str, probs: torch.Tensor) -> None:
    if not probs.is_floating_point():
        raise ConfigError(f"{name} must be a floating-point tensor of probabilities, got dtype {probs.dtype}.")
    if not bool((probs >= 0).all()):  # also False for NaN
        raise ConfigError(
            f"{name} must hold probabilities (>= 0, no NaN); it has negative or NaN entries. "
            "Did you pass logits? Convert them with logits_to_probs(logits, sampling)."
        )


def _check_values(p: torch.Tensor, q: torch.Tensor | None, draft_tokens: torch.Tensor) -> None:
    """The checks both shapes share: p and q hold probabilities over the same V, the ids index it."""
    vocab = p.shape[-1]
    if q is not None:
        if q.shape[-1] != vocab:
            raise ConfigError(
                f"p and q must cover the same vocabulary, got V = {vocab} for p and V = {q.shape[-1]} for q. "
                "The draft and the target must share a tokenizer (see specdec_lib.core.vocab)."
            )
        _check_probabilities("q", q)
    _check_probabilities("p", p)
    if draft_tokens.numel() and (int(draft_tokens.min()) < 0 or int(draft_tokens.max()) >= vocab):
        raise ConfigError(f"draft_tokens must be token ids in [0, {vocab}), got {draft_tokens.tolist()}.")


def check_round(p: torch.Tensor, q: torch.Tensor | None, draft_tokens: torch.Tensor) -> None:
    """Validate the inputs of a one-round sampling verifier: ``p: [k + 1, V]``, ``q: [k, V] | None``, ``draft_tokens: [k]``."""
    if not isinstance(draft_tokens, torch.Tensor) or draft_tokens.ndim != 1:
        raise ConfigError(f"draft_tokens must be a 1-D LongTensor [k], got {_shape(draft_tokens)}.")
    _check_token_dtype(draft_tokens)
    k = draft_tokens.shape[0]
    if not isinstance(p, torch.Tensor) or p.ndim != 2:
        raise ConfigError(f"p (the target's probabilities) must have shape [k + 1, V], got {_shape(p)}.")
    if p.shape[0] != k + 1:
        raise ConfigError(
            f"p needs k + 1 = {k + 1} rows for k = {k} draft tokens (one per draft token plus one for the bonus "
            f"token), got {p.shape[0]}."
        )
    if q is not None and (not isinstance(q, torch.Tensor) or q.ndim != 2 or q.shape[0] != k):
        raise ConfigError(
            f"q (the drafter's probabilities) must have shape [k = {k}, V] (the distribution each draft token "
            f"was drawn from) or be None (no distribution: a point mass on each draft), got {_shape(q)}."
        )
    _check_values(p, q, draft_tokens)


def check_batch(p: torch.Tensor, q: torch.Tensor | None, draft_tokens: torch.Tensor,
                num_drafts: torch.Tensor | None) -> None:
    """Validate the inputs of a batched sampling verifier: ``p: [B, K + 1, V]``, ``q: [B, K, V] | None``, ``draft_tokens: [B, K]``, ``num_drafts: [B]``."""
    if not isinstance(draft_tokens, torch.Tensor) or draft_tokens.ndim != 2:
        raise ConfigError(f"draft_tokens must be a LongTensor [B, K] (one row per round), got {_shape(draft_tokens)}.")
    _check_token_dtype(draft_tokens)
    batch, width = draft_tokens.shape
    if not isinstance(p, torch.Tensor) or p.ndim != 3 or tuple(p.shape[:2]) != (batch, width + 1):
        raise ConfigError(
            f"p (the target's probabilities) must have shape [B, K + 1, V] = [{batch}, {width + 1}, V] for draft "
            f"tokens [B, K] = [{batch}, {width}] (a bonus row after each row's drafts), got {_shape(p)}."
        )
    if q is not None and (not isinstance(q, torch.Tensor) or q.ndim != 3 or tuple(q.shape[:2]) != (batch, width)):
        raise ConfigError(f"q must have shape [B, K, V] = [{batch}, {width}, V] or be None, got {_shape(q)}.")
    if num_drafts is not None:
        if not isinstance(num_drafts, torch.Tensor) or num_drafts.shape != (batch,):
            raise ConfigError(f"num_drafts must be a LongTensor [B] = [{batch}], got {_shape(num_drafts)}.")
        if batch and (int(num_drafts.min()) < 0 or int(num_drafts.max()) > width):
            raise ConfigError(f"num_drafts must lie in [0, K = {width}], got {num_drafts.tolist()}.")
    _check_values(p, q, draft_tokens)


# ------------------------------------------------------------------------------------------------ the drafted path


@dataclass(frozen=True)
class DraftedPath:
    """A batch of drafts and the probabilities of the drafted path, shared by the sampling verifiers (token-wise
    here, block in `specdec_lib.core.block_verify`).

    ``tokens: [B, K]``; ``num_drafts: [B]``; ``valid: [B, K]`` position i < num_drafts[b]; ``q: [B, K + 1, V]`` the
    reported q (a point mass per draft where the drafter gave None) with zero rows at and after each row's bonus
    position; ``p_draft, q_draft: [B, K]`` p_i(x_i) and q_i(x_i) (q_draft > 0 on valid positions, checked).
    """

    tokens: torch.Tensor
    num_drafts: torch.Tensor
    valid: torch.Tensor
    q: torch.Tensor
    p_draft: torch.Tensor
    q_draft: torch.Tensor


def drafted_path(p: torch.Tensor, q: torch.Tensor | None, draft_tokens: torch.Tensor,
                 num_drafts: torch.Tensor | None) -> DraftedPath:
    """Read the drafted path's p and q off validated batch inputs, and refuse a q that rules out its own draft."""
    batch, width = draft_tokens.shape
    tokens = draft_tokens.to(device=p.device, dtype=torch.long)
    count = torch.full((batch,), width, device=p.device) if num_drafts is None else num_drafts.to(p.device)
    valid = torch.arange(width, device=p.device) < count[:, None]  # [B, K]
    if q is None:
        q = torch.nn.functional.one_hot(tokens, p.shape[-1]).to(p.dtype)  # no distribution: a point mass per draft
    q = torch.cat([q.to(device=p.device, dtype=p.dtype), p.new_zeros(batch, 1, p.shape[-1])], dim=1)  # [B, K + 1, V]
    q = q * torch.cat([valid, valid.new_zeros(batch, 1)], dim=1)[..., None]  # q = 0 from each row's bonus position on
    p_draft = p[:, :width].gather(-1, tokens[..., None])[..., 0]  # [B, K]: p_i(x_i)
    q_draft = q[:, :width].gather(-1, tokens[..., None])[..., 0]  # [B, K]: q_i(x_i)
    impossible = (valid & (q_draft <= 0)).nonzero()
    if impossible.numel():
        b, i = impossible[0].tolist()
        where = f"position {i}" if batch == 1 else f"position {i} of row {b}"
        raise ConfigError(
            f"Draft token {int(tokens[b, i])} at {where} has probability q = 0 in the distribution the drafter "
            "reported for it, so it cannot have been drawn from that distribution. A drafter must report in "
            "Draft.probs the distribution it actually sampled each token from (the same logits_to_probs processing), "
            "or probs=None for a point mass (see specdec_lib.core.drafting)."
        )
    return DraftedPath(tokens, count, valid, q, p_draft, q_draft)


def _accepted_prefix(accepted: torch.Tensor) -> torch.Tensor:
    """``[B, K]`` bool -> ``[B]``: the length of each row's all-True prefix (stop at the first rejection)."""
    return accepted.long().cumprod(dim=1).sum(dim=1)


def rows_at(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``table[b, index[b]]`` for every row b: ``[B, R, V]``, ``[B]`` -> ``[B, V]``."""
    return table[torch.arange(table.shape[0], device=table.device), index]


def draw_each_row(distributions: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row of ``distributions: [B, V]`` -> ``LongTensor[B]`` (one multinomial call for the batch)."""
    return torch.multinomial(distributions, num_samples=1, generator=generator)[:, 0]


def only_result(batch: BatchVerdict) -> VerifyResult:
    """The `VerifyResult` of a batch of one round."""
    return batch.results()[0]


# ---------------------------------------------------------------------------------------------------------- greedy


def verify_greedy_batch(target_logits: torch.Tensor, draft_tokens: torch.Tensor,
                        num_drafts: torch.Tensor | None = None) -> BatchVerdict:
    """Greedy verification of B rounds: ``target_logits: [B, K + 1, V]``, ``draft_tokens: LongTensor[B, K]``,
    ``num_drafts: LongTensor[B]`` (None: K each). With ``t_{b,i} = argmax(target_logits[b, i])``, row b accepts its
    longest prefix with ``d_{b,i} == t_{b,i}`` (never past ``num_drafts[b]``) and appends ``t_{b, n_b}``."""
    if not isinstance(target_logits, torch.Tensor) or target_logits.ndim != 3:
        raise ConfigError(f"target_logits must have shape [B, K + 1, V], got {_shape(target_logits)}.")
    if not isinstance(draft_tokens, torch.Tensor) or draft_tokens.ndim != 2:
        raise ConfigError(f"draft_tokens must have shape [B, K], got {_shape(draft_tokens)}.")
    batch, width = draft_tokens.shape
    if tuple(target_logits.shape[:2]) != (batch, width + 1):
        raise ConfigError(
            f"verify_greedy_batch needs target logits [B, K + 1, V] = [{batch}, {width + 1}, V] for draft tokens "
            f"[{batch}, {width}], got {list(target_logits.shape)}."
        )
    if num_drafts is not None and (not isinstance(num_drafts, torch.Tensor) or num_drafts.shape != (batch,)
                                   or (batch and (int(num_drafts.min()) < 0 or int(num_drafts.max()) > width))):
        raise ConfigError(f"num_drafts must be a LongTensor [B] = [{batch}] of counts in [0, K = {width}], got "
                          f"{num_drafts.tolist() if isinstance(num_drafts, torch.Tensor) else num_drafts!r}.")
    choice = target_logits.argmax(dim=-1)  # [B, K + 1]: t_{b,i}, the target's greedy token after d_1 .. d_i
    matches = draft_tokens.to(choice.device) == choice[:, :width]  # [B, K]
    count = width  # every row drafted K (an int: no tensor to build on the common path)
    if num_drafts is not None:
        count = num_drafts.to(choice.device)
        matches &= torch.arange(width, device=choice.device) < count[:, None]
    accepted = _accepted_prefix(matches)  # [B]
    return BatchVerdict(accepted, choice.gather(1, accepted[:, None])[:, 0], accepted == count)


def verify_greedy(target_logits: torch.Tensor, draft_tokens: torch.Tensor) -> VerifyResult:
    """Greedy verification of ``draft_tokens: LongTensor[k]`` against ``target_logits: FloatTensor[k + 1, V]``.

    With ``t_i = argmax(target_logits[i])`` (ties to the lowest id, as in greedy decoding):

    - ``num_accepted = n`` is the largest n with ``draft_tokens[i] == t_i`` for every ``i < n``;
    - ``next_token = t_n``: the recovered token when ``n < k`` (the target's choice where the draft went
      wrong), the bonus token when ``n == k``.

    The emitted tokens ``draft_tokens[:n] + [next_token]`` are exactly what the target's own greedy decoding
    would produce, which is why greedy speculative decoding is token-identical to the target alone.
    EOS-agnostic: stopping at an end-of-sequence token is the generation loop's job. Returns a `VerifyResult`
    (the same type as `verify_exact`), ``kind`` ``"recovered"`` or ``"bonus"``. One host transfer.
    """
    if target_logits.ndim != 2:
        raise ConfigError(f"target_logits must have shape [k + 1, V], got {list(target_logits.shape)}.")
    if draft_tokens.ndim != 1:
        raise ConfigError(f"draft_tokens must have shape [k], got {list(draft_tokens.shape)}.")
    k = draft_tokens.shape[0]
    if target_logits.shape[0] != k + 1:
        raise ConfigError(
            f"verify_greedy needs k + 1 = {k + 1} rows of target logits for k = {k} draft tokens "
            f"(one per draft token plus one for the bonus token), got {target_logits.shape[0]}."
        )
    return only_result(verify_greedy_batch(target_logits[None], draft_tokens[None]))


# --------------------------------------------------------------------------------------------------------------
# Sampling verification: modified rejection sampling (Leviathan, Kalman & Matias 2023; Chen et al. 2023)
#
# With sampling, "accept the draft if it equals the target's token" is either wrong (compare with the target's
# argmax: the output becomes greedy) or wasteful (compare with an independent sample of the target: correct, but
# accepted only with probability sum_x p(x) q(x)). Rejection sampling keeps the target's distribution exactly and
# accepts as often as any distribution-preserving rule can, with probability alpha = sum_x min(p(x), q(x)):
#
#   draft  x ~ q                         (the drafter already did this)
#   accept x with probability min(1, p(x) / q(x))       P(x emitted by acceptance) = q(x) min(1, p/q) = min(p(x), q(x))
#   else   y ~ norm(max(p - q, 0))        P(rejection) = 1 - alpha = sum_y max(p(y) - q(y), 0)
#   total  P(y) = min(p(y), q(y)) + max(p(y) - q(y), 0) = p(y)
# --------------------------------------------------------------------------------------------------------------


def acceptance_probability(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``alpha = sum_x min(p(x), q(x))``: the probability that exact verification accepts a token drawn from q.

    ``p, q: FloatTensor[..., V]`` (same shape) give ``FloatTensor[...]``. Equal to ``1 - TV(p, q)``: the closer the
    draft's distribution to the target's, the more is accepted; 1 when they are equal, 0 when their supports are
    disjoint. No distribution-preserving rule can accept more often (it is the maximal coupling of p and q).
    """
    if p.shape != q.shape:
        raise ConfigError(f"p and q must have the same shape, got {list(p.shape)} and {list(q.shape)}.")
    return torch.minimum(p, q).sum(dim=-1)  # sum_x min(p(x), q(x))


def residual_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The distribution a recovered token is drawn from: ``norm(max(p - q, 0))``, row-wise over ``[..., V]``.

    It puts mass exactly where the target wants more than the draft offers, which is what the accepted tokens
    (``min(p, q)``) leave missing. A row whose residual is all zero happens only when ``p == q`` (both sum to 1, so
    ``p <= q`` everywhere forces equality); then every token q can draw is accepted (``min(1, p/q) = 1``), a
    rejection has probability 0 and what it would emit does not change the output distribution. Returning p there
    is the natural choice (and the right one for floating-point near-equality, where a rejection has a tiny but
    non-zero probability): it never emits a token the target rules out, and never divides by zero.
    """
    excess = (p - q).clamp_min(0)  # max(p(x) - q(x), 0): [..., V]
    total = excess.sum(dim=-1, keepdim=True)  # Z = sum_x max(p - q, 0) = 1 - alpha (= TV(p, q)): [..., 1]
    safe_total = torch.where(total > 0, total, torch.ones_like(total))  # avoid 0 / 0 where Z = 0
    return torch.where(total > 0, excess / safe_total, p)  # Z > 0: norm(max(p - q, 0)); Z = 0 (p == q): p


def _rejection_sample(p: torch.Tensor, drafted: DraftedPath, generator: torch.Generator | None,
                      lenience: float) -> BatchVerdict:
    """Shared body of `verify_exact` (``lenience = 1``) and `verify_relaxed`: accept with min(1, lenience p/q)."""
    u = torch.rand(drafted.tokens.shape, generator=generator, device=p.device)  # [B, K]: one u_i ~ U[0, 1) a position
    # accept x_i  <=>  u_i < min(1, l p_i(x_i) / q_i(x_i))  <=>  u_i q_i(x_i) < l p_i(x_i)   (no division, never NaN:
    # q_i(x_i) > 0 is checked; p = 0 rejects; l = lenience, 1 for exact verification); padding is never accepted
    accepted = _accepted_prefix((u * drafted.q_draft < lenience * drafted.p_draft) & drafted.valid)  # [B]: n_b
    bonus = accepted == drafted.num_drafts
    p_n = rows_at(p, accepted)  # [B, V]: p_n, the row after the accepted drafts (p_k, the bonus row, after all k)
    # rejected at n: the recovered token's law is norm(max(p_n - q_n, 0)); all k accepted: q_k = 0, so it is p_k
    distribution = torch.where(bonus[:, None], p_n, residual_distribution(p_n, rows_at(drafted.q, accepted)))
    return BatchVerdict(accepted, draw_each_row(distribution, generator), bonus)


def verify_exact_batch(p: torch.Tensor, q: torch.Tensor | None, draft_tokens: torch.Tensor,
                       num_drafts: torch.Tensor | None = None,
                       generator: torch.Generator | None = None) -> BatchVerdict:
    """`verify_exact` for B rounds at once (module docstring's shapes): ``p: [B, K + 1, V]``, ``q: [B, K, V] | None``,
    ``draft_tokens: LongTensor[B, K]``, ``num_drafts: LongTensor[B]`` (None: K each). One ``[B, K]`` block of
    uniforms, then one multinomial draw of B recovered-or-bonus tokens, from ``generator``."""
    check_batch(p, q, draft_tokens, num_drafts)
    return _rejection_sample(p, drafted_path(p, q, draft_tokens, num_drafts), generator, lenience=1.0)


def verify_exact(
    p: torch.Tensor,
    q: torch.Tensor | None,
    draft_tokens: torch.Tensor,
    generator: torch.Generator | None = None,
) -> VerifyResult:
    """Exact sampling verification of ``draft_tokens: LongTensor[k]`` by modified rejection sampling.

    Indices are 0-based: ``x_i = draft_tokens[i]``. ``p: FloatTensor[k + 1, V]`` holds the target's processed
    distributions (``logits_to_probs(target_logits, sampling)``): ``p_i = p[i]`` follows the committed sequence and
    ``x_0 .. x_{i-1}``. ``q: FloatTensor[k, V]``: ``q_i = q[i]`` is the distribution the drafter *actually* drew
    ``x_i`` from, processed the same way; or None when the drafter has no distribution (each draft is then treated
    as a point mass: accepted with probability ``p_i(x_i)``, the residual is ``p_i`` without ``x_i``, renormalised).

    With one uniform ``u_i`` per position, drawn up front from ``generator`` (so a seed fixes the round):

    - for i = 0 .. k-1: accept ``x_i`` with probability ``min(1, p_i(x_i) / q_i(x_i))``;
    - at the first rejection, draw a **recovered** token from ``norm(max(p_i - q_i, 0))`` and stop;
    - if all k are accepted, draw a **bonus** token from ``p_k`` (the last row).

    The emitted tokens are then distributed exactly as if the target had sampled them one by one, whatever q is,
    *as long as q is the distribution the drafts were really drawn from*. A drafter reporting another q (the
    un-tempered softmax while sampling at temperature 0.7, one-hot rows while sampling...) silently changes the
    output distribution. A draft token the reported q gives probability 0 is refused with a `ConfigError` (the
    drafter cannot have drawn it: its q is wrong). Zeros elsewhere in p or q and the all-zero residual (only when
    ``p_i == q_i``; see `residual_distribution`) are handled without NaNs. With one-hot p and q this is exactly
    `verify_greedy`.
    """
    check_round(p, q, draft_tokens)
    q = None if q is None else q[None]
    return only_result(_rejection_sample(p[None], drafted_path(p[None], q, draft_tokens[None], None), generator, 1.0))


def verify_relaxed_batch(p: torch.Tensor, q: torch.Tensor | None, draft_tokens: torch.Tensor,
                         num_drafts: torch.Tensor | None = None, generator: torch.Generator | None = None, *,
                         lenience: float) -> BatchVerdict:
    """`verify_relaxed` for B rounds at once (shapes as in `verify_exact_batch`). NOT DISTRIBUTION-PRESERVING."""
    check_lenience(lenience)
    check_batch(p, q, draft_tokens, num_drafts)
    return _rejection_sample(p, drafted_path(p, q, draft_tokens, num_drafts), generator, float(lenience))


def verify_relaxed(
    p: torch.Tensor,
    q: torch.Tensor | None,
    draft_tokens: torch.Tensor,
    generator: torch.Generator | None = None,
    *,
    lenience: float,
) -> VerifyResult:
    """NOT DISTRIBUTION-PRESERVING. Lenient rule: accept ``x_i`` w.p. ``min(1, lenience * p_i(x_i) / q_i(x_i))``.

    Same inputs, random draws and residual ``norm(max(p_i - q_i, 0))`` as `verify_exact`, which it equals for
    ``lenience = 1``. A lenience above 1 accepts more drafts (more tokens per target forward) at the price of
    emitting text that is **no longer distributed like the target's**: the output drifts towards the draft's
    distribution q. This is the "lenience" knob of Leviathan et al. (2023, appendix A.5), kept here to measure
    what the trade costs; never use it where the speculative output must match the target's.
    """
    check_lenience(lenience)
    check_round(p, q, draft_tokens)
    q = None if q is None else q[None]
    drafted = drafted_path(p[None], q, draft_tokens[None], None)
    return only_result(_rejection_sample(p[None], drafted, generator, float(lenience)))
