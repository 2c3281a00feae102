"""specdec_lib: the library behind the specdec course on speculative decoding.

The notebooks in ``course/`` import what they need from here; each name lives in a
small module with one job (see the README's library table).
"""
from .core.baseline import autoregressive_generate
from .core.devices import COURSE_THREADS, course_setup, describe_device, get_device, seed_everything, synchronize
from .core.errors import ConfigError, ContextOverflowError, HubUnavailableError, InputError, ModelNotFoundError, SpecdecError
from .loading import ModelPair, list_presets, load_embedded, load_pair
from .prompts import TASKS, load_prompts
from .core.sampling import GREEDY, SamplingConfig, logits_to_probs, sample_token
from .core.trace import GenerationResult, RoundRecord, Trace, summarize

# speculative decoding with a draft model (greedy verification)
from .drafters import Draft, Drafter, DraftModelDrafter
from .core.speculative import speculative_generate
from .core.verify import verify_greedy

# sampling verification (rejection sampling) and the statistics that check it
from .core.verify import VerifyResult, acceptance_probability, residual_distribution, verify_exact, verify_relaxed
from .core.block_verify import BlockThresholds, block_thresholds, verify_block
from .core.stats import ChiSquareResult, chi_square_gof, chi_square_homogeneity, total_variation, tv_noise_floor

# drafting across tokenizers (notebook 04)
from .drafters import CrossTokenizerDrafter, CrossVocabularySamplingDrafter
from .core.vocab import compare_vocabularies, vocabulary_intersection

# beyond one chain: token trees (notebook 07; block verification is imported above)
from .drafters import DraftModelTreeDrafter
from .core.tree_speculative import tree_speculative_generate
from .core.trees import TreeShape, verify_tree_exact, verify_tree_greedy

# model-free drafting: copy from the context (prompt lookup) or from suffix trees with counts (suffix decoding)
from .drafters import PromptLookupDrafter, SuffixDrafter

# self-speculative drafting: the target's first layers draft, the rest verify, over one shared KV cache
from .drafters import EarlyExitDrafter

# drafting from the target's own hidden states: Medusa heads and an EAGLE layer trained on the frozen target
from .drafters import EagleDrafter, HeadsDrafter, load_eagle, load_heads

# the exercises' self-checks: check.<exercise>(your_function_or_value)
from .teaching import check
