"""specdec_lib: the library behind the specdec course on speculative decoding.

The notebooks in ``course/`` import what they need from here. The packages below it, by job (docs/library.md's layout
table): ``core`` (the algorithm: the round engine, verification, caches, sampling, the result type, theory),
``drafters`` (every drafter behind one interface), ``bench`` (measurement) and ``teaching`` (what only the course
needs); `decoders`, `loading` and `prompts` are the entry points. What only a maintainer runs (training the embedded
models, the site, the learner-time table, the load test against a server) is ``specdec_tools``, beside it.
"""
from .core.devices import COURSE_THREADS, course_setup, describe_device, get_device, seed_everything, synchronize
from .core.numerics import get_dtype, near_tie_tolerance, same_up_to_rounding
from .core.errors import ConfigError, ContextOverflowError, HubUnavailableError, InputError, ModelNotFoundError, SpecdecError
from .core.result import GenerationResult, summarize
from .core.sampling import GREEDY, SamplingConfig, logits_to_probs, sample_token
from .core.trace import RoundRecord, Trace
from .core.pair import ModelPair
from .loading import list_presets, load_embedded, load_pair
from .prompts import TASKS, load_prompts

# the decoders: the target alone, and speculative decoding with a chain of drafts, a token tree, Jacobi iteration,
# or a batch of prompts (all of them the one round engine of specdec_lib.core.engine)
from .decoders import (autoregressive_generate, batched_autoregressive_generate, batched_speculative_generate,
                       jacobi_generate, speculative_generate, tree_speculative_generate)

# verification: greedy, exact (rejection sampling), block, relaxed (NOT exact), trees; and the statistics that check it
from .core.verify import Verdict, acceptance_probability, residual_distribution, verify_exact, verify_greedy, verify_relaxed
from .core.block_verify import BlockThresholds, block_thresholds, verify_block
from .core.trees import DynamicTree, TreeShape, verify_tree_exact, verify_tree_greedy
# floating point: tell a fork at a near-tie of the target's top logits from a bug (exact in float32, near-exact in
# bfloat16 and float16), and replay a generation's verification forwards
from .core.forks import ForkReport, assert_same_greedy, explain_fork, replay_verification
from .core.stats import ChiSquareResult, chi_square_gof, chi_square_homogeneity, total_variation, tv_noise_floor

# drafters, behind one interface: a draft model (chain, tree or batch), another tokenizer (notebook 04), copies from the
# context (prompt lookup, suffix trees), the target's own first layers (early exit) or hidden states (Medusa, EAGLE)
from .drafters import (Context, CrossTokenizerDrafter, CrossVocabularySamplingDrafter, Draft, Drafter, DraftModelDrafter,
                       EagleDrafter, EarlyExitDrafter, HeadsDrafter, PromptLookupDrafter, SuffixDrafter, load_eagle,
                       load_heads)
from .core.vocab import compare_vocabularies, vocabulary_intersection

# the exercises' self-checks: check.<exercise>(your_function_or_value)
from .teaching import check
