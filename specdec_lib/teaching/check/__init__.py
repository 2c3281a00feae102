"""Self-checks for the course's exercises: ``check.<exercise>(your_function_or_value)``.

Each exercise in notebooks 00-09 ends with a starter stub and one call of its check, e.g.::

    from specdec_lib import check
    check.top_k_probs(top_k_probs)

The check runs cases the notebook does not show and answers in one line: a pass, or the case that failed with
expected against got and what that mistake usually means (never a raw traceback). Conceptual questions are
multiple choice (``check.<question>("b")``), with an explanation for every option. The machinery is in
:mod:`specdec_lib.teaching.check.core`; the checks of notebook NN live in ``notebookNN.py``.
"""

from .core import CheckReport

# notebook 00: setup and baseline
from .notebook00 import fit_step_cost, prose_versus_code, top_k_probs

# notebook 01: greedy matching
from .notebook01 import best_gamma_gap, forwards_saved, grounded_prompts, my_expected_speedup, my_verify_greedy

# notebook 02: exact sampling verification
from .notebook02 import accepted_count_law, metrics_from_counts, output_with_reported_q, point_mass_output, refused_q

# notebook 03: KV-cache rollback
from .notebook03 import crossover_length, forget_draft_rollback, llama_cache_crossover, my_crop, my_kv_bytes_per_token

# notebook 04: cross-tokenizer assisted decoding
from .notebook04 import intersection_ceiling, intersection_gap, lookbehind_effect, my_continuation

# notebook 05: drafting without a draft model
from .notebook05 import acceptance_by_position, free_draft_speedup, latest_prompt_lookup, which_exit

# notebook 06: tuning and measuring
from .notebook06 import disable_threshold, percentile, predicted_best_gamma, relative_drop_rule

# notebook 07: beyond the chain
from .notebook07 import chain_or_tree, compact_pointer_cache, expected_accepted_drafts

# notebook 08: from classroom to production
from .notebook08 import metrics_from_vllm_counters, queued_ttft

# notebook 09: lossless in floating point
from .notebook09 import fork_verdict, lossless_promise
