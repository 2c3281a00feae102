"""The classic drafter (Leviathan et al. 2023; Chen et al. 2023): a small model on the target's tokenizer, drafting a
chain for one row, chains for a batch of rows, or a token tree, with one KV cache kept across rounds.

A chain, row by row (a batch runs the same steps for every row in one forward each):

    round r, committed [... x_L]          the cache holds a prefix (all but the last one or two tokens, usually)
    forward 1: the tokens the cache lacks -> logits -> d_1
    forward i: d_{i-1}                    -> logits -> d_i        (i = 2 .. k; a row that drafted enough gets a hole)
    accept:    keep x_1 .. x_{L'-1}       (drop the rejected drafts; the target's own token is fed next round)

``d_k`` itself is never fed during drafting: the next round feeds it (when accepted) with the bonus token.

A token tree of shape ``(b_1, .., b_D)`` (SpecInfer, EAGLE-1's static trees): the root's ``b_1`` most likely next
tokens, each continued by its ``b_2`` best, and so on; or a `DynamicTree` (EAGLE-2), which expands only the
best-scored nodes of each depth and keeps a budget of them (`specdec_lib.core.trees.grow_tree` grows both). One
forward per depth feeds that depth's expanded nodes with the tree attention mask, so a tree of depth D costs D
forwards like a chain of D drafts, whatever its width. The deepest nodes are never fed. Candidates are
deterministic (the top-b or top-k), so they are verified as point masses (``probs`` None), which keeps the
target's distribution exactly under sampling. A chain-shaped tree ``(1, .., 1)`` is drafted
and verified as the chain it is (greedy drafts, point masses): no tree mask, no compaction.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..core.drafting import Context, Draft, Drafter
from ..core.pair import ModelPair
from ..core.errors import ConfigError
from ..core.sampling import GREEDY, SamplingConfig, draw
from ..core.trees import grow_tree
from ..core.validation import check_input_ids
from ..core.vocab import require_same_tokenizer, require_vocab_covers
from .cached_model import CachedModel
from .schedules import DraftStopRule



class DraftModelDrafter(Drafter):
    """Draft with a small causal LM that shares the target's tokenizer, in any shape (module docstring).

    ``DraftModelDrafter(model)`` trusts that ``model`` reads the target's token ids. Pass both tokenizers
    (``draft_tokenizer=``, ``target_tokenizer=``), or build it with `for_pair`, to have that checked: the tokenizers
    must agree on token strings (`require_same_tokenizer`) and the model's embedding table must cover the target
    tokenizer's ids. The model may use another dtype than the target (logits are float32), but must sit on the
    target's device. ``stop_rule`` (`specdec_lib.drafters.schedules`) may end a row's draft early.

    Padded embedding tables (hub pairs often differ by padding: 151936 vs 152064 rows) are fine: the draft only
    ever proposes ids the target has (its logits are cut to the target's ``V`` before argmax or sampling), and
    ``Draft.probs`` rows are over the target's ``V`` ids (zero-padded when the draft's table is the smaller one).
    """

    name = "draft-model"
    batches = True
    trees = True

    def __init__(
        self,
        model: PreTrainedModel,
        *,
        draft_tokenizer: PreTrainedTokenizerBase | None = None,
        target_tokenizer: PreTrainedTokenizerBase | None = None,
        cache_kind: str = "dynamic",
        stop_rule: DraftStopRule | None = None,
    ) -> None:
        if stop_rule is not None and not callable(getattr(stop_rule, "should_stop", None)):
            raise ConfigError(
                f"stop_rule must be a DraftStopRule (e.g. ConfidenceStop(0.4)) or None, got {type(stop_rule).__name__}."
            )
        if (draft_tokenizer is None) != (target_tokenizer is None):
            raise ConfigError("Pass both draft_tokenizer and target_tokenizer to have the pair checked, or neither.")
        if target_tokenizer is not None:
            require_same_tokenizer(target_tokenizer, draft_tokenizer)
            require_vocab_covers(model, target_tokenizer, role="draft")
        self.model = model
        self.stop_rule = stop_rule  # None: always draft k tokens; else may stop a row's draft early
        if stop_rule is not None:
            self.name = f"draft-model+{stop_rule.name}"
        self.state = CachedModel(model, cache_kind)  # allocated by `begin`, sized to the generation
        self.vocab_size = self.state.vocab_size
        self.target_vocab_size = self.vocab_size
        self._check_ids = True
        self._tree_start = 0  # the committed length when the last tree was drafted
        self._fed: tuple[int, ...] = ()  # where each of its nodes was fed in the cache (-1: never)

    @classmethod
    def for_pair(cls, pair: ModelPair, **options) -> "DraftModelDrafter":
        """The drafter for ``pair.draft``, after checking it against ``pair.target_tokenizer`` (see the class)."""
        return cls(pair.draft, draft_tokenizer=pair.draft_tokenizer, target_tokenizer=pair.target_tokenizer, **options)

    @property
    def cache(self):
        """The draft model's KV cache (read-only use: memory accounting, tests)."""
        return self.state.cache

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return self.model.device

    @property
    def max_positions(self) -> int:
        return self.state.max_positions

    def begin(self, context: Context, *, max_length: int | None = None, target_vocab_size: int | None = None) -> None:
        """A new generation: an empty cache for ``context.batch`` rows sized for ``max_length`` positions (the
        prompts are read by the first `propose`); drafts and their q cover the target's ``target_vocab_size`` ids."""
        for b in range(context.batch):
            check_input_ids(context.row(b)[None], self.model)
        self.state.reset(context.batch, max_length)
        self.target_vocab_size = self.vocab_size if target_vocab_size is None else int(target_vocab_size)
        # ids the target produces fit the draft's table when the target's vocabulary is no larger: no check needed
        self._check_ids = target_vocab_size is None or self.target_vocab_size > self.vocab_size

    def _over_target_ids(self, probs: torch.Tensor) -> torch.Tensor:
        """``probs: [..., V_kept]`` over the target's ids, zero-padded to the target's V when the draft's table is
        smaller."""
        missing = self.target_vocab_size - probs.shape[-1]
        return torch.nn.functional.pad(probs, (0, missing)) if missing > 0 else probs

    @torch.inference_mode()
    def propose(self, context: Context, sampling: SamplingConfig, generator: torch.Generator | None) -> Draft:
        """Up to ``context.row_k[b]`` tokens per row, argmax (greedy, ``probs=None``) or drawn from
        ``logits_to_probs(logits, sampling)`` (those rows, over the target's ids, are ``probs``); or a tree of
        ``context.tree``. Fewer when the ``stop_rule`` ends a row early (after the token whose confidence made it
        stop: one number read back per drafted token) or the draft model's own context would overflow."""
        if context.tree is not None and not context.tree.is_chain:
            return self._propose_tree(context)
        if context.tree is not None:  # a chain-shaped tree: top-1 candidates, verified as point masses
            sampling = GREEDY
        pending = self.state.sync(context, check_ids=self._check_ids)
        # feeding the pending tokens then k - 1 drafts uses positions up to L + k - 2 < max_positions
        ks = [max(0, min(k, self.max_positions - length + 1)) for k, length in zip(context.row_k, context.lengths)]
        width = max(ks)
        if width == 0:
            return Draft.empty(context.batch, self.device)
        kept = min(self.vocab_size, self.target_vocab_size)  # ids both models have: draft-only ids get no mass
        lengths = list(ks)  # how many each row drafts (a stop rule may end a row sooner)
        confidences: list[list[float]] = [[] for _ in ks]
        tokens, rows = [], []
        logits = self.state.feed(pending)[:, :kept]  # [B, V_kept]
        for i in range(width):
            if i:  # feed d_i to the rows that still draft after it (the others get a hole)
                logits = self.state.step(tokens[-1], [n > i for n in lengths])[:, :kept]
            token, q = draw(logits, sampling, generator)  # [B], [B, V_kept] | None
            tokens.append(token)
            if q is not None:
                rows.append(self._over_target_ids(q))
            if self.stop_rule is not None:
                chosen = (torch.softmax(logits, -1) if q is None else q).gather(1, token[:, None])[:, 0].tolist()
                for b, confidence in enumerate(chosen):
                    if lengths[b] > i + 1:
                        confidences[b].append(confidence)
                        if self.stop_rule.should_stop(confidences[b]):
                            lengths[b] = i + 1
                if max(lengths) <= i + 1:
                    break
        drafted = len(tokens)
        probs = torch.stack(rows, dim=1) if rows else None
        return Draft(torch.stack(tokens, dim=1), probs, forwards=drafted, lengths=lengths)

    def _propose_tree(self, context: Context) -> Draft:
        """A tree of ``context.tree`` after the only row (`grow_tree`): ``depth`` draft forwards, each over the nodes
        of one depth it expands, after the cache's committed tokens (module docstring)."""
        pending = self.state.sync(context, check_ids=self._check_ids)
        self._tree_start = context.lengths[0]
        kept = min(self.vocab_size, self.target_vocab_size)
        root_logits = self.state.feed(pending)[0, :kept]  # [V]: after the root

        def feed(ids: torch.Tensor, parents: tuple[int, ...], first: int) -> torch.Tensor:
            return self.state.feed_tree(ids, parents, first)[:, :kept]

        tree = grow_tree(context.tree, root_logits, feed)
        self._fed = tree.fed
        return Draft(tree.tokens[None], None, forwards=tree.forwards, parents=tree.parents)

    def accept(self, context: Context) -> None:
        """Keep each row's committed tokens but the last (what its cache held then agrees with the committed
        sequence, so it is trusted); after a tree round, the accepted path's fed nodes first (the other branches go)."""
        if context.path is not None:
            start = self._tree_start
            self.state.keep_path(start, [start + self._fed[node] for node in context.path if self._fed[node] >= 0])
        keep = [max(length - 1, 0) for length in context.lengths]
        self.state.crop(keep)
        self.state.trust(keep)

    def select(self, rows: torch.Tensor) -> None:
        self.state.select(rows)
