"""Drafters: everything that proposes tokens for the target to verify, behind one interface (`Drafter`)."""

from .base import Draft, Drafter, check_draft
from .draft_model import DraftModelDrafter

__all__ = ["Draft", "Drafter", "DraftModelDrafter", "check_draft"]
from .cross_tokenizer import CrossTokenizerDrafter, CrossVocabularySamplingDrafter

__all__ += ["CrossTokenizerDrafter", "CrossVocabularySamplingDrafter"]
from .tree import DraftModelTreeDrafter, TokenTree

__all__ += ["DraftModelTreeDrafter", "TokenTree"]
from .prompt_lookup import PromptLookupDrafter, find_continuation

__all__ += ["PromptLookupDrafter", "find_continuation"]
from .suffix import SuffixDrafter, SuffixTree

__all__ += ["SuffixDrafter", "SuffixTree"]
from .early_exit import EarlyExitDrafter

__all__ += ["EarlyExitDrafter"]
from .heads import HeadsDrafter, MedusaHeads, load_heads

__all__ += ["HeadsDrafter", "MedusaHeads", "load_heads"]
from .eagle import EagleDrafter, EagleModule, load_eagle

__all__ += ["EagleDrafter", "EagleModule", "load_eagle"]
from .schedules import ConfidenceStop, CostAwareStop, DraftStopRule, HeuristicSchedule

__all__ += ["ConfidenceStop", "CostAwareStop", "DraftStopRule", "HeuristicSchedule"]
