"""Block verification (Sun, Mendlovic, Leviathan, Aharoni, Beirami, Ro & Suresh, ICLR 2025): exact sampling
verification that decides the accepted prefix of a draft jointly. Pure functions, no model; the same inputs,
``[B, K]`` shapes and `Verdict` as `specdec_lib.core.verify`.
"""

from dataclasses import dataclass

import torch

from .verify import DraftedPath, Verdict, chain_path, check_chain, draw_each_row, drafted_path, rows_at

# --------------------------------------------------------------------------------------------------------------
# Block verification (Sun, Mendlovic, Leviathan, Aharoni, Beirami, Ro & Suresh, ICLR 2025)
#
# Token-wise verification stops at the first rejection, although a rejected x_i might have been worth keeping when
# the target likes what follows it more than the draft did. Block verification decides the accepted length tau of
# the whole block jointly, from the on-path probabilities only. With w_0 = 1 and the *prefix weights*
#
#   w_{i+1} = min(w_i p_i(x_i) / q_i(x_i), 1)                      (how much of the target's path mass survives)
#
# the residual mass after keeping i drafts is Z_i = sum_x max(w_i p_i(x) - q_i(x), 0), with q_k = 0 at the bonus
# position (so Z_k = w_k). Each length i gets the threshold h_i = Z_i / (Z_i + 1 - w_i) (h_0 = 1, h_k = w_k); with
# one uniform eta_i per length, tau = max{i : eta_i <= h_i} (the longest length that passes its own test), and the
# token after the kept drafts is drawn from norm(max(w_tau p_tau - q_tau, 0)) (p_k for a full block). The paper
# proves this emits exactly the target's distribution and accepts, in expectation, at least as many tokens as any
# valid verifier that reads only the on-path probabilities (token-wise verification included). At temperature 0 the
# weights are 0 or 1 and it coincides with greedy verification. Indices are 0-based rows: p[i] is p_i.
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BlockThresholds:
    """What block verification computes for a batch of B drafts, for every accepted length ``i = 0 .. K``.

    ``weights: [B, K + 1]`` the prefix weights w_i; ``residual_mass: [B, K + 1]`` Z_i; ``thresholds: [B, K + 1]`` h_i,
    the probability that length i passes its test (0 beyond a row's own drafts); ``residuals: [B, K + 1, V]``
    ``max(w_i p_i - q_i, 0)`` (unnormalised), whose normalisation the token after ``i`` kept drafts is drawn from.
    """

    weights: torch.Tensor
    residual_mass: torch.Tensor
    thresholds: torch.Tensor
    residuals: torch.Tensor

    def length_distribution(self) -> torch.Tensor:
        """``[B, K + 1]``: P(tau = i) = h_i * prod_{j > i} (1 - h_j), the law of each draft's accepted length."""
        fail_after = torch.flip(torch.cumprod(torch.flip(1 - self.thresholds, [-1]), -1), [-1])  # prod_{j >= i} (1 - h_j)
        later = torch.cat([fail_after[..., 1:], torch.ones_like(fail_after[..., :1])], dim=-1)  # prod_{j > i} (1 - h_j)
        return self.thresholds * later


def _block_thresholds(p: torch.Tensor, drafted: DraftedPath) -> BlockThresholds:
    """`BlockThresholds` of a batch ``[B, K + 1]``; lengths beyond a row's own drafts get threshold 0 (never kept)."""
    width = drafted.tokens.shape[1]
    ratio = drafted.p_draft / torch.where(drafted.valid, drafted.q_draft, 1.0)  # [B, K]: p_i(x_i) / q_i(x_i)
    weights = [p.new_ones(p.shape[0])]  # w_0 = 1
    for i in range(width):
        weights.append(torch.clamp(weights[-1] * ratio[:, i], max=1.0))  # w_{i+1}
    w = torch.stack(weights, dim=1)  # [B, K + 1]
    residuals = (w[..., None] * p - drafted.q).clamp_min(0)  # [B, K + 1, V]: max(w_i p_i - q_i, 0), q = 0 at the bonus
    mass = residuals.sum(dim=-1)  # [B, K + 1]: Z_i
    denominator = mass + 1 - w
    thresholds = torch.where(denominator > 0, mass / torch.where(denominator > 0, denominator, 1), 0.0).clamp(0, 1)
    thresholds[:, 0] = 1.0  # w_0 = 1: h_0 = Z_0 / Z_0, and tau = 0 is always possible
    possible = torch.arange(width + 1, device=p.device) <= drafted.num_drafts[:, None]  # [B, K + 1]
    return BlockThresholds(w, mass, thresholds * possible, residuals)


def block_thresholds(p: torch.Tensor, q: torch.Tensor | None, draft_tokens: torch.Tensor,
                     num_drafts: torch.Tensor | None = None) -> BlockThresholds:
    """The prefix weights, residuals and thresholds of block verification (section comment above) for a batch of
    drafts, with the inputs of `specdec_lib.core.verify.verify_exact` (``p: [B, K + 1, V]``, ``q: [B, K, V] | None``,
    ``draft_tokens: LongTensor[B, K]``, ``num_drafts: [B]``). Pure and deterministic: the randomness is all in
    `verify_block`'s draws. One draft: ``block_thresholds(p[None], q[None], drafts[None])``, then ``[0]`` of each
    field."""
    check_chain(p, q, draft_tokens, num_drafts)
    return _block_thresholds(p, drafted_path(p, q, draft_tokens, num_drafts))


def block_rule(p: torch.Tensor, drafted: DraftedPath, generator: torch.Generator | None) -> Verdict:
    """`verify_block`'s arithmetic: one ``[B, K + 1]`` block of uniforms, then one multinomial draw of B tokens."""
    block = _block_thresholds(p, drafted)
    eta = torch.rand(block.thresholds.shape, generator=generator, device=p.device)  # [B, K + 1]: one per length
    passing = eta <= block.thresholds  # lengths whose own test passed (0 always does)
    lengths = torch.arange(passing.shape[1], device=p.device)
    tau = torch.where(passing, lengths, 0).amax(dim=1)  # [B]: the longest passing length
    bonus = tau == drafted.num_drafts
    residual, mass = rows_at(block.residuals, tau), rows_at(block.residual_mass[..., None], tau)  # [B, V], [B, 1]
    recovered = torch.where(mass > 0, residual / torch.where(mass > 0, mass, 1), rows_at(p, tau))  # Z = 0: never drawn
    distribution = torch.where(bonus[:, None], rows_at(p, tau), recovered)
    return Verdict(tau, draw_each_row(distribution, generator), bonus, chain_path(tau, drafted.tokens.shape[1]))


def verify_block(p: torch.Tensor, q: torch.Tensor | None, draft_tokens: torch.Tensor,
                 num_drafts: torch.Tensor | None = None, generator: torch.Generator | None = None) -> Verdict:
    """Exact sampling verification that decides the accepted prefix jointly: block verification (Sun et al. 2025).

    Same inputs and `Verdict` as `specdec_lib.core.verify.verify_exact` (and the same refusal of a draft token with
    q = 0). With the prefix weights, residuals and thresholds of `block_thresholds`, and ``k + 1`` uniforms per row
    drawn up front from ``generator``: ``tau = max{i : eta_i <= h_i}`` drafts are kept and the next token is drawn
    from ``norm(max(w_tau p_tau - q_tau, 0))`` (**recovered**, tau < k) or ``p_k`` (**bonus**, tau = k). Distributed
    exactly like the target's own samples, and never fewer accepted tokens in expectation than `verify_exact`: on
    the paper's two-symbol toy (p = (1/3, 2/3), q = (2/3, 1/3), k = 2) 11/9 against 10/9.
    """
    check_chain(p, q, draft_tokens, num_drafts)
    return block_rule(p, drafted_path(p, q, draft_tokens, num_drafts), generator)
