"""The drafts' stage of the family: the draft on tokenizer A and draft B on tokenizer B, trained against a target.

Both drafts exist to be *accepted* by the target, so both end on text the target wrote itself
(`specdec_tools.training.target_text`):

- the **draft** (tokenizer A): next-token steps on the corpus, then distillation (KL(p_target || q_draft)) on corpus
  windows, then more distillation on the target's own greedy continuations, then many cheaper steps on *fresh*
  target text against the target's cached top-k distributions (`specdec_tools.training.cached_teacher`);
- **draft B** (tokenizer B, ids the target cannot read): next-token steps on the corpus, then next-token steps on the
  same target-written text re-tokenised with tokenizer B. No per-token distillation is possible across vocabularies;
  learning the target's *text* (sequence-level distillation) is what aligns a draft that can only be compared with
  the target through text, as the cross-tokenizer drafter does.

`python -m specdec_tools train` runs this stage inside the whole pipeline; ``python -m specdec_tools train drafts``
re-runs it alone against the shipped target (`retrain_drafts`), on exactly the corpus the family was trained on;
``python -m specdec_tools train fresh-text`` applies only the draft's last phase to the shipped draft
(`apply_fresh_text_to_shipped_draft`).
Every function takes the family's spec as ``spec``, a ``specdec_tools.training.cli.FamilySpec`` (not imported here:
``train`` imports this module).
Every checkpoint before a later phase is saved to the work folder, so the card can show what each phase bought.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer, LlamaForCausalLM

from .corpus import collect_stdlib_sources, corpus_manifest, split_files
from .cached_teacher import fresh_text_phase
from .model_training import ModelSpec, build_model, save_model, train_model, validation_loss
from .target_text import retokenize_stream, target_text_stream
from .tokenizer_training import tokenize_texts

#: the work-folder checkpoints of the draft before its later phases, in training order, and what each had learnt
#: (measured by ``train.measure_family`` for the draft's card)
DRAFT_CHECKPOINTS = {"draft_corpus_only": "corpus only",
                     "draft_corpus_distilled": "corpus, then distillation on corpus windows",
                     "draft_target_distilled": "corpus, distillation on corpus windows, then on the target's text"}


def generate_target_text(spec, target: LlamaForCausalLM, tokens_a: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """The target's own text for the drafts' last phase: (stream in tokenizer A, summary with its size and seconds)."""
    text = spec.draft_target_text
    started = time.perf_counter()
    stream = target_text_stream(target, tokens_a, sequences=text.sequences, prompt_tokens=text.prompt_tokens,
                                new_tokens=text.new_tokens, batch_size=text.batch_size, seed=spec.seed + 5)
    summary = {"sequences": text.sequences, "prompt_tokens": text.prompt_tokens, "new_tokens": text.new_tokens,
               "stream_tokens": stream.numel(), "seconds": round(time.perf_counter() - started, 1)}
    return stream, summary


def _steps_only(spec: ModelSpec, steps: int = 0, distill_steps: int = 0) -> ModelSpec:
    """``spec`` with its step counts replaced: one phase of a model's training."""
    return ModelSpec(**{**spec.__dict__, "steps": steps, "distill_steps": distill_steps})


def _fresh_text(spec, draft: LlamaForCausalLM, target: LlamaForCausalLM, tokens_a: torch.Tensor, log: list) -> dict:
    """Phase 4 of `train_draft` with the family's spec and seed (the pipeline and the ``fresh-text`` command)."""
    return fresh_text_phase(draft, spec.draft, spec.draft_fresh_text, target, tokens_a, seed=spec.seed + 9, log=log)


def train_draft(spec, tok_a, tokens_a: torch.Tensor, target: LlamaForCausalLM, work_dir: Path,
                log: list, target_text: torch.Tensor | None = None) -> tuple[LlamaForCausalLM, dict]:
    """The draft on tokenizer A, in four phases:

    1. ``spec.draft.steps`` next-token steps on the corpus (checkpoint ``draft_corpus_only``);
    2. ``spec.draft.distill_steps`` steps minimising KL(p_target || q_draft) on corpus windows (checkpoint
       ``draft_corpus_distilled``);
    3. with ``target_text`` (`generate_target_text`), ``spec.draft_target_text.steps`` more KL steps on it
       (checkpoint ``draft_target_distilled`` when phase 4 follows);
    4. with ``spec.draft_fresh_text``, `fresh_text_phase`: fresh target text, the target's top-k cached along it,
       cheap steps against the cache.

    tokens_a: tokenizer A's training stream (1-D). Returns the draft and the training report's summaries
    ``draft_corpus_only``, ``draft`` (phase 2), ``draft_target_text`` (phase 3) and ``draft_fresh_text``."""
    corpus_only, corpus_distilled, target_distilled = DRAFT_CHECKPOINTS  # the checkpoints' folder names, in order
    draft = build_model(spec.draft, len(tok_a), tok_a.eos_token_id, spec.seed + 1)
    summaries = {"draft_corpus_only": train_model(draft, _steps_only(spec.draft, steps=spec.draft.steps), tokens_a,
                                                  seed=spec.seed + 1, name="draft", log=log)}
    save_model(draft, tok_a, work_dir / corpus_only)
    if spec.draft.distill_steps:
        summaries["draft"] = train_model(draft, _steps_only(spec.draft, distill_steps=spec.draft.distill_steps),
                                         tokens_a, seed=spec.seed + 2, name="draft", teacher=target, log=log)
    if target_text is not None:
        save_model(draft, tok_a, work_dir / corpus_distilled)
        summaries["draft_target_text"] = train_model(
            draft, _steps_only(spec.draft, distill_steps=spec.draft_target_text.steps), target_text,
            seed=spec.seed + 6, name="draft_target_text", teacher=target, log=log)
    if spec.draft_fresh_text is not None:
        save_model(draft, tok_a, work_dir / target_distilled)
        summaries["draft_fresh_text"] = _fresh_text(spec, draft, target, tokens_a, log)
    return draft, summaries


def train_draft_b(spec, tok_b, tokens_b: torch.Tensor, log: list,
                  target_text_b: torch.Tensor | None = None) -> tuple[LlamaForCausalLM, dict]:
    """Draft B on tokenizer B: ``spec.draft_b.steps`` next-token steps on the corpus, then, with ``target_text_b``
    (the target's text re-tokenised with B, `retokenize_stream`), ``spec.draft_target_text.steps``
    next-token steps on it. Returns draft B and the summaries ``draft_b`` and ``draft_b_target_text``."""
    draft_b = build_model(spec.draft_b, len(tok_b), tok_b.eos_token_id, spec.seed + 3)
    summaries = {"draft_b": train_model(draft_b, _steps_only(spec.draft_b, steps=spec.draft_b.steps), tokens_b,
                                        seed=spec.seed + 3, name="draft_b", log=log)}
    if target_text_b is not None:
        summaries["draft_b_target_text"] = train_model(
            draft_b, _steps_only(spec.draft_b, steps=spec.draft_target_text.steps), target_text_b,
            seed=spec.seed + 7, name="draft_b_target_text", log=log)
    return draft_b, summaries


def train_drafts(spec, tokenizers: dict, tokens: dict, target: LlamaForCausalLM, work_dir: Path,
                 log: list) -> tuple[dict, dict]:
    """Both drafts against ``target``: generate the target's text once (when ``spec.draft_target_text`` asks for
    it), then `train_draft` and `train_draft_b`. tokenizers / tokens: ``{"a": ..., "b": ...}`` (training streams).
    Returns ``({"draft": model, "draft_b": model}, summaries)``; the summaries include ``target_text``."""
    summaries: dict = {}
    text_a = text_b = None
    if spec.draft_target_text is not None and spec.draft_target_text.steps:
        text_a, summaries["target_text"] = generate_target_text(spec, target, tokens["a"])
        text_b = retokenize_stream(text_a, tokenizers["a"], tokenizers["b"])
    draft, draft_summaries = train_draft(spec, tokenizers["a"], tokens["a"], target, work_dir, log, text_a)
    draft_b, draft_b_summaries = train_draft_b(spec, tokenizers["b"], tokens["b"], log, text_b)
    return {"draft": draft, "draft_b": draft_b}, {**summaries, **draft_summaries, **draft_b_summaries}


def shipped_corpus(spec, models_dir: Path) -> tuple[list[str], list[str]]:
    """(train texts, validation texts) of this interpreter's standard library, refused unless they are exactly
    the corpus the shipped family was trained on (same sha256 as its manifest)."""
    train_files, val_files = split_files(collect_stdlib_sources(max_files=spec.max_files))
    shipped = json.loads((models_dir / "corpus_manifest.json").read_text())
    here = corpus_manifest(train_files, val_files)
    if here["sha256"] != shipped["sha256"]:
        raise ValueError(
            f"this interpreter's standard library (Python {here['python_version']}, sha256 {here['sha256'][:12]}…) "
            f"is not the corpus the shipped family was trained on (Python {shipped['python_version']}, sha256 "
            f"{shipped['sha256'][:12]}…): retraining one model on other data would mix corpora. Run it with "
            f"Python {shipped['python_version']}, or retrain the whole family with `python -m specdec_tools train`.")
    return [f.text for f in train_files], [f.text for f in val_files]


def retrain_drafts(spec, models_dir: Path, work_dir: Path) -> dict:
    """Re-run the drafts' stage (`train_drafts`) against the shipped target and tokenizers, on the shipped corpus,
    and record it (`ship_drafts`). The target, the heads and EAGLE are untouched. Returns the training report."""
    torch.set_num_threads(spec.threads)
    train_texts, val_texts = shipped_corpus(spec, models_dir)
    tokenizers = {"a": AutoTokenizer.from_pretrained(models_dir / "target"),
                  "b": AutoTokenizer.from_pretrained(models_dir / "draft_b")}
    target = LlamaForCausalLM.from_pretrained(models_dir / "target", dtype=torch.float32).eval()
    tokens = {key: tokenize_texts(tok, train_texts) for key, tok in tokenizers.items()}
    log: list[dict] = []
    drafts, summaries = train_drafts(spec, tokenizers, tokens, target, work_dir, log)
    return ship_drafts(drafts, tokenizers, summaries, log, val_texts, spec, models_dir)


def ship_drafts(drafts: dict, tokenizers: dict, summaries: dict, log: list, val_texts: list[str], spec,
                models_dir: Path, replaced_log_models: set[str] | None = None) -> dict:
    """Save retrained drafts into the family and record them: their summaries and validation losses in
    ``training_report.json``, their log lines in ``training_log.jsonl`` (replacing the old drafts' lines: every
    phase of each draft, or only the log models named in ``replaced_log_models`` when one phase was re-run). Only
    whole retrainings (``replaced_log_models`` None) are listed in the report's ``drafts_retrained``, which the
    target's card cites as ``train drafts``.

    drafts: ``{"draft": model, "draft_b": model}`` (either may be left out); tokenizers: ``{"a": ..., "b": ...}``.
    Returns the updated report."""
    report = json.loads((models_dir / "training_report.json").read_text())
    report["training"].update(summaries)
    if replaced_log_models is None:  # every phase re-run after the family
        report["drafts_retrained"] = sorted(set(report.get("drafts_retrained", [])) | set(drafts))
    for name, model in drafts.items():
        tokenizer = tokenizers["b" if name == "draft_b" else "a"]
        save_model(model, tokenizer, models_dir / name)
        context = (spec.draft_b if name == "draft_b" else spec.draft).context
        loss = validation_loss(model, tokenize_texts(tokenizer, val_texts), context)
        report["validation_loss_nats_per_token"][name] = round(loss, 4)
        print(f"{name}: validation loss {loss:.4f} nats/token", flush=True)
    (models_dir / "training_report.json").write_text(json.dumps(report, indent=2) + "\n")
    log_path = models_dir / "training_log.jsonl"
    replaced = replaced_log_models if replaced_log_models is not None else {  # each draft's log names
        logged for name in drafts for logged in (name, f"{name}_target_text", f"{name}_fresh_text")}
    kept = [line for line in log_path.read_text().splitlines() if json.loads(line)["model"] not in replaced]
    log_path.write_text("".join(line + "\n" for line in kept) + "".join(json.dumps(row) + "\n" for row in log))
    return report


def apply_fresh_text_to_shipped_draft(spec, models_dir: Path, work_dir: Path) -> dict:
    """Run only the draft's last phase (`fresh_text_phase`) on the shipped draft (``python -m specdec_tools train
    fresh-text``) and record it, as `train_draft` would have run it after phase 3.

    spec: the family's ``FamilySpec`` (its ``draft``, ``draft_fresh_text`` and seed). The corpus must be the shipped
    family's (`shipped_corpus`). Refused when the report says the draft already went through the phase. The draft
    before it is saved to ``work_dir/draft_target_distilled`` (the card measures what the phase bought); the report
    gets the phase's summary and the draft's new validation loss, the log its lines. Returns the updated report."""
    report = json.loads((models_dir / "training_report.json").read_text())
    if "draft_fresh_text" in report["training"]:
        raise ValueError(f"{models_dir / 'draft'} already went through the fresh-text phase (see "
                         f"{models_dir / 'training_report.json'}): applying it twice is not what `python -m "
                         "specdec_tools.training.cli` does. Restore the draft from git, or retrain the drafts "
                         "(train drafts).")
    torch.set_num_threads(spec.threads)
    train_texts, val_texts = shipped_corpus(spec, models_dir)
    tokenizer = AutoTokenizer.from_pretrained(models_dir / "draft")
    target = LlamaForCausalLM.from_pretrained(models_dir / "target", dtype=torch.float32).eval()
    draft = LlamaForCausalLM.from_pretrained(models_dir / "draft", dtype=torch.float32).eval()
    save_model(draft, tokenizer, work_dir / list(DRAFT_CHECKPOINTS)[-1])
    log: list[dict] = []
    summary = _fresh_text(spec, draft, target, tokenize_texts(tokenizer, train_texts), log)
    report = ship_drafts({"draft": draft}, {"a": tokenizer}, {"draft_fresh_text": summary}, log, val_texts, spec,
                         models_dir, replaced_log_models={"draft_fresh_text"})
    report["draft_fresh_text_applied_afterwards"] = True
    (models_dir / "training_report.json").write_text(json.dumps(report, indent=2) + "\n")
    return report
