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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .errors import ConfigError
from .validation import is_whole
from .sampling import sample_token


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


def check_parents(parents: Sequence[int]) -> None:
    """Refuse parent lists that are not a breadth-first tree below the root (``-1 <= parents[i] < i``)."""
    for i, parent in enumerate(parents):
        if not -1 <= parent < i:
            raise ConfigError(
                f"parents[{i}] = {parent}: a node's parent must be -1 (the root) or an earlier node (0 .. {i - 1}); "
                "list the nodes breadth first, as TreeShape.parents() does."
            )


def node_depths(parents: Sequence[int]) -> list[int]:
    """Depth of every node (1 for the root's children)."""
    check_parents(parents)
    depths: list[int] = []
    for parent in parents:
        depths.append(1 if parent < 0 else depths[parent] + 1)
    return depths


def ancestor_matrix(parents: Sequence[int]) -> torch.Tensor:
    """``BoolTensor[N + 1, N + 1]`` over [root, node_0 .. node_{N-1}]: ``m[a, b]`` = b is a itself or an ancestor.

    Row 0 is the root (only itself); row 1 + i holds the root, node i's ancestors and node i.
    """
    check_parents(parents)
    n = len(parents)
    m = torch.zeros(n + 1, n + 1, dtype=torch.bool)
    m[:, 0] = True
    for i, parent in enumerate(parents):
        m[i + 1] = m[parent + 1]  # the parent's row (the root's when parent = -1) ...
        m[i + 1, i + 1] = True  # ... plus the node itself
    return m


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
    rows = ancestor_matrix(parents)[first:]  # [N + 1 - first, N + 1]
    visible = torch.cat([torch.ones(rows.shape[0], root_position, dtype=torch.bool), rows], dim=1)
    mask = torch.zeros(visible.shape, dtype=dtype).masked_fill(~visible, torch.finfo(dtype).min)
    return mask.view(1, 1, *visible.shape).to(device)


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


@dataclass(frozen=True)
class TreeVerdict:
    """The outcome of verifying a tree: the accepted path (node indices, root first) and the token after it.

    The round emits ``[tokens[i] for i in path] + [next_token]``: ``len(path) + 1`` tokens. ``kind`` is
    ``"bonus"`` when the path ends at a leaf (nothing below it was drafted) and ``"recovered"`` otherwise."""

    path: tuple[int, ...]
    next_token: int
    kind: str

    @property
    def num_accepted(self) -> int:
        return len(self.path)


def _check_rows(rows: torch.Tensor, tokens: torch.Tensor, parents: Sequence[int], name: str) -> None:
    check_parents(parents)
    if tokens.ndim != 1 or tokens.shape[0] != len(parents):
        raise ConfigError(f"tokens must have shape [N] = [{len(parents)}] (one per node), got {list(tokens.shape)}.")
    if rows.ndim != 2 or rows.shape[0] != len(parents) + 1:
        raise ConfigError(
            f"{name} must have shape [N + 1, V] = [{len(parents) + 1}, V] (the root's row and one per node), got "
            f"{list(rows.shape)}."
        )


def verify_tree_greedy(target_logits: torch.Tensor, tokens: torch.Tensor, parents: Sequence[int]) -> TreeVerdict:
    """Greedy verification of a tree: from the root, follow the child carrying the target's argmax while one does.

    ``target_logits: [N + 1, V]`` (row 0: after the root; row 1 + i: after node i), ``tokens: LongTensor[N]``.
    Each step's argmax is exactly the token the target's own greedy decoding emits there, so the emitted path
    plus the final argmax is token-identical to the target alone (siblings carry distinct tokens, so at most one
    child matches; with duplicates the first one is taken, which changes nothing in the output).
    """
    _check_rows(target_logits, tokens, parents, "target_logits")
    choice = target_logits.argmax(dim=-1).tolist()  # [N + 1]: the target's greedy token after each input position
    children = children_of(parents)
    token_list = tokens.tolist()
    path: list[int] = []
    row = 0
    while True:
        match = next((c for c in children[row] if token_list[c] == choice[row]), None)
        if match is None:
            return TreeVerdict(tuple(path), int(choice[row]), "recovered" if children[row] else "bonus")
        path.append(match)
        row = match + 1


def verify_tree_exact(p: torch.Tensor, tokens: torch.Tensor, parents: Sequence[int],
                      generator: torch.Generator | None = None) -> TreeVerdict:
    """Exact verification of a tree whose nodes are *deterministic* candidates (e.g. the drafter's top-k).

    ``p: [N + 1, V]`` the target's processed distributions (row 0 after the root, row 1 + i after node i).
    At a node with candidate children ``t_1 .. t_m`` (distinct tokens), multi-draft recursive rejection sampling
    with point-mass drafts (SpecInfer's rule with q = one-hot):

        r = p_node
        for j = 1 .. m:   accept t_j with probability r(t_j)            -> move to child j
                          else r = norm(r with t_j set to 0)             (the residual: max(r - onehot(t_j), 0))
        none accepted:    sample the next token from r                   (the recovered token)

    Why exact: P(emit t_1) = r(t_1) = p(t_1); P(emit t_2) = (1 - p(t_1)) · p(t_2) / (1 - p(t_1)) = p(t_2); and
    any other token x is drawn from p with t_1 .. t_m removed, with the probability that all were rejected,
    1 - sum_j p(t_j): P(x) = p(x). Every step's next token is distributed as the target's, given the path so far.
    A leaf's row gives the bonus token, sampled from p.
    """
    _check_rows(p, tokens, parents, "p")
    children = children_of(parents)
    token_list = tokens.tolist()
    path: list[int] = []
    row = 0
    while True:
        residual = p[row].clone()  # [V]
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
            return TreeVerdict(tuple(path), int(sample_token(residual, generator)),
                               "recovered" if children[row] else "bonus")
        path.append(chosen)
        row = chosen + 1
