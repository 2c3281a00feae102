"""The bookkeeping of one generation, so that the round engine holds nothing but the algorithm.

`Settings` is what the caller asked for (draft length, token budget, sampling, verification, tree, cache), checked once.
`Run` holds, for the B rows of one generation:

    tokens     LongTensor[B0, capacity] on the target's device: row r's committed tokens are tokens[r, :lengths[r]]
    active     the rows still generating, in the order of the caches' batch dimension (rows keep their index r)
    row_k      per active row, how many tokens it may draft this round: k_b = min(gamma, remaining_b - 1,
               positions left in the target's context); a token tree is cut to that depth (and drafted from the
               second round: the first reads the prompts)
    step_input the verification forward's input: what the target's cache lacks of each row (the prompt in the
               first round, the last committed token after it), then the row's drafts
    commit     reads the verdict back once, appends each row's accepted drafts and its recovered or bonus token,
               cut right after a stop id and never past max_new_tokens
    retire     finished rows leave the batch (and every state that holds rows)

Every check of the inputs happens in `Run.start`, before the first forward: a bad setting gets a clear error that
says how to fix it, never a traceback from inside torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from .drafting import Context, Draft, Drafter, TargetOutput
from .errors import ConfigError
from .recording import Recorder
from .result import GenerationResult
from .rows import PAD_ID, ROW_KINDS, left_pad
from .sampling import GREEDY, SamplingConfig, check_sampling, make_generator
from .stopping import stop_token_ids
from .trace import RoundRecord
from .trees import DynamicTree, TreeShape, check_tree_kind, node_depths
from .validation import (check_count, check_drafter, check_prompts, check_same_device, context_length,
                         is_whole)
from .verify import Verdict, check_probabilities


@dataclass(frozen=True)
class Settings:
    """How to decode. ``gamma``: the most drafts per round (0: no drafter, the target alone); ``max_new_tokens``: the
    budget per row; ``sampling``: greedy or the processing p and q share; ``verification``: ``"exact"``, ``"block"``
    or ``"relaxed"`` (with ``lenience``; NOT distribution-preserving); ``tree``: draft a token tree of this shape,
    static (`TreeShape`) or grown by the drafter's confidence (`DynamicTree`), one row; ``cache_kind``: the
    target's KV cache (``"dynamic"``, ``"preallocated"``, or ``"none"``: no cache, every forward re-reads the whole
    sequence); ``disable_by_batch_size``: draft only while at most that many rows are active (None: always)."""

    max_new_tokens: int
    gamma: int = 0
    sampling: SamplingConfig = GREEDY
    verification: str = "exact"
    lenience: float | None = None
    tree: TreeShape | DynamicTree | None = None
    cache_kind: str = "dynamic"
    disable_by_batch_size: int | None = None

    def check(self) -> None:
        check_count("max_new_tokens", self.max_new_tokens, minimum=1, hint="Ask for at least one new token.")
        check_count("gamma (the number of draft tokens per round)", self.gamma, minimum=0,
                    hint="Typical values are 2 to 8; use autoregressive_generate for plain decoding.")
        check_sampling(self.sampling, self.verification, self.lenience)
        check_tree_kind(self.tree)
        if self.cache_kind not in ROW_KINDS:
            raise ConfigError(f"cache kind must be one of {ROW_KINDS}, got {self.cache_kind!r}.")
        if self.disable_by_batch_size is not None:
            check_count("disable_by_batch_size", self.disable_by_batch_size, minimum=1,
                        hint="None always speculates; N speculates only while at most N rows are active.")


def check_draft_ids(drafts: Sequence[Sequence[int]], readable: int) -> None:
    """Refuse draft ids the target cannot read and score. The verification forward and the verdict read them clamped
    into ``0 .. readable - 1`` (an id outside the embedding table would fail deep inside torch, or, on a GPU, poison
    the device), so this check runs on the ids `Run.commit` reads back anyway, before anything is committed: no extra
    host synchronisation."""
    wrong = [token for row in drafts for token in row if not 0 <= token < readable]
    if wrong:
        raise ConfigError(
            f"The drafter proposed token id {wrong[0]}, outside the target's vocabulary of {readable}. "
            "Draft and target must share a tokenizer (see specdec_lib.core.vocab)."
        )


class Run:
    """The bookkeeping of one generation (module docstring); build it with `Run.start`, which checks the inputs."""

    def __init__(self, target: PreTrainedModel, drafter: Drafter, prompts: list[torch.Tensor],
                 settings: Settings, stop_ids: frozenset[int], generator: torch.Generator | None,
                 record_memory: bool) -> None:
        self.target, self.drafter, self.settings = target, drafter, settings
        self.stop_ids, self.generator = stop_ids, generator
        self.device = target.device
        self.prompt_lengths = [prompt.shape[1] for prompt in prompts]
        self.max_positions = context_length(target)
        self.target_vocab = target.get_output_embeddings().out_features  # V: the width of p and q
        # the ids it can both read (its embedding table) and score (its logits): a draft's ids must lie below
        self.readable_ids = min(target.get_input_embeddings().num_embeddings, self.target_vocab)
        width = settings.tree.slots if settings.tree is not None else settings.gamma  # slots one round may add
        longest = max(self.prompt_lengths) + settings.max_new_tokens
        self.max_length = min(longest + width + 1, self.max_positions)  # positions a row reaches (drafters size by it)
        self.cache_slots = longest + width + 1  # slots the target's cache may hold (a tree takes more than positions)
        self.tokens = torch.full((len(prompts), longest), PAD_ID, dtype=torch.long, device=self.device)
        for row, prompt in enumerate(prompts):
            self.tokens[row, : prompt.shape[1]] = prompt[0].to(self.device)
        self.lengths = list(self.prompt_lengths)
        self.active = list(range(len(prompts)))
        self.target_forwards = 0  # run so far: one per round
        self.fed_committed = 0  # the first active row's committed tokens in the last verification input
        self.rounds: dict[int, RoundRecord] = {}  # row -> what it did in the last forward (the recorder times it)
        self.path: tuple[int, ...] | None = None  # the accepted path of the last tree round
        self.path_slots: tuple[int, list[int]] | None = None  # its cache slots, and the slot they move to
        self.recorder = Recorder(self.device, len(prompts), record_memory=record_memory)

    @classmethod
    def start(cls, target: PreTrainedModel, drafter: Drafter, prompts: Sequence[torch.Tensor],
              settings: Settings, *, seed: int | None, eos_token_id, record_memory: bool = False) -> "Run":
        """Check everything before the first forward, then set the generation up."""
        settings.check()
        prompts = check_prompts(target, prompts, settings.max_new_tokens)
        check_drafter(drafter, batch=len(prompts), tree=settings.tree is not None)
        check_same_device(target.device, getattr(drafter, "device", None))
        if settings.cache_kind != "dynamic" and len(prompts) > 1:
            raise ConfigError(f"A {settings.cache_kind!r} cache holds one row; use cache_kind='dynamic' for a "
                              f"batch of {len(prompts)}.")
        if settings.tree is not None and (len(prompts) > 1 or settings.cache_kind == "none"):
            raise ConfigError("A token tree is drafted for one row, over a KV cache (cache_kind 'dynamic' or "
                              "'preallocated').")
        generator = make_generator(seed, target.device)
        return cls(target, drafter, prompts, settings, stop_token_ids(target, eos_token_id), generator, record_memory)

    @property
    def batch(self) -> int:
        """The rows still generating."""
        return len(self.active)

    @property
    def first_round(self) -> bool:
        """Whether no target forward has run yet (the target's cache is empty: this round reads the prompts)."""
        return self.target_forwards == 0

    def _k(self, row: int) -> int:
        """k for ``row`` this round: drafts + the target's own token fit in what is left of max_new_tokens, and the
        last draft's position stays inside the target's context."""
        settings = self.settings
        if settings.disable_by_batch_size is not None and self.batch > settings.disable_by_batch_size:
            return 0
        if settings.tree is not None and self.first_round:
            return 0  # a tree is verified after the root's cached context: the first round reads the prompt alone
        generated = self.lengths[row] - self.prompt_lengths[row]
        depth = settings.tree.depth if settings.tree is not None else settings.gamma
        return max(0, min(depth, settings.max_new_tokens - generated - 1, self.max_positions - self.lengths[row]))

    def context(self, path: tuple[int, ...] | None = None) -> Context:
        """What the drafter sees of the active rows, with this round's k per row (``path``: for `accept`)."""
        everyone = self.active == list(range(self.tokens.shape[0]))
        tokens = self.tokens if everyone else self.tokens[self.active]
        row_k = [self._k(row) for row in self.active]
        tree = self.settings.tree
        if tree is not None and row_k[0] > 0:
            tree = tree.cut(row_k[0])
        return Context(tokens, [self.lengths[row] for row in self.active], row_k, tree, path)

    def checked(self, draft: object, context: Context) -> Draft:
        """``draft`` as ``[B, K]`` tensors on the target's device, after refusing anything malformed with a message
        for the drafter's author (module docstring of `specdec_lib.core.drafting`)."""
        if not isinstance(draft, Draft):
            raise ConfigError(f"A drafter's propose() must return a Draft, got {type(draft).__name__}.")
        tokens, probs = draft.tokens, draft.probs
        if isinstance(probs, torch.Tensor) and probs.ndim == 2 and isinstance(tokens, torch.Tensor) and tokens.ndim == 2:
            probs = probs[None]  # one row's q set as [K, V] after the draft was built
        if not isinstance(tokens, torch.Tensor) or tokens.ndim != 2 or tokens.dtype != torch.long:
            raise ConfigError(f"Draft.tokens must be a torch.long tensor [B, K] (or [K] for one row), got "
                              f"{list(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__}.")
        if tokens.shape[0] != self.batch:
            raise ConfigError(f"The draft has {tokens.shape[0]} rows but {self.batch} rows are generating.")
        width = tokens.shape[1]
        lengths = [width] * self.batch if draft.lengths is None else list(draft.lengths)
        if draft.parents is not None:  # node_depths refuses parents that are not a tree
            if len(draft.parents) != width or max(node_depths(draft.parents), default=0) > context.row_k[0]:
                raise ConfigError(f"A token tree of {len(draft.parents)} parents must come with as many tokens (got "
                                  f"{width}) and stay within the depth asked for ({context.row_k[0]}).")
        elif len(lengths) != self.batch or any(not is_whole(n) or not 0 <= n <= min(k, width)
                                               for n, k in zip(lengths, context.row_k)):
            raise ConfigError(f"The drafter proposed {lengths} tokens per row but was asked for at most "
                              f"{context.row_k} (its tokens are {width} wide).")
        if probs is not None and tuple(probs.shape) != (self.batch, width, self.target_vocab):
            raise ConfigError(f"Draft.probs must have shape [B, K, V] = [{self.batch}, {width}, {self.target_vocab}] "
                              f"(one distribution over the target's ids per token) or be None, got {list(probs.shape)}.")
        if probs is not None:
            check_probabilities("Draft.probs", probs)
        if not is_whole(draft.forwards) or draft.forwards < 0:
            raise ConfigError(f"Draft.forwards must be an integer >= 0, got {draft.forwards!r}.")
        if self.batch == 1 and lengths[0] < width:  # one row's forward reads its own drafts only (`step_input`)
            tokens, probs = tokens[:, : lengths[0]], None if probs is None else probs[:, : lengths[0]]
        return Draft(tokens.to(self.device), None if probs is None else probs.to(self.device), draft.forwards, lengths,
                     draft.parents)

    def nothing(self) -> Draft:
        """The draft of a round in which no row may draft (the target alone, or one token left to emit)."""
        return Draft.empty(self.batch, self.device)

    def step_input(self, draft: Draft) -> tuple[torch.Tensor, torch.Tensor | None, int]:
        """The verification forward's input ``[B, W]``: per row, what the target's cache lacks of its committed
        tokens (the whole prompt in the first round, the last committed token after it), left-padded so that every
        row's last committed token shares one column, then the row's drafts (a tree's nodes), right-padded; which
        inputs are real (None: all); and how many columns of logits the verdict needs (1 + K). Draft ids are read
        clamped to the target's vocabulary (`check_draft_ids` refuses them at the commit)."""
        fresh = [self.tokens[row, 0 if self.first_round else self.lengths[row] - 1 : self.lengths[row]]
                 for row in self.active]
        self.fed_committed = fresh[0].shape[0]  # read by `target_output`
        drafts = draft.tokens.clamp(0, self.readable_ids - 1)  # [B, K]
        width = drafts.shape[1]
        if self.batch == 1:
            return torch.cat([fresh[0], drafts[0, : draft.lengths[0]]])[None], None, 1 + draft.lengths[0]
        committed, real = left_pad(fresh)  # [B, C], [B, C] | None
        if real is None and all(n == width for n in draft.lengths):  # host lengths: no device read-back
            return torch.cat([committed, drafts], dim=1), None, 1 + width
        drafted = torch.arange(width, device=self.device) < torch.tensor(draft.lengths, device=self.device)[:, None]
        real = torch.ones_like(committed, dtype=torch.bool) if real is None else real
        valid = torch.cat([real, drafted], dim=1)  # [B, C + K]
        return torch.cat([committed, drafts], dim=1).masked_fill(~valid, PAD_ID), valid, 1 + width

    def commit(self, draft: Draft, verdict: Verdict) -> list[bool]:
        """Append each row's accepted drafts (``verdict.path``: a chain's first n, a tree's path) and its recovered or
        bonus token (one read-back of the verdict), cut right after a stop id and never past max_new_tokens; returns
        which rows finished (aligned with `active`)."""
        depth = verdict.path.shape[1]
        host = torch.cat([verdict.accepted[:, None], verdict.next_token[:, None], verdict.bonus[:, None].long(),
                          verdict.path, draft.tokens], dim=1).tolist()  # [B, 3 + D + K]: one transfer for the round
        accepted, next_tokens, bonus = ([row[i] for row in host] for i in range(3))
        paths = [row[3 : 3 + depth][:n] for row, n in zip(host, accepted)]
        drafts = [row[3 + depth :][:n] for row, n in zip(host, draft.lengths)]
        kept = [[row[node] for node in path] for row, path in zip(drafts, paths)]
        self.path = self.path_slots = None
        if draft.parents is not None:  # one row; its nodes sit in the cache after x_L, at L, L + 1, ...
            self.path = tuple(paths[0])
            start = self.lengths[self.active[0]]
            self.path_slots = (start, [start + node for node in paths[0]])
        check_draft_ids(drafts, self.readable_ids)
        first = self.first_round
        self.rounds, finished = {}, []
        for index, row in enumerate(self.active):
            left = self.settings.max_new_tokens - (self.lengths[row] - self.prompt_lengths[row])
            new = (kept[index] + [next_tokens[index]])[:left]
            stop = next((i for i, token in enumerate(new) if token in self.stop_ids), None)
            if stop is not None:
                new = new[: stop + 1]
            start = self.lengths[row]
            self.tokens[row, start : start + len(new)] = torch.tensor(new, device=self.device)
            self.lengths[row] += len(new)
            kind = ("recovered" if drafts[index] and not bonus[index] else "bonus" if drafts[index]
                    else "prefill" if first else "target")
            self.rounds[row] = RoundRecord(len(drafts[index]), accepted[index], len(new), 0.0, 0.0, 0, kind,
                                           tuple(drafts[index]))  # the recorder adds the times and draft forwards
            finished.append(stop is not None or len(new) == left)
        self.target_forwards += 1
        return finished

    def cache_keep(self) -> list[int]:
        """Per active row, what the target's cache keeps: the committed tokens but the last (fed next round)."""
        return [self.lengths[row] - 1 for row in self.active]

    def target_output(self, logits: torch.Tensor, states: torch.Tensor | None) -> TargetOutput:
        """What the drafter may read of this round's forward (`TargetOutput`): the first row's logits ``[1 + K,
        V]`` and its hidden states at the inputs the cache keeps (the committed ones fed this round, then the
        accepted drafts)."""
        done = self.rounds[self.active[0]]
        if states is None:
            return TargetOutput(logits[0], None, done.accepted)
        if self.path is None:  # a chain: the committed inputs, then its first accepted drafts
            return TargetOutput(logits[0], states[0, : self.fed_committed + done.accepted], done.accepted)
        kept = list(range(self.fed_committed)) + [self.fed_committed + node for node in self.path]  # a tree's path
        return TargetOutput(logits[0], states[0, kept], done.accepted)

    def retire(self, finished: list[bool], *states) -> None:
        """Drop the finished rows from `active` and from every state holding rows (a `CachedRows`, a drafter)."""
        if not any(finished):
            return
        keep = [index for index, done in enumerate(finished) if not done]
        self.active = [self.active[index] for index in keep]
        if keep:
            rows = torch.tensor(keep, dtype=torch.long, device=self.device)
            for state in states:
                if state is not None:
                    state.select(rows)

    def result(self, method: str) -> GenerationResult:
        sequences = [self.tokens[row : row + 1, : self.lengths[row]] for row in range(self.tokens.shape[0])]
        return GenerationResult(sequences, self.prompt_lengths, method, self.recorder.traces)
