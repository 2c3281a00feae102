"""Speculative decoding with token trees: the drafter proposes a tree, the target verifies every branch at once.

One round, with the committed sequence ``x_1 .. x_L`` (the target's cache holds ``x_1 .. x_{L-1}``):

    1. draft:   tree = drafter.propose_tree(x, shape)                   N nodes, depth D (D draft forwards)
    2. verify:  one target forward over [x_L, node_0 .. node_{N-1}]     tree positions and tree attention mask
    3. decide:  the accepted path + 1 recovered-or-bonus token          (`verify_tree_greedy` / `verify_tree_exact`)
    4. commit:  append them; *compact* the target's cache to x_1 .. x_L + the path (the path's entries sit
                between rejected siblings, so this is more than a crop), and tell the drafter (`accept_path`)

A chain of γ drafts is the tree ``TreeShape((1,) * γ)``. Greedy output is token-identical to the target alone;
with sampling, point-mass verification of the (deterministic) candidates keeps the target's distribution exactly.
The trace's ``drafted`` counts the tree's nodes, so a tree's acceptance rate (accepted / drafted) is low by
construction; compare trees and chains by mean acceptance length and tokens per target forward.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel

from ..drafters.tree import DraftModelTreeDrafter
from .errors import ConfigError
from .caches import compact_cache, crop_cache, new_cache
from .forward import check_generation_inputs, context_length, forward_with_cache
from .sampling import GREEDY, SamplingConfig, logits_to_probs, make_generator, sample_token
from .speculative import check_same_device, check_sampling, kept_until_stop
from .stopping import AUTO, stop_token_ids
from .trace import GenerationResult, RoundRecord, Trace
from .trees import TreeShape, verify_tree_exact, verify_tree_greedy


def tree_speculative_generate(
    target: PreTrainedModel,
    drafter: DraftModelTreeDrafter,
    input_ids: torch.Tensor,
    *,
    shape: TreeShape,
    max_new_tokens: int,
    sampling: SamplingConfig = GREEDY,
    eos_token_id: int | Sequence[int] | str | None = AUTO,
    seed: int | None = None,
) -> GenerationResult:
    """Generate up to ``max_new_tokens`` tokens after ``input_ids: LongTensor[1, T]``, drafting a tree of
    ``shape`` per round (module docstring). Same stopping rules, trace and result type as `speculative_generate`;
    near the end of the budget or the context the tree is cut to fewer depths. The target's cache is a
    ``DynamicCache`` (trees need full-attention layers: `compact_cache` refuses sliding-window ones)."""
    if not isinstance(shape, TreeShape):
        raise ConfigError(f"shape must be a TreeShape, e.g. TreeShape((3, 2, 1)), got {type(shape).__name__}.")
    check_sampling(sampling)
    check_generation_inputs(target, input_ids, max_new_tokens)
    stop_ids = stop_token_ids(target, eos_token_id)
    device = target.device
    check_same_device(device, drafter.device)
    prompt_length = input_ids.shape[1]
    total_length = prompt_length + max_new_tokens
    generator = make_generator(seed, device)
    max_positions = min(context_length(target), drafter.max_positions)
    cache_positions = min(total_length + shape.size + 1, context_length(target))

    with torch.inference_mode():
        sequence = torch.empty(1, total_length, dtype=torch.long, device=device)
        sequence[:, :prompt_length] = input_ids
        trace = Trace.start(device)
        cache = new_cache(target)
        drafter.begin(input_ids, max_length=cache_positions,
                      target_vocab_size=target.get_output_embeddings().out_features)
        after_begin = trace.elapsed(device)
        logits = forward_with_cache(target, sequence[:, :prompt_length], cache, logits_to_keep=1)  # [1, 1, V]
        token = int(sample_token(logits_to_probs(logits[0, -1], sampling), generator))
        sequence[0, prompt_length] = token
        length = prompt_length + 1
        now = trace.elapsed(device)
        trace.add_round(RoundRecord(0, 0, 1, after_begin, now - after_begin, draft_forwards=0, kind="prefill"), now)
        trace.prefill_time = now
        finished = token in stop_ids

        while not finished and length < total_length:
            # the path (up to D tokens) + 1 must fit the budget; the deepest node sits at position L - 1 + D
            depth = min(shape.depth, total_length - length - 1, max_positions - length)
            round_start = trace.elapsed(device)
            if depth > 0:
                tree = drafter.propose_tree(sequence[:, :length], TreeShape(shape.branching[:depth]))
                tokens, parents, forwards = tree.tokens.to(device), tree.parents, tree.forwards
            else:
                tokens, parents, forwards = torch.empty(0, dtype=torch.long, device=device), (), 0
            verify_start = trace.elapsed(device)

            step_input = torch.cat([sequence[0, length - 1 : length], tokens]).view(1, -1)  # [1, N + 1]
            logits = forward_with_cache(target, step_input, cache, tree_parents=parents)[0]  # [N + 1, V]
            if sampling.is_greedy:
                verdict = verify_tree_greedy(logits, tokens, parents)
            else:
                verdict = verify_tree_exact(logits_to_probs(logits, sampling), tokens, parents, generator)

            path = list(verdict.path)
            accepted = len(path)
            sequence[0, length : length + accepted] = tokens[path]
            sequence[0, length + accepted] = verdict.next_token
            emitted, finished = kept_until_stop(sequence[0, length : length + accepted + 1], stop_ids)
            # keep x_1 .. x_L (the root is entry L - 1) and the path's nodes, entries L + node
            compact_cache(cache, length, torch.tensor([length + node for node in path], dtype=torch.long))
            start = length
            length += emitted
            crop_cache(cache, length - 1)  # an EOS inside the path ends the generation with fewer tokens kept
            verify_end = trace.elapsed(device)

            if depth > 0:
                drafter.accept_path(length, tuple(path[: length - start - 1]))
            now = trace.elapsed(device)
            trace.add_round(RoundRecord(
                drafted=len(parents),
                accepted=accepted,
                emitted=emitted,
                draft_time=(verify_start - round_start) + (now - verify_end),
                verify_time=verify_end - verify_start,
                draft_forwards=forwards,
                kind=verdict.kind if parents else "target",
            ), verify_end)

    return GenerationResult(sequence=sequence[:, :length], prompt_length=prompt_length,
                            method=f"tree-speculative[{drafter.name}]", trace=trace)
