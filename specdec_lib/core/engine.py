"""The round engine: every decoder of the library is this one loop, with another drafter, tree shape or batch width.

One generation of B rows; each round, for every row (row b has committed ``x_1 .. x_L``):

    draft      up to k_b tokens (a chain), or a token tree (one row)                   drafter.propose
    verify     ONE target forward over what its cache lacks (the prompt in the first round, x_L after it) and
               the drafts: k_b + 1 rows of logits                                      verifier.forward
    decide     the accepted prefix + one recovered or bonus token                      `decide`
    commit     append them (cut after a stop id, never past max_new_tokens)            run.commit
    roll back  the target's cache to the committed tokens but the last (a crop; after a tree, the accepted path
               moved next to them), and the drafter's state                            rows.roll_back, drafter.accept
    stop       finished rows leave the batch                                           run.retire

The first round is the prefill: its forward reads the prompts and gives each row its first token, and a drafter
that drafts from the tokens alone has already drafted, so that forward verifies too (a drafter that reads the
target's forward starts in the second). The target alone is the drafter that proposes nothing (`TargetAlone`):
every round one ordinary step. The target runs once per round instead of once per token. Greedy: the output is
token-identical to the target alone's greedy decoding. Sampling: exact (or block) verification makes it
distributed exactly like the target's own samples. Nothing else lives in the loop: the inputs are checked before it
(`specdec_lib.core.run.Run.start`), and timing, memory and the trace are written beside it
(`specdec_lib.core.recording.Recorder`). The named decoders of `specdec_lib.decoders` (the target alone,
speculative, tree, Jacobi, batched) are this function with their drafter and settings; `specdec_lib.core.minimal`
is the same loop for one row and greedy decoding only, in a few lines.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel

from .block_verify import block_rule
from .drafting import Draft, Drafter
from .result import GenerationResult
from .rows import CachedRows
from .run import Run, Settings
from .sampling import logits_to_probs
from .trees import tree_exact_rule, tree_greedy_rule
from .verify import Verdict, drafted_path, greedy_rule, rejection_rule


def decide(logits: torch.Tensor, draft: Draft, settings: Settings, generator: torch.Generator | None) -> Verdict:
    """The `Verdict` of one round on ``logits: [B, 1 + K, V]``: greedy compares argmaxes; sampling verifies against
    ``p = logits_to_probs(logits, sampling)``, the processing the drafter's q got, by token-wise rejection sampling
    (``"exact"``), block verification (``"block"``) or the lenient rule (``"relaxed"``: NOT distribution-
    preserving). A token tree is verified along its branches. With no drafts this samples the target's own token.
    Each verifier's rule runs without its input checks: the logits are the target's own, and the draft was checked
    when it was proposed (`Run.checked`); an id outside the vocabulary is read clamped here and refused at the
    commit (`specdec_lib.core.run.check_draft_ids`), before anything is appended."""
    tokens = draft.tokens.clamp(0, logits.shape[-1] - 1)  # [B, K]
    greedy = settings.sampling.is_greedy
    p = None if greedy else logits_to_probs(logits, settings.sampling)  # [B, 1 + K, V]: the target's distributions
    if draft.parents is not None:
        if greedy:
            return tree_greedy_rule(logits, tokens, draft.parents)
        return tree_exact_rule(p, tokens, draft.parents, generator)
    width = tokens.shape[1]
    full = draft.lengths is None or all(n == width for n in draft.lengths)
    lengths = None if full else torch.tensor(draft.lengths, device=logits.device)
    if greedy:
        return greedy_rule(logits, tokens, lengths)
    drafted = drafted_path(p, draft.probs, tokens, lengths)
    if settings.verification == "block":
        return block_rule(p, drafted, generator)
    return rejection_rule(p, drafted, generator, float(settings.lenience) if settings.verification == "relaxed" else 1.0)


def generate(target: PreTrainedModel, drafter: Drafter, prompts: Sequence[torch.Tensor], settings: Settings, *,
             method: str, seed: int | None = None, eos_token_id=None, record_memory: bool = False) -> GenerationResult:
    """Decode ``prompts`` (B rows, ``LongTensor[T_b]`` or ``[1, T_b]``) with ``target``, drafting with ``drafter``
    (`TargetAlone`: the target alone, one token per forward) under ``settings`` (module docstring);
    ``eos_token_id`` as in `specdec_lib.core.stopping`; ``seed`` fixes every random draw of a sampled run."""
    run = Run.start(target, drafter, prompts, settings, seed=seed, eos_token_id=eos_token_id,
                    record_memory=record_memory)
    hidden = drafter.hidden_layers or None  # the target's hidden states the drafter reads (None: none computed)
    with torch.inference_mode():
        rows = CachedRows(target, run.batch, kind=settings.cache_kind, max_len=run.cache_slots)
        verifier = drafter.verifier(rows)
        drafter.begin(run.context(), max_length=run.max_length, target_vocab_size=run.target_vocab)
        while run.active:
            context = run.context()
            proposed = drafter.propose(context, settings.sampling, run.generator) if context.drafting else None
            draft = run.nothing() if proposed is None else run.checked(proposed, context)
            run.recorder.drafted(drafter)
            step, valid, keep = run.step_input(draft)  # [B, W]: what the cache lacks, then the drafts
            logits, states = verifier.forward(step, valid, logits_to_keep=keep, tree_parents=draft.parents,
                                              hidden=hidden)
            finished = run.commit(draft, decide(logits, draft, settings, run.generator))
            run.recorder.verified(rows)
            rows.roll_back(run.cache_keep(), run.path_slots)
            drafter.observe(run.target_output(logits, states))
            drafter.accept(run.context(path=run.path))
            run.recorder.round_done(run.rounds, draft.forwards)
            run.retire(finished, rows, drafter)
    return run.result(method)
