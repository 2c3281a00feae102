"""Build and train the Llama-architecture models of the embedded family.

Three losses, one loop:

- next-token cross-entropy on the corpus (every model);
- an auxiliary *early-exit* cross-entropy (target only): the hidden state after layer
  ``early_exit_layer`` goes through the model's own final norm and LM head, so a
  shallow prefix of the target can later draft for the full target (self-speculation);
- *distillation* (draft only, optional): KL(p_target || q_draft) per position, which
  aligns the draft's next-token choices with the target's — what acceptance rewards.

Batches are random windows of the tokenised corpus drawn with a seeded generator, so a
run is reproducible for a given corpus, seed and thread count.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm
from transformers import LlamaConfig, LlamaForCausalLM

from specdec_lib.core.forward import lm_head_logits
from .tokenizer_training import save_tokenizer


@dataclass(frozen=True)
class ModelSpec:
    """Architecture of one model (a LlamaConfig subset) and how long to train it."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    context: int
    steps: int
    batch_size: int
    learning_rate: float
    warmup_steps: int = 100
    early_exit_layer: int | None = None
    early_exit_weight: float = 0.0
    distill_steps: int = 0

    def config(self, vocab_size: int, eos_token_id: int) -> LlamaConfig:
        config = LlamaConfig(
            vocab_size=vocab_size,
            hidden_size=self.hidden,
            intermediate_size=self.intermediate,
            num_hidden_layers=self.layers,
            num_attention_heads=self.heads,
            num_key_value_heads=self.heads,
            max_position_embeddings=self.context,
            tie_word_embeddings=True,
            bos_token_id=None,
            eos_token_id=eos_token_id,
            pad_token_id=eos_token_id,
        )
        if self.early_exit_layer is not None:
            config.early_exit_layer = self.early_exit_layer  # read by the self-speculative drafter
        return config


def build_model(spec: ModelSpec, vocab_size: int, eos_token_id: int, seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    model = LlamaForCausalLM(spec.config(vocab_size, eos_token_id))
    model.generation_config.eos_token_id = eos_token_id
    model.generation_config.pad_token_id = eos_token_id
    model.generation_config.bos_token_id = None
    return model


def save_model(model: LlamaForCausalLM, tokenizer, folder: Path) -> None:
    """Weights in fp16 on disk (half the bytes; reloaded as fp32 they give the same greedy text), and the tokenizer.

    The model stays in memory with the fp16-rounded weights, so later stages (distillation from the target,
    validation) use exactly the weights that ship."""
    folder.mkdir(parents=True, exist_ok=True)
    model.to(torch.float16).save_pretrained(folder)
    model.to(torch.float32)
    save_tokenizer(tokenizer, folder)


def sample_windows(tokens: torch.Tensor, batch_size: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """``batch_size`` random windows of ``length`` tokens: LongTensor[B, length]."""
    if tokens.numel() <= length:
        raise ValueError(f"a training stream of {tokens.numel()} tokens is too short for windows of {length} tokens "
                         "(the context + 1): train on more text or with a shorter context.")
    starts = torch.randint(0, tokens.numel() - length, (batch_size,), generator=generator)
    return torch.stack([tokens[s : s + length] for s in starts.tolist()]).long()


def lr_at(step: int, spec: ModelSpec, total: int) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak."""
    if step < spec.warmup_steps:
        return spec.learning_rate * (step + 1) / spec.warmup_steps
    progress = (step - spec.warmup_steps) / max(1, total - spec.warmup_steps)
    return spec.learning_rate * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def lm_loss(model: LlamaForCausalLM, windows: torch.Tensor, spec: ModelSpec) -> tuple[torch.Tensor, dict]:
    """Next-token CE (+ weighted early-exit CE). windows: [B, T+1]."""
    inputs, labels = windows[:, :-1], windows[:, 1:]
    want_exit = spec.early_exit_layer is not None and spec.early_exit_weight > 0
    out = model.model(input_ids=inputs, output_hidden_states=want_exit, use_cache=False)
    logits = model.lm_head(out.last_hidden_state)  # [B, T, V]
    loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten())
    parts = {"loss": loss.item()}
    if want_exit:
        # hidden_states[0] is the embedding output, hidden_states[i] the output of layer i.
        exit_logits = lm_head_logits(model, out.hidden_states[spec.early_exit_layer])
        exit_loss = F.cross_entropy(exit_logits.flatten(0, 1), labels.flatten())
        parts["exit_loss"] = exit_loss.item()
        loss = loss + spec.early_exit_weight * exit_loss
    return loss, parts


def _distill_loss(model: LlamaForCausalLM, teacher: LlamaForCausalLM, windows: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """KL(p_teacher || q_student) averaged over positions; windows: [B, T+1]."""
    inputs = windows[:, :-1]
    with torch.no_grad():
        teacher_logp = F.log_softmax(teacher(input_ids=inputs, use_cache=False).logits, dim=-1)
    student_logp = F.log_softmax(model(input_ids=inputs, use_cache=False).logits, dim=-1)
    # KL(p || q) = sum_v p_v (log p_v - log q_v)
    kl = F.kl_div(student_logp.flatten(0, 1), teacher_logp.flatten(0, 1), log_target=True, reduction="batchmean")
    return kl, {"kl": kl.item()}


def optimizer_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss: torch.Tensor) -> None:
    """One step on ``loss``: gradients cleared, back-propagated, clipped to norm 1, applied (every trainer's step)."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()


def run_phase(model: torch.nn.Module, optimizer: torch.optim.Optimizer, spec: ModelSpec, steps: int,
              batch_loss: Callable[[], tuple[torch.Tensor, dict]], *, name: str, phase: str, started: float,
              log: list | None = None) -> dict:
    """One training phase: ``steps`` optimizer steps on ``batch_loss()`` (which draws its own batch and returns
    ``(loss, {part: value})``), the learning rate following `lr_at` with ``spec``'s peak and warm-up.

    Every phase of every model runs through here, so they share one schedule, one clipping and one log format.
    Logs every 50th step (and the last) to ``log`` with the seconds since ``started``. Returns the parts' moving
    averages at the end (the phase's final losses)."""
    bar = tqdm(range(steps), desc=f"{name} [{phase}]", mininterval=5)
    running: dict[str, float] = {}
    for step in bar:
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, spec, steps)
        loss, parts = batch_loss()
        optimizer_step(model, optimizer, loss)
        # exponential moving average for a readable progress bar and log
        running = {k: v if k not in running else 0.98 * running[k] + 0.02 * v for k, v in parts.items()}
        if step % 50 == 0 or step == steps - 1:
            bar.set_postfix({k: f"{v:.3f}" for k, v in running.items()})
            if log is not None:
                log.append({"model": name, "phase": phase, "step": step, **{k: round(v, 4) for k, v in running.items()},
                            "seconds": round(time.perf_counter() - started, 1)})
    return {k: round(v, 4) for k, v in running.items()}


def new_optimizer(model: torch.nn.Module, learning_rate: float) -> torch.optim.Optimizer:
    """The family's optimizer: AdamW (beta 0.9, 0.95; weight decay 0.1); `run_phase` sets its learning rate."""
    return torch.optim.AdamW(model.parameters(), lr=learning_rate, betas=(0.9, 0.95), weight_decay=0.1)


def train_model(
    model: LlamaForCausalLM,
    spec: ModelSpec,
    tokens: torch.Tensor,
    *,
    seed: int,
    name: str,
    teacher: LlamaForCausalLM | None = None,
    log: list | None = None,
) -> dict:
    """Train in place: ``spec.steps`` LM steps, then ``spec.distill_steps`` steps against ``teacher``.

    tokens: the tokenised training split, a 1-D tensor. Returns a summary (steps, tokens
    seen, seconds, final losses); each logged step is appended to ``log`` as a dict.
    """
    generator = torch.Generator().manual_seed(seed)
    optimizer = new_optimizer(model, spec.learning_rate)
    phases = [(phase, steps) for phase, steps in (("lm", spec.steps), ("distill", spec.distill_steps)) if steps]
    if spec.distill_steps and teacher is None:
        raise ValueError(f"{name}: distill_steps={spec.distill_steps} needs a teacher model")
    model.train()
    start = time.perf_counter()
    summary: dict = {"name": name, "spec": asdict(spec)}
    for phase, steps in phases:
        def batch_loss(phase: str = phase) -> tuple[torch.Tensor, dict]:
            windows = sample_windows(tokens, spec.batch_size, spec.context + 1, generator)
            return lm_loss(model, windows, spec) if phase == "lm" else _distill_loss(model, teacher, windows)
        summary[f"{phase}_final"] = run_phase(model, optimizer, spec, steps, batch_loss, name=name, phase=phase,
                                              started=start, log=log)
        summary[f"{phase}_steps"] = steps
        summary[f"{phase}_tokens"] = steps * spec.batch_size * spec.context
    summary["seconds"] = round(time.perf_counter() - start, 1)
    model.eval()
    return summary


@torch.no_grad()
def validation_loss(model: LlamaForCausalLM, tokens: torch.Tensor, context: int, *, max_windows: int = 64,
                    exit_layer: int | None = None) -> float:
    """Mean next-token CE (nats/token) over consecutive windows of the validation split.

    With ``exit_layer`` the loss of the early-exit head at that layer is measured instead.
    """
    model.eval()
    n = min(max_windows, (tokens.numel() - 1) // context)
    if n < 1:
        raise ValueError(f"validation split too small: {tokens.numel()} tokens for context {context}")
    windows = tokens[: n * context + 1]
    inputs = windows[:-1].view(n, context).long()
    labels = windows[1:].view(n, context).long()
    total = 0.0
    for i in range(0, n, 8):
        out = model.model(input_ids=inputs[i : i + 8], output_hidden_states=exit_layer is not None, use_cache=False)
        hidden = out.hidden_states[exit_layer] if exit_layer is not None else out.last_hidden_state
        logits = lm_head_logits(model, hidden) if exit_layer is not None else model.lm_head(hidden)
        total += F.cross_entropy(logits.flatten(0, 1), labels[i : i + 8].flatten(), reduction="sum").item()
    return total / labels.numel()
