"""Drafting with a model on a *different* tokenizer (universal assisted decoding, through text).

Token ids mean nothing across tokenizers (id 1234 is ``"Ġreturn"`` for one, ``"▁x"`` for the other), so the draft
cannot read the target's ids nor propose its own. `CrossTokenizerDrafter` translates through text each round:

    target ids --decode--> text --encode(draft tokenizer)--> draft ids      (the draft's context)
    draft model: k greedy tokens (its own KV cache)
    draft ids  --decode--> draft text --encode(target tokenizer)--> target ids   (the proposal, <= k tokens)

Two details make the proposal usable (as in transformers' ``AssistedCandidateGeneratorDifferentTokenizers``):

- **Lookbehind windows.** Re-encoding is local: only the last ``lookbehind`` draft tokens are re-encoded with the
  newly committed text (`_DraftContext`), and the proposal is encoded from the text of the last ``lookbehind``
  target tokens plus the draft text, so the tokenizer sees the left context a boundary token depends on.
- **Boundary alignment.** The re-encoded window need not split the committed text the way the target did
  (committed ``"Ġfoo"`` + drafted ``"bar"`` re-encodes as one token ``"Ġfoobar"``). Taking "everything after the
  first n tokens" would then propose text that repeats or skips characters. Instead the proposal starts at the
  first re-encoded token that begins exactly where the committed text ends (character offsets); a token that
  straddles that point is replaced by the encoding of its part after it. The proposal then continues the committed
  target sequence exactly, text-wise.

Rollback: the draft's KV cache is cropped (`accept`) to the longest prefix of its own tokens whose text lies inside
what the target committed, and each `propose` re-checks it against the fresh re-encoding (longest common prefix).

Correctness never depends on any of this: the target verifies every proposed token, so greedy output is
token-identical to the target's own greedy output whatever is proposed. Alignment only decides how much is
accepted.

Sampling is exact too. The proposal is the draft model's greedy text, a function of the committed tokens, reported
as point masses (``probs=None``), as prompt lookup reports its copies: exact verification then accepts a proposed x
with probability p(x) and otherwise draws from p without x, renormalised, so the emitted token follows p
(notebook 02). What a point mass costs is acceptance: p(x), where a reported q would give min(1, p(x) / q(x)).

`CrossVocabularySamplingDrafter` reports a real q instead: it drafts token by token inside the vocabulary
intersection (`specdec_lib.core.vocab.vocabulary_intersection`), where the draft's distribution can be written over
the target's ids.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..core.pair import ModelPair
from ..core.sampling import SamplingConfig, logits_to_probs, sample_token
from ..core.validation import check_count
from ..core.vocab import vocabulary_intersection
from ..core.drafting import Context, Draft, Drafter
from .cached_model import CachedModel


REPLACEMENT = "\ufffd"  # what decoding an incomplete UTF-8 sequence gives ("�")


def decode(tokenizer: PreTrainedTokenizerBase, ids: list[int]) -> str:
    """Text of ``ids``, special tokens kept, spaces untouched (the text round trip must be exact)."""
    return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def encode(tokenizer: PreTrainedTokenizerBase, text: str) -> tuple[list[int], list[tuple[int, int]] | None]:
    """Ids of ``text`` (no BOS/EOS added) and each token's ``(start, end)`` character span (None for a slow
    tokenizer, which has no offsets). Tokens of one character split into bytes share that character's span."""
    if not text:
        return [], []
    if getattr(tokenizer, "is_fast", False):
        encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return list(encoding["input_ids"]), [tuple(span) for span in encoding["offset_mapping"]]
    return list(tokenizer(text, add_special_tokens=False)["input_ids"]), None


def continuation_ids(
    tokenizer: PreTrainedTokenizerBase, context: str, text: str
) -> tuple[list[int], list[int]]:
    """Target ids that continue a sequence whose (window) text is ``context`` with exactly the text ``text``, and the
    character end of each inside ``text``: the boundary alignment described in the module docstring.

    ``encode(context + text)``; keep the tokens starting at or after ``len(context)``; a token straddling
    ``len(context)`` is replaced by the encoding of the part of ``text`` before the next token starts.
    """
    if not text:
        return [], []
    ids, spans = encode(tokenizer, context + text)
    if spans is None:  # no offsets: encode the new text alone (correct, less canonical at the boundary)
        alone, _ = encode(tokenizer, text)
        return alone, [len(text)] * len(alone)
    boundary = len(context)
    first = next((i for i, (start, _) in enumerate(spans) if start >= boundary), len(ids))
    head_end = spans[first][0] if first < len(ids) else len(context + text)
    head, head_spans = encode(tokenizer, text[: head_end - boundary])  # the straddling part (often empty)
    tail = ids[first:]
    ends = [end for _, end in head_spans] + [end - boundary for _, end in spans[first:]]
    return head + tail, ends


def naive_continuation_ids(
    tokenizer: PreTrainedTokenizerBase, context_ids: list[int], context: str, text: str
) -> list[int]:
    """The naive translation, kept to show its failure (notebook 04): re-encode ``context + text`` (``context`` is
    the text of ``context_ids``) and drop as many tokens as ``context_ids`` has. When the boundary tokenizes
    differently (a merge across it), this repeats or skips characters."""
    ids, _ = encode(tokenizer, context + text)
    return ids[len(context_ids) :]


def clean_text(tokenizer: PreTrainedTokenizerBase, ids: list[int]) -> tuple[str, int]:
    """Text of ``ids`` without a trailing incomplete character, and how many ids that text covers.

    A byte-level sequence may end in the middle of a multi-byte character (``"漢"`` is 3 byte tokens); decoding it
    ends in ``"�"``. The trailing ids are dropped (at most 3) until the text is clean.
    """
    for drop in range(0, min(4, len(ids) + 1)):
        text = decode(tokenizer, ids[: len(ids) - drop])
        if not text.endswith(REPLACEMENT):
            return text, len(ids) - drop
    return decode(tokenizer, ids), len(ids)


def target_window(tokenizer: PreTrainedTokenizerBase, ids: list[int], lookbehind: int) -> str:
    """The text of the last ``lookbehind`` of ``ids``, the left context a proposal is encoded after: started one id
    earlier while it would begin inside a character split into byte tokens (its text then starts with "\ufffd" and is
    not the end of the whole text); the whole text when ``ids`` has no more than ``lookbehind`` ids."""
    text = decode(tokenizer, ids)
    start = max(0, len(ids) - lookbehind)
    while start > 0:
        window = decode(tokenizer, ids[start:])
        if text.endswith(window) and not window.startswith(REPLACEMENT):
            return window
        start -= 1
    return text


class _DraftContext:
    """The draft tokenizer's ids for the committed text, updated with a lookbehind window instead of re-encoding
    everything: the last ``lookbehind`` ids (and any id sharing a character with the one before) are re-encoded
    together with the new text, so a word that grew (``"▁foo"`` -> ``"▁foobar"``) is re-tokenized."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, lookbehind: int) -> None:
        self.tokenizer, self.lookbehind = tokenizer, lookbehind
        self.text, self.ids, self.spans = "", [], []

    def update(self, text: str) -> list[int]:
        if not text.startswith(self.text) or not self.ids:  # a new sequence: encode it all
            cut_char, cut = 0, 0
        else:
            cut = max(0, len(self.ids) - self.lookbehind)
            while 0 < cut < len(self.ids) and self.spans[cut][0] < self.spans[cut - 1][1]:
                cut -= 1  # never cut inside a character split into byte tokens
            cut_char = self.spans[cut][0] if cut < len(self.ids) else len(self.text)
        ids, spans = encode(self.tokenizer, text[cut_char:])
        if spans is None:
            ids = encode(self.tokenizer, text)[0]
            self.ids, self.spans, self.text = ids, [(0, len(text))] * len(ids), text
            return self.ids
        self.ids = self.ids[:cut] + ids
        self.spans = self.spans[:cut] + [(start + cut_char, end + cut_char) for start, end in spans]
        self.text = text
        return self.ids


class CrossTokenizerDrafter(Drafter):
    """Greedy drafting with a draft model on another tokenizer, translated through text (module docstring).

    ``CrossTokenizerDrafter(draft_model, draft_tokenizer, target_tokenizer, lookbehind=8)``; ``lookbehind`` is the
    number of tokens re-encoded on each side of a boundary (transformers' ``target_lookbehind`` /
    ``assistant_lookbehind``, 10 there). Greedy or sampling alike, the draft model drafts greedily and the
    proposal is reported as point masses (``probs=None``), so exact verification keeps the target's distribution
    (module docstring).

    Limits: the draft stops at its EOS (not proposed: the target decides to stop); a draft whose text ends in the
    middle of a character is cut before it; when the committed target text itself ends mid-character, that round
    proposes nothing.
    """

    name = "cross-tokenizer"

    def __init__(
        self,
        draft_model: PreTrainedModel,
        draft_tokenizer: PreTrainedTokenizerBase,
        target_tokenizer: PreTrainedTokenizerBase,
        *,
        lookbehind: int = 8,
    ) -> None:
        check_count("lookbehind (tokens re-encoded at a boundary)", lookbehind, minimum=1)
        self.model, self.draft_tokenizer, self.target_tokenizer = draft_model, draft_tokenizer, target_tokenizer
        self.lookbehind = lookbehind
        self.draft_eos = draft_tokenizer.eos_token_id
        self.state = CachedModel(draft_model)  # the draft model, its cache and the draft ids in it
        self._context = _DraftContext(draft_tokenizer, lookbehind)
        self._last: dict | None = None  # what the last proposal needs for `accept`

    @classmethod
    def for_pair(cls, pair: ModelPair, **options) -> "CrossTokenizerDrafter":
        """The drafter for ``pair.draft`` (on ``pair.draft_tokenizer``) drafting for ``pair.target_tokenizer``."""
        return cls(pair.draft, pair.draft_tokenizer, pair.target_tokenizer, **options)

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return self.model.device

    @property
    def cache(self):
        """The draft model's KV cache (read-only use: memory accounting, tests)."""
        return self.state.cache

    def begin(self, context: Context, *, max_length: int | None = None, target_vocab_size: int | None = None) -> None:
        """A new generation: an empty draft cache (draft ids are counted in the draft tokenizer, so
        ``max_length``, in target tokens, does not size it) and a fresh text context."""
        self.state.reset()
        self._context = _DraftContext(self.draft_tokenizer, self.lookbehind)
        self._last = None

    def _sync(self, context: list[int]) -> list[int]:
        """Crop the draft cache to its longest common prefix with ``context`` (the re-encoding may have changed
        any id, so all are compared); the ids it lacks (>= 1)."""
        ids = torch.tensor([context], dtype=torch.long, device=self.model.device)
        return self.state.sync(Context.of(ids))[0].tolist()

    def _next_logits(self, ids: list[int]) -> torch.Tensor:
        """Feed ``ids`` after the cache; logits ``[V_draft]`` for the next draft token."""
        return self.state.feed([torch.tensor(ids, dtype=torch.long, device=self.model.device)])[0]

    def _draft_greedy(self, context: list[int], k: int) -> tuple[list[int], int]:
        """Up to ``k`` greedy draft ids after ``context``, stopping at the draft's EOS (not included), and the
        number of draft forwards run."""
        pending = self._sync(context)
        k = max(0, min(k, self.state.max_positions - len(context) + 1))
        drafted: list[int] = []
        forwards = 0
        for _ in range(k):
            token = int(self._next_logits(pending).argmax())
            forwards += 1
            if token == self.draft_eos:
                break
            drafted.append(token)
            pending = [token]
        return drafted, forwards

    # ------------------------------------------------------------------ translation

    def draft_text(self, context: list[int], drafted: list[int]) -> tuple[str, list[int]]:
        """Text of ``drafted`` (decoded after a few context ids, so leading spaces survive any decoder), cut before
        the first incomplete character, and each drafted id's character end in it."""
        left = context[-2:]
        base = decode(self.draft_tokenizer, left)
        ends, text = [], ""
        for i in range(1, len(drafted) + 1):
            full = decode(self.draft_tokenizer, left + drafted[:i])
            text = full[len(base) :] if full.startswith(base) else decode(self.draft_tokenizer, drafted[:i])
            ends.append(len(text))
        cut = text.find(REPLACEMENT)
        if cut >= 0:
            text = text[:cut]
        return text, ends

    def propose(self, context: Context, sampling: SamplingConfig, generator: torch.Generator | None) -> Draft:
        """Up to ``k`` target ids continuing the committed text with the draft's greedy text, as point masses.
        ``sampling`` and ``generator`` are unused: the proposal is the same whatever the temperature."""
        sequence, k = context.sequence, context.k
        with torch.inference_mode():
            ids = sequence[0].tolist()
            text, clean = clean_text(self.target_tokenizer, ids)
            draft_ids = self._context.update(text)
            self._last = None
            if k <= 0 or clean < len(ids) or not draft_ids:  # nothing asked, or the target ends mid-character
                return Draft.empty(1, self.model.device)
            drafted, forwards = self._draft_greedy(draft_ids, k)
            words, draft_ends = self.draft_text(draft_ids, drafted)
            window = target_window(self.target_tokenizer, ids, self.lookbehind)
            proposal, target_ends = continuation_ids(self.target_tokenizer, window, words)
            last_token_text = words[target_ends[-2] if len(proposal) > 1 else 0 :] if proposal else ""
            if len(proposal) <= k and last_token_text.isspace():
                # the draft text ends in whitespace: in code it is usually followed by more (indentation), which
                # the target tokenizer merges into one token ("\n" + 8 spaces); the partial one would be rejected
                proposal, target_ends = proposal[:-1], target_ends[:-1]
            proposal, target_ends = proposal[:k], target_ends[:k]
            self._last = {"length": len(ids), "context": len(draft_ids), "draft_ends": draft_ends,
                          "target_ends": target_ends}
            tokens = torch.tensor(proposal, dtype=torch.long, device=self.model.device)
            return Draft(tokens=tokens, probs=None, forwards=forwards)

    def accept(self, context: Context) -> None:
        """Crop the cache to the context plus the drafted ids whose text the target accepted."""
        sequence_length = context.lengths[0]
        last, self._last = self._last, None
        if last is None:
            return
        accepted = max(0, min(sequence_length - 1 - last["length"], len(last["target_ends"])))
        accepted_chars = last["target_ends"][accepted - 1] if accepted else 0
        kept = sum(1 for end in last["draft_ends"] if end <= accepted_chars)
        self.state.crop([last["context"] + kept])


class CrossVocabularySamplingDrafter(CrossTokenizerDrafter):
    """Speculative sampling across tokenizers with a reported q: draft only tokens both vocabularies share.

    The intersection (`vocabulary_intersection`: ``"▁return"`` <-> ``"Ġreturn"``, ``"<0xE6>"`` <-> ``"æ"``) maps draft
    ids one-to-one to target ids. Each drafted token is drawn from

        q = logits_to_probs(draft logits masked to the intersection, sampling)      over draft ids
        q_target[target_ids[i]] = q[draft_ids[i]], 0 elsewhere                      over target ids, sums to 1

    and ``q_target`` is what is reported, so ``verify_exact`` accepts a drafted token with probability
    ``min(1, p / q_target)`` rather than a point mass's ``p`` (what the q buys is acceptance, never exactness). The
    drawn target token is fed back to the draft as its draft id (same text), so the draft's context stays consistent
    with the target text (though not always in the draft tokenizer's canonical split; the next round re-encodes it).

    Limits: tokens outside the intersection (here: target merges the draft's vocabulary lacks, e.g. ``"ĊĠĠĠ"``)
    can never be drafted, so the target must produce them itself; a draft whose own best continuation lies outside
    the intersection is forced onto the renormalised rest, which lowers acceptance.
    """

    name = "cross-vocabulary"

    def __init__(
        self,
        draft_model: PreTrainedModel,
        draft_tokenizer: PreTrainedTokenizerBase,
        target_tokenizer: PreTrainedTokenizerBase,
        *,
        target_vocab_size: int | None = None,
        lookbehind: int = 8,
    ) -> None:
        super().__init__(draft_model, draft_tokenizer, target_tokenizer, lookbehind=lookbehind)
        target_ids, draft_ids = vocabulary_intersection(target_tokenizer, draft_tokenizer)
        draft_rows = draft_model.get_input_embeddings().num_embeddings
        keep = draft_ids < draft_rows
        self.target_ids, self.draft_ids = target_ids[keep], draft_ids[keep]  # LongTensor[N] each
        self.target_vocab_size = int(target_vocab_size or len(target_tokenizer))
        self._draft_mask = torch.full((draft_rows,), float("-inf"))  # 0 on the intersection, -inf elsewhere
        self._draft_mask[self.draft_ids] = 0.0
        self._to_draft = {int(t): int(d) for t, d in zip(self.target_ids, self.draft_ids)}
        # the same on the draft model's device, copied once rather than for every drafted token
        device = draft_model.device
        self._device_mask = self._draft_mask.to(device)
        self._device_target_ids, self._device_draft_ids = self.target_ids.to(device), self.draft_ids.to(device)

    @classmethod
    def for_pair(cls, pair: ModelPair, **options) -> "CrossVocabularySamplingDrafter":
        options.setdefault("target_vocab_size", pair.target.get_output_embeddings().out_features)
        return cls(pair.draft, pair.draft_tokenizer, pair.target_tokenizer, **options)

    @property
    def intersection_size(self) -> int:
        return int(self.target_ids.numel())

    def target_distribution(self, draft_logits: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
        """``FloatTensor[V_target]``: the processed draft distribution restricted to the intersection, in target ids."""
        masked = draft_logits.float() + self._device_mask
        q = logits_to_probs(masked, sampling)  # [V_draft], zero outside the intersection
        q_target = torch.zeros(self.target_vocab_size, device=draft_logits.device)
        q_target[self._device_target_ids] = q[self._device_draft_ids]
        return q_target

    def propose(self, context: Context, sampling: SamplingConfig, generator: torch.Generator | None) -> Draft:
        sequence, k = context.sequence, context.k
        with torch.inference_mode():
            ids = sequence[0].tolist()
            text, clean = clean_text(self.target_tokenizer, ids)
            draft_ids = self._context.update(text)
            self._last = None
            k = max(0, min(k, self.state.max_positions - len(draft_ids) + 1))
            if k <= 0 or clean < len(ids) or not draft_ids:
                return Draft.empty(1, self.model.device)
            pending = self._sync(draft_ids)
            tokens, rows = [], []
            for _ in range(k):
                q = self.target_distribution(self._next_logits(pending), sampling)  # [V_target]
                token = q.argmax() if sampling.is_greedy else sample_token(q, generator)
                tokens.append(int(token))
                rows.append(q)
                pending = [self._to_draft[int(token)]]  # the same text, as the draft's id
            self._last = {"length": len(ids), "context": len(draft_ids)}
            probs = None if sampling.is_greedy else torch.stack(rows)  # greedy: a point mass per token
            return Draft(tokens=torch.tensor(tokens, dtype=torch.long, device=self.model.device),
                         probs=probs, forwards=len(tokens))

    def accept(self, context: Context) -> None:
        """Drafted ids map one-to-one to proposed target ids: keep the context and the accepted ones."""
        sequence_length = context.lengths[0]
        last, self._last = self._last, None
        if last is None:
            return
        accepted = max(0, sequence_length - 1 - last["length"])
        self.state.crop([last["context"] + accepted])
