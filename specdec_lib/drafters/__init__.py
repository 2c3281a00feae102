"""Drafters: everything that proposes tokens for the target to verify, behind one interface (`Drafter`)."""

from .base import Draft, Drafter, check_draft
from .draft_model import DraftModelDrafter

__all__ = ["Draft", "Drafter", "DraftModelDrafter", "check_draft"]
from .cross_tokenizer import CrossTokenizerDrafter, CrossVocabularySamplingDrafter

__all__ += ["CrossTokenizerDrafter", "CrossVocabularySamplingDrafter"]
from .tree import DraftModelTreeDrafter, TokenTree

__all__ += ["DraftModelTreeDrafter", "TokenTree"]
