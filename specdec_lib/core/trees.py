"""Token trees: several drafted continuations verified in **one** target forward. Pure functions, no model.

A chain of drafts dies at its first wrong token. A tree (SpecInfer, Medusa, EAGLE-2) hedges: at the first
positions it keeps the drafter's top few candidates, each continued by its own sub-tree, and the target scores
every node at once. The longest path the target accepts is kept.

A tree of N drafted nodes hangs below the last committed token ``x_L`` (the *root*, not a node). Node i carries
``tokens[i]`` and has parent ``parents[i]`` (``-1``: the root); nodes are listed breadth first, so
``parents[i] < i``. Its depth is 1 for the root's children. One target forward reads ``[x_L, node_0 .. node_{N-1}]``
(N + 1 positions) after the committed prefix in the cache (``past`` = L - 1 tokens), with

- **position ids** ``past + depth``: the root at ``past``, every node where it would sit in its own chain;
- a **tree attention mask**: each input position attends to the whole committed prefix, to the root and to its own
  ancestors and itself, never to its siblings or cousins (they are other continuations);

and returns N + 1 rows of logits: row 0 is the target's prediction after ``x_L``, row 1 + i its prediction after
the path to node i. A chain of k drafts is the tree with ``parents = (-1, 0, 1, .., k - 2)``: mask and positions
are then the ordinary causal ones.

After verification the accepted path's keys and values sit between rejected siblings in the cache, so rolling
back is a *compaction* (`specdec_lib.core.caches.compact_cache`), not a crop.

What a drafter drafts each round is a shape: a static `TreeShape`, or a `DynamicTree` (EAGLE-2) grown where the
drafter is confident and cut to a node budget; `grow_tree` grows both from any drafter that can score a depth's
nodes in one forward.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .errors import ConfigError
from .validation import check_number, is_whole
from .sampling import sample_token
from .verify import Verdict


@dataclass(frozen=True)
class TreeShape:
    """A static tree: ``branching[d]`` children under every node at depth d (depth 0: the root).

    ``TreeShape((3, 2, 1))``: the root's 3 best candidates, each continued by its 2 best, each of those by 1:
    3 + 6 + 6 = 15 nodes, depth 3. ``TreeShape((1,) * k)`` is a chain of k drafts.
    """

    branching: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.branching or any(not is_whole(b) or b < 1 for b in self.branching):
            raise ConfigError(
                f"A tree shape needs at least one depth and a whole number >= 1 of children per depth, got "
                f"{self.branching!r}. Example: TreeShape((3, 2, 1)); a chain of 4 drafts is TreeShape((1, 1, 1, 1))."
            )

    @property
    def depth(self) -> int:
        return len(self.branching)

    def parents(self) -> tuple[int, ...]:
        """Breadth-first parent indices (-1: the root), children of one node listed best candidate first."""
        parents: list[int] = []
        level = [-1]  # the nodes of the current depth (the root first)
        for children in self.branching:
            next_level = []
            for parent in level:
                for _ in range(children):
                    next_level.append(len(parents))
                    parents.append(parent)
            level = next_level
        return tuple(parents)

    @property
    def size(self) -> int:
        return len(self.parents())

    def cut(self, depth: int) -> "TreeShape":
        """The same shape down to ``depth`` at most (near the end of the token budget or the context)."""
        return TreeShape(self.branching[:depth])

    @property
    def is_chain(self) -> bool:
        """Whether every node has one child: a chain of ``depth`` drafts."""
        return all(b == 1 for b in self.branching)

    @property
    def slots(self) -> int:
        """The most nodes a round places in a cache: the target's reads the whole tree."""
        return self.size


@dataclass(frozen=True)
class DynamicTree:
    """A tree grown by the drafter's confidence each round (EAGLE-2, Li et al. 2024), verified like any other.

    A node's *score* is the drafter's cumulative log-probability of the path to it (``log q(d_1) + .. + log
    q(d_i)``, q the drafter's softmax at ``temperature``), the drafter's estimate of the chance that the target
    accepts the whole path. EAGLE-2 scores with the drafter's own softmax (``temperature = 1``); a drafter whose
    drafts are accepted more often than its q says (an underconfident one) wastes the budget on shallow second
    choices; a temperature below 1 sharpens the scores towards its first choices (notebook 07 compares 1 with 0.3
    for the EAGLE layer). The scores only choose which nodes to draft: verification treats them as point masses,
    so any temperature keeps the output exact. `grow_tree` builds it level by level:

    - depth 1: the root's ``top_k`` most likely children;
    - depth d = 2 .. ``depth``: the ``top_k`` best-scored nodes of depth d - 1 are *expanded* (fed to the drafter,
      all in one forward with the tree's attention mask), each offering its ``top_k`` most likely children, so
      ``top_k ** 2`` candidates per depth;
    - rerank: the ``budget`` best-scored nodes of all depths become the tree. A child never scores above its parent
      (log q <= 0) and sorts after it on a tie, so the kept nodes always include their ancestors.

    The same fact prunes the growth without changing the tree: once ``budget`` nodes are grown, a node scoring no
    more than the budget-th best has no descendant that could be kept (the budget-th best only rises), so it is not
    expanded, and growth stops at the depth where no node is left to expand. The drafter runs at most ``depth``
    forwards (the root's, then one per expanded depth), like a chain of ``depth`` drafts, fewer where its scores fall
    fast; the target verifies ``budget + 1`` rows. ``DynamicTree(depth=k, top_k=1, budget=k)`` is the greedy chain of k.
    Choose the budget from the machine's verification cost curve v(n) (`best_budget`).
    """

    depth: int
    top_k: int
    budget: int
    temperature: float = 1.0

    def __post_init__(self) -> None:
        for name in ("depth", "top_k", "budget"):
            value = getattr(self, name)
            if not is_whole(value) or value < 1:
                raise ConfigError(f"DynamicTree's {name} must be a whole number >= 1, got {value!r}. Example: "
                                  "DynamicTree(depth=6, top_k=4, budget=24).")
        check_number("DynamicTree's temperature", self.temperature, minimum=0, open_low=True,
                     hint="1 scores nodes by the drafter's own probabilities; below 1 trusts its first choices more.")
        if self.budget > self.candidates:
            raise ConfigError(
                f"DynamicTree(depth={self.depth}, top_k={self.top_k}) grows at most {self.candidates} candidate nodes "
                f"(top_k at depth 1, top_k ** 2 at each deeper one), fewer than budget={self.budget}: lower the "
                "budget or raise depth or top_k.")

    @property
    def candidates(self) -> int:
        """Nodes grown before the rerank: ``top_k + (depth - 1) * top_k ** 2``."""
        return _candidates(self.depth, self.top_k)

    @property
    def size(self) -> int:
        """The most nodes a round drafts (the target's verification reads ``size + 1`` rows)."""
        return self.budget

    def cut(self, depth: int) -> "DynamicTree":
        """The same tree down to ``depth`` at most, its budget cut to what that depth can grow."""
        depth = min(self.depth, depth)
        return DynamicTree(depth, self.top_k, min(self.budget, _candidates(depth, self.top_k)), self.temperature)

    @property
    def is_chain(self) -> bool:
        """Whether it is the greedy chain of ``depth`` drafts (one child each, all kept)."""
        return self.top_k == 1 and self.budget == self.depth

    @property
    def slots(self) -> int:
        """The most nodes a round places in a cache: the target's reads ``budget``, the drafter's holds the
        ``(depth - 1) * top_k`` nodes it expanded, which the rerank may drop."""
        return max(self.budget, (self.depth - 1) * self.top_k)


def _candidates(depth: int, top_k: int) -> int:
    """Nodes a `DynamicTree` of ``depth`` and ``top_k`` grows before its rerank."""
    return top_k + (depth - 1) * top_k ** 2


def check_tree_kind(shape: object) -> None:
    """Refuse a tree shape that is neither a `TreeShape` nor a `DynamicTree` (None: no tree, passes)."""
    if shape is not None and not isinstance(shape, (TreeShape, DynamicTree)):
        raise ConfigError(f"shape must be a TreeShape, e.g. TreeShape((3, 2, 1)), or a DynamicTree, e.g. "
                          f"DynamicTree(depth=6, top_k=4, budget=24); got {type(shape).__name__}.")


@dataclass
class GrownTree:
    """A drafted tree: ``tokens: LongTensor[N]`` and ``parents`` (breadth first, -1: the root), ``fed[i]`` node i's
    place among the nodes the drafter fed itself (in feeding order; -1: never fed), and the drafter ``forwards``."""

    tokens: torch.Tensor
    parents: tuple[int, ...]
    fed: tuple[int, ...]
    forwards: int


def grow_tree(shape: "TreeShape | DynamicTree", root_logits: torch.Tensor, feed) -> GrownTree:
    """Grow a tree of ``shape`` from the drafter's ``root_logits: [V]`` (its prediction after the root, the last
    committed token), depth by depth.

    ``feed(tokens: LongTensor[n], parents: tuple[int, ...], first: int) -> logits [n, V]`` runs the drafter's
    forward over the n nodes it expands next. The nodes it has been fed form a tree of their own, listed in
    feeding order: ``parents`` covers all of them so far (the new ones last; -1: the root) and ``first`` is the
    first new one's place in ``[root, fed_0, fed_1, ..]``, as `tree_attention_mask` takes them. A `TreeShape`
    expands every node of a depth into its ``branching[d]`` best children; a `DynamicTree` its ``top_k``
    best-scored nodes into ``top_k`` children each (none that could no longer be kept), then keeps the ``budget``
    best-scored nodes of all depths (`DynamicTree`). Children are listed best first; the deepest depth is never fed.
    """
    dynamic = isinstance(shape, DynamicTree)
    temperature = shape.temperature if dynamic else 1.0
    tokens: list[int] = []
    parents: list[int] = []  # over the grown nodes
    scores: list[float] = []  # nodes are grown depth by depth: a node's index orders it after its ancestors
    fed: dict[int, int] = {}  # grown node -> its place among the fed nodes
    fed_parents: list[int] = []  # the fed nodes' tree (-1: the root)
    expanding, level_logits = [-1], root_logits[None]  # the nodes to expand and their logits [n, V]
    forwards = 1  # the caller's forward that gave root_logits
    for depth in range(1, shape.depth + 1):
        width = shape.top_k if dynamic else shape.branching[depth - 1]
        best = level_logits.topk(width, dim=-1)  # [n, width]: ranked by the logits, the probabilities' order
        log_q = torch.log_softmax(level_logits.float() / temperature, dim=-1).gather(1, best.indices)
        level = []
        for node, children, values in zip(expanding, best.indices.tolist(), log_q.tolist()):  # one read-back
            base = scores[node] if node >= 0 else 0.0
            for token, value in zip(children, values):
                level.append(len(tokens))
                tokens.append(token)
                parents.append(node)
                scores.append(base + value)
        if depth == shape.depth:
            break
        expanding = sorted(level, key=lambda i: -scores[i])[: shape.top_k] if dynamic else level
        if dynamic and len(tokens) >= shape.budget:  # only a node above the budget-th best can have kept descendants
            bar = sorted(scores, reverse=True)[shape.budget - 1]
            expanding = [node for node in expanding if scores[node] > bar]
            if not expanding:
                break
        expanding.sort()  # feeding order: grown order (breadth first)
        first = 1 + len(fed_parents)
        for node in expanding:
            fed[node] = len(fed_parents)
            fed_parents.append(-1 if parents[node] < 0 else fed[parents[node]])
        level_logits = feed(torch.tensor([tokens[i] for i in expanding], device=root_logits.device),
                            tuple(fed_parents), first)
        forwards += 1
    kept = range(len(tokens))
    if dynamic:  # the rerank: best score first, a parent (a smaller index) before its child on a tie
        kept = sorted(sorted(kept, key=lambda i: (-scores[i], i))[: shape.budget])
    place = {node: index for index, node in enumerate(kept)}
    return GrownTree(torch.tensor([tokens[i] for i in kept], dtype=torch.long, device=root_logits.device),
                     tuple(-1 if parents[i] < 0 else place[parents[i]] for i in kept),
                     tuple(fed.get(i, -1) for i in kept), forwards)


def check_parents(parents: Sequence[int]) -> None:
    """Refuse parent lists that are not a breadth-first tree below the root (``-1 <= parents[i] < i``)."""
    for i, parent in enumerate(parents):
        if not -1 <= parent < i:
            raise ConfigError(
                f"parents[{i}] = {parent}: a node's parent must be -1 (the root) or an earlier node (0 .. {i - 1}); "
                "list the nodes breadth first, as TreeShape.parents() does."
            )


def _depths(parents: Sequence[int]) -> list[int]:
    depths: list[int] = []
    for parent in parents:
        depths.append(1 if parent < 0 else depths[parent] + 1)
    return depths


def node_depths(parents: Sequence[int]) -> list[int]:
    """Depth of every node (1 for the root's children)."""
    check_parents(parents)
    return _depths(parents)


def ancestor_matrix(parents: Sequence[int]) -> torch.Tensor:
    """``BoolTensor[N + 1, N + 1]`` over [root, node_0 .. node_{N-1}]: ``m[a, b]`` = b is a itself or an ancestor.

    Row 0 is the root (only itself); row 1 + i holds the root, node i's ancestors and node i.
    """
    check_parents(parents)
    n = len(parents)
    m = torch.zeros(n + 1, n + 1, dtype=torch.bool)
    m[:, 0] = True  # every row sees the root
    rows, columns = _ancestry(parents)
    m[rows, columns] = True
    return m


def _ancestry(parents: Sequence[int], first: int = 0) -> tuple[list[int], list[int]]:
    """The True entries of `ancestor_matrix`'s rows ``first .. N`` below the root's column, as ``(rows, columns)``
    (row r: tree position ``first + r``; column c: tree position c >= 1): each node and its ancestors, found by
    walking up the parents, so a drafter that feeds a few new nodes builds their rows alone."""
    rows, columns = [], []
    for row, position in enumerate(range(first, len(parents) + 1)):
        node = position - 1
        while node >= 0:
            rows.append(row)
            columns.append(1 + node)
            node = parents[node]
    return rows, columns


def tree_attention_mask(parents: Sequence[int], root_position: int, first: int = 0, *,
                        dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> torch.Tensor:
    """Additive 4-D mask for a forward over tree positions ``first .. N`` (0: the root, 1 + i: node i).

    The root sits at cache position ``root_position``, positions ``0 .. first - 1`` of the tree are already in the
    cache right after it, and this forward appends the rest: the mask is ``[1, 1, N + 1 - first,
    root_position + N + 1]``. Each row may see the committed prefix (``root_position`` entries), the root, its
    ancestors and itself: 0 there, the dtype's minimum elsewhere, the form transformers passes through unchanged
    to both the eager and the SDPA attention. Verification reads the whole tree (``first = 0``, the root is the
    last committed token); a drafter grows it depth by depth (``first`` = the nodes already fed, plus the root).
    """
    check_parents(parents)
    count = len(parents)
    mask = torch.full((count + 1 - first, root_position + count + 1), torch.finfo(dtype).min, dtype=dtype,
                      device=device)
    mask[:, : root_position + 1] = 0  # the committed prefix and the root
    index = torch.tensor(_ancestry(parents, first), dtype=torch.long, device=device)  # [2, entries]
    mask[index[0], root_position + index[1]] = 0  # each row's ancestors and itself
    return mask.view(1, 1, *mask.shape)


def tree_position_ids(parents: Sequence[int], root_position: int, first: int = 0,
                      device: torch.device | str = "cpu") -> torch.Tensor:
    """``LongTensor[1, N + 1 - first]``: the root at ``root_position``, node i at ``root_position + depth(i)``,
    for tree positions ``first .. N`` (see `tree_attention_mask`)."""
    positions = [root_position] + [root_position + d for d in node_depths(parents)]
    return torch.tensor([positions[first:]], dtype=torch.long, device=device)


def children_of(parents: Sequence[int]) -> list[list[int]]:
    """``children[1 + i]`` lists node i's children and ``children[0]`` the root's, in node order."""
    children: list[list[int]] = [[] for _ in range(len(parents) + 1)]
    for i, parent in enumerate(parents):
        children[parent + 1].append(i)
    return children


def _check_tree(rows: torch.Tensor, tokens: torch.Tensor, parents: Sequence[int], name: str) -> None:
    """Refuse a tree verifier's inputs unless ``tokens: [B, N]`` and ``rows: [B, N + 1, V]`` for N = len(parents)."""
    check_parents(parents)
    n = len(parents)
    if not isinstance(tokens, torch.Tensor) or tokens.ndim != 2 or tokens.shape[1] != n:
        raise ConfigError(f"tokens must have shape [B, N] = [B, {n}] (one per node; one tree is a batch of one: "
                          f"tokens[None]), got {list(tokens.shape) if isinstance(tokens, torch.Tensor) else tokens!r}.")
    if not isinstance(rows, torch.Tensor) or rows.ndim != 3 or tuple(rows.shape[:2]) != (tokens.shape[0], n + 1):
        raise ConfigError(
            f"{name} must have shape [B, N + 1, V] = [{tokens.shape[0]}, {n + 1}, V] (the root's row and one per "
            f"node), got {list(rows.shape) if isinstance(rows, torch.Tensor) else rows!r}."
        )


def _tree_verdict(outcomes: list[tuple[list[int], int, bool]], parents: Sequence[int],
                  device: torch.device) -> Verdict:
    """The `Verdict` of B trees from each row's ``(path, next_token, ends_at_a_leaf)``; paths padded with -1 to the
    tree's depth."""
    depth = max(_depths(parents), default=0)
    paths = [path + [-1] * (depth - len(path)) for path, _, _ in outcomes]
    return Verdict(torch.tensor([len(path) for path, _, _ in outcomes], device=device),
                   torch.tensor([token for _, token, _ in outcomes], device=device),
                   torch.tensor([leaf for _, _, leaf in outcomes], device=device),
                   torch.tensor(paths, dtype=torch.long, device=device).view(len(outcomes), depth))


def tree_greedy_rule(target_logits: torch.Tensor, tokens: torch.Tensor, parents: Sequence[int]) -> Verdict:
    """`verify_tree_greedy`'s arithmetic, on inputs of valid shapes."""
    choice = target_logits.argmax(dim=-1).tolist()  # [B][N + 1]: the target's greedy token after each input position
    children = children_of(parents)
    outcomes = []
    for row_choice, row_tokens in zip(choice, tokens.tolist()):
        path: list[int] = []
        row = 0
        while True:
            match = next((c for c in children[row] if row_tokens[c] == row_choice[row]), None)
            if match is None:
                break
            path.append(match)
            row = match + 1
        outcomes.append((path, int(row_choice[row]), not children[row]))
    return _tree_verdict(outcomes, parents, target_logits.device)


def verify_tree_greedy(target_logits: torch.Tensor, tokens: torch.Tensor, parents: Sequence[int]) -> Verdict:
    """Greedy verification of B trees of one shape: from the root, follow the child carrying the target's argmax
    while one does.

    ``target_logits: [B, N + 1, V]`` (row 0: after the root; row 1 + i: after node i), ``tokens: LongTensor[B, N]``.
    Each step's argmax is exactly the token the target's own greedy decoding emits there, so the emitted path
    plus the final argmax is token-identical to the target alone (siblings carry distinct tokens, so at most one
    child matches; with duplicates the first one is taken, which changes nothing in the output). Returns the
    `Verdict` every verifier returns: ``path`` the accepted nodes from the root down, ``bonus`` True when the path
    ends at a leaf (nothing below it was drafted). One tree: ``verify_tree_greedy(logits[None], tokens[None], parents)``.
    """
    _check_tree(target_logits, tokens, parents, "target_logits")
    return tree_greedy_rule(target_logits, tokens, parents)


def tree_exact_rule(p: torch.Tensor, tokens: torch.Tensor, parents: Sequence[int],
                    generator: torch.Generator | None = None) -> Verdict:
    """`verify_tree_exact`'s arithmetic, on inputs of valid shapes (rows one after another, each with its draws)."""
    children = children_of(parents)
    outcomes = []
    for row_p, token_list in zip(p, tokens.tolist()):
        path: list[int] = []
        row = 0
        while True:
            residual = row_p[row].clone()  # [V]
            chosen = None
            for child in children[row]:
                token = token_list[child]
                mass = float(residual[token])
                u = float(torch.rand((), generator=generator, device=p.device))
                if u < mass:
                    chosen = child
                    break
                residual[token] = 0.0
                total = float(residual.sum())
                if total <= 0.0:  # this candidate held all the remaining mass (up to rounding): it is the outcome
                    chosen = child
                    break
                residual /= total
            if chosen is None:
                outcomes.append((path, int(sample_token(residual, generator)), not children[row]))
                break
            path.append(chosen)
            row = chosen + 1
    return _tree_verdict(outcomes, parents, p.device)


def verify_tree_exact(p: torch.Tensor, tokens: torch.Tensor, parents: Sequence[int],
                      generator: torch.Generator | None = None) -> Verdict:
    """Exact verification of B trees whose nodes are *deterministic* candidates (e.g. the drafter's top-k).

    ``p: [B, N + 1, V]`` the target's processed distributions (row 0 after the root, row 1 + i after node i),
    ``tokens: LongTensor[B, N]``. At a node with candidate children ``t_1 .. t_m`` (distinct tokens), multi-draft
    recursive rejection sampling with point-mass drafts (SpecInfer's rule with q = one-hot):

        r = p_node
        for j = 1 .. m:   accept t_j with probability r(t_j)            -> move to child j
                          else r = norm(r with t_j set to 0)             (the residual: max(r - onehot(t_j), 0))
        none accepted:    sample the next token from r                   (the recovered token)

    Why exact: P(emit t_1) = r(t_1) = p(t_1); P(emit t_2) = (1 - p(t_1)) · p(t_2) / (1 - p(t_1)) = p(t_2); and
    any other token x is drawn from p with t_1 .. t_m removed, with the probability that all were rejected,
    1 - sum_j p(t_j): P(x) = p(x). Every step's next token is distributed as the target's, given the path so far.
    A leaf's row gives the bonus token, sampled from p. Returns a `Verdict` as `verify_tree_greedy` does.
    """
    _check_tree(p, tokens, parents, "p")
    return tree_exact_rule(p, tokens, parents, generator)
