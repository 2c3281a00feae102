"""A target and a draft model with their tokenizers: what `specdec_lib.loading.load_pair` returns and the drafters'
``for_pair`` constructors read."""

from dataclasses import dataclass

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .vocab import compare_vocabularies


@dataclass
class ModelPair:
    """A target and a draft model with their tokenizers, on one device."""

    target: PreTrainedModel
    draft: PreTrainedModel
    target_tokenizer: PreTrainedTokenizerBase
    draft_tokenizer: PreTrainedTokenizerBase
    preset: str
    device: torch.device

    @property
    def same_tokenizer(self) -> bool:
        """True when the draft's token ids mean the same strings to the target (same or padded tokenizer).

        Compared on ``get_vocab()`` (token string -> id), never on vocabulary size: two tokenizers of the same
        size can split text differently, and one tokenizer can sit under embeddings padded to different sizes.
        """
        return compare_vocabularies(self.target_tokenizer, self.draft_tokenizer, normalized=False).compatible
