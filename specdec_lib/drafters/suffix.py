"""Suffix decoding (Oliaro et al. 2024, "SuffixDecoding"; Arctic Inference in vLLM): draft from a suffix tree.

Like prompt lookup it runs no model and copies continuations from text already seen, but it keeps *counts*:
a trie of every suffix of the text (depth-limited to ``max_depth`` tokens), each node counting how many
positions of the text start a path through it. For the text ``a b a b c``, depth 3:

    root (5)                      node count = occurrences of the path from the root
    ├── a (2) ── b (2) ─┬── a (1)     "a b" was followed once by "a", once by "c"
    │                   └── c (1)
    ├── b (2) ─┬── a (1) ── b (1)
    │          └── c (1)
    └── c (1)

Drafting for a sequence ending in ``... a b``: every suffix of the sequence present in the tree is a match
(``b``, ``a b``, ...); from each matched node, walk down the most frequent child while the empirical
probability of the path (the product of ``child count / node count``) stays at least ``min_probability``
(optionally for at most ``max_spec_factor * match length`` tokens: longer matches trusted with longer drafts).
The draft with the highest score (the sum of its path probabilities: the expected number of accepted tokens if
the counts were the truth) wins, a longer match winning ties. So the draft length adapts every round: long in a
repetitive stretch, short or empty where the text branched before. This is Arctic Inference's
``_speculate_path`` rule, on a plain trie instead of their compressed suffix tree (same counts, simpler code,
more nodes). Defaults: vLLM's ``suffix_decoding_*`` settings (depth 24, min probability 0.1) except the factor:
vLLM's 1.0 wastes fewer drafts, which matters in batched GPU serving, but saves fewer target forwards. Without a
cap a draft runs as long as its path stays probable: more drafted tokens are rejected (a lower acceptance rate),
and more are accepted per round (fewer target forwards), the better trade when a rejected draft costs only a few
positions of a forward the target runs anyway.

Two trees, as in Arctic: the **request tree** holds the prompt and the committed tokens of the current
generation (emptied by `begin`, extended at each `propose` by the tokens committed since), the **history
tree** the sequences passed to `SuffixDrafter.remember` (earlier answers: a repeated request is then drafted
from its previous answer).
The draft is a point mass (``probs`` None): its counts are not a distribution over the target's vocabulary.

Cost per round: appending a committed token updates the at most ``max_depth`` suffixes ending at it
(O(max_depth) dictionary operations); matching walks each suffix of up to ``max_depth`` tokens from the root
(O(max_depth^2)) and drafting walks up to ``k`` nodes per match length. No model runs: next to one forward of the
target this is small. The first `propose` inserts the prompt, O(T · max_depth).
"""

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from ..core.drafting import Context, Draft, Drafter
from ..core.errors import ConfigError, InputError
from ..core.sampling import SamplingConfig
from ..core.validation import check_count, check_number


@dataclass
class SuffixDraft:
    """One tree's proposal: ``tokens`` (up to k ids), ``probs`` the empirical path probability of each (not a
    distribution over the vocabulary: ``probs[i]`` estimates P(tokens[: i + 1] follows the match)), ``score``
    their sum, ``match_length`` the length of the matched suffix of the context (0: nothing matched)."""

    tokens: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    score: float = 0.0
    match_length: int = 0


class SuffixTree:
    """A trie of all suffixes (up to ``max_depth`` tokens) of one or more token sequences, with counts.

    Nodes are integers (0 is the root): ``counts[node]`` is how many positions of the inserted sequences start
    a path through ``node``, ``children[node]`` maps a token to its child (None for a leaf). `append` extends
    the current sequence by one token; `add_sequence` inserts a whole sequence (suffixes never span two
    sequences). Never rolled back: only committed tokens go in.
    """

    def __init__(self, max_depth: int) -> None:
        self.max_depth = max_depth
        self.counts: list[int] = [0]
        self.children: list[dict[int, int] | None] = [None]
        self._open: list[int] = []  # nodes of the suffixes ending at the last token, depth 1, 2, .. < max_depth

    def new_sequence(self) -> None:
        """End the current sequence: the next `append` starts a new one."""
        self._open = []

    def append(self, token: int) -> None:
        """Extend the current sequence by ``token``: each suffix ending at it (the empty one, at the root,
        included) goes one node deeper, counted once more. O(max_depth)."""
        counts, children = self.counts, self.children
        counts[0] += 1
        extended: list[int] = []
        for node in [0, *self._open]:
            kids = children[node]
            if kids is None:
                kids = children[node] = {}
            child = kids.get(token)
            if child is None:
                child = kids[token] = len(counts)
                counts.append(0)
                children.append(None)
            counts[child] += 1
            extended.append(child)
        self._open = extended[: self.max_depth - 1]  # a node at max_depth never grows children

    def add_sequence(self, tokens: Sequence[int]) -> None:
        """Insert the suffixes of ``tokens`` as a sequence of their own."""
        self.new_sequence()
        for token in tokens:
            self.append(token)
        self.new_sequence()

    def paths(self) -> dict[tuple[int, ...], int]:
        """Every path from the root and its count, ``{(t_1, .., t_d): count}`` (to inspect or compare trees)."""
        result: dict[tuple[int, ...], int] = {}
        stack: list[tuple[int, tuple[int, ...]]] = [(0, ())]
        while stack:
            node, path = stack.pop()
            for token, child in (self.children[node] or {}).items():
                result[path + (token,)] = self.counts[child]
                stack.append((child, path + (token,)))
        return result

    def _find(self, pattern: Sequence[int]) -> int | None:
        """The node of path ``pattern`` (None: it never occurred)."""
        node = 0
        for token in pattern:
            kids = self.children[node]
            node = kids.get(token) if kids is not None else None
            if node is None:
                return None
        return node

    def _walk(self, node: int, max_tokens: int, min_probability: float) -> tuple[list[int], list[float]]:
        """Greedy descent from ``node``: the most frequent child (the first inserted on ties) while the path
        probability stays >= ``min_probability``, at most ``max_tokens`` steps."""
        counts, children = self.counts, self.children
        tokens: list[int] = []
        probs: list[float] = []
        prob = 1.0
        while len(tokens) < max_tokens and children[node]:
            token, child = max(children[node].items(), key=lambda item: counts[item[1]])  # type: ignore[union-attr]
            prob *= counts[child] / counts[node]
            if prob < min_probability:
                break
            tokens.append(token)
            probs.append(prob)
            node = child
        return tokens, probs

    def speculate(
        self, context: Sequence[int], k: int, *, min_probability: float, max_spec_factor: float | None
    ) -> SuffixDraft:
        """The best draft of at most ``k`` tokens continuing ``context`` (its last ``max_depth`` tokens matter).

        For each match length m = 1, 2, .. (while ``context[-m:]`` is a path of the tree, ``m < len(context)``
        as in Arctic), a greedy walk of at most ``min(k, floor(max_spec_factor * m))`` tokens (no factor cap
        for None); the highest score wins, the longer match on ties. An empty `SuffixDraft` when nothing does.
        """
        best = SuffixDraft()
        for m in range(1, min(len(context), self.max_depth + 1)):
            node = self._find(context[len(context) - m :])
            if node is None:
                break  # a longer suffix contains this one: it cannot occur either
            cap = k if max_spec_factor is None else min(k, int(max_spec_factor * m + 1e-6))
            tokens, probs = self._walk(node, cap, min_probability)
            score = sum(probs)
            if tokens and score >= best.score:
                best = SuffixDraft(tokens, probs, score, m)
        return best


class SuffixDrafter(Drafter):
    """Draft with suffix trees over the current generation and, via `remember`, earlier ones (see the module).

    ``max_depth``: the longest path stored (and so the longest match plus draft), default 24;
    ``min_probability``: stop a draft when its empirical path probability falls below this, default 0.1;
    ``max_spec_factor``: draft at most this many tokens per matched token (Arctic's cap; default None: only
    ``k`` caps, which saves the most target forwards, see the module docstring).
    The round's ``k`` (``gamma`` in `speculative_generate`) caps every draft.

    Usage across requests (the history is kept by `begin`, which only rebuilds the request tree)::

        drafter = SuffixDrafter()
        for input_ids in prompts:
            result = speculative_generate(target, drafter, input_ids, gamma=8, max_new_tokens=64)
            drafter.remember(result.new_tokens)   # what Arctic keeps: the answers
    """

    name = "suffix"

    def __init__(
        self, *, max_depth: int = 24, min_probability: float = 0.1, max_spec_factor: float | None = None
    ) -> None:
        check_count("max_depth (the longest suffix the tree stores, in tokens)", max_depth, minimum=2,
                    hint="Arctic Inference uses 24 (the default).")
        self.min_probability = check_number("min_probability", min_probability, minimum=0, maximum=1,
                                            hint="0 drafts until k or the tree ends; the default is 0.1.")
        if max_spec_factor is not None:
            check_number("max_spec_factor (draft tokens allowed per matched token)", max_spec_factor, minimum=0,
                         open_low=True, hint="None (the default): no cap below k; Arctic Inference uses 1.0.")
        self.max_depth = max_depth
        self.max_spec_factor = max_spec_factor
        self.history_tree = SuffixTree(max_depth)
        self.request_tree = SuffixTree(max_depth)
        self._seen = 0  # tokens of the current generation inserted into the request tree

    def remember(self, tokens: torch.Tensor | Sequence[int]) -> None:
        """Add ``tokens`` (``LongTensor[L]`` or ``[1, L]``, or a list of ids: e.g. ``result.new_tokens``) to the
        history tree, which later generations draft from too. Kept across `begin` calls."""
        if isinstance(tokens, torch.Tensor):
            if tokens.ndim > 2 or (tokens.ndim == 2 and tokens.shape[0] != 1):
                raise InputError(
                    f"remember() takes one sequence, a LongTensor[L] or [1, L], got shape {list(tokens.shape)}."
                )
            tokens = tokens.reshape(-1).tolist()
        self.history_tree.add_sequence(tokens)

    def begin(self, context: Context, *, max_length: int | None = None, target_vocab_size: int | None = None) -> None:
        """A new generation: an empty request tree (the prompt goes in at the first `propose`); history kept."""
        self.request_tree = SuffixTree(self.max_depth)
        self._seen = 0

    def _sync(self, context: list[int]) -> None:
        """Append the committed tokens the request tree lacks (`accept` carries only a length, so the ids
        committed by a round arrive with the next `propose`)."""
        if len(context) < self._seen:
            raise InputError(
                f"propose() got a sequence of {len(context)} tokens after one of {self._seen}: a generation's "
                "committed sequence only grows. Call begin() before a new generation."
            )
        for token in context[self._seen :]:
            self.request_tree.append(token)
        self._seen = len(context)

    def propose(self, context: Context, sampling: SamplingConfig, generator: torch.Generator | None) -> Draft:
        """The best-scoring draft of at most ``context.k`` tokens from the request and history trees (the request
        tree on ties) after the committed sequence; empty when neither matches with enough probability.
        ``sampling`` and ``generator`` are unused (a point mass, verified as such)."""
        committed = context.sequence[0].tolist()
        self._sync(committed)
        tail = committed[-self.max_depth :]
        options = dict(min_probability=self.min_probability, max_spec_factor=self.max_spec_factor)
        drafts = [tree.speculate(tail, context.k, **options) for tree in (self.request_tree, self.history_tree)]
        best = max(drafts, key=lambda draft: draft.score)  # the first of equals: the request tree
        return Draft(tokens=torch.tensor(best.tokens, dtype=torch.long))
