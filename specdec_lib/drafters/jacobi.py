"""Jacobi decoding as a drafter: greedy decoding solved as a fixed-point iteration of the target itself.

Greedy decoding defines the next n tokens by n equations, ``y_i = argmax p(. | x, y_1 .. y_{i-1})`` for
i = 1 .. n. Autoregressive decoding solves them one after the other: n sequential target forwards. Jacobi
decoding (Santilli et al. 2023, "Accelerating Transformer Inference for Translation via Parallel Decoding"; Song
et al. 2021 for Jacobi iteration in neural networks) updates all n unknowns at once from a guess ``y^0``:

    y^{t+1}_i = argmax p(. | x, y^t_1 .. y^t_{i-1})     for every i, in ONE forward over [x, y^t_1 .. y^t_n]

The greedy output is the fixed point, and the iteration reaches it in at most n steps: ``y^{t+1}_1`` is exact
(it depends on x only), and once ``y^t_1 .. y^t_j`` are exact, ``y^{t+1}_{j+1}`` is. It saves forwards only
when a position's prediction comes out right although the guess before it was still wrong, which happens in
repetitive text (the embedded target's loops) and rarely elsewhere. Lookahead decoding (Fu et al. 2024) keeps the
n-grams these iterations produce and verifies them like drafts.

Committing the converged prefix after each iteration is *greedy verification with the previous iterate as the
draft*: the round engine's ``verify_greedy`` accepts the guesses that equal the target's choice and appends the
target's own next token, so the output is token-identical to greedy decoding, the target runs once per iteration,
and there is no draft model: the "draft" is the target's own last forward, which this drafter reads
(`observe`). That is how draft-free parallel decoding relates to speculative decoding, and how it differs:
nothing cheap proposes, the expensive model guesses for itself.
"""

from __future__ import annotations

import torch

from ..core.drafting import Context, Draft, Drafter, TargetOutput
from ..core.sampling import SamplingConfig


class JacobiDrafter(Drafter):
    """The target's last forward as the draft (module docstring): each round proposes the Jacobi update of the
    positions not yet converged (the argmax of the verification rows after the accepted ones), padded to the round's
    k with the last committed token (the initial guess of a new position). Greedy only, one row."""

    name = "jacobi"

    def __init__(self) -> None:
        self.guess = torch.empty(0, dtype=torch.long)  # LongTensor[<= k]: the current iterate

    def begin(self, context: Context, *, max_length: int | None = None, target_vocab_size: int | None = None) -> None:
        self.guess = torch.empty(0, dtype=torch.long, device=context.tokens.device)

    def observe(self, output: TargetOutput) -> None:
        """Rows ``accepted + 1 ..`` of the verification forward predicted the positions after the target's own
        token from the guesses before them: their argmax is the next iterate."""
        self.guess = output.logits[output.accepted + 1 :].argmax(dim=-1)

    def propose(self, context: Context, sampling: SamplingConfig, generator: torch.Generator | None) -> Draft:
        k = context.k
        last = context.sequence[0, -1]
        filler = last.expand(max(k - self.guess.numel(), 0))  # new positions: the last committed token
        return Draft(torch.cat([self.guess[:k], filler]))
