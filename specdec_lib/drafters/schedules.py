"""Adaptive draft length: how many tokens to draft each round, decided as generation goes.

A fixed gamma is a bet on one acceptance rate. Acceptance changes along a generation (boilerplate is easy, names
are hard), so runtimes adapt the draft length. Two places to decide, two kinds of rule:

- **between rounds** (`HeuristicSchedule`, a wrapper around any drafter): transformers'
  ``num_assistant_tokens_schedule="heuristic"``: after a round that accepted every draft, draft 2 more next time;
  after any rejection, 1 fewer (never below 1). The loop's ``gamma`` stays the cap.
- **within a round** (a `DraftStopRule` given to `DraftModelDrafter(stop_rule=...)`): after each drafted token
  the rule sees the draft's confidences so far (the probability the draft gave each of its tokens) and may stop
  the draft early, before ``k`` tokens.

  - `ConfidenceStop`: stop once a token's confidence falls below a threshold (transformers'
    ``assistant_confidence_threshold``, 0.4 by default; transformers also re-fits the threshold on a ROC curve of
    past rounds when scikit-learn is installed, which this fixed version does not do);
  - `CostAwareStop` (the course's rule): drafting one more token costs ``c`` (one draft forward) plus
    ``marginal_verify`` (one more position in the verification forward), both in one-token target forwards, and
    saves at most one target forward, and only if the target accepts every draft so far. With confidences
    ``p_1 .. p_j`` as acceptance estimates, stop when ``p_1 * ... * p_j < c + marginal_verify``: the chance that
    one more token pays is below its price. It assumes confidences are calibrated; where they are overconfident
    it drafts too long.

Neither kind changes the output: greedy stays token-identical and sampling stays exact, because the verifier
checks whatever was drafted (the draft length may depend on the draft's own probabilities, never on the target's
choice for the drafted positions). The tests check both.
"""

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import replace

import torch

from ..core.errors import ConfigError
from ..core.drafting import Context, Draft, Drafter, WrappedDrafter
from ..core.sampling import SamplingConfig
from ..core.validation import check_count, check_number


class DraftStopRule(ABC):
    """Decides, after each drafted token, whether the draft model should stop drafting this round."""

    name: str = "stop-rule"

    @abstractmethod
    def should_stop(self, confidences: Sequence[float]) -> bool:
        """``confidences``: the probability the draft gave each token drafted so far this round (>= 1 entry)."""


class ConfidenceStop(DraftStopRule):
    """Stop as soon as the last drafted token's confidence is below ``threshold`` (that token is still proposed,
    as in transformers' ``ConfidenceCriteria``)."""

    def __init__(self, threshold: float = 0.4) -> None:
        self.threshold = check_number("threshold (a probability)", threshold, minimum=0, maximum=1)
        self.name = f"confidence<{self.threshold:g}"

    def should_stop(self, confidences: Sequence[float]) -> bool:
        return confidences[-1] < self.threshold


class CostAwareStop(DraftStopRule):
    """Stop when ``prod(confidences) < c + marginal_verify`` (module docstring): the estimated probability that
    the next draft token is even reached is below what drafting and verifying it costs.

    ``c``: one draft forward in target forwards; ``marginal_verify``: the extra cost of one more verified position
    (``(v(gamma) - 1) / gamma`` from measured verification costs ``v``), >= 0."""

    def __init__(self, c: float, marginal_verify: float) -> None:
        c = check_number("c (one draft forward, in one-token target forwards)", c, minimum=0)
        marginal_verify = check_number("marginal_verify (one more verified position, in one-token target forwards)",
                                       marginal_verify, minimum=0)
        if c + marginal_verify >= 1:
            raise ConfigError(
                f"c + marginal_verify = {c + marginal_verify:.3f} >= 1: one drafted token would cost more than the "
                "target forward it can save, so no draft ever pays. Use a cheaper drafter, or decode without one."
            )
        self.c, self.marginal_verify = c, marginal_verify
        self.price = self.c + self.marginal_verify
        self.name = f"cost-aware(price={self.price:.3f})"

    def should_stop(self, confidences: Sequence[float]) -> bool:
        return math.prod(confidences) < self.price


class HeuristicSchedule(WrappedDrafter):
    """transformers' heuristic draft length around any drafter: start at ``initial`` tokens (None: the loop's
    gamma), +2 after a round whose drafts were all accepted, -1 (at least 1) after a round with a rejection.

    Reset by every `begin` (transformers' ``"heuristic_transient"``; its ``"heuristic"`` carries the length over
    to the next ``generate`` call). The loop's gamma caps every round, as transformers' cap is
    ``num_assistant_tokens`` and the model's length."""

    def __init__(self, inner: Drafter, initial: int | None = None) -> None:
        super().__init__(inner)
        if initial is not None:
            check_count("initial (the first draft length)", initial, minimum=1, hint="None: the loop's gamma.")
        self.initial = initial
        self.length: int | None = initial  # the draft length of the next round (None: not set yet)
        self.lengths: list[int] = []  # the draft length of every round so far, for plots
        self._proposed_at = 0  # sequence length when the last draft was proposed
        self._drafted = 0

    name = property(lambda self: f"{getattr(self.inner, 'name', type(self.inner).__name__)}+heuristic")  # type: ignore[assignment]

    def begin(self, context: Context, **limits) -> None:
        self.length, self.lengths, self._drafted = self.initial, [], 0
        super().begin(context, **limits)

    def propose(self, context: Context, sampling: SamplingConfig, generator: torch.Generator | None) -> Draft:
        if self.length is None:
            self.length = context.k
        capped = replace(context, row_k=[min(context.k, self.length)])
        draft = self.inner.propose(capped, sampling, generator)
        self._proposed_at, self._drafted = context.lengths[0], len(draft)
        self.lengths.append(len(draft))
        return draft

    def accept(self, context: Context) -> None:
        if self._drafted:  # empty drafts say nothing about acceptance
            accepted = context.lengths[0] - self._proposed_at - 1
            self.length = self.length + 2 if accepted >= self._drafted else max(1, self.length - 1)
            self._drafted = 0
        super().accept(context)
