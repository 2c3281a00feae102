"""A token-tree drafter on a small draft model: the top candidates at each depth, grown one depth per forward.

For a `TreeShape` ``(b_1, .., b_D)`` the draft model reads the context once, takes its ``b_1`` most likely next
tokens as the root's children, feeds that whole depth in **one** forward with the tree attention mask (each node
sees the context and its own ancestors only), takes the ``b_2`` best children of every node, and so on. The
deepest nodes are never fed (nothing below them is drafted), so a tree of depth D costs D draft forwards, like a
chain of D drafts, whatever its width.

Candidates are deterministic (the draft's top-b, distinct tokens), so under sampling the tree is verified with
point masses (`specdec_lib.core.trees.verify_tree_exact`), which keeps the target's distribution exactly without ever
reading the draft's probabilities.

After verification, `accept_path` keeps the draft's cache entries of the accepted path and drops every other
branch (`CachedModel.compact`), so the next round feeds only the target's new token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from ..core.errors import InputError
from ..core.forward import check_input_ids
from ..loading import ModelPair
from ..core.trees import TreeShape
from ..core.vocab import require_same_tokenizer, require_vocab_covers
from .cached_model import CachedModel


@dataclass
class TokenTree:
    """What a tree drafter proposes: ``tokens: LongTensor[N]`` with breadth-first ``parents`` (-1: the root, the
    last committed token) and the draft forwards it cost."""

    tokens: torch.Tensor
    parents: tuple[int, ...]
    forwards: int

    def __len__(self) -> int:
        return len(self.parents)


class DraftModelTreeDrafter:
    """Grow a static token tree with a small causal LM on the target's tokenizer (module docstring).

    ``begin(input_ids, max_length=..., target_vocab_size=V)`` starts a generation, ``propose_tree(sequence,
    shape)`` drafts, ``accept_path(sequence_length, path)`` rolls the cache back to the accepted path.
    """

    name = "draft-model-tree"

    def __init__(self, model: PreTrainedModel, *, cache_kind: str = "dynamic") -> None:
        self.model = model
        self.vocab_size = model.get_input_embeddings().num_embeddings
        self.state = CachedModel(model, cache_kind)
        self.target_vocab_size = self.vocab_size
        self._tree_start = 0  # the committed length L when the current tree was drafted
        self._fed_nodes = 0  # nodes of the current tree whose keys are in the cache (all but the deepest)

    @classmethod
    def for_pair(cls, pair: ModelPair) -> "DraftModelTreeDrafter":
        """The tree drafter for ``pair.draft``, after checking it shares ``pair.target_tokenizer``."""
        require_same_tokenizer(pair.target_tokenizer, pair.draft_tokenizer)
        require_vocab_covers(pair.draft, pair.target_tokenizer, role="draft")
        return cls(pair.draft)

    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def max_positions(self) -> int:
        return self.state.max_positions

    def begin(self, input_ids: torch.Tensor, *, max_length: int | None = None,
              target_vocab_size: int | None = None) -> None:
        check_input_ids(input_ids, self.model)
        self.state.reset(max_length)
        self.target_vocab_size = self.vocab_size if target_vocab_size is None else int(target_vocab_size)

    @torch.inference_mode()
    def propose_tree(self, sequence: torch.Tensor, shape: TreeShape) -> TokenTree:
        """A tree of ``shape`` continuing ``sequence: LongTensor[1, L]``: ``shape.depth`` draft forwards.

        The caller keeps ``L - 1 + shape.depth`` within both models' contexts."""
        context = sequence[0].to(self.model.device)
        self._tree_start = context.shape[0]
        kept = min(self.vocab_size, self.target_vocab_size)  # ids both models have
        pending = self.state.sync(context)  # [P], P >= 1: what the cache lacks, the root last
        if int(pending.max()) >= self.vocab_size:
            raise InputError(f"The sequence contains token id {int(pending.max())}, outside the draft model's "
                             f"vocabulary of {self.vocab_size}: the draft must cover every id the target produces.")
        level_logits = self.state.feed(pending)[:kept].view(1, -1)  # [1, V]: after the root
        level_nodes = [-1]  # the parents of the next depth: the root
        parents: list[int] = []
        tokens: list[torch.Tensor] = []
        forwards = 1
        for depth, branching in enumerate(shape.branching):
            candidates = level_logits.topk(branching, dim=-1).indices  # [nodes at this depth, b], best first
            first_new = len(parents)
            for parent, children in zip(level_nodes, candidates):
                parents.extend([parent] * branching)
                tokens.extend(children)
            level_nodes = list(range(first_new, len(parents)))
            if depth + 1 == shape.depth:
                break  # the deepest nodes have no children to draft
            new_tokens = torch.stack(tokens[first_new:])  # [nodes at the new depth]
            level_logits = self.state.feed_tree(new_tokens, parents, first=1 + first_new)[:, :kept]
            forwards += 1
        self._fed_nodes = len(parents) - len(level_nodes)
        return TokenTree(torch.stack(tokens), tuple(parents), forwards)

    def accept_path(self, sequence_length: int, path: tuple[int, ...]) -> None:
        """The target kept ``path`` (node indices) and the sequence now has ``sequence_length`` tokens: keep the
        context and the path's fed nodes in the cache, drop every other branch."""
        start = self._tree_start
        fed_path = [start + node for node in path if node < self._fed_nodes]
        self.state.compact(start, torch.tensor(fed_path, dtype=torch.long))
        self.state.crop(max(sequence_length - 1, 0))
        self.state.trust(self.state.length)
