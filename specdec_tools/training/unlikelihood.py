"""Unlikelihood fine-tuning of the target: fewer greedy loops, for acceptance numbers that loops do not inflate.

A small language model decoded greedily falls into loops: it writes a line, then the same line again, and again.
Growing a deeper target from a shallow base can make it loop more than the base did (the target's card reports the
share of distinct 4-grams in its greedy continuations, before and after this stage). A loop is easy to predict, so
a looping target flatters every drafter: the draft guesses a repeat far more often than fresh text (the card
reports agreement inside repeated 4-grams and elsewhere). A target worth accelerating should not loop more than the
one it replaces.

Sequence-level unlikelihood training (Welleck et al., "Neural Text Generation with Unlikelihood Training", 2019)
is the standard remedy. Each step:

1. the target continues ``prompts`` random windows of the training split greedily for ``new_tokens`` tokens
   (no gradient), with the library's batched baseline;
2. every token of a 4-gram that already occurred earlier in its own continuation is a *repeat*
   (`specdec_lib.bench.model_measures.repeated_ngram_mask`, the measure the cards report);
3. the loss is the usual next-token loss on a corpus batch (with the early-exit term, `model_training.lm_loss`,
   which keeps the model a language model) plus ``weight`` × the unlikelihood loss
   ``-log(1 - p(x_t | x_<t))`` averaged over the repeats (`unlikelihood_loss`): the model is pushed off exactly
   the tokens that continue its own loops.

Only a few dozen steps at a low learning rate are needed; the training report records the validation loss before
and after, because the remedy costs a little likelihood.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import AutoTokenizer, LlamaForCausalLM

from specdec_lib.bench.model_measures import repeated_ngram_mask
from specdec_lib.decoders import batched_autoregressive_generate
from .drafts import shipped_corpus
from .model_training import ModelSpec, lm_loss, optimizer_step, sample_windows, save_model, validation_loss
from .tokenizer_training import tokenize_texts


@dataclass(frozen=True)
class UnlikelihoodSpec:
    """How long and how hard to fine-tune the target against its own loops.

    The learning rate warms up linearly over ``warmup_steps``, then stays at ``learning_rate`` (`learning_rate_at`);
    every step generates ``prompts`` continuations of ``new_tokens`` tokens after
    ``prompt_tokens``-token windows, and penalises the tokens of repeated ``ngram``-grams."""

    steps: int
    learning_rate: float
    warmup_steps: int
    weight: float
    prompts: int
    prompt_tokens: int
    new_tokens: int
    ngram: int = 4


def learning_rate_at(step: int, spec: UnlikelihoodSpec) -> float:
    """Linear warm-up over ``spec.warmup_steps``, then constant at ``spec.learning_rate``.

    Not the family's cosine schedule (`model_training.lr_at`): over a stage of a few dozen steps the cosine spends
    half of it below half the peak, and a stage this short has no steps to spare. The target's card reports the
    distinct 4-gram share and the validation loss before and after the stage."""
    return spec.learning_rate * min(1.0, (step + 1) / spec.warmup_steps)


def unlikelihood_loss(model: LlamaForCausalLM, sequences: torch.Tensor, prompt_tokens: int,
                      repeats: torch.Tensor) -> torch.Tensor:
    """Mean of ``-log(1 - p(x_t | x_<t))`` over the continuation tokens marked in ``repeats``.

    sequences: LongTensor[B, P + N], prompts of ``prompt_tokens`` = P tokens followed by continuations of N tokens;
    repeats: BoolTensor[B, N] (`repeated_ngram_mask`). Zero when nothing repeats. Probabilities are clamped below
    1 - 1e-5 so a token the model is certain of gives a large but finite loss."""
    logits = model(input_ids=sequences[:, :-1], use_cache=False).logits[:, prompt_tokens - 1 :]  # [B, N, V]
    chosen = logits.softmax(-1).gather(-1, sequences[:, prompt_tokens:, None]).squeeze(-1)      # [B, N]
    penalty = -torch.log((1 - chosen).clamp_min(1e-5))
    return (penalty * repeats).sum() / repeats.sum().clamp_min(1)


def train_unlikelihood(target: LlamaForCausalLM, spec: UnlikelihoodSpec, target_spec: ModelSpec,
                       tokens: torch.Tensor, *, seed: int, log: list | None = None) -> dict:
    """Fine-tune ``target`` in place for ``spec.steps`` steps of next-token loss + unlikelihood on its own repeats.

    target_spec: the target's `ModelSpec` (its batch size, context and early-exit loss are reused for the
    next-token term); tokens: the tokenised training split, 1-D. Returns a summary (steps, seconds, final losses
    and share of generated tokens inside a repeat as moving averages; that share is noisy with a few windows per
    step, so `measure.heldout_distinct_4gram_shares` is what says how much less the target loops)."""
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(target.parameters(), lr=spec.learning_rate, betas=(0.9, 0.95), weight_decay=0.1)
    start = time.perf_counter()
    running: dict[str, float] = {}
    for step in tqdm(range(spec.steps), desc="target [unlikelihood]", mininterval=5):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate_at(step, spec)
        target.eval()
        prompts = sample_windows(tokens, spec.prompts, spec.prompt_tokens, generator)  # [B, P]
        continuations = torch.tensor(batched_autoregressive_generate(
            target, list(prompts), max_new_tokens=spec.new_tokens, eos_token_id=None).tokens)  # [B, N]
        repeats = repeated_ngram_mask(continuations, spec.ngram)
        target.train()
        lm, parts = lm_loss(target, sample_windows(tokens, target_spec.batch_size, target_spec.context + 1, generator),
                            target_spec)
        unlikely = unlikelihood_loss(target, torch.cat([prompts, continuations], 1), spec.prompt_tokens, repeats)
        optimizer_step(target, optimizer, lm + spec.weight * unlikely)
        parts = {**parts, "unlikelihood": unlikely.item(), "repeat_share": repeats.float().mean().item()}
        running = {k: v if k not in running else 0.9 * running[k] + 0.1 * v for k, v in parts.items()}
        if log is not None and (step % 10 == 0 or step == spec.steps - 1):
            log.append({"model": "target", "phase": "unlikelihood", "step": step,
                        **{k: round(v, 4) for k, v in running.items()}, "seconds": round(time.perf_counter() - start, 1)})
    target.eval()
    return {"name": "target_unlikelihood", "spec": asdict(spec), "unlikelihood_steps": spec.steps,
            "unlikelihood_final": {k: round(v, 4) for k, v in running.items()},
            "seconds": round(time.perf_counter() - start, 1)}


def unlikelihood_stage(spec, target: LlamaForCausalLM, tokenizer, tokens: torch.Tensor, val_tokens: torch.Tensor,
                       work_dir: Path, log: list) -> tuple[dict, float]:
    """The family's stage, as both `train.train_family` and `apply_to_shipped_target` run it: the target is saved
    to ``work_dir/target_before_unlikelihood`` (with ``tokenizer``; `train.measure_family` measures how much it
    looped) and its validation loss on ``val_tokens`` (1-D) taken, then `train_unlikelihood` runs with the
    family's spec and seed on ``tokens`` (the training split, 1-D). spec: the family's ``FamilySpec``.
    Returns (summary, loss before)."""
    save_model(target, tokenizer, work_dir / "target_before_unlikelihood")
    before = validation_loss(target, val_tokens, spec.target.context)
    summary = train_unlikelihood(target, spec.target_unlikelihood, spec.target, tokens, seed=spec.seed + 8, log=log)
    return summary, before


def apply_to_shipped_target(spec, models_dir: Path, work_dir: Path) -> dict:
    """Run this stage alone on the shipped target (``python -m specdec_tools train unlikelihood``) and record it.

    spec: the family's ``specdec_tools.training.cli.FamilySpec`` (its ``target``, ``target_unlikelihood`` and seed). The
    corpus must be the shipped family's (`drafts.shipped_corpus` checks it). Refused when the report says the
    target already went through this stage: fine-tuning twice is not what the pipeline does. The target before
    the stage is saved to ``work_dir/target_before_unlikelihood``; the report gets the stage's summary, the
    validation loss before and after; the log gets its lines. The drafts, heads and EAGLE are *not* retrained:
    they were fitted to the old target, so retrain them next (``train drafts``, ``train heads``).
    Returns the updated report."""
    report_path, log_path = models_dir / "training_report.json", models_dir / "training_log.jsonl"
    report = json.loads(report_path.read_text())
    if "target_unlikelihood" in report["training"]:
        raise ValueError(f"{models_dir / 'target'} already went through the unlikelihood stage (see "
                         f"{report_path}): applying it twice is not what `python -m specdec_tools train` does. Restore "
                         "the target from git, or retrain the whole family.")
    torch.set_num_threads(spec.threads)
    train_texts, val_texts = shipped_corpus(spec, models_dir)
    tokenizer = AutoTokenizer.from_pretrained(models_dir / "target")
    target = LlamaForCausalLM.from_pretrained(models_dir / "target", dtype=torch.float32).eval()
    tokens, val_tokens = tokenize_texts(tokenizer, train_texts), tokenize_texts(tokenizer, val_texts)
    log: list[dict] = []
    report["training"]["target_unlikelihood"], before = unlikelihood_stage(spec, target, tokenizer, tokens, val_tokens,
                                                                           work_dir, log)
    save_model(target, tokenizer, models_dir / "target")
    val = report["validation_loss_nats_per_token"]
    val["target_before_unlikelihood"] = round(before, 4)
    val["target"] = round(validation_loss(target, val_tokens, spec.target.context), 4)
    val["target_early_exit"] = round(validation_loss(target, val_tokens, spec.target.context,
                                                     exit_layer=spec.target.early_exit_layer), 4)
    report["target_unlikelihood_applied_afterwards"] = True
    report_path.write_text(json.dumps(report, indent=2) + "\n")
    log_path.write_text(log_path.read_text() + "".join(json.dumps(row) + "\n" for row in log))
    print(f"target: validation loss {before:.4f} -> {val['target']:.4f} nats/token", flush=True)
    return report
