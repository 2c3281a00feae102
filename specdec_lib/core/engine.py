"""The round engine: every decoder of the library is this one loop, with another drafter, tree shape or batch width.

One generation of B rows (row b has committed ``x_1 .. x_L``; the target's cache holds all but the last):

    prefill    one target forward over the prompts: each row's first token, exactly the target alone's
    round      draft     up to k_b tokens per row (a chain), or a token tree (one row)     drafter.propose
               verify    ONE target forward over [x_L, d_1 .. d_k] per row                  k_b + 1 rows of logits
               decide    the accepted prefix + one recovered or bonus token per row        `decide`
               commit    append them (cut after a stop id, never past max_new_tokens)
               roll back the target's cache to the committed tokens but the last; the drafter's (accept)
               stop      finished rows leave the batch

The target runs once per round instead of once per token. Greedy: the output is token-identical to the target
alone's greedy decoding. Sampling: exact (or block) verification makes it distributed exactly like the target's own
samples. Nothing else lives in the loop: the inputs are checked before it (`specdec_lib.core.run.Run.start`), and
timing, memory and the trace are written beside it (`specdec_lib.core.recording.Recorder`). The named decoders of
`specdec_lib.core.decoders` (the target alone, speculative, tree, Jacobi, batched) are this function with their
drafter and settings.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel

from .block_verify import verify_block_batch
from .drafting import Draft, Drafter, TargetOutput
from .result import GenerationResult
from .rows import CachedRows
from .run import Run, Settings
from .sampling import logits_to_probs
from .trees import TreeVerdict, verify_tree_exact, verify_tree_greedy
from .verify import BatchVerdict, verify_exact_batch, verify_greedy_batch, verify_relaxed_batch


def decide(logits: torch.Tensor, draft: Draft, settings: Settings,
           generator: torch.Generator | None) -> BatchVerdict | TreeVerdict:
    """The verdict of one round on ``logits: [B, 1 + K, V]``: greedy compares argmaxes; sampling verifies against
    ``p = logits_to_probs(logits, sampling)``, the processing the drafter's q got, by token-wise rejection sampling
    (``"exact"``), block verification (``"block"``) or the lenient rule (``"relaxed"``: NOT distribution-
    preserving). A token tree is verified along its branches. With no drafts this samples the target's own token."""
    greedy = settings.sampling.is_greedy
    if draft.parents is not None:
        if greedy:
            return verify_tree_greedy(logits[0], draft.tokens[0], draft.parents)
        return verify_tree_exact(logits_to_probs(logits[0], settings.sampling), draft.tokens[0], draft.parents,
                                 generator)
    width = draft.tokens.shape[1]
    full = draft.lengths is None or all(n == width for n in draft.lengths)
    lengths = None if full else torch.tensor(draft.lengths, device=logits.device)
    if greedy:
        return verify_greedy_batch(logits, draft.tokens, lengths)
    p = logits_to_probs(logits, settings.sampling)  # [B, 1 + K, V]: the target's processed distributions
    if settings.verification == "block":
        return verify_block_batch(p, draft.probs, draft.tokens, lengths, generator)
    if settings.verification == "relaxed":
        return verify_relaxed_batch(p, draft.probs, draft.tokens, lengths, generator, lenience=settings.lenience)
    return verify_exact_batch(p, draft.probs, draft.tokens, lengths, generator)


def generate(target: PreTrainedModel, drafter: Drafter | None, prompts: Sequence[torch.Tensor], settings: Settings,
             *, method: str, seed: int | None = None, eos_token_id=None, record_memory: bool = False) -> GenerationResult:
    """Decode ``prompts`` (B rows, ``LongTensor[T_b]`` or ``[1, T_b]``) with ``target``, drafting with ``drafter``
    (None: the target alone, one token per forward) under ``settings`` (module docstring); ``eos_token_id`` as in
    `specdec_lib.core.stopping`; ``seed`` fixes every random draw of a sampled run."""
    run = Run.start(target, drafter, prompts, settings, seed=seed, eos_token_id=eos_token_id,
                    record_memory=record_memory)
    hidden = drafter.hidden_layers if drafter is not None and drafter.wants_target_hidden else None
    observes = drafter is not None and (hidden is not None or drafter.reads_target)
    with torch.inference_mode():
        rows = CachedRows(target, run.batch, kind=settings.cache_kind, max_len=run.cache_slots)
        if drafter is not None:
            if drafter.shares_target_cache:
                drafter.attach_target(rows)
            drafter.begin(run.context(), max_length=run.max_length, target_vocab_size=run.target_vocab)
        logits, states = rows.forward(*run.prompt_block(), logits_to_keep=1, hidden=hidden)  # prefill
        if observes:
            drafter.observe_target(TargetOutput(logits[0], None if states is None else states[0], 0))
        nothing = Draft.empty(run.batch, run.device)
        finished = run.commit(nothing, decide(logits, nothing, settings, run.generator), prefill=True)
        if drafter is not None:
            drafter.accept(run.context())
        run.recorder.prefill_done(rows, run.rounds)
        run.retire(finished, rows, drafter)
        while run.active:
            context = run.context()
            drafting = drafter is not None and context.drafting
            proposed = drafter.propose(context, settings.sampling, run.generator) if drafting else None
            draft = run.checked(proposed, context) if proposed is not None else Draft.empty(run.batch, run.device)
            run.recorder.drafted(drafter)
            step, valid = run.step_input(draft)  # [B, 1 + K]: each row's last committed token and its drafts
            if drafter is not None and drafter.shares_target_cache:
                logits, states = drafter.target_forward(step, step.shape[1]), None
            else:
                tree = None if draft.parents is None else (draft.parents, 0)
                logits, states = rows.forward(step, valid, logits_to_keep=step.shape[1], tree=tree, hidden=hidden)
            finished = run.commit(draft, decide(logits, draft, settings, run.generator))
            run.recorder.verified(rows)
            if run.path is not None:  # the accepted path sits between rejected siblings: keep only its entries
                start = run.lengths[run.active[0]] - run.rounds[0].emitted
                rows.keep_path(start, [start + node for node in run.path])
            rows.truncate(run.cache_keep())  # every row: its committed tokens but the last
            if observes:
                kept = run.rounds[0].emitted
                drafter.observe_target(TargetOutput(logits[0], None if states is None else states[0, :kept],
                                                    run.rounds[0].accepted))
            if drafter is not None:
                drafter.accept(run.context(path=run.path))
            run.recorder.round_done(run.rounds, draft.forwards)
            run.retire(finished, rows, drafter)
    return run.result(method)
