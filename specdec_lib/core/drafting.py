"""What the round engine asks of a drafter: the one interface every drafter implements, whatever it drafts (a chain
for one row, chains for a batch of rows, or a token tree). The drafters themselves live in `specdec_lib.drafters`.

Drafting is separated from verification (as in transformers' candidate generators): the round engine
(`specdec_lib.core.engine`) owns the target and the acceptance test, and talks to any drafter through one set of
hooks, each with a default that does nothing:

    hidden_layers                                                the target's hidden states `observe` receives
                                                                 (transformers' hidden_states indices; empty: none)
    drafter.begin(context, max_length=N, target_vocab_size=V)    once per generation, before the first round
    verifier = drafter.verifier(rows)                            who runs the verification forward (default: the
                                                                 target's own `CachedRows`)
    draft = drafter.propose(context, sampling, generator)        each round: up to context.row_k[b] tokens per row
    drafter.observe(output)                                      each round: what the target's forward computed
    drafter.accept(context)                                      each round: context.lengths are the committed lengths
    drafter.select(rows)                                         rows leaving the batch (batch drafters)

A `Context` shows the committed tokens of every row (``context.sequence``, ``context.k`` for one row). A `Draft`
holds ``tokens [B, K]`` (a drafter for one row may return ``[k]``), the distribution each token was drawn from
(``probs``, or None for point masses), the drafter's model forwards and, for a token tree, the parent of each node.

The first round reads the prompts: a drafter that drafts from the tokens alone (a draft model, prompt lookup, a
suffix tree) drafts already then, and the prompts' forward verifies its drafts. A drafter that drafts from the
target's work returns an empty draft until `observe` has shown it some (Medusa heads and EAGLE read the target's
hidden states at ``hidden_layers``; Jacobi decoding guesses from its logits), and self-speculative early exit, whose
drafting writes into the target's own KV cache, returns its own `verifier` (the target's cache, its own forward).
What a drafter can draft is declared: ``batches`` (B > 1 rows) and ``trees`` (token trees).

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
from .trees import DynamicTree, TreeShape


@dataclass
class Context:
    """What a drafter sees of the B rows it drafts for.

    ``tokens: LongTensor[B, capacity]``: row b's committed tokens are ``tokens[b, :lengths[b]]`` (the engine's
    buffer, on the target's device: read it, never write it); ``row_k[b]``: k for row b, the most tokens it may draft
    this round (``min(gamma, tokens left - 1)``; 0: nothing); ``tree``: the token tree to draft (one row; None: a
    chain), already cut to that depth;
    ``path``: in `accept` after a tree round, the accepted nodes (None otherwise).
    """

    tokens: torch.Tensor
    lengths: list[int]
    row_k: list[int]
    tree: TreeShape | DynamicTree | None = None
    path: tuple[int, ...] | None = None

    @property
    def batch(self) -> int:
        return len(self.lengths)

    @property
    def drafting(self) -> bool:
        """Whether any row may draft this round (with one token left to emit, or above ``disable_by_batch_size``,
        none may)."""
        return max(self.row_k, default=0) > 0

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
        """k of the only row: the most tokens it may draft this round."""
        self._require_one_row("k")
        return self.row_k[0]

    def _require_one_row(self, what: str) -> None:
        if self.batch != 1:
            raise ConfigError(f"context.{what} is the one row of a batch of one; this batch has {self.batch} rows "
                              "(read context.row(b) and context.row_k[b]).")

    @classmethod
    def of(cls, sequence: torch.Tensor, k: int = 0, tree: TreeShape | DynamicTree | None = None) -> "Context":
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
    ``lengths``: k'_b <= ``context.row_k[b]`` per row (None: K each; ``k' = 0`` is allowed: nothing to propose);
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
    """Base class of every drafter (module docstring). Subclasses implement `propose`; every other hook defaults to
    doing nothing.

    ``name`` goes into the result's method string; ``device`` is where the drafter computes (None for drafters
    that run no model, such as prompt lookup); ``batches``, ``trees``: the shapes it drafts besides one chain;
    ``hidden_layers``: the target's hidden states `observe` receives, side by side (transformers' ``hidden_states``
    indices: -1 is the last layer's after the final norm, what Medusa heads and EAGLE-1 read; an EAGLE-3-style layer
    reads a low, a middle and the last one). Empty: none, and the target's forward computes none.
    """

    name: str = "drafter"
    device: torch.device | None = None
    batches: bool = False
    trees: bool = False
    hidden_layers: tuple[int, ...] = ()

    def begin(self, context: Context, *, max_length: int | None = None, target_vocab_size: int | None = None) -> None:
        """A new generation, its prompts in ``context``: reset all state. ``max_length``: the most positions a row
        will reach, to size buffers by; ``target_vocab_size``: the width V of the target's logits, the ids
        ``Draft.probs`` rows cover (None: unknown, the drafter's own)."""

    def verifier(self, rows):
        """What runs this generation's verification forwards: ``rows`` (the target's `CachedRows`) by default. A
        drafter that drafts into the target's own cache (early exit) keeps ``rows.cache`` and returns an object with
        the same ``forward(input_ids, valid, *, logits_to_keep, tree_parents, hidden) -> (logits, hidden states)``,
        whose logits equal the full target forward's."""
        return rows

    @abstractmethod
    def propose(self, context: Context, sampling: SamplingConfig, generator: torch.Generator | None) -> Draft:
        """Up to ``context.row_k[b]`` tokens continuing each row (or a tree of ``context.tree``). Greedy
        ``sampling``: argmax tokens with ``probs=None``; otherwise draw each token with ``generator`` from
        ``logits_to_probs(logits, sampling)`` and return exactly those rows as ``probs`` (`sampling.draw` does both).
        A drafter with nothing to draft from yet (the first round, for one that reads the target) returns
        `Draft.empty`."""

    def observe(self, output: "TargetOutput") -> None:
        """What the target computed in this round's forward (after every round, before `accept`)."""

    def accept(self, context: Context) -> None:
        """The rows now have ``context.lengths`` committed tokens (after a tree round, ``context.path`` holds the
        accepted nodes): roll internal state back so that it holds nothing beyond what was kept. The token at
        position ``lengths[b] - 1`` is the target's own (recovered or bonus) and may differ from any draft."""

    def select(self, rows: torch.Tensor) -> None:
        """Only the rows ``rows: LongTensor[B']`` (batch indices, in order) go on (the others finished)."""


class TargetAlone(Drafter):
    """The target by itself: a drafter that proposes nothing, so that every round is one ordinary target step (the
    engine asks it for no tokens: its k is 0)."""

    name = "target-alone"
    batches = True

    def propose(self, context: Context, sampling: SamplingConfig, generator: torch.Generator | None) -> Draft:
        return Draft.empty(context.batch, context.tokens.device)


@dataclass
class TargetOutput:
    """What the target computed in one round's forward, for drafters that read it (the first row's: drafters that
    read the target draft for one row).

    ``logits: [1 + K, V]``: the forward's rows for the last committed token and the K drafts (float32);
    ``hidden: [n, H * D] | None``: the hidden states of the drafter's H ``hidden_layers`` at the n inputs the
    target's cache now keeps (the first round: every prompt position and the accepted drafts; later rounds: the
    last committed token and the accepted drafts), None when ``hidden_layers`` is empty; ``accepted``: the drafts
    the target accepted."""

    logits: torch.Tensor
    hidden: torch.Tensor | None
    accepted: int


class WrappedDrafter(Drafter):
    """A drafter that passes every hook through to ``inner`` (subclasses override the hooks they watch: the
    notebooks' round recorder, the benchmark's timer, an adaptive schedule). Its declarations are the inner
    drafter's, and any other attribute (``cache``, ``model``) is read from it."""

    def __init__(self, inner: Drafter) -> None:
        self.inner = inner

    def _declared(attribute: str):  # noqa: N805 (a helper of the class body, not a method)
        return property(lambda self: getattr(self.inner, attribute, getattr(Drafter, attribute)))

    name = _declared("name")  # type: ignore[assignment]
    device = _declared("device")  # type: ignore[assignment]
    batches = _declared("batches")  # type: ignore[assignment]
    trees = _declared("trees")  # type: ignore[assignment]
    hidden_layers = _declared("hidden_layers")  # type: ignore[assignment]
    del _declared

    def __getattr__(self, attribute: str):  # only called for attributes the wrapper itself lacks
        if attribute == "inner":
            raise AttributeError(attribute)
        return getattr(self.inner, attribute)

    def begin(self, context: Context, **limits) -> None:
        self.inner.begin(context, **limits)

    def verifier(self, rows):
        return self.inner.verifier(rows)

    def propose(self, context: Context, sampling: SamplingConfig, generator: torch.Generator | None) -> Draft:
        return self.inner.propose(context, sampling, generator)

    def observe(self, output: TargetOutput) -> None:
        self.inner.observe(output)

    def accept(self, context: Context) -> None:
        self.inner.accept(context)

    def select(self, rows: torch.Tensor) -> None:
        self.inner.select(rows)
