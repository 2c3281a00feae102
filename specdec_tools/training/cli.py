"""Reproduce the embedded model family from scratch: ``python -m specdec_tools train``.

Stages (each logged, seeded): collect the stdlib corpus and write its manifest →
train tokenizers A and B → tokenise → train a shallow base target (with an early-exit
loss) → grow it three times deeper and continue training it (depth up-scaling,
:mod:`specdec_tools.training.depth_growth`; the early-exit loss moves to the matching
shallow layer) → fine-tune it against its own greedy loops (unlikelihood training,
:mod:`specdec_tools.training.unlikelihood`) → the drafts (:mod:`specdec_tools.training.drafts`): the target writes
greedy continuations of corpus windows; the draft trains on the corpus, is distilled from
the target on corpus windows, then on the target's text, then against the target's cached
top-k on fresh text (:mod:`specdec_tools.training.cached_teacher`); draft B trains on the corpus,
then on the target's text in tokenizer B → measure every model and write the cards
(:mod:`specdec_tools.training.cards`).

``--grow-from FOLDER`` skips the base stage and grows a saved base instead (the v1
target, which is exactly what the base stage trains). ``--quick`` trains tiny versions
on a slice of the corpus in seconds: the pipeline's own test uses it. Training steps for
extra heads on the frozen target are kept out of this pipeline on purpose, so that they
can be added without retraining the family; ``python -m specdec_tools train drafts``
re-runs the drafts' stage alone against the shipped target, ``python -m
specdec_tools.training.cli unlikelihood`` applies the unlikelihood stage alone to the shipped
target (after it, retrain the drafts and the heads: both were fitted to the old target),
and ``python -m specdec_tools train fresh-text`` applies the draft's last phase alone to
the shipped draft.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoTokenizer, LlamaForCausalLM

from specdec_lib.bench.model_measures import (distinct_4gram_share, greedy_agreement, greedy_continuations,
                                              interleaved_forward_costs)
from specdec_lib.core.paths import EMBEDDED_MODEL_NAMES, REPO_DATA_DIR
from specdec_lib.prompts import encode_prompts
from .cards import write_cards
from .corpus import collect_stdlib_sources, corpus_manifest, split_files, write_manifest
from .depth_growth import grow_depth
from .heads import main as train_heads
from .measure import heldout_distinct_4gram_shares
from .cached_teacher import CachedTeacherSpec
from .drafts import (DRAFT_CHECKPOINTS, apply_fresh_text_to_shipped_draft, retrain_drafts, shipped_corpus,
                     train_drafts)
from .model_training import ModelSpec, build_model, save_model, train_model, validation_loss
from .target_text import TargetTextSpec
from .unlikelihood import UnlikelihoodSpec, apply_to_shipped_target, unlikelihood_stage
from .tokenizer_training import (
    tokenize_texts,
    train_tokenizer_a,
    train_tokenizer_b,
    wrap_for_transformers,
)


#: Block sizes whose verification cost (one target forward over k new tokens / over one) the target's card reports.
BLOCKS = (2, 3, 4, 6, 8)

#: Written beside a saved base target: the summary of the run that trained it (read back by ``--grow-from``).
BASE_SUMMARY_FILE = "training_summary.json"


@dataclass(frozen=True)
class FamilySpec:
    """Everything that defines the family: tokenizer sizes, model specs, corpus size, seed."""

    vocab_a: int
    vocab_b: int
    target_base: ModelSpec  # trained first, then grown into `target` (same width, a whole multiple of its depth)
    target: ModelSpec
    draft: ModelSpec
    draft_b: ModelSpec
    draft_target_text: TargetTextSpec | None = None  # a distillation phase on text the target wrote
    draft_fresh_text: CachedTeacherSpec | None = None  # the draft's last phase: fresh text, cached teacher top-k
    target_unlikelihood: UnlikelihoodSpec | None = None  # the target's last stage: fewer greedy loops
    max_files: int | None = None
    seed: int = 1234
    threads: int = 2


FULL = FamilySpec(
    vocab_a=4096,
    vocab_b=3072,
    target_base=ModelSpec(layers=8, hidden=192, intermediate=512, heads=4, context=512, steps=1400, batch_size=6,
                          learning_rate=2e-3, early_exit_layer=2, early_exit_weight=0.3),
    # the base's exit after layer 2 sits after layer 4 of the grown model (grown_layer_index): 1/6 of the depth
    target=ModelSpec(layers=24, hidden=192, intermediate=512, heads=4, context=512, steps=480, batch_size=6,
                     learning_rate=1e-3, warmup_steps=40, early_exit_layer=4, early_exit_weight=0.3),
    draft=ModelSpec(layers=1, hidden=192, intermediate=512, heads=4, context=512, steps=1000, batch_size=6,
                    learning_rate=3e-3, distill_steps=1000),
    draft_b=ModelSpec(layers=1, hidden=192, intermediate=512, heads=4, context=512, steps=1000, batch_size=6,
                      learning_rate=3e-3),
    draft_target_text=TargetTextSpec(sequences=4096, prompt_tokens=64, new_tokens=96, batch_size=128, steps=700),
    draft_fresh_text=CachedTeacherSpec(
        text=TargetTextSpec(sequences=8192, prompt_tokens=64, new_tokens=96, batch_size=256, steps=1500),
        top_k=32, sequences_per_step=19, learning_rate=1e-3, warmup_steps=50),
    target_unlikelihood=UnlikelihoodSpec(steps=60, learning_rate=1e-4, warmup_steps=10, weight=0.5, prompts=8,
                                         prompt_tokens=64, new_tokens=64),
)

QUICK = FamilySpec(
    vocab_a=300,
    vocab_b=300,
    target_base=ModelSpec(layers=1, hidden=32, intermediate=64, heads=2, context=64, steps=3, batch_size=2,
                          learning_rate=1e-3, warmup_steps=1),
    target=ModelSpec(layers=3, hidden=32, intermediate=64, heads=2, context=64, steps=3, batch_size=2,
                     learning_rate=1e-3, warmup_steps=1, early_exit_layer=1, early_exit_weight=0.3),
    draft=ModelSpec(layers=1, hidden=32, intermediate=64, heads=2, context=64, steps=3, batch_size=2,
                    learning_rate=1e-3, warmup_steps=1, distill_steps=2),
    draft_b=ModelSpec(layers=1, hidden=32, intermediate=64, heads=2, context=64, steps=3, batch_size=2,
                      learning_rate=1e-3, warmup_steps=1),
    draft_target_text=TargetTextSpec(sequences=8, prompt_tokens=8, new_tokens=16, batch_size=4, steps=2),
    draft_fresh_text=CachedTeacherSpec(text=TargetTextSpec(sequences=6, prompt_tokens=8, new_tokens=12, batch_size=4,
                                                           steps=2), top_k=4, sequences_per_step=2,
                                       learning_rate=1e-3, warmup_steps=1),
    target_unlikelihood=UnlikelihoodSpec(steps=2, learning_rate=1e-4, warmup_steps=1, weight=0.5, prompts=2,
                                         prompt_tokens=8, new_tokens=12),
    max_files=12,
    threads=1,  # models this small train fastest on one thread, and it leaves the other core to whatever runs beside
)


def _base_target(spec: FamilySpec, tok_a, tokens: torch.Tensor, work_dir: Path, grow_from: Path | None,
                 log: list) -> tuple[LlamaForCausalLM, dict]:
    """The shallow target to grow and its training summary.

    Trained here (and saved to ``work_dir/target_base`` with its summary in ``training_summary.json``), or read
    from ``grow_from``, whose summary (if it has one) is that of the run that trained it. A saved base must use
    the tokenizer A trained now (its ids index the embeddings): checked."""
    if grow_from is None:
        base = build_model(spec.target_base, len(tok_a), tok_a.eos_token_id, spec.seed)
        summary = train_model(base, spec.target_base, tokens, seed=spec.seed, name="target_base", log=log)
        save_model(base, tok_a, work_dir / "target_base")
        (work_dir / "target_base" / BASE_SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n")
        return base, summary
    base = LlamaForCausalLM.from_pretrained(grow_from, dtype=torch.float32)
    if AutoTokenizer.from_pretrained(grow_from).get_vocab() != tok_a.get_vocab():
        raise ValueError(f"--grow-from {grow_from}: its tokenizer differs from the tokenizer A trained now, so its "
                         "embeddings do not match; grow a base trained by this pipeline on this corpus.")
    saved = grow_from / BASE_SUMMARY_FILE
    summary = json.loads(saved.read_text()) if saved.is_file() else {"name": "target_base"}
    return base, {**summary, "grown_from": str(grow_from)}


def train_family(spec: FamilySpec, out_dir: Path, work_dir: Path, grow_from: Path | None = None) -> dict:
    """Run every stage; models, the corpus manifest, the training report and log go to ``out_dir``, the
    base target and the draft's checkpoint from before distillation (for measuring distillation both ways) to
    ``work_dir``. With ``grow_from`` the base stage is skipped and that saved base is grown instead."""
    torch.set_num_threads(spec.threads)
    started = time.perf_counter()
    log: list[dict] = []
    files = collect_stdlib_sources(max_files=spec.max_files)
    train_files, val_files = split_files(files)
    manifest = corpus_manifest(train_files, val_files)
    write_manifest(manifest, out_dir / "corpus_manifest.json")
    print(f"corpus: {manifest['train_files']} train files ({manifest['train_bytes'] / 1e6:.1f} MB), "
          f"{manifest['validation_files']} validation files", flush=True)

    train_texts = [f.text for f in train_files]
    val_texts = [f.text for f in val_files]
    context = max(spec.target.context, spec.draft.context, spec.draft_b.context)
    tok_a = wrap_for_transformers(train_tokenizer_a(train_texts, spec.vocab_a), context)
    tok_b = wrap_for_transformers(train_tokenizer_b(train_texts, spec.vocab_b), context)
    data = {name: (tokenize_texts(tok, train_texts), tokenize_texts(tok, val_texts)) for name, tok in (("a", tok_a), ("b", tok_b))}
    print(f"tokens: A train {data['a'][0].numel():,} val {data['a'][1].numel():,}; "
          f"B train {data['b'][0].numel():,} val {data['b'][1].numel():,}", flush=True)

    summaries = {}
    base, summaries["target_base"] = _base_target(spec, tok_a, data["a"][0], work_dir, grow_from, log)
    target = grow_depth(base, spec.target, spec.seed)
    summaries["target"] = train_model(target, spec.target, data["a"][0], seed=spec.seed + 4, name="target", log=log)
    val_before_unlikelihood = {}
    if spec.target_unlikelihood is not None:
        summaries["target_unlikelihood"], val_before_unlikelihood["target_before_unlikelihood"] = unlikelihood_stage(
            spec, target, tok_a, data["a"][0], data["a"][1], work_dir, log)
    save_model(target, tok_a, out_dir / "target")

    drafts, draft_summaries = train_drafts(spec, {"a": tok_a, "b": tok_b}, {"a": data["a"][0], "b": data["b"][0]},
                                           target, work_dir, log)
    summaries.update(draft_summaries)
    draft, draft_b = drafts["draft"], drafts["draft_b"]
    save_model(draft, tok_a, out_dir / "draft")
    save_model(draft_b, tok_b, out_dir / "draft_b")

    val = {
        "target_base": validation_loss(base, data["a"][1], spec.target_base.context),
        "target": validation_loss(target, data["a"][1], spec.target.context),
        "target_early_exit": validation_loss(target, data["a"][1], spec.target.context,
                                             exit_layer=spec.target.early_exit_layer),
        "draft": validation_loss(draft, data["a"][1], spec.draft.context),
        "draft_b": validation_loss(draft_b, data["b"][1], spec.draft_b.context),
        **val_before_unlikelihood,
    }
    val_bytes = manifest["validation_bytes"]
    report = {
        "seed": spec.seed,
        "threads": spec.threads,
        "torch": torch.__version__,
        "total_seconds": round(time.perf_counter() - started, 1),
        "training": summaries,
        "validation_loss_nats_per_token": {k: round(v, 4) for k, v in val.items()},
        "validation_tokens": {"a": data["a"][1].numel(), "b": data["b"][1].numel()},
        "validation_bytes": val_bytes,
    }
    (out_dir / "training_report.json").write_text(json.dumps(report, indent=2) + "\n")
    (out_dir / "training_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log))
    print(json.dumps(report["validation_loss_nats_per_token"], indent=2), flush=True)
    print(f"done in {report['total_seconds'] / 60:.1f} min", flush=True)
    return report


def _saved_base_folder(models_dir: Path, work_dir: Path) -> Path | None:
    """Where the base target the shipped one grew from is saved: the folder it was read from, or ``work_dir``."""
    report = models_dir / "training_report.json"
    grown_from = json.loads(report.read_text())["training"].get("target_base", {}).get("grown_from") if report.exists() else None
    folder = Path(grown_from) if grown_from else work_dir / "target_base"
    return folder if (folder / "config.json").is_file() else None


def measure_family(models_dir: Path, work_dir: Path, threads: int = 2) -> dict:
    """Measure the saved family (costs, c, greedy agreement per prompt set, how much the target and its base loop on
    the prompt sets and on held-out windows) and write ``measurements.json``.

    The models of ``work_dir`` (the base target, the target before unlikelihood, the draft's checkpoints) are
    intermediate and not committed: one that is no longer there (a later session, a stage re-run alone) keeps the
    measurement the previous ``measurements.json`` holds for it, and ``carried_over`` names each such entry. Its
    weights did not change, so neither did its numbers (greedy agreement and looping are not timings).
    Timings are only meaningful on a quiet machine: run this with nothing else busy.
    """
    from specdec_lib.bench.cli import cpu_model
    from specdec_lib.loading import load_model_folder
    from specdec_lib.prompts import TASKS, load_prompts

    torch.set_num_threads(threads)
    device = torch.device("cpu")
    previous_path = models_dir / "measurements.json"
    previous = json.loads(previous_path.read_text()) if previous_path.is_file() else {}
    carried_over: list[str] = []
    loaded = {name: load_model_folder(models_dir / name, device=device) for name in EMBEDDED_MODEL_NAMES}
    target, target_tok = loaded["target"]
    prompts = {task: [p.prompt for p in load_prompts(task)] for task in TASKS}
    context_a = encode_prompts(target_tok, [prompts["code"][0]], device)[0][:, :64]
    context_b = encode_prompts(loaded["draft_b"][1], [prompts["code"][0]], device)[0][:, :64]
    costs = interleaved_forward_costs({
        **{name: (model, context_b if name == "draft_b" else context_a, 1) for name, (model, _) in loaded.items()},
        **{k: (target, context_a, k) for k in BLOCKS}})
    blocks = {k: costs[k] / costs["target"] for k in BLOCKS}
    models = {}
    for name, (model, _) in loaded.items():
        models[name] = {"parameters": sum(p.numel() for p in model.parameters()), "forward_ms": costs[name] * 1e3}
        if name != "target":
            models[name]["c"] = costs[name] / costs["target"]
    models["target"]["block_cost_ratio"] = {str(k): round(v, 3) for k, v in blocks.items()}
    encoded = {task: encode_prompts(target_tok, texts, device) for task, texts in prompts.items()}
    continuations = {task: greedy_continuations(target, ids) for task, ids in encoded.items()}
    agreement = {task: greedy_agreement(loaded["draft"][0], runs) for task, runs in continuations.items()}
    measurements = {
        "machine": f"{os.cpu_count()}-core CPU ({cpu_model()})",
        "torch": torch.__version__,
        "threads": threads,
        "models": models,
        "agreement": agreement,
    }
    looping = {"target": target}  # a deeper target must not loop more than the base it grew from: looping inflates α
    base = _saved_base_folder(models_dir, work_dir)
    if base is not None:
        looping["target_base"], _ = load_model_folder(base, device=device)
        measurements["target_base"] = {
            "folder": base.name,
            "distinct_4gram_share": {
                task: distinct_4gram_share(greedy_continuations(looping["target_base"], ids))
                for task, ids in encoded.items()},
        }
    elif "target_base" in previous:
        measurements["target_base"] = previous["target_base"]
        carried_over.append("target_base")
    before = work_dir / "target_before_unlikelihood"  # saved by the unlikelihood stage: how much it changed
    if (before / "config.json").is_file():
        looping["target_before_unlikelihood"], _ = load_model_folder(before, device=device)
    _, val_texts = shipped_corpus(FULL, models_dir)
    heldout = heldout_distinct_4gram_shares(looping, tokenize_texts(target_tok, val_texts).to(device))
    earlier = previous.get("heldout_distinct_4gram_share", {})
    missing = [name for name in earlier if name not in heldout]
    carried_over += [f"heldout_distinct_4gram_share.{name}" for name in missing]
    text = heldout.pop("held-out text")  # the models first, the text's own share last (the cards' order)
    measurements["heldout_distinct_4gram_share"] = {**heldout, **{name: earlier[name] for name in missing},
                                                    "held-out text": text}
    checkpoints = {}
    for folder in DRAFT_CHECKPOINTS:  # the draft before each of its later phases (`training.drafts.train_draft`)
        if (work_dir / folder / "config.json").is_file():
            checkpoint, _ = load_model_folder(work_dir / folder, device=device)
            checkpoints[folder] = {task: greedy_agreement(checkpoint, runs) for task, runs in continuations.items()}
        elif folder in previous.get("draft_checkpoints", {}):
            checkpoints[folder] = previous["draft_checkpoints"][folder]
            carried_over.append(f"draft_checkpoints.{folder}")
    if checkpoints:
        measurements["draft_checkpoints"] = checkpoints
    if carried_over:
        measurements["carried_over"] = carried_over
    (models_dir / "measurements.json").write_text(json.dumps(measurements, indent=2) + "\n")
    write_cards(models_dir)
    return measurements


def _stage_arguments(argv: list[str], command: str, description: str, work_help: str) -> argparse.Namespace:
    """The options of a command that re-runs one stage on the shipped family: ``--models`` (checked to hold a
    target) and ``--work``."""
    parser = argparse.ArgumentParser(prog=f"python -m specdec_tools train {command}", description=description)
    parser.add_argument("--models", type=Path, default=REPO_DATA_DIR / "models", help="the family's folder")
    parser.add_argument("--work", type=Path, default=Path("runs"), help=work_help)
    args = parser.parse_args(argv)
    if not (args.models / "target" / "config.json").is_file():
        parser.error(f"--models {args.models}: no target/config.json there; point it at the family's folder")
    return args


def _drafts_main(argv: list[str]) -> None:
    """``python -m specdec_tools train drafts``: the drafts' stage alone, against the shipped target, then measure."""
    args = _stage_arguments(argv, "drafts",
                            "Retrain only the draft and draft B against the shipped target "
                            "(specdec_tools.training.drafts: corpus, distillation, the target's own text), then "
                            "re-measure the family and rewrite the cards. The target, the heads and EAGLE are "
                            "untouched.", "intermediate checkpoints (not committed)")
    retrain_drafts(FULL, args.models, args.work)
    print(json.dumps(measure_family(args.models, args.work), indent=2), flush=True)


def _fresh_text_main(argv: list[str]) -> None:
    """``python -m specdec_tools train fresh-text``: the draft's last phase alone, on the shipped draft, then
    measure."""
    args = _stage_arguments(argv, "fresh-text",
                            "Apply only the draft's last phase (specdec_tools.training.cached_teacher: fresh text the "
                            "target writes, its top-k cached, cheap steps against the cache) to the shipped draft, "
                            "record it, then re-measure the family and rewrite the cards. Refused if the draft "
                            "already went through it.", "where the draft before the phase is saved")
    apply_fresh_text_to_shipped_draft(FULL, args.models, args.work)
    print(json.dumps(measure_family(args.models, args.work), indent=2), flush=True)


def _unlikelihood_main(argv: list[str]) -> None:
    """``python -m specdec_tools train unlikelihood``: the target's unlikelihood stage alone, on the shipped target."""
    args = _stage_arguments(argv, "unlikelihood",
                            "Fine-tune the shipped target against its own greedy loops "
                            "(specdec_tools.training.unlikelihood), the pipeline's last target stage, and record it in "
                            "the training report. Then retrain the drafts (train drafts) and the heads (train "
                            "heads): they were fitted to the old target.", "where the target before the stage is saved")
    apply_to_shipped_target(FULL, args.models, args.work)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["heads"]:  # drafters trained on the frozen target, separate from the family
        return train_heads(argv[1:])
    if argv[:1] == ["drafts"]:
        return _drafts_main(argv[1:])
    if argv[:1] == ["unlikelihood"]:
        return _unlikelihood_main(argv[1:])
    if argv[:1] == ["fresh-text"]:
        return _fresh_text_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m specdec_tools train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="python -m specdec_tools train heads [--quick] trains Medusa heads and an "
                                            "EAGLE layer on the frozen target instead (see its --help); "
                                            "python -m specdec_tools train drafts retrains only the two drafts against "
                                            "the shipped target; python -m specdec_tools train unlikelihood applies "
                                            "only the target's unlikelihood stage to the shipped target; python -m "
                                            "specdec_tools.training.cli fresh-text only the draft's last phase to the "
                                            "shipped draft.")
    parser.add_argument("--out", type=Path, default=REPO_DATA_DIR / "models", help="where the models go (default: data/models)")
    parser.add_argument("--work", type=Path, default=Path("runs"), help="intermediate checkpoints (not committed)")
    parser.add_argument("--quick", action="store_true", help="tiny models on a corpus slice (seconds; for tests)")
    parser.add_argument("--measure", action="store_true", help="only re-measure the saved models and rewrite the cards")
    parser.add_argument("--grow-from", type=Path, default=None, metavar="FOLDER",
                        help="skip the base-target stage and grow this saved base (e.g. a copy of the v1 target)")
    args = parser.parse_args(argv)
    if args.grow_from is not None and not (args.grow_from / "config.json").is_file():
        parser.error(f"--grow-from {args.grow_from}: no config.json there; point it at a saved model folder")
    if not args.measure:
        train_family(QUICK if args.quick else FULL, args.out, args.work, grow_from=args.grow_from)
    if not args.quick:  # the quick models' context is too short for the prompt sets
        print(json.dumps(measure_family(args.out, args.work), indent=2), flush=True)


if __name__ == "__main__":
    main()
