"""Write the model cards (``data/models/<name>/README.md``) from what training and measuring recorded.

Every number in a card comes from ``training_report.json`` (written by training) or
``measurements.json`` (written by :func:`specdec_tools.training.cli.measure_family`); nothing is typed in by hand.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from .drafts import DRAFT_CHECKPOINTS

ROLE = {
    "target": "The **target**: the expensive model whose output speculative decoding must reproduce exactly. "
              "Deep and narrow on purpose: each layer adds its weights to stream and its framework overhead to pay "
              "on every forward, so depth makes the target's forward clearly dearer than the one-layer draft's while "
              "verifying several tokens in one forward stays cheap (the table below measures both), as in real "
              "model pairs. Grown from a shallower trained model (depth up-scaling), then trained further.",
    "draft": "The **draft**: a one-layer model on the target's tokenizer (A) that proposes tokens for the target "
             "to verify. Trained on the corpus, then distilled from the target (trained to match the target's "
             "next-token distribution) on corpus windows and then on text the target wrote itself, which is how real "
             "drafts are aligned with their targets.",
    "draft_b": "**Draft B**: a one-layer model on a *different* tokenizer (B: marker `▁`, its own pre-tokenizer and "
               "vocabulary, byte fallback). Its token ids mean nothing to the target, so it can only draft through "
               "text (cross-tokenizer assisted decoding). Trained on the corpus, then on the target's own text "
               "re-tokenised with B, so that its guesses follow the target's habits.",
}
TOKENIZER = {
    "target": "A — byte-level BPE (space marker `Ġ`, GPT-2-style pre-tokenizer)",
    "draft": "A — byte-level BPE (space marker `Ġ`, GPT-2-style pre-tokenizer)",
    "draft_b": "B — BPE with space marker `▁`, a word/indentation/punctuation pre-tokenizer and 256 byte-fallback tokens",
}


def bits_per_byte(nats_per_token: float, tokens: int, text_bytes: int) -> float:
    """Loss in bits per byte of text: comparable across tokenizers (nats/token is not)."""
    return nats_per_token * tokens / text_bytes / math.log(2)


def _architecture(spec: dict, config: dict, parameters: int) -> str:
    rows = [
        ("architecture", "LlamaForCausalLM (RoPE, RMSNorm, SwiGLU, tied embeddings)"),
        ("layers × hidden", f"{spec['layers']} × {spec['hidden']}"),
        ("attention heads", str(spec["heads"])),
        ("MLP width", str(spec["intermediate"])),
        ("vocabulary", str(config["vocab_size"])),
        ("context", f"{config['max_position_embeddings']} tokens"),
        ("parameters", f"{parameters / 1e6:.2f} M"),
        ("weights on disk", "float16 safetensors (load as float32 on CPU)"),
    ]
    if spec.get("early_exit_layer") is not None:
        rows.append(("early exit", f"layer {spec['early_exit_layer']} (auxiliary loss weight {spec['early_exit_weight']})"))
    return "\n".join(f"| {k} | {v} |" for k, v in rows)


def _growth_lines(report: dict, val: dict) -> list[str]:
    """The target card's lines on its shallow base and how it was grown (see ``training/depth_growth.py``)."""
    base, grown = report["training"]["target_base"], report["training"]["target"]["spec"]
    base_spec = base["spec"]
    factor = grown["layers"] // base_spec["layers"]
    if "grown_from" in base:
        origin = (f"read from the saved base `{Path(base['grown_from']).name}` (`--grow-from`): these weights reuse "
                  f"that base instead of training it again; training it took {base['seconds'] / 60:.1f} min "
                  f"({base['threads']} threads)")
    else:
        origin = f"trained in this run, {base['seconds'] / 60:.1f} min"
    return [
        f"- stage 1, the base: {base_spec['layers']} × {base_spec['hidden']}, {base['lm_steps']} steps "
        f"({base['lm_tokens'] / 1e6:.1f} M tokens, peak learning rate {base_spec['learning_rate']}"
        + (f", early exit after layer {base_spec['early_exit_layer']}" if base_spec["early_exit_layer"] else "")
        + f"), {origin}.",
        f"- stage 2, growth: each base block followed by {factor - 1} copies of itself whose output projections start at "
        "zero, so the grown model starts as exactly the base's function; the early-exit loss moves to layer "
        f"{grown['early_exit_layer']} of {grown['layers']}. "
        "Stage 3, below: the grown model's continued training, with the early-exit loss.",
    ]


def render_card(name: str, report: dict, measurements: dict, manifest: dict, config: dict) -> str:
    """The README.md of model ``name``."""
    training = report["training"]["draft_corpus_only" if name == "draft" else name]
    spec = training["spec"]
    m = measurements["models"][name]
    val = report["validation_loss_nats_per_token"]
    tok_key = "b" if name == "draft_b" else "a"
    bpb = bits_per_byte(val[name], report["validation_tokens"][tok_key], report["validation_bytes"])
    lines = [
        f"# Embedded model `{name}`",
        "",
        ROLE[name],
        "",
        "Load it with `specdec_lib.load_embedded(\"%s\")` or `AutoModelForCausalLM.from_pretrained(\"data/models/%s\")`." % (name, name),
        "",
        "## Architecture",
        "",
        "| | |",
        "|---|---|",
        _architecture(spec, config, m["parameters"]),
        f"| tokenizer | {TOKENIZER[name]} |",
        "",
        "## Data",
        "",
        f"Python {manifest['python_version']} standard library source: {manifest['train_files']} training files "
        f"({manifest['train_bytes'] / 1e6:.1f} MB), {manifest['validation_files']} held-out validation files "
        f"({manifest['validation_bytes'] / 1e3:.0f} kB), chosen by a hash of the path. Manifest with sha256: "
        "[`../corpus_manifest.json`](../corpus_manifest.json). The corpus is not committed; training re-reads it "
        "from the interpreter that runs it.",
        "",
        "## Training",
        "",
        *(_growth_lines(report, val) if name == "target" else []),
        f"- next-token cross-entropy: {training['lm_steps']} steps × {spec['batch_size']} windows × {spec['context']} "
        f"tokens = {training['lm_tokens'] / 1e6:.1f} M tokens, AdamW (β = 0.9, 0.95; weight decay 0.1), peak "
        f"learning rate {spec['learning_rate']}, warm-up {spec['warmup_steps']} steps then cosine decay, "
        f"seed {report['seed']}, {report['threads']} CPU threads, {training['seconds'] / 60:.1f} min.",
        f"- final training loss (moving average): {training['lm_final']['loss']:.3f} nats/token"
        + (f"; early-exit head: {training['lm_final']['exit_loss']:.3f}" if "exit_loss" in training["lm_final"] else ""),
    ]
    if name == "target" and "target_unlikelihood" in report["training"]:
        stage, ul_spec = report["training"]["target_unlikelihood"], report["training"]["target_unlikelihood"]["spec"]
        afterwards = (" It was applied to the trained target afterwards by "
                      "`python -m specdec_tools train unlikelihood`, and the drafts and heads were retrained against "
                      "the result."
                      if report.get("target_unlikelihood_applied_afterwards") else "")
        lines.append(
            f"- stage 4, fewer loops (unlikelihood training, `specdec_tools/training/unlikelihood.py`): "
            f"{stage['unlikelihood_steps']} "
            f"steps, each the next-token loss on a corpus batch plus {ul_spec['weight']} × −log(1 − p) of every token "
            f"of a repeated {ul_spec['ngram']}-gram in the target's own greedy continuations ({ul_spec['prompts']} "
            f"windows of {ul_spec['prompt_tokens']} tokens continued for {ul_spec['new_tokens']}), learning rate "
            f"{ul_spec['learning_rate']} after a {ul_spec['warmup_steps']}-step warm-up, {stage['seconds'] / 60:.1f} min; "
            f"validation loss {val['target_before_unlikelihood']:.3f} before, {val[name]:.3f} after (how much less it loops: "
            f"Results).{afterwards}")
    if name == "draft" and "draft" in report["training"]:
        distill = report["training"]["draft"]
        lines.append(
            f"- distillation from the target on corpus windows: {distill['distill_steps']} steps ({distill['distill_tokens'] / 1e6:.1f} M "
            f"tokens) minimising KL(p_target ‖ q_draft), {distill['seconds'] / 60:.1f} min; final KL "
            f"{distill['distill_final']['kl']:.3f} nats/token."
        )
    if name == "draft" and "draft_target_text" in report["training"]:
        on_text, generation = report["training"]["draft_target_text"], report["training"]["target_text"]
        lines.append(
            f"- distillation on the target's own text: {generation['sequences']} random corpus windows of "
            f"{generation['prompt_tokens']} tokens, each continued greedily by the target for "
            f"{generation['new_tokens']} tokens ({generation['seconds'] / 60:.1f} min to generate), then "
            f"{on_text['distill_steps']} more KL steps on that text ({on_text['distill_tokens'] / 1e6:.1f} M tokens, "
            f"{on_text['seconds'] / 60:.1f} min); final KL {on_text['distill_final']['kl']:.3f} nats/token. "
            "These are the contexts greedy speculative decoding shows the draft (the target's own continuations)."
        )
    if name == "draft" and "draft_fresh_text" in report["training"]:
        fresh = report["training"]["draft_fresh_text"]
        text, final = fresh["spec"]["text"], fresh["distill_final"]
        afterwards = (" Applied to the trained draft afterwards by `python -m specdec_tools train fresh-text`."
                      if report.get("draft_fresh_text_applied_afterwards") else "")
        lines.append(
            f"- distillation on fresh text against a cached teacher (`specdec_tools/training/cached_teacher.py`): "
            f"the target wrote "
            f"{text['sequences']} new continuations ({text['prompt_tokens']} + {text['new_tokens']} tokens, another "
            f"seed; {fresh['text_seconds'] / 60:.1f} min), its top-{fresh['spec']['top_k']} next-token distribution "
            f"was computed once along them ({fresh['teacher_seconds'] / 60:.1f} min), then {fresh['distill_steps']} "
            f"steps of the KL restricted to those tokens on whole sequences ({fresh['distill_tokens'] / 1e6:.1f} M "
            f"positions, peak learning rate {fresh['spec']['learning_rate']}, {fresh['seconds'] / 60:.1f} min; "
            f"final top-k KL {final['kl_top_k']:.3f} nats/token, the top-{fresh['spec']['top_k']} holding "
            f"{final['teacher_mass']:.1%} of the target's mass). No target forward per step: each step costs the "
            f"draft's own." + afterwards
        )
    if name == "draft_b" and "draft_b_target_text" in report["training"]:
        on_text = report["training"]["draft_b_target_text"]
        lines.append(
            f"- then {on_text['lm_steps']} next-token steps ({on_text['lm_tokens'] / 1e6:.1f} M tokens, "
            f"{on_text['seconds'] / 60:.1f} min; final loss {on_text['lm_final']['loss']:.3f}) on the target's own "
            "text (the draft's greedy continuations, see the draft's card) re-tokenised with tokenizer B: no per-token "
            "distillation is possible across vocabularies, so draft B learns the target's text instead."
        )
    if name == "target":
        without_base = " (stage 1 not included: it was read from disk)" if "grown_from" in report["training"]["target_base"] else ""
        afterwards = []  # what was trained again after that run, each clause naming its command
        if report.get("drafts_retrained"):
            afterwards.append(f"{' and '.join(report['drafts_retrained'])} retrained afterwards against this target "
                              "by `python -m specdec_tools train drafts` (see their cards)")
        if report.get("draft_fresh_text_applied_afterwards"):
            afterwards.append("the draft's last phase applied afterwards by `python -m specdec_tools train fresh-text` "
                              "(see its card)")
        lines.append(f"- the whole family (tokenizers, target, draft, draft B, validation) took "
                     f"{report['total_seconds'] / 60:.1f} min of wall time in the run that produced these weights"
                     f"{without_base}" + "".join(f"; {clause}" for clause in afterwards) + ".")
    lines += [
        "",
        "## Results (measured, not promised)",
        "",
        "| metric | value |",
        "|---|---|",
        f"| validation loss | {val[name]:.3f} nats/token ({bpb:.3f} bits/byte) |",
    ]
    if name == "target":
        exit_bpb = bits_per_byte(val["target_early_exit"], report["validation_tokens"]["a"], report["validation_bytes"])
        lines.append(f"| validation loss of the early-exit head | {val['target_early_exit']:.3f} nats/token ({exit_bpb:.3f} bits/byte) |")
        base_bpb = bits_per_byte(val["target_base"], report["validation_tokens"]["a"], report["validation_bytes"])
        base_spec = report["training"]["target_base"]["spec"]
        lines.append(f"| validation loss of the {base_spec['layers']}-layer base it was grown from | "
                     f"{val['target_base']:.3f} nats/token ({base_bpb:.3f} bits/byte) |")
    lines.append(f"| one decoding forward (1 token after 64) | {m['forward_ms']:.2f} ms (median) |")
    if name == "target":
        blocks = ", ".join(f"{k}: {v:.2f}×" for k, v in m["block_cost_ratio"].items())
        lines.append(f"| cost of verifying k tokens in one forward, relative to 1 | {blocks} |")
        shares = ", ".join(f"{result['distinct_4gram_share']:.2f} {task}" for task, result in measurements["agreement"].items())
        if "target_base" in measurements:
            shares += "; the base it grew from: " + ", ".join(
                f"{share:.2f} {task}" for task, share in measurements["target_base"]["distinct_4gram_share"].items())
        lines.append(f"| distinct 4-gram share of its greedy continuations (1.0 = never repeats) | {shares} |")
        if "heldout_distinct_4gram_share" in measurements:
            heldout = measurements["heldout_distinct_4gram_share"]
            lines.append("| the same share on 64 random held-out windows, each continued for 96 tokens | "
                         + ", ".join(f"{share:.2f} {who.replace('_', ' ')}" for who, share in heldout.items()) + " |")
    if name in ("draft", "draft_b"):
        lines.append(f"| cost ratio c = draft forward / target forward | {m['c']:.3f} |")
    if name == "draft":
        for task, result in measurements["agreement"].items():
            split = (f"; {result['alpha_in_repeats']:.3f} inside the target's repeated 4-grams "
                     f"({result['repeat_positions']} positions), {result['alpha_fresh']:.3f} elsewhere"
                     if result.get("alpha_in_repeats") is not None and result.get("alpha_fresh") is not None else "")
            lines.append(f"| greedy agreement α with the target, {task} prompts | {result['alpha']:.3f} "
                         f"({result['positions']} positions{split}) |")
        saved = measurements.get("draft_checkpoints", {})
        checkpoints = [(label, saved[folder]) for folder, label in DRAFT_CHECKPOINTS.items() if folder in saved]
        if checkpoints:
            tasks = list(measurements["agreement"])
            lines += [
                "",
                "### Distillation, measured both ways",
                "",
                "| draft | " + " | ".join(f"α on {task} prompts" for task in tasks) + " |",
                "|---" * (len(tasks) + 1) + "|",
                *("| " + label + " | " + " | ".join(f"{agreement[t]['alpha']:.3f}" for t in tasks) + " |"
                  for label, agreement in checkpoints),
                "| this model (every phase) | " + " | ".join(f"{measurements['agreement'][t]['alpha']:.3f}" for t in tasks)
                + " |",
                "",
                "Each row is the checkpoint taken just before the next phase started. Every phase also trains longer "
                "(its steps come on top of the earlier ones), so a gain mixes the phase's data with extra training.",
            ]
    if name == "draft_b":
        lines.append("| greedy agreement with the target | not comparable token by token (different tokenizer): "
                     "measured through text by the cross-tokenizer drafter |")
    lines += [
        "",
        f"α is the share of the target's greedy next tokens (48 per prompt, on the prompt sets in `data/prompts/`) that "
        "the draft's argmax matches: the per-token acceptance probability of greedy speculative decoding. "
        f"Timings: {measurements['machine']}, torch {measurements['torch']}, {measurements['threads']} threads.",
        *([] if name == "draft_b" or not measurements.get("carried_over") else [
            "",
            "Measured earlier, when these intermediate models were still in the (uncommitted) work folder, and carried "
            "over unchanged (same weights, so the same numbers; no timings among them): "
            + ", ".join(f"`{entry}`" for entry in measurements["carried_over"]) + "."]),
        "",
        "## Reproduce",
        "",
        "```bash",
        "python -m specdec_tools train            # trains the whole family into data/models/ and measures it",
        "python -m specdec_tools train --measure   # re-measures the saved models and rewrites these cards",
        "python -m specdec_tools train drafts     # retrains only the draft and draft B against the saved target",
        "python -m specdec_tools train unlikelihood  # only the target's last stage, on a saved target (then retrain"
        " the drafts and heads)",
        "python -m specdec_tools train fresh-text  # only the draft's last phase (fresh text, cached teacher), on a"
        " saved draft",
        "```",
        "",
    ]
    return "\n".join(lines)


def write_cards(models_dir: Path) -> None:
    """Render every card from the JSON files in ``models_dir``."""
    report = json.loads((models_dir / "training_report.json").read_text())
    measurements = json.loads((models_dir / "measurements.json").read_text())
    manifest = json.loads((models_dir / "corpus_manifest.json").read_text())
    for name in ROLE:
        config = json.loads((models_dir / name / "config.json").read_text())
        (models_dir / name / "README.md").write_text(render_card(name, report, measurements, manifest, config))
