"""Train the two tokenizers of the embedded family on the corpus.

- **Tokenizer A** (target and draft): byte-level BPE, GPT-2 style. Spaces become the
  marker ``Ġ`` and every byte is in the base alphabet, so any text encodes.
- **Tokenizer B** (draft B): a different scheme on purpose, SentencePiece/Llama style.
  Spaces become ``▁``, the pre-tokenizer keeps runs of ``▁`` (indentation) as their own
  pieces, and characters outside the learned alphabet fall back to byte tokens
  ``<0x..>``. Same text, different token boundaries and ids: this is what the
  cross-tokenizer drafter has to bridge.

Both decode back to exactly the text that was encoded (tested), which the text round
trip of cross-tokenizer decoding relies on.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from specdec_lib.core.vocab import SPACE_MARKER

EOS_TOKEN = "<|endoftext|>"
#: Pieces of tokenizer B: a word with an optional leading space marker, a run of markers
#: (indentation), a run of newlines, or a run of punctuation.
_PIECES_B = Regex(rf"{SPACE_MARKER}?[A-Za-z_0-9]+|{SPACE_MARKER}+|\n+|[^\sA-Za-z_0-9{SPACE_MARKER}]+|\s")


def train_tokenizer_a(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    """Byte-level BPE (marker ``Ġ``) with ``vocab_size`` tokens including EOS."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def train_tokenizer_b(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    """Marker-``▁`` BPE with byte fallback; ``vocab_size`` learned tokens + 256 byte tokens."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.Replace(" ", SPACE_MARKER)
    tok.pre_tokenizer = pre_tokenizers.Split(_PIECES_B, behavior="isolated")
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS_TOKEN], show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    # Rebuild the model with the 256 byte tokens appended and byte fallback switched on,
    # so characters never seen in training still encode (and decode) exactly.
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    for byte in range(256):
        vocab.setdefault(f"<0x{byte:02X}>", len(vocab))
    spec["model"]["byte_fallback"] = True
    tok = Tokenizer.from_str(json.dumps(spec))
    tok.decoder = decoders.Sequence(
        [decoders.Replace(SPACE_MARKER, " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    return tok


def wrap_for_transformers(tok: Tokenizer, model_max_length: int) -> PreTrainedTokenizerFast:
    """A transformers tokenizer around ``tok`` that decodes without touching spaces."""
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token=EOS_TOKEN,
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )


def save_tokenizer(tokenizer: PreTrainedTokenizerFast, folder: Path) -> None:
    """``save_pretrained`` + a class name every transformers 5.x (and 4.x) can load.

    transformers 5.24 writes ``TokenizersBackend`` as the class, which older versions
    cannot resolve; ``PreTrainedTokenizerFast`` loads everywhere.
    """
    tokenizer.save_pretrained(folder)
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config["clean_up_tokenization_spaces"] = False
    for loading_flag in ("is_local", "local_files_only"):  # how a loaded tokenizer was found, not what it is
        config.pop(loading_flag, None)
    config_path.write_text(json.dumps(config, indent=2) + "\n")


def tokenize_texts(tokenizer, texts: list[str]) -> torch.Tensor:
    """Concatenate the texts' token ids with EOS between them (after each text): a 1-D int32 tensor, the
    training and validation streams `sample_windows` cuts windows from."""
    eos = tokenizer.eos_token_id
    ids: list[int] = []
    for encoding in tokenizer.backend_tokenizer.encode_batch(texts, add_special_tokens=False):
        ids.extend(encoding.ids)
        ids.append(eos)
    return torch.tensor(ids, dtype=torch.int32)
