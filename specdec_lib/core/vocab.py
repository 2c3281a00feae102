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

Across *different* tokenizers, many tokens still mean the same text, only spelled differently: byte-level BPE
(GPT-2 style, tokenizer A) writes a leading space as ``Ġ`` and stores every byte as a printable stand-in
character, SentencePiece-style tokenizers (tokenizer B) write it as ``▁`` and fall back to ``<0x..>`` byte tokens.
`token_bytes` normalises a token to the bytes it stands for, `vocabulary_intersection` pairs the tokens of two
vocabularies that stand for the same bytes (what `CrossVocabularySamplingDrafter` drafts with), and
``VocabReport.normalized_overlap`` counts them.
"""

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import torch
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
    normalized_overlap: int | None = None  # tokens standing for the same bytes in both (None: not computable)

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


def compare_vocabularies(tok_a: object, tok_b: object, *, normalized: bool = True) -> VocabReport:
    """Compare two tokenizers (or ``{token string: id}`` dicts) by their token strings; see `VocabReport`.

    ``normalized=False`` skips the (costlier) byte-normalised overlap, for callers that only need the kind."""
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
    normalized_overlap = None
    if normalized:
        try:
            normalized_overlap = len(_pair_by_bytes(tok_a, tok_b))
        except ConfigError:  # plain dicts without a known spelling scheme: strings only
            pass
    return VocabReport(
        kind=kind, size_a=len(vocab_a), size_b=len(vocab_b), overlap=len(shared), same_ids=same_ids,
        normalized_overlap=normalized_overlap,
    )


# ---------------------------------------------------------------------------------------------- normalisation

SPACE_MARKER = "\u2581"  # "▁", SentencePiece's space marker
_BYTE_FALLBACK_LENGTH = len("<0x00>")


@functools.lru_cache(maxsize=1)
def _byte_level_decoder() -> dict[str, int]:
    """GPT-2's printable stand-in character -> the byte it stands for (``Ġ`` -> 0x20, ``Ċ`` -> 0x0A, ...)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    chars, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            chars[chr(byte)] = byte
        else:
            chars[chr(256 + extra)] = byte
            extra += 1
    return chars


def spelling_scheme(tokenizer: object) -> Literal["byte-level", "metaspace"]:
    """How a tokenizer spells token strings: ``"byte-level"`` (``Ġ``, every byte a stand-in character, GPT-2,
    Llama 3, Qwen) or ``"metaspace"`` (``▁`` for a space, ``<0x..>`` byte-fallback tokens, SentencePiece, Llama 2,
    tokenizer B), read from the fast tokenizer's decoder."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ConfigError(
            f"Cannot tell how {type(tokenizer).__name__} spells its tokens: a fast (tokenizers-backed) tokenizer is "
            "needed to normalise token strings across tokenizers."
        )
    decoder = json.dumps(json.loads(backend.to_str()).get("decoder"))
    return "byte-level" if '"ByteLevel"' in decoder else "metaspace"


def token_bytes(token: str, scheme: str) -> bytes | None:
    """The bytes a token string stands for under ``scheme`` (see `spelling_scheme`), or None if it stands for none.

    ``"byte-level"``: each character is a stand-in for one byte (``"Ġdef"`` -> ``b" def"``).
    ``"metaspace"``: ``"<0xE6>"`` -> ``b"\xe6"`` (byte fallback), otherwise UTF-8 with ``▁`` -> space
    (``"▁def"`` -> ``b" def"``). So ``Ġ`` <-> ``▁`` <-> space, and a byte-fallback token equals a byte-level token
    only when both stand for the same single byte.
    """
    if scheme == "byte-level":
        table = _byte_level_decoder()
        if any(char not in table for char in token):
            return None
        return bytes(table[char] for char in token)
    if len(token) == _BYTE_FALLBACK_LENGTH and token.startswith("<0x") and token.endswith(">"):
        try:
            return bytes([int(token[3:5], 16)])
        except ValueError:
            pass
    return token.replace(SPACE_MARKER, " ").encode("utf-8")


def _normalized_vocab(tokenizer: object) -> dict[object, int]:
    """Normalised key -> id: ``bytes`` for ordinary tokens, ``("special", string)`` for added/special tokens.

    When several ids stand for the same bytes (``"▁"`` and ``"<0x20>"``), the ordinary token wins over the
    byte-fallback one, then the lower id: the map stays one-to-one.
    """
    scheme = spelling_scheme(tokenizer)
    special = set(getattr(tokenizer, "all_special_tokens", [])) | {
        str(token) for token in getattr(tokenizer, "added_tokens_decoder", {}).values()
    }
    keyed: dict[object, tuple[bool, int]] = {}
    for string, index in _vocab_of(tokenizer).items():
        if string in special:
            key: object = ("special", string)
            fallback = False
        else:
            key = token_bytes(string, scheme)
            if key is None or key == b"":
                continue
            fallback = scheme == "metaspace" and len(string) == _BYTE_FALLBACK_LENGTH and string.startswith("<0x")
        if key not in keyed or (fallback, index) < keyed[key]:
            keyed[key] = (fallback, index)
    return {key: index for key, (_, index) in keyed.items()}


def _pair_by_bytes(tok_a: object, tok_b: object) -> list[tuple[int, int]]:
    """(id in a, id in b) for every normalised key both vocabularies have, sorted by the id in a."""
    if isinstance(tok_a, Mapping) or isinstance(tok_b, Mapping):
        raise ConfigError("Normalised comparison needs tokenizers, not plain dicts.")
    vocab_a, vocab_b = _normalized_vocab(tok_a), _normalized_vocab(tok_b)
    return sorted((vocab_a[key], vocab_b[key]) for key in vocab_a.keys() & vocab_b.keys())


def vocabulary_intersection(target_tokenizer: object, draft_tokenizer: object) -> tuple[torch.Tensor, torch.Tensor]:
    """The tokens two tokenizers share once spellings are normalised (`token_bytes`; special tokens by string).

    Returns ``(target_ids, draft_ids)``, two ``LongTensor[N]``: ``draft_ids[i]`` and ``target_ids[i]`` stand for
    the same bytes (``"▁return"`` and ``"Ġreturn"``). The pairing is one-to-one, sorted by target id. Only these N
    tokens can be drafted token by token in the target's id space (`CrossVocabularySamplingDrafter`).
    """
    pairs = _pair_by_bytes(target_tokenizer, draft_tokenizer)
    if not pairs:
        raise ConfigError("The two tokenizers share no token once spellings are normalised: nothing can be mapped.")
    target_ids, draft_ids = zip(*pairs)
    return torch.tensor(target_ids, dtype=torch.long), torch.tensor(draft_ids, dtype=torch.long)


def require_same_tokenizer(target_tokenizer: object, draft_tokenizer: object) -> VocabReport:
    """Return the `VocabReport` of a pair whose ids can be shared, or raise `ConfigError` pointing to the fix."""
    report = compare_vocabularies(target_tokenizer, draft_tokenizer, normalized=False)
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
