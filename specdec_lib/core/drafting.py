"""What the round engine asks of a drafter: the one interface every drafter implements, whatever it drafts (a chain
for one row, chains for a batch of rows, or a token tree). The drafters themselves live in `specdec_lib.drafters`.

Drafting is separated from verification (as in transformers' candidate generators): the round engine
(`specdec_lib.core.engine`) owns the target and the acceptance test, and talks to any drafter through a few calls:

    drafter.begin(context, max_length=N, target_vocab_size=V)    once per generation, after the prefill
    draft = drafter.propose(context, sampling, generator)        each round: up to context.budget[b] tokens per row
    drafter.accept(context)                                      each round: context.lengths are the committed lengths
    drafter.select(rows)                                         rows leaving the batch (batch drafters)

A `Context` shows the committed tokens of every row (``context.sequence``, ``context.k`` for one row). A `Draft`
holds ``tokens [B, K]`` (a drafter for one row may return ``[k]``), the distribution each token was drawn from
(``probs``, or None for point masses), the drafter's model forwards and, for a token tree, the parent of each node.

What a drafter can do is declared, not discovered: ``batches`` (B > 1 rows), ``trees`` (token trees), and three
ways of reading the *target's* work instead of running a model of its own (the draft-free drafters of notebook 05):

- ``wants_target_hidden``: `observe_target` receives the target's hidden states at the committed positions
  (Medusa heads and EAGLE draft from them): those of ``hidden_layers``, side by side (default: the last layer's,
  after the final norm; an EAGLE-3-style layer reads a low, a middle and the last one);
- ``reads_target``: `observe_target` receives the target's logits after every forward (Jacobi decoding guesses
  from them);
- ``shares_target_cache``: the engine lends the drafter the target's own KV cache (`attach_target`) and lets it run
  the verification forward (`target_forward`); self-speculative early exit drafts with the target's first layers.

The contract that matters most: **a drafter reports the distribution it actually drew each token from**
(``Draft.probs``). Exact speculative sampling accepts a draft token x with probability ``min(1, p(x) / q(x))``;
if q is not the real sampling distribution (the drafter sampled at temperature 0.7 but reported its temperature-1
softmax, or applied top-k only when sampling), the output distribution silently stops being the target's. Real
systems have shipped this bug. A greedy drafter and a drafter with no distribution at all (prompt lookup copies
tokens) report None: exact verification then treats each token as drawn from a point mass. Rows of ``probs`` are
over the *target's* ids (``target_vocab_size``): a draft model whose embedding table is padded beyond the target's
vocabulary gives its extra ids no mass. Every model drafter draws its tokens with `specdec_lib.core.sampling.draw`,
so they all agree on this.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch

from .errors import ConfigError
from .sampling import SamplingConfig
from .trees import TreeShape


@dataclass
class Context:
    """What a drafter sees of the B rows it drafts for.

    ``tokens: LongTensor[B, capacity]``: row b's committed tokens are ``tokens[b, :lengths[b]]`` (the engine's
    buffer, on the target's device: read it, never write it); ``budget[b]``: the most tokens row b may draft this
    round (0: nothing); ``tree``: the token tree to draft (one row; None: a chain), already cut to the budget;
    ``path``: in `accept` after a tree round, the accepted nodes (None otherwise).
    """

    tokens: torch.Tensor
    lengths: list[int]
    budget: list[int]
    tree: TreeShape | None = None
    path: tuple[int, ...] | None = None

    @property
    def batch(self) -> int:
        return len(self.lengths)

    @property
    def drafting(self) -> bool:
        """Whether any row may draft this round (near the budget's end, or above ``disable_by_batch_size``, none may)."""
        return max(self.budget, default=0) > 0

    def row(self, b: int) -> torch.Tensor:
        """``LongTensor[L_b]``: row b's committed tokens (a view)."""
        return self.tokens[b, : self.lengths[b]]

    @property
    def sequence(self) -> torch.Tensor:
        """``LongTensor[1, L]``: the committed tokens of the only row (a view); drafters for one row read this."""
        self._require_one_row("sequence")
        return self.tokens[:1, : self.lengths[0]]

    @property
    def k(self) -> int:
        """The budget of the only row."""
        self._require_one_row("k")
        return self.budget[0]

    def _require_one_row(self, what: str) -> None:
        if self.batch != 1:
            raise ConfigError(f"context.{what} is the one row of a batch of one; this batch has {self.batch} rows "
                              "(read context.row(b) and context.budget[b]).")

    @classmethod
    def of(cls, sequence: torch.Tensor, k: int = 0, tree: TreeShape | None = None) -> "Context":
        """A context of one row, ``sequence: LongTensor[1, L]``, asking for ``k`` drafts: for calling a drafter by
        hand (a notebook, a test)."""
        if not isinstance(sequence, torch.Tensor) or sequence.ndim != 2 or sequence.shape[0] != 1:
            raise ConfigError(f"Context.of takes one row, a LongTensor[1, L], got {getattr(sequence, 'shape', sequence)}.")
        return cls(sequence, [sequence.shape[1]], [k], tree)


@dataclass
class Draft:
    """What a drafter proposes in one round.

    ``tokens: LongTensor[B, K]`` (a drafter for one row may give ``[K]``, stored as ``[1, K]``): row b's draft is
    ``tokens[b, :lengths[b]]`` (`row`);
    ``lengths``: k'_b <= ``context.budget[b]`` per row (None: K each; ``k' = 0`` is allowed: nothing to propose);
    ``probs: FloatTensor[B, K, V]`` (or ``[K, V]``) | None: the distribution over the target's V ids each token was
    drawn from (None: point masses, a greedy draft or a copy); ``forwards``: the drafter's model forwards this round
    (0 for drafters without a model); ``parents``: for a token tree (one row), node i's parent, -1 for the root (the
    last committed token), listed breadth first; the tree's nodes are ``tokens[0]``.
    """

    tokens: torch.Tensor
    probs: torch.Tensor | None = None
    forwards: int = 0
    lengths: list[int] | None = None
    parents: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        """A one-row draft given as ``[K]`` (``probs [K, V]``) is stored as the batch of one it is, ``[1, K]``."""
        if isinstance(self.tokens, torch.Tensor) and self.tokens.ndim == 1:
            self.tokens = self.tokens[None]
            if isinstance(self.probs, torch.Tensor) and self.probs.ndim == 2:
                self.probs = self.probs[None]

    def __len__(self) -> int:
        """Tokens drafted for the first row (a drafter for one row: its draft's length)."""
        return self.tokens.shape[-1] if self.lengths is None else self.lengths[0]

    def row(self, b: int = 0) -> torch.Tensor:
        """``LongTensor[k'_b]``: row b's drafted tokens (a tree's nodes, for a tree)."""
        return self.tokens[b, : self.tokens.shape[1] if self.lengths is None else self.lengths[b]]

    @classmethod
    def empty(cls, batch: int = 1, device: torch.device | str = "cpu") -> "Draft":
        """A draft of zero tokens for ``batch`` rows (the round degenerates into one ordinary target step)."""
        return cls(tokens=torch.empty(batch, 0, dtype=torch.long, device=device), lengths=[0] * batch)


class Drafter(ABC):
    """Base class of every drafter (module docstring). Subclasses implement `propose`; the other calls default to
    doing nothing.

    ``name`` goes into the result's method string; ``device`` is where the drafter computes (None for drafters
    that run no model, such as prompt lookup). ``proposes_target_ids``: every proposed id is one the target can read
    by construction (copied from the sequence, or an argmax or sample over at most the target's V logits), so the
    engine skips its range check of the draft ids (a host synchronisation per round on a GPU).
    """

    name: str = "drafter"
    device: torch.device | None = None
    batches: bool = False
    trees: bool = False
    wants_target_hidden: bool = False
    hidden_layers: tuple[int, ...] = (-1,)  # transformers' hidden_states indices `observe_target` receives
    reads_target: bool = False
    shares_target_cache: bool = False
    proposes_target_ids: bool = False

    def begin(self, context: Context, *, max_length: int | None = None, target_vocab_size: int | None = None) -> None:
        """A new generation, its prompts and first tokens in ``context``: reset all state. ``max_length``: the most
        positions a row will reach, to size buffers by; ``target_vocab_size``: the width V of the target's logits,
        the ids ``Draft.probs`` rows cover (None: unknown, the drafter's own)."""

    @abstractmethod
    def propose(self, context: Context, sampling: SamplingConfig, generator: torch.Generator | None) -> Draft:
        """Up to ``context.budget[b]`` tokens continuing each row (or a tree of ``context.tree``). Greedy
        ``sampling``: argmax tokens with ``probs=None``; otherwise draw each token with ``generator`` from
        ``logits_to_probs(logits, sampling)`` and return exactly those rows as ``probs`` (`sampling.draw` does both)."""

    def accept(self, context: Context) -> None:
        """The rows now have ``context.lengths`` committed tokens (after a tree round, ``context.path`` holds the
        accepted nodes): roll internal state back so that it holds nothing beyond what was kept. The token at
        position ``lengths[b] - 1`` is the target's own (recovered or bonus) and may differ from any draft."""

    def select(self, rows: torch.Tensor) -> None:
        """Only the rows ``rows: LongTensor[B']`` (batch indices, in order) go on (the others finished)."""

    def observe_target(self, output: "TargetOutput") -> None:
        """(``wants_target_hidden`` or ``reads_target``) What the target computed in its last forward (one row),
        called after the prefill and after every verification, before `accept`."""
        raise NotImplementedError(f"{type(self).__name__} reads the target's output but has no observe_target().")

    def attach_target(self, target_rows) -> None:
        """(``shares_target_cache``) The target's `CachedRows` for this generation, before `begin`."""
        raise NotImplementedError(f"{type(self).__name__} shares the target's cache but has no attach_target().")

    def target_forward(self, step_input: torch.Tensor, logits_to_keep: int) -> torch.Tensor:
        """(``shares_target_cache``) The verification forward: float32 logits ``[1, logits_to_keep, V]`` for
        ``step_input: LongTensor[1, 1 + k']`` (the last committed token and the drafts), appended to the target's
        cache in every layer, exactly what the full target forward would give."""
        raise NotImplementedError(f"{type(self).__name__} shares the target's cache but has no target_forward().")


@dataclass
class TargetOutput:
    """What the target computed in one forward, for drafters that read it (one row).

    ``logits: [T, V]``: the forward's rows (the prefill keeps only its last position); ``hidden: [n, H * D] |
    None``: the hidden states of the drafter's H ``hidden_layers`` (default: the last layer's, normed) at the n
    inputs whose outputs were kept (every prompt position after the prefill; after a round that kept ``a`` drafts,
    the last committed token and those ``a``), None unless the drafter ``wants_target_hidden``; ``accepted``: the
    drafts the target accepted (0 for the prefill)."""

    logits: torch.Tensor
    hidden: torch.Tensor | None
    accepted: int


class WrappedDrafter(Drafter):
    """A drafter that passes every call through to ``inner`` (subclasses override the calls they watch: the
    notebooks' round recorder, the benchmark's timer, an adaptive schedule). The capabilities pass through too, and
    any other attribute (``cache``, ``model``) is the inner drafter's."""

    def __init__(self, inner: Drafter) -> None:
        self.inner = inner

    def __getattr__(self, attribute: str):  # only called for attributes the wrapper itself lacks
        if attribute == "inner":
            raise AttributeError(attribute)
        return getattr(self.inner, attribute)

    name = property(lambda self: getattr(self.inner, "name", type(self.inner).__name__))  # type: ignore[assignment]
    device = property(lambda self: getattr(self.inner, "device", None))  # type: ignore[assignment]
    batches = property(lambda self: self.inner.batches)  # type: ignore[assignment]
    trees = property(lambda self: self.inner.trees)  # type: ignore[assignment]
    wants_target_hidden = property(lambda self: self.inner.wants_target_hidden)  # type: ignore[assignment]
    hidden_layers = property(lambda self: self.inner.hidden_layers)  # type: ignore[assignment]
    reads_target = property(lambda self: self.inner.reads_target)  # type: ignore[assignment]
    shares_target_cache = property(lambda self: self.inner.shares_target_cache)  # type: ignore[assignment]
    proposes_target_ids = property(lambda self: self.inner.proposes_target_ids)  # type: ignore[assignment]

    def begin(self, context: Context, **limits) -> None:
        self.inner.begin(context, **limits)

    def propose(self, context: Context, sampling: SamplingConfig, generator: torch.Generator | None) -> Draft:
        return self.inner.propose(context, sampling, generator)

    def accept(self, context: Context) -> None:
        self.inner.accept(context)

    def select(self, rows: torch.Tensor) -> None:
        self.inner.select(rows)

    def observe_target(self, output: TargetOutput) -> None:
        self.inner.observe_target(output)

    def attach_target(self, target_rows) -> None:
        self.inner.attach_target(target_rows)

    def target_forward(self, step_input: torch.Tensor, logits_to_keep: int) -> torch.Tensor:
        return self.inner.target_forward(step_input, logits_to_keep)
