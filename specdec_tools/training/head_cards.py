"""The cards (``README.md``) of the Medusa heads and the EAGLE layer, rendered from their JSON files.

Every number comes from the folder's ``training_report.json`` (written by `specdec_tools.training.heads`) or its
``config.json``; nothing is typed in by hand, so ``render_head_card(folder)`` always equals the shipped card
(a test checks it).
"""
from __future__ import annotations

import json
from pathlib import Path

from .head_measure import COST_CONTEXT

TITLE = {"medusa-heads": "Medusa heads", "eagle": "EAGLE layer"}
ROLE = {
    "medusa-heads": "K extra heads on the *frozen* embedded target (Medusa-1): head j maps the target's last hidden "
                    "state h_t (after its final norm) through a residual SiLU block, h + SiLU(W h + b), and then the "
                    "target's own LM head (shared, not copied) to a guess of x_{t+1+j}. Drafting runs no model: the "
                    "hidden state comes with the target's verification forward.",
    "eagle": "One decoder layer on the *frozen* embedded target ({style} style): fc(concat(embed(x_{{t+1}}), h_t)) → "
             "a Llama decoder layer → RMSNorm predicts the target's next feature h_{{t+1}}, and the target's own LM "
             "head turns it into a draft token. The embedding table and LM head are the target's (shared, not "
             "copied). At draft time it autoregresses on its own predicted features.",
}
LOADER = {"medusa-heads": ("load_heads", "HeadsDrafter"), "eagle": ("load_eagle", "EagleDrafter")}
LEFT_OUT = {
    "medusa-heads": ["tree attention over the top candidates of every head (much of Medusa's speed)",
                     "Medusa-2's joint fine-tuning of the target"],
    "eagle": ["tree drafting (EAGLE-1's static tree, EAGLE-2's dynamic tree grown by the draft's confidence)",
              "feature noise during training"],
}
SELF_DISTILLATION = "training on the target's own generations (self-distillation)"
TRAIN_HEADS = "python -m specdec_tools train heads"  # the command that trains these drafters (its defaults: both)
EAGLE3_PARTS = ("fusion of low, middle and high target layers",
                "training-time test (training on its own multi-step predictions)")


def _feature_layers(architecture: dict) -> list[int]:
    """The target's hidden states the EAGLE layer reads (layers saved before the option read the last one)."""
    return architecture.get("feature_layers", [-1])


def _eagle3_parts_used(architecture: dict, report: dict) -> tuple[bool, bool]:
    """Whether the layer reads fused features, and whether it was trained with training-time test."""
    return len(_feature_layers(architecture)) > 1, _test_steps(report) > 1


def _left_out(kind: str, architecture: dict, report: dict) -> str:
    """The card's 'what this leaves out' sentence: the kind's usual omissions, the EAGLE-3 parts an EAGLE layer was
    built without, and self-distillation unless it trained on text the target wrote."""
    items = list(LEFT_OUT[kind])
    if kind == "eagle":
        parts = [part for part, used in zip(EAGLE3_PARTS, _eagle3_parts_used(architecture, report)) if not used]
        if parts:
            items.append("EAGLE-3's " + (parts[0] if len(parts) == 1 else f"{parts[0]} and its {parts[1]}"))
    if not _target_text(report["data"]):
        items.append(SELF_DISTILLATION)
    text = " and ".join(items) if len(items) == 2 else ", ".join(items[:-1]) + ", and " + items[-1]
    return text[0].upper() + text[1:] + "."


def _reproduce_lines(report: dict) -> list[str]:
    """The command that trained this folder (reports from before it was recorded: the default run's)."""
    command = report.get("command", TRAIN_HEADS)
    if command != TRAIN_HEADS:
        return [command]
    return [command + "            # trains the heads and the EAGLE layer into data/models/",
            "python -m specdec_tools train heads --quick    # a few steps on a corpus slice (seconds), for tests"]


def _eagle_style(architecture: dict, report: dict) -> str:
    """'EAGLE-3' when the layer was built with either of EAGLE-3's changes, else 'EAGLE-1'."""
    return "EAGLE-3" if any(_eagle3_parts_used(architecture, report)) else "EAGLE-1"


def _trained_alone(spec: dict) -> bool:
    """Whether the run trained one drafter only (``--only``; reports from before the option trained both)."""
    return len(spec.get("kinds", ("medusa-heads", "eagle"))) == 1


def _test_steps(report: dict) -> int:
    """The draft steps unrolled in training (1: EAGLE-1's loss alone; reports from before the option say nothing)."""
    return report["spec"].get("eagle_test_steps", 1)


def _target_text(data: dict) -> bool:
    """Whether the training windows are text the target wrote (reports from before the option: corpus windows)."""
    return data.get("train_text", "corpus") == "target"


def _windows_sentence(data: dict) -> str:
    """What the training windows were, for the card's Data section."""
    count, window, tokens = data["train_windows"], data["window"], f"{data['feature_tokens']:,}"
    if not _target_text(data):
        return f"{count} random training windows of {window} tokens ({tokens} tokens)"
    return (f"{count} training windows of {window} tokens ({tokens} tokens), each text the target wrote itself: a "
            f"random corpus prompt and the target's greedy continuation to the window's end (self-distillation: "
            f"the contexts decoding meets; generating them took {data['target_text_seconds'] / 60:.1f} min)")


def _cost_lines(report: dict) -> list[str]:
    """The cost ratio c of the drafter and, measured beside it, the family's draft model (reports from before c
    was measured: none)."""
    cost = report.get("cost")
    if cost is None:
        return []
    again = " (measured again after training: `train heads --measure-cost`)" if cost.get("remeasured") else ""
    lines = ["", f"Cost ratio c, as decoding pays it (`draft_cost_ratios`): milliseconds inside the drafter's "
                 f"`propose` per drafted token at γ = {cost['gamma']} (its forwards and bookkeeping, each generation's "
                 f"first proposal left out), over one target forward of one new token after {COST_CONTEXT} "
                 f"({cost['target_forward_ms']:.2f} ms); drafters and target measured in turns, medians{again}.", "",
             "| drafter | ms per drafted token | c |", "|---|---|---|"]
    lines += [f"| {'this drafter' if name == report['kind'] else name} | {m['draft_ms_per_token']:.3f} | {m['c']:.3f} |"
              for name, m in cost["drafters"].items()]
    return lines


def _architecture_rows(kind: str, architecture: dict, report: dict) -> list[tuple[str, str]]:
    if kind == "medusa-heads":
        rows = [("heads", f"{architecture['num_heads']} (head j guesses x_{{t+1+j}} from h_t)"),
                ("block", f"{architecture['block']}, width {architecture['hidden_size']}, W initialised at zero "
                          "(each head starts as the LM head)")]
    else:
        width, layers = architecture["hidden_size"], _feature_layers(architecture)
        rows = [("fusion", f"the target's hidden states after layers {', '.join(map(str, layers[:-1]))} and its "
                           f"last layer (normed): [{len(layers) * width}] → [{width}] by one linear map (EAGLE-3)")
                ] if len(layers) > 1 else []
        rows += [("input", f"fc: [{2 * width}] → [{width}] (token embedding ‖ feature)"),
                ("layer", f"1 LlamaDecoderLayer: {architecture['num_attention_heads']} heads × "
                          f"{architecture['head_dim']}, MLP {architecture['intermediate_size']}, RoPE, "
                          f"context {architecture['max_position_embeddings']}"),
                ("output", "RMSNorm (initialised from the target's final norm) → the predicted feature")]
    return rows + [
        ("LM head and embedding", "the target's, shared and frozen (not in these files)"),
        ("own parameters", f"{report['parameters'] / 1e6:.3f} M"),
        ("weights on disk", f"float16 safetensors, {report['weights_bytes'] / 1e6:.2f} MB"),
    ]


def _acceptance_lines(report: dict) -> list[str]:
    lines = ["| γ | α (per-token acceptance) | acceptance rate | mean acceptance length | tokens per target "
             "forward | per-position acceptance |", "|---|---|---|---|---|---|"]
    for gamma, m in report["acceptance"].items():
        positions = ", ".join(f"{v:.2f}" for v in m["per_position_acceptance"])
        lines.append(f"| {gamma} | {m['alpha']:.3f} | {m['acceptance_rate']:.3f} | {m['mean_acceptance_length']:.2f} "
                     f"| {m['tokens_per_target_forward']:.2f} | {positions} |")
    return lines


def _accuracy_lines(kind: str, validation: dict) -> list[str]:
    step = "head j" if kind == "medusa-heads" else "step s"
    header = f"| {step} | top-1 | chain (all up to here right) |" + (" CE (nats) |" if kind == "medusa-heads" else "")
    lines = [header, "|---|---|---|" + ("---|" if kind == "medusa-heads" else "")]
    for i, (top1, chain) in enumerate(zip(validation["top1"], validation["chain"])):
        loss = f" {validation['loss'][i]:.3f} |" if kind == "medusa-heads" else ""
        lines.append(f"| {i + 1} | {top1:.3f} | {chain:.3f} |{loss}")
    return lines


def render_head_card(folder: Path) -> str:
    """The README.md of the drafter folder ``folder`` (``heads/`` or ``eagle/``), from its JSON files."""
    folder = Path(folder)
    config = json.loads((folder / "config.json").read_text())
    report = json.loads((folder / "training_report.json").read_text())
    kind, spec, training, data = config["kind"], report["spec"], report["training"], report["data"]
    target, corpus = config["target"], report["corpus"]
    loader, drafter = LOADER[kind]
    gammas = ", ".join(report["acceptance"])
    measured = ("per-head top-1 of head j on h_t against the corpus token x_{t+1+j}" if kind == "medusa-heads" else
                "per-step top-1 of the greedy drafts along its own autoregression (each step on its own predicted "
                "feature and token) against the corpus tokens")
    total = (data["feature_seconds"] + training["seconds"]) / 60
    title, role = TITLE[kind], ROLE[kind]
    if kind == "eagle":
        style = _eagle_style(config["architecture"], report)
        title, role = (f"{style}-style layer" if style == "EAGLE-3" else title), role.format(style=style)
    where = "target" if folder.name in ("heads", "eagle") else f'target, "data/models/{folder.name}"'
    lines = [
        f"# {title} for the embedded target",
        "",
        role,
        "",
        f"Load with `specdec_lib.{loader}({where})` (or `{drafter}.load(folder, target)`): it refuses any model but "
        f"the one it was trained for (fingerprint below), and `speculative_generate(target, drafter, ...)` feeds it "
        f"the target's hidden states.",
        "",
        "## Architecture",
        "",
        "| | |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in _architecture_rows(kind, config["architecture"], report)),
        f"| trained for | `{target['name']}`: {target['layers']} layers × {target['hidden_size']}, vocabulary "
        f"{target['vocab_size']}, {target['parameters'] / 1e6:.2f} M parameters; sha256 of its float16 embedding "
        f"and LM head `{target['sha256'][:16]}…` |",
        "",
        "## Data",
        "",
        f"The family's corpus and split (Python standard library, {corpus['train_files']} training files, "
        f"{corpus['validation_files']} validation files, corpus sha256 `{corpus['sha256'][:16]}…`"
        + (", the corpus the target was trained on" if corpus["same_corpus_as_target"] else
           ", **not** the corpus recorded beside the target") + "), tokenizer A. "
        + _windows_sentence(data) + " went through the frozen target once (inference mode) to get its features; "
        f"{data['validation_windows']} validation windows spread over the held-out files serve the accuracies. "
        "Loading the target, reading and tokenising the corpus, "
        + ("generating the target's text " if _target_text(data) else "") + "and computing the features took "
        f"{data['feature_seconds'] / 60:.1f} min, "
        + ("for this drafter alone (it was trained by itself)." if _trained_alone(spec) else
           "shared by the heads and the EAGLE layer (one pass serves both)."),
        "",
        "## Training",
        "",
        f"- {training['steps']} steps × {training['batch_windows']} windows × {data['window']} tokens = "
        f"{training['tokens'] / 1e6:.2f} M tokens, AdamW (β = 0.9, 0.95), peak learning rate {spec['learning_rate']}, "
        f"warm-up {spec['warmup_steps']} steps then cosine decay, seed {spec['seed']}, {report['threads']} CPU threads, "
        f"torch {report['torch']}: {training['seconds'] / 60:.1f} min; with the features, "
        f"{total:.1f} min from scratch.",
    ]
    final = training["final"]
    if kind == "medusa-heads":
        lines.append(f"- loss: cross-entropy per head, head j weighted {spec['head_decay']}^(j-1); final training "
                     "CE (moving average): " + ", ".join(f"head {k[4:]} {v:.3f}" for k, v in final.items()) + ".")
    else:
        regression = spec.get("eagle_regression_weight", 1.0)  # reports from before the weight was a setting: 1
        weighted = {1.0: "smooth L1", 0.0: None}.get(regression, f"{regression} × smooth L1")
        lines.append(f"- loss: {weighted + ' between predicted and true features + ' if weighted else ''}"
                     f"{spec['eagle_cls_weight']} × the cross-entropy between the target's next-token distribution "
                     "and the LM head's on the predicted feature"
                     + ("" if weighted else " (no feature regression, as in EAGLE-3; the regression below is only "
                        "watched)")
                     + f"; final (moving average): regression {final['regression']:.3f}, cross-entropy "
                     f"{final['cls']:.3f}, one-step top-1 agreement with the target {final['top1']:.3f}.")
        steps = _test_steps(report)
        if steps > 1:
            later = ", ".join(f"step {j} {final[f'top1_step{j}']:.3f}" for j in range(2, steps + 1))
            lines.append(f"- training-time test (EAGLE-3): steps 2 .. {steps} drafted on the layer's own predicted "
                         f"features with the attention they have at draft time, each scored like step 1 and weighted "
                         f"{spec['eagle_step_decay']}^(j-1); final top-1 agreement: {later}.")
    validation = report["validation"]
    lines += [
        "",
        "## Results (measured, not promised)",
        "",
        f"Held-out accuracy, {validation['positions']:,} validation positions: {measured}.",
        "",
        *_accuracy_lines(kind, validation),
    ]
    if kind == "medusa-heads":
        lines += ["", f"For reference, the target's own LM head predicts x_{{t+1}} with top-1 "
                      f"{validation['target_top1']:.3f} on the same positions."]
    first = next(iter(report["acceptance"].values()))
    lines += [
        "",
        f"Greedy speculative decoding of the target with this drafter, γ = {gammas}, on the {first['prompts']} code "
        f"prompts of `data/prompts/` ({first['new_tokens']} new tokens per γ in all; every round of every prompt "
        "pooled; vocabulary of `specdec_lib.core.trace`). The output is token-identical to the target's own greedy "
        "decoding.",
        "",
        *_acceptance_lines(report),
        *_cost_lines(report),
    ]
    reference = report.get("reference_draft_alpha")
    if reference is not None:
        lines += ["", f"For comparison, the embedded one-layer draft model's greedy agreement α on the code prompts "
                      f"was {reference:.3f} when this drafter was measured (`data/models/measurements.json` then; "
                      "the draft may have been retrained since: its card has today's)."]
    lines += [
        "",
        f"Measuring took {report['measure_seconds'] / 60:.1f} min.",
        "",
        "## What this leaves out",
        "",
        _left_out(kind, config["architecture"], report),
        "",
        "## Reproduce",
        "",
        "```bash",
        *_reproduce_lines(report),
        "```",
        "",
    ]
    return "\n".join(lines)


def write_head_card(folder: Path) -> None:
    """Write ``folder/README.md`` from the folder's JSON files."""
    (Path(folder) / "README.md").write_text(render_head_card(folder))
