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

**Shapes.** Every rule verifies a batch of B rounds at once, vLLM's layout: ``p: [B, K + 1, V]`` (or the target's
logits, for greedy), ``q: [B, K, V] | None``, ``draft_tokens: [B, K]``, and returns one `Verdict`, the type the
tree verifiers (`specdec_lib.core.trees`) return too. Row b drafted ``num_drafts[b] <= K`` tokens (ragged: the rest
of its row is padding, never accepted) and its bonus row is ``p[b, num_drafts[b]]``. One round is the batch of one:
``p[None]``, ``draft_tokens[None]``.

**Checks.** Each ``verify_*`` function checks its inputs (`check_chain`), then applies its rule (``*_rule``: the
arithmetic alone). The round engine (`specdec_lib.core.engine.decide`) calls the rules directly: its logits are the
target's own and its drafts were checked when the drafter proposed them.
"""

from dataclasses import dataclass

import torch

from .errors import ConfigError
from .validation import check_lenience


@dataclass(frozen=True)
class Verdict:
    """The outcome of verifying B rounds, a chain of drafts or a token tree in each (vLLM's one verdict shape).

    ``accepted: LongTensor[B]``: n_b, the drafts row b keeps;
    ``next_token: LongTensor[B]``: the token the target appends after them;
    ``bonus: BoolTensor[B]``: True when nothing drafted was left to reject (all of a chain's drafts accepted, or a
    tree's path ending at a leaf): ``next_token`` is the **bonus** token, drawn from the row after the path; False
    when a draft was rejected: it is the **recovered** token, the target's own choice there (drawn from the residual
    ``norm(max(p_n - q_n, 0))`` when sampling);
    ``path: LongTensor[B, D]``: the accepted drafts' indices, ``path[b, :n_b]``, then -1. For a chain of K drafts
    (``D = K``) this is ``0 .. n_b - 1``; for a tree (``D`` its depth) the node indices from the root down.

    Row b emits ``draft_tokens[b, path[b, :n_b]]`` and then ``next_token[b]``: ``n_b + 1`` tokens. The tensors stay on
    the device; `tolist` and `paths` read them back.
    """

    accepted: torch.Tensor
    next_token: torch.Tensor
    bonus: torch.Tensor
    path: torch.Tensor

    def tolist(self) -> list[tuple[int, int, str]]:
        """``(accepted, next_token, kind)`` per row as Python values (one host transfer), ``kind`` ``"bonus"`` or
        ``"recovered"``."""
        rows = torch.stack([self.accepted, self.next_token, self.bonus.long()], dim=1).tolist()
        return [(n, token, "bonus" if bonus else "recovered") for n, token, bonus in rows]

    def paths(self) -> list[tuple[int, ...]]:
        """Each row's accepted path ``path[b, :n_b]`` as a tuple of draft indices."""
        return [tuple(node for node in row if node >= 0) for row in self.path.tolist()]


def chain_path(accepted: torch.Tensor, width: int) -> torch.Tensor:
    """The `Verdict.path` of chains of ``width`` drafts: ``[B, K]``, ``i`` where ``i < accepted[b]``, else -1."""
    index = torch.arange(width, device=accepted.device)
    return torch.where(index < accepted[:, None], index, -1)


# ---------------------------------------------------------------------------------------------------- input checks


def _shape(value: object) -> object:
    return list(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__


def check_probabilities(name: str, probs: torch.Tensor) -> None:
    """Refuse ``probs`` unless it is a floating-point tensor of probabilities (>= 0, no NaN)."""
    if not probs.is_floating_point():
        raise ConfigError(f"{name} must be a floating-point tensor of probabilities, got dtype {probs.dtype}.")
    if not bool((probs >= 0).all()):  # also False for NaN
        raise ConfigError(
            f"{name} must hold probabilities (>= 0, no NaN); it has negative or NaN entries. "
            "Did you pass logits? Convert them with logits_to_probs(logits, sampling)."
        )


def check_chain(p: torch.Tensor, q: torch.Tensor | None, draft_tokens: torch.Tensor,
                num_drafts: torch.Tensor | None, *, logits: bool = False) -> None:
    """Validate a batch of rounds: ``p: [B, K + 1, V]`` probabilities (``logits=True``: the target's logits, for
    greedy verification), ``q: [B, K, V] | None`` probabilities over the same V, ``draft_tokens: [B, K]`` integer ids
    in ``[0, V)``, ``num_drafts: [B]`` counts in ``[0, K]`` or None."""
    name = "target_logits" if logits else "p (the target's probabilities)"
    one_round = " (one round is a batch of one: add the batch dimension with [None])"
    if not isinstance(draft_tokens, torch.Tensor) or draft_tokens.ndim != 2:
        hint = one_round if isinstance(draft_tokens, torch.Tensor) and draft_tokens.ndim == 1 else ""
        raise ConfigError(f"draft_tokens must be a LongTensor [B, K] (one row per round), got "
                          f"{_shape(draft_tokens)}{hint}.")
    if draft_tokens.is_floating_point() or draft_tokens.dtype == torch.bool:
        raise ConfigError(f"draft_tokens must hold integer token ids, got dtype {draft_tokens.dtype}.")
    batch, width = draft_tokens.shape
    if not isinstance(p, torch.Tensor) or p.ndim != 3 or tuple(p.shape[:2]) != (batch, width + 1):
        hint = one_round if isinstance(p, torch.Tensor) and p.ndim == 2 else ""
        raise ConfigError(
            f"{name} must have shape [B, K + 1, V] = [{batch}, {width + 1}, V] for draft tokens [B, K] = "
            f"[{batch}, {width}] (one row per draft token and one for the bonus token), got {_shape(p)}{hint}."
        )
    vocab = p.shape[-1]
    if q is not None:
        if not isinstance(q, torch.Tensor) or q.ndim != 3 or tuple(q.shape[:2]) != (batch, width):
            raise ConfigError(
                f"q (the drafter's probabilities) must have shape [B, K, V] = [{batch}, {width}, V] (the distribution "
                f"each draft token was drawn from) or be None (no distribution: a point mass on each draft), got "
                f"{_shape(q)}."
            )
        if q.shape[-1] != vocab:
            raise ConfigError(
                f"p and q must cover the same vocabulary, got V = {vocab} for p and V = {q.shape[-1]} for q. "
                "The draft and the target must share a tokenizer (see specdec_lib.core.vocab)."
            )
        check_probabilities("q", q)
    if not logits:
        check_probabilities("p", p)
    if draft_tokens.numel() and (int(draft_tokens.min()) < 0 or int(draft_tokens.max()) >= vocab):
        raise ConfigError(f"draft_tokens must be token ids in [0, {vocab}), got {draft_tokens.tolist()}.")
    if num_drafts is not None and (not isinstance(num_drafts, torch.Tensor) or num_drafts.shape != (batch,)
                                   or (batch and (int(num_drafts.min()) < 0 or int(num_drafts.max()) > width))):
        got = num_drafts.tolist() if isinstance(num_drafts, torch.Tensor) else type(num_drafts).__name__
        raise ConfigError(f"num_drafts must be a LongTensor [B] = [{batch}] of counts in [0, K = {width}] (None: K "
                          f"each), got {got}.")


# ------------------------------------------------------------------------------------------------ the drafted path


@dataclass(frozen=True)
class DraftedPath:
    """A batch of drafts and the probabilities of the drafted path, shared by the sampling rules (token-wise here,
    block in `specdec_lib.core.block_verify`).

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
    """Read the drafted path's p and q off batch inputs of valid shapes, and refuse a q that rules out its own draft
    (a check on what the drafter reported, so it runs on every call, the round engine's included)."""
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


# ---------------------------------------------------------------------------------------------------------- greedy


def greedy_rule(target_logits: torch.Tensor, draft_tokens: torch.Tensor,
                num_drafts: torch.Tensor | None = None) -> Verdict:
    """`verify_greedy`'s arithmetic, on inputs of valid shapes."""
    width = draft_tokens.shape[1]
    choice = target_logits.argmax(dim=-1)  # [B, K + 1]: t_{b,i}, the target's greedy token after d_1 .. d_i
    matches = draft_tokens.to(choice.device) == choice[:, :width]  # [B, K]
    count = width  # every row drafted K (an int: no tensor to build on the common path)
    if num_drafts is not None:
        count = num_drafts.to(choice.device)
        matches &= torch.arange(width, device=choice.device) < count[:, None]
    accepted = _accepted_prefix(matches)  # [B]: n_b
    return Verdict(accepted, choice.gather(1, accepted[:, None])[:, 0], accepted == count, chain_path(accepted, width))


def verify_greedy(target_logits: torch.Tensor, draft_tokens: torch.Tensor,
                  num_drafts: torch.Tensor | None = None) -> Verdict:
    """Greedy verification of B rounds: ``draft_tokens: LongTensor[B, K]`` against ``target_logits: FloatTensor[B,
    K + 1, V]``; ``num_drafts: LongTensor[B]`` the drafts of each row (None: K each).

    With ``t_{b,i} = argmax(target_logits[b, i])`` (ties to the lowest id, as in greedy decoding):

    - ``accepted[b] = n`` is the largest n <= num_drafts[b] with ``draft_tokens[b, i] == t_{b,i}`` for every ``i < n``;
    - ``next_token[b] = t_{b,n}``: the recovered token when ``n < num_drafts[b]`` (the target's choice where the
      draft went wrong), the bonus token when every draft was accepted.

    The emitted tokens ``draft_tokens[b, :n] + [next_token[b]]`` are exactly what the target's own greedy decoding
    would produce, which is why greedy speculative decoding is token-identical to the target alone.
    EOS-agnostic: stopping at an end-of-sequence token is the generation loop's job. Returns a `Verdict` (the type
    every verifier returns). One round: ``verify_greedy(logits[None], drafts[None])``.
    """
    check_chain(target_logits, None, draft_tokens, num_drafts, logits=True)
    return greedy_rule(target_logits, draft_tokens, num_drafts)


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


def rejection_rule(p: torch.Tensor, drafted: DraftedPath, generator: torch.Generator | None,
                   lenience: float = 1.0) -> Verdict:
    """`verify_exact`'s arithmetic (``lenience = 1``) and `verify_relaxed`'s: accept with min(1, lenience p/q)."""
    u = torch.rand(drafted.tokens.shape, generator=generator, device=p.device)  # [B, K]: one u_i ~ U[0, 1) a position
    # accept x_i  <=>  u_i < min(1, l p_i(x_i) / q_i(x_i))  <=>  u_i q_i(x_i) < l p_i(x_i)   (no division, never NaN:
    # q_i(x_i) > 0 is checked; p = 0 rejects; l = lenience, 1 for exact verification); padding is never accepted
    accepted = _accepted_prefix((u * drafted.q_draft < lenience * drafted.p_draft) & drafted.valid)  # [B]: n_b
    bonus = accepted == drafted.num_drafts
    p_n = rows_at(p, accepted)  # [B, V]: p_n, the row after the accepted drafts (p_k, the bonus row, after all k)
    # rejected at n: the recovered token's law is norm(max(p_n - q_n, 0)); all k accepted: q_k = 0, so it is p_k
    distribution = torch.where(bonus[:, None], p_n, residual_distribution(p_n, rows_at(drafted.q, accepted)))
    return Verdict(accepted, draw_each_row(distribution, generator), bonus, chain_path(accepted, drafted.tokens.shape[1]))


def verify_exact(p: torch.Tensor, q: torch.Tensor | None, draft_tokens: torch.Tensor,
                 num_drafts: torch.Tensor | None = None, generator: torch.Generator | None = None) -> Verdict:
    """Exact sampling verification of B rounds by modified rejection sampling.

    ``draft_tokens: LongTensor[B, K]``, ``num_drafts: LongTensor[B]`` (None: K each). In row b (its index dropped
    below; indices 0-based), ``x_i = draft_tokens[b, i]``. ``p: FloatTensor[B, K + 1, V]`` holds the target's
    processed distributions (``logits_to_probs(target_logits, sampling)``): ``p_i = p[b, i]`` follows the committed
    sequence and ``x_0 .. x_{i-1}``. ``q: FloatTensor[B, K, V]``: ``q_i = q[b, i]`` is the distribution the drafter
    *actually* drew ``x_i`` from, processed the same way; or None when the drafter has no distribution (each draft is
    then treated as a point mass: accepted with probability ``p_i(x_i)``, the residual is ``p_i`` without ``x_i``,
    renormalised).

    With one uniform ``u_i`` per position, drawn up front from ``generator`` (one ``[B, K]`` block, so a seed fixes
    the round), then one multinomial draw of B tokens:

    - for i = 0 .. k-1: accept ``x_i`` with probability ``min(1, p_i(x_i) / q_i(x_i))``;
    - at the first rejection, draw a **recovered** token from ``norm(max(p_i - q_i, 0))`` and stop;
    - if all k are accepted, draw a **bonus** token from ``p_k`` (the row after them).

    The emitted tokens are then distributed exactly as if the target had sampled them one by one, whatever q is,
    *as long as q is the distribution the drafts were really drawn from*. A drafter reporting another q (the
    un-tempered softmax while sampling at temperature 0.7, one-hot rows while sampling...) silently changes the
    output distribution. A draft token the reported q gives probability 0 is refused with a `ConfigError` (the
    drafter cannot have drawn it: its q is wrong). Zeros elsewhere in p or q and the all-zero residual (only when
    ``p_i == q_i``; see `residual_distribution`) are handled without NaNs. With one-hot p and q this is exactly
    `verify_greedy`. Returns a `Verdict`; one round: ``verify_exact(p[None], q[None], drafts[None])``.
    """
    check_chain(p, q, draft_tokens, num_drafts)
    return rejection_rule(p, drafted_path(p, q, draft_tokens, num_drafts), generator)


def verify_relaxed(p: torch.Tensor, q: torch.Tensor | None, draft_tokens: torch.Tensor,
                   num_drafts: torch.Tensor | None = None, generator: torch.Generator | None = None, *,
                   lenience: float) -> Verdict:
    """NOT DISTRIBUTION-PRESERVING. Lenient rule: accept ``x_i`` w.p. ``min(1, lenience * p_i(x_i) / q_i(x_i))``.

    Same inputs, random draws and residual ``norm(max(p_i - q_i, 0))`` as `verify_exact`, which it equals for
    ``lenience = 1``. A lenience above 1 accepts more drafts (more tokens per target forward) at the price of
    emitting text that is **no longer distributed like the target's**: the output drifts towards the draft's
    distribution q. This is the "lenience" knob of Leviathan et al. (2023, appendix A.5), kept here to measure
    what the trade costs; never use it where the speculative output must match the target's.
    """
    check_lenience(lenience)
    check_chain(p, q, draft_tokens, num_drafts)
    return rejection_rule(p, drafted_path(p, q, draft_tokens, num_drafts), generator, float(lenience))
