"""Can two models share token ids? Compare their vocabularies by token *strings*, never by size.

Speculative decoding with a draft model passes token ids straight from one model to the other, which is only
meaningful if id 1234 is the same string for both. Sizes prove nothing: two tokenizers of the same size can
split text differently, and one tokenizer often sits under embedding tables padded to different sizes (a
family's small and large checkpoints). So `compare_vocabularies` compares ``get_vocab()`` (string -> id) maps:

- ``"same"``: identical maps;
- ``"padded"``: one map is the other plus extra ids (added special tokens); every shared string has the same
  id, so ids can be passed across as long as each model's embedding table covers them;
- ``"different"``: some string has two ids, or each side has strings the other lacks. Such a pair needs the
  cross-tokenizer drafter (`CrossTokenizerDrafter`, notebook 04), which translates through text.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from transformers import PreTrainedModel

from .errors import ConfigError

VocabKind = Literal["same", "padded", "different"]


@dataclass(frozen=True)
class VocabReport:
    """How two vocabularies relate (see the module docstring for the kinds)."""

    kind: VocabKind
    size_a: int  # number of token strings in vocabulary a
    size_b: int  # number of token strings in vocabulary b
    overlap: int  # token strings present in both
    same_ids: int  # shared token strings that also have the same id in both

    @property
    def compatible(self) -> bool:
        """True when token ids can be passed between the two models unchanged ("same" or "padded")."""
        return self.kind != "different"


def _vocab_of(tokenizer: object) -> Mapping[str, int]:
    """The string -> id map of a tokenizer (anything with ``get_vocab()``) or of a plain mapping."""
    if isinstance(tokenizer, Mapping):
        return tokenizer
    if not hasattr(tokenizer, "get_vocab"):
        raise ConfigError(
            f"Cannot read a vocabulary from {type(tokenizer).__name__}: pass a tokenizer (with get_vocab()) "
            "or a dict mapping token strings to ids."
        )
    return tokenizer.get_vocab()


def compare_vocabularies(tok_a: object, tok_b: object) -> VocabReport:
    """Compare two tokenizers (or ``{token string: id}`` dicts) by their token strings; see `VocabReport`."""
    vocab_a, vocab_b = _vocab_of(tok_a), _vocab_of(tok_b)
    shared = vocab_a.keys() & vocab_b.keys()
    same_ids = sum(1 for token in shared if vocab_a[token] == vocab_b[token])
    if len(vocab_a) == len(vocab_b) == len(shared) == same_ids:
        kind: VocabKind = "same"
    elif same_ids == len(shared) == min(len(vocab_a), len(vocab_b)):
        # the smaller map is contained in the larger one; the extra strings must not reuse a shared id
        larger, smaller = (vocab_a, vocab_b) if len(vocab_a) >= len(vocab_b) else (vocab_b, vocab_a)
        shared_ids = set(smaller.values())
        clash = any(larger[token] in shared_ids for token in larger.keys() - smaller.keys())
        kind = "different" if clash else "padded"
    else:
        kind = "different"
    return VocabReport(kind=kind, size_a=len(vocab_a), size_b=len(vocab_b), overlap=len(shared), same_ids=same_ids)


def require_same_tokenizer(target_tokenizer: object, draft_tokenizer: object) -> VocabReport:
    """Return the `VocabReport` of a pair whose ids can be shared, or raise `ConfigError` pointing to the fix."""
    report = compare_vocabularies(target_tokenizer, draft_tokenizer)
    if not report.compatible:
        raise ConfigError(
            "The target and draft tokenizers are different (compared by token strings: "
            f"{report.size_a} vs {report.size_b} tokens, {report.overlap} shared, {report.same_ids} with the same id), "
            "so token ids cannot be passed from one model to the other. Use a draft model with the target's "
            "tokenizer, or use CrossTokenizerDrafter (notebook 04), which drafts across tokenizers through text."
        )
    return report


def require_vocab_covers(model: PreTrainedModel, tokenizer: object, *, role: str = "draft") -> None:
    """Refuse ``model`` if its embedding table is smaller than ``tokenizer``'s vocabulary (ids would overflow)."""
    rows = model.get_input_embeddings().num_embeddings
    needed = len(tokenizer) if hasattr(tokenizer, "__len__") else len(_vocab_of(tokenizer))
    if rows < needed:
        raise ConfigError(
            f"The {role} model has {rows} token embeddings but the tokenizer it must read has {needed} tokens: "
            f"ids {rows} and above would index outside its embedding table. Use a {role} model whose vocabulary "
            "covers the target's tokenizer."
        )
