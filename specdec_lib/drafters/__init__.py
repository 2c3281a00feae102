"""Drafters: everything that proposes tokens for the target to verify, behind one interface (`Drafter`, in
`specdec_lib.core.drafting`, where the round engine defines what it asks of a drafter)."""

from ..core.drafting import Context, Draft, Drafter, TargetOutput, WrappedDrafter
from .cross_tokenizer import CrossTokenizerDrafter, CrossVocabularySamplingDrafter
from .draft_model import DraftModelDrafter
from .eagle import EagleDrafter, EagleModule, load_eagle
from .early_exit import EarlyExitDrafter
from .heads import HeadsDrafter, MedusaHeads, load_heads
from .jacobi import JacobiDrafter
from .prompt_lookup import PromptLookupDrafter, find_continuation
from .schedules import ConfidenceStop, CostAwareStop, DraftStopRule, HeuristicSchedule
from .suffix import SuffixDrafter, SuffixTree

__all__ = [
    "ConfidenceStop", "Context", "CostAwareStop", "CrossTokenizerDrafter", "CrossVocabularySamplingDrafter", "Draft",
    "DraftModelDrafter", "DraftStopRule", "Drafter", "EagleDrafter", "EagleModule", "EarlyExitDrafter",
    "HeadsDrafter", "HeuristicSchedule", "JacobiDrafter", "MedusaHeads", "PromptLookupDrafter", "SuffixDrafter",
    "SuffixTree", "TargetOutput", "WrappedDrafter", "find_continuation", "load_eagle", "load_heads",
]
