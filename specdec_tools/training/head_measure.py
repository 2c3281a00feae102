"""Measure Medusa heads and an EAGLE layer: accuracy on held-out features, acceptance when drafting for the target.

- **Medusa, per-head top-1**: on the validation windows, head j's argmax on ``h_t`` against the corpus token
  ``x_{t+1+j}`` (and, for reference, the target's own LM head against ``x_{t+1}``); *chain* j is the share of
  positions where heads 1 .. j are all right, the share of rounds whose first j drafts match the text.
- **EAGLE, per-step top-1 along its own autoregression**: at every position of the validation windows the
  `EagleDrafter` itself drafts ``eval_steps`` tokens greedily from the true features so far, each step on its
  *own* predicted feature and token, and each draft is compared with the corpus token; *chain* s = the first s
  drafts all right.
- **greedy acceptance**: `speculative_generate` with the drafter on the code prompts, every round of every prompt
  pooled into one `Trace` and read by the trace functions (alpha, acceptance rate, mean acceptance length,
  per-position acceptance; `specdec_lib.core.trace`); per-prompt alpha from `summarize`.
- **cost ratio c**, as decoding pays it (`draft_cost_ratios`): seconds inside a drafter's ``propose`` per drafted
  token, over one target forward of one new token (`forward_cost`, the denominator of the family's c). Every
  drafter measured in the same call, taking turns with the target, so their c are comparable side by side.

Accuracies against the corpus and acceptance against the target are different numbers: greedy drafts are
accepted when they match the *target's* choice, which the corpus token often is not.
"""
from __future__ import annotations

import statistics

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from specdec_lib.bench.profiling import TimedDrafter
from specdec_lib.core.drafting import Context, Drafter, TargetOutput
from specdec_lib.drafters.eagle import EagleDrafter, EagleModule
from specdec_lib.drafters.heads import MedusaHeads
from specdec_lib.bench.model_measures import forward_cost
from specdec_lib.prompts import encode_prompts, load_prompts
from specdec_lib.core.sampling import GREEDY
from specdec_lib.decoders import speculative_generate
from specdec_lib.core.trace import (Trace, acceptance_rate, mean_acceptance_length, per_position_acceptance,
                                    per_token_acceptance, tokens_per_target_forward)
from specdec_lib.core.result import summarize

COST_CONTEXT = 64  # c's denominator: one target forward of one new token after this many


def _rounded(values: torch.Tensor) -> list[float]:
    return [round(float(v), 4) for v in values]


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


@torch.inference_mode()
def medusa_accuracy(heads: MedusaHeads, lm_head: torch.nn.Module, features: torch.Tensor, tokens: torch.Tensor) -> dict:
    """Per-head and chain top-1 accuracy, and per-head CE, on ``features: [W, T, D]`` / ``tokens: [W, T + 1]``.

    Positions ``t <= T - 1 - K`` only, so that every head is scored on the same positions."""
    K, length = heads.num_heads, features.shape[1]
    h = features[:, : length - K]  # [W, T - K, D]
    logits = lm_head(heads(h)).float()  # [W, T - K, K, V]
    labels = torch.stack([tokens[:, 1 + j : 1 + j + length - K] for j in range(1, K + 1)], dim=-1)  # [W, T - K, K]
    hits = (logits.argmax(-1) == labels).flatten(0, 1).float()  # [N, K]
    losses = torch.nn.functional.cross_entropy(logits.flatten(0, 2), labels.flatten(), reduction="none")
    target_hits = lm_head(h).argmax(-1) == tokens[:, 1 : 1 + length - K]
    return {
        "positions": hits.shape[0],
        "top1": _rounded(hits.mean(0)),
        "chain": _rounded(hits.cumprod(1).mean(0)),
        "loss": _rounded(losses.view(-1, K).mean(0)),
        "target_top1": round(target_hits.float().mean().item(), 4),
    }


@torch.inference_mode()
def eagle_accuracy(module: EagleModule, features: torch.Tensor, tokens: torch.Tensor, steps: int) -> dict:
    """Per-step and chain top-1 accuracy of greedy EAGLE drafts along its own autoregression (module docstring)
    on ``features: [W, T, D]`` / ``tokens: [W, T + 1]``, at every committed length ``L = 2 .. T + 1 - steps``."""
    drafter = EagleDrafter(module)
    hits, chain, positions = torch.zeros(steps), torch.zeros(steps), 0
    for window, x in zip(features, tokens):
        sequence = x[None]  # [1, T + 1]
        drafter.begin(Context.of(sequence[:, :1]))
        drafter.observe(TargetOutput(window[:0], window[:1], 0))  # h_0
        for length in range(2, x.shape[0] - steps + 1):  # committed x_0 .. x_{L-1}; features h_0 .. h_{L-2}
            draft = drafter.propose(Context.of(sequence[:, :length], steps), GREEDY, None)
            correct = (draft.row() == x[length : length + steps]).float()  # against x_L .. x_{L+steps-1}
            hits, chain, positions = hits + correct, chain + correct.cumprod(0), positions + 1
            # the target commits x_L: one true feature more
            drafter.observe(TargetOutput(window[:0], window[length - 1 : length], 0))
            drafter.accept(Context.of(sequence[:, : length + 1]))
    return {"positions": positions, "top1": _rounded(hits / positions), "chain": _rounded(chain / positions)}


def code_prompts(tokenizer: PreTrainedTokenizerBase, limit: int | None = None) -> list[torch.Tensor]:
    """The code prompt set (the first ``limit`` prompts; None: all), each ``LongTensor[1, T]`` on the CPU."""
    return encode_prompts(tokenizer, [p.prompt for p in load_prompts("code", limit=limit)], torch.device("cpu"))


def greedy_acceptance(target: PreTrainedModel, drafter: Drafter, prompts: list[torch.Tensor],
                      gammas: tuple[int, ...], new_tokens: int) -> dict[str, dict]:
    """Per gamma: the pooled acceptance numbers of greedy `speculative_generate` runs on ``prompts``."""
    numbers = {}
    for gamma in gammas:
        results = [speculative_generate(target, drafter, prompt, gamma=gamma, max_new_tokens=new_tokens)
                   for prompt in prompts]
        trace = Trace(start_time=0.0, rounds=[record for result in results for record in result.trace.rounds])
        numbers[str(gamma)] = {
            "prompts": len(results),
            "new_tokens": sum(result.new_tokens.numel() for result in results),
            "alpha": _round(per_token_acceptance(trace)),
            "acceptance_rate": _round(acceptance_rate(trace)),
            "mean_acceptance_length": _round(mean_acceptance_length(trace)),
            "per_position_acceptance": _rounded(torch.tensor(per_position_acceptance(trace))),
            "tokens_per_target_forward": _round(tokens_per_target_forward(trace)),
            "alpha_per_prompt": [_round(summarize(result)["alpha"], 3) for result in results],
        }
    return numbers


def draft_cost_ratios(target: PreTrainedModel, drafters: dict[str, Drafter], prompts: list[torch.Tensor], gamma: int,
                      new_tokens: int, turns: int = 3) -> dict:
    """The cost ratio c of each drafter as decoding pays it, measured side by side.

    c = (seconds inside ``propose`` per drafted token, greedy `speculative_generate` on ``prompts`` at ``gamma``,
    each generation's first proposal left out: it reads the prompt; `TimedDrafter`) / (median seconds of one
    target forward of one new token after the first `COST_CONTEXT` tokens of the first prompt, `forward_cost`).
    Drafting includes all a drafter does per round (its forwards, argmax, cache crops), so c here is at least its
    bare forward's ratio. The target and the drafters take ``turns`` turns so a busy moment hits all alike; each c
    is the median over the turns.

    Returns ``{"gamma", "target_forward_ms", "drafters": {name: {"draft_ms_per_token", "c"}}}``."""
    context = prompts[0][:, :COST_CONTEXT]
    target_seconds, per_token = [], {name: [] for name in drafters}
    for _ in range(turns):
        target_seconds.append(forward_cost(target, context, repeats=20))
        for name, drafter in drafters.items():
            timed = TimedDrafter(drafter, target.device)
            for prompt in prompts:
                speculative_generate(target, timed, prompt, gamma=gamma, max_new_tokens=new_tokens)
            steps = [(seconds, drafted) for seconds, drafted, first in timed.calls if not first]
            drafted = sum(n for _, n in steps)
            if drafted == 0:
                raise ValueError(f"{name} drafted nothing after its first proposal on these prompts, so its cost per "
                                 "drafted token is undefined: time it on longer generations (new_tokens).")
            per_token[name].append(sum(s for s, _ in steps) / drafted)
    target_s = statistics.median(target_seconds)
    ratios = {name: statistics.median(values) / target_s for name, values in per_token.items()}
    return {"gamma": gamma, "target_forward_ms": round(1e3 * target_s, 3),
            "drafters": {name: {"draft_ms_per_token": round(1e3 * statistics.median(per_token[name]), 3),
                                "c": round(ratios[name], 4)} for name in drafters}}
