"""Distillation against a cached teacher: the draft's last phase, on fresh text the target wrote.

Distilling with the target as a *live* teacher runs the 24-layer target forward on every training batch, so one
distillation step costs several steps of the one-layer draft alone (the training log times both). Text the target
wrote itself (`target_text`) is a fixed set of sequences, so the target's next-token distributions along it can be
computed **once** and reused for many student steps: the same teacher signal without the teacher's forward.

Storing the whole distribution at every position is too much (N sequences × L positions × V probabilities × 4 bytes;
with the family's thousands of sequences, a few hundred positions and a 4096-token vocabulary, gigabytes), so
the cache keeps the target's ``k`` most likely tokens at each position (`teacher_top_k`), and the student minimises
the **top-k KL** (`top_k_kl`): the KL(p ‖ q) of `model_training` between the two distributions *coarsened* to
k + 1 outcomes, the teacher's top-k tokens one by one and "any other token",

    Σ_{v ∈ top-k(p)} p(v) · log(p(v) / q(v))  +  p_rest · log(p_rest / q_rest),   p_rest = 1 − Σ_{top-k} p(v).

Coarsening never increases a KL, so this is at most the full KL, equals it when k is the vocabulary, and is zero
only when q matches p on every kept token. The rest term matters: a small target keeps a large share of its mass
outside its top 32 tokens (the loss logs the kept share as ``teacher_mass``), and without the term the student
would be rewarded for piling the tail's mass onto the top-k (the truncated sum goes negative), a sharper q than the
target's p, which costs sampling's α = Σ min(p, q). The target's greedy choice, its argmax,
is always kept: that is what greedy acceptance rewards.

A batch is whole sequences (a corpus window followed by the target's greedy continuation), each read from its own
first token: exactly the contexts greedy speculative decoding shows the draft, and the contexts the teacher's
distributions were computed in (a window cut across two sequences would see a context the cache never saw).
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm
from transformers import LlamaForCausalLM

from .model_training import ModelSpec, new_optimizer, run_phase
from .target_text import TargetTextSpec, target_text_stream


@dataclass(frozen=True)
class CachedTeacherSpec:
    """The draft's fresh-text phase: how much new target text, how many teacher tokens to keep, how to train."""

    text: TargetTextSpec  # the fresh text (its own seed); ``text.steps``: the student's steps on it
    top_k: int  # teacher tokens kept per position
    sequences_per_step: int  # whole sequences per student batch
    learning_rate: float  # peak, after ``warmup_steps``, then the family's cosine to a tenth of the peak
    warmup_steps: int


@dataclass(frozen=True)
class TeacherTopK:
    """The teacher's ``k`` most likely next tokens at every position of ``N`` sequences of ``L`` tokens.

    ``ids[n, t]`` (LongTensor[N, L - 1, k]) and ``log_probs[n, t]`` (FloatTensor[N, L - 1, k], the teacher's full
    log-softmax at those ids, most likely first) describe the teacher's distribution of token ``t + 1`` given tokens
    ``0 .. t`` of sequence ``n``."""

    ids: torch.Tensor
    log_probs: torch.Tensor


def sequences_of(stream: torch.Tensor, text: TargetTextSpec) -> torch.Tensor:
    """`target_text_stream`'s 1-D stream as its sequences: LongTensor[sequences, prompt + new + 1] (every one ends
    with EOS; none stops early, so all have the same length)."""
    return stream.view(text.sequences, text.prompt_tokens + text.new_tokens + 1).long()


@torch.no_grad()
def teacher_top_k(teacher: LlamaForCausalLM, sequences: torch.Tensor, k: int, batch_size: int = 32) -> TeacherTopK:
    """The teacher's top-``k`` next-token log-probabilities along ``sequences: LongTensor[N, L]``, computed once.

    Each sequence is read from its own first token (no cache, no padding: all have length L). Costs one teacher
    forward per token of the text, in batches of ``batch_size`` sequences."""
    if not 1 <= k <= teacher.config.vocab_size:
        raise ValueError(f"top_k must be between 1 and the vocabulary size {teacher.config.vocab_size}, got {k}")
    teacher.eval()
    ids, log_probs = [], []
    for start in tqdm(range(0, len(sequences), batch_size), desc="teacher top-k", mininterval=5):
        logits = teacher(input_ids=sequences[start:start + batch_size, :-1], use_cache=False).logits  # [B, L-1, V]
        values, indices = F.log_softmax(logits.float(), dim=-1).topk(k, dim=-1)  # [B, L-1, k] each
        ids.append(indices)
        log_probs.append(values)
    return TeacherTopK(torch.cat(ids), torch.cat(log_probs))


def top_k_kl(student: LlamaForCausalLM, sequences: torch.Tensor, teacher: TeacherTopK) -> tuple[torch.Tensor, dict]:
    """The KL(p ‖ q) between teacher and student coarsened to the teacher's top-k tokens plus "any other token",
    averaged over positions (the module's docstring derives it).

    sequences: LongTensor[B, L]; teacher: the same B sequences' `TeacherTopK` (ids and log_probs [B, L - 1, k]).
    Returns (loss, {"kl_top_k": loss, "teacher_mass": mean Σ_{top-k} p, the share of the target's mass kept})."""
    student_log_q = F.log_softmax(student(input_ids=sequences[:, :-1], use_cache=False).logits, dim=-1)  # [B, L-1, V]
    log_q = student_log_q.gather(-1, teacher.ids)  # [B, L-1, k]: the student's log q at the teacher's top tokens
    p = teacher.log_probs.exp()  # [B, L-1, k]
    kept = (p * (teacher.log_probs - log_q)).sum(-1)  # [B, L-1]: Σ_{top-k} p log(p / q)
    p_rest = (1 - p.sum(-1)).clamp(min=0)  # [B, L-1]
    # log q_rest = log(1 - Σ_{top-k} q) = log(-expm1(logsumexp(log q))), kept finite when q leaves no mass outside
    log_q_rest = torch.log(-torch.expm1(torch.logsumexp(log_q, -1).clamp(max=-1e-6)))  # [B, L-1]
    rest = torch.xlogy(p_rest, p_rest) - p_rest * log_q_rest  # p_rest log(p_rest / q_rest), 0 when p_rest = 0
    kl = (kept + rest).mean()
    return kl, {"kl_top_k": kl.item(), "teacher_mass": (1 - p_rest).mean().item()}


def distill_on_cached_teacher(draft: LlamaForCausalLM, draft_spec: ModelSpec, phase: CachedTeacherSpec,
                              sequences: torch.Tensor, teacher: TeacherTopK, *, seed: int, name: str,
                              log: list | None = None) -> dict:
    """``phase.text.steps`` student steps of `top_k_kl` on random batches of ``phase.sequences_per_step`` whole
    sequences (LongTensor[N, L], drawn with a seeded generator) and their cached teacher. Trains ``draft`` in place;
    returns the summary the training report and the card read."""
    generator = torch.Generator().manual_seed(seed)
    schedule = dataclasses.replace(draft_spec, learning_rate=phase.learning_rate, warmup_steps=phase.warmup_steps)
    optimizer = new_optimizer(draft, phase.learning_rate)

    def batch_loss() -> tuple[torch.Tensor, dict]:
        rows = torch.randint(0, len(sequences), (phase.sequences_per_step,), generator=generator)
        return top_k_kl(draft, sequences[rows], TeacherTopK(teacher.ids[rows], teacher.log_probs[rows]))

    draft.train()
    started = time.perf_counter()
    final = run_phase(draft, optimizer, schedule, phase.text.steps, batch_loss, name=name, phase="distill_top_k",
                      started=started, log=log)
    draft.eval()
    positions = phase.text.steps * phase.sequences_per_step * (sequences.shape[1] - 1)
    return {"name": name, "spec": asdict(phase), "distill_steps": phase.text.steps, "distill_tokens": positions,
            "distill_final": final, "seconds": round(time.perf_counter() - started, 1)}


def fresh_text_phase(draft: LlamaForCausalLM, draft_spec: ModelSpec, phase: CachedTeacherSpec,
                     target: LlamaForCausalLM, tokens: torch.Tensor, *, seed: int, log: list | None = None) -> dict:
    """The whole phase: the target writes ``phase.text`` fresh sequences from random windows of ``tokens`` (the
    training split, 1-D, seeded by ``seed``), its top-k is cached along them, and ``draft`` trains on the cache.
    Returns the phase's summary, with the seconds of each of its three parts."""
    started = time.perf_counter()
    text = phase.text
    stream = target_text_stream(target, tokens, sequences=text.sequences, prompt_tokens=text.prompt_tokens,
                                new_tokens=text.new_tokens, batch_size=text.batch_size, seed=seed)
    sequences = sequences_of(stream, text)
    generated = time.perf_counter()
    teacher = teacher_top_k(target, sequences, phase.top_k)
    cached = time.perf_counter()
    summary = distill_on_cached_teacher(draft, draft_spec, phase, sequences, teacher, seed=seed + 1,
                                        name="draft_fresh_text", log=log)
    return {**summary, "text_seconds": round(generated - started, 1), "teacher_seconds": round(cached - generated, 1),
            "text_tokens": sequences.numel()}
