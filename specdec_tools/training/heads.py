"""Train Medusa heads and an EAGLE layer on the *frozen* embedded target: ``python -m specdec_tools train heads``.

Both drafters read the target's hidden states, so their training data is the target's features on windows of
text (corpus windows, or with ``--train-text target`` text the target wrote itself), computed once and shared by
the trainings, which then only run their own small modules (`specdec_tools.training.head_data`):

    Medusa     head j on h_t -> x_{t+1+j}: cross-entropy per head, weighted head_decay ** (j - 1) (Medusa-1)
    EAGLE      (h_t, x_{t+1}) -> h^_{t+1}: smooth L1 against h_{t+1} + eagle_cls_weight x the cross-entropy
               between the target's next-token distribution at t+1 and the LM head's on h^_{t+1} (EAGLE-1); with
               ``--eagle-test-steps K`` also steps 2 .. K drafted on its own predicted features, as at draft
               time (EAGLE-3's training-time test: `unrolled_predictions`)

The target's embedding and LM head are used, never trained: the heads' and the layer's files hold their own
weights only. Both train with AdamW and the family's warm-up + cosine schedule, seeded. After training, weights
are rounded to float16 (the format that ships) and measured on the validation split and the code prompts
(`specdec_tools.training.head_measure`: acceptance, and the cost ratio c beside the draft model's); each folder gets
``config.json`` (architecture + the target's fingerprint), ``model.safetensors``, ``training_report.json`` and a
``README.md`` rendered from the report (`specdec_tools.training.head_cards`).
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

import torch
import torch.nn.functional as F

from specdec_lib.core.caches import new_cache
from specdec_lib.core.devices import torch_threads
from specdec_lib.core.errors import ConfigError
from specdec_lib.core.forward import LAST_HIDDEN
from specdec_lib.core.paths import REPO_DATA_DIR
from specdec_lib.core.validation import check_count
from specdec_lib.drafters.draft_model import DraftModelDrafter
from specdec_lib.drafters.eagle import EagleDrafter, EagleModule, check_feature_layers, eagle_architecture, load_eagle
from specdec_lib.drafters.eagle import KIND as EAGLE_KIND
from specdec_lib.drafters.frozen_target import WEIGHTS_FILE, save_drafter
from specdec_lib.drafters.heads import KIND as HEADS_KIND
from specdec_lib.drafters.heads import HeadsDrafter, MedusaHeads, load_heads
from specdec_lib.loading import load_model_folder
from .head_cards import TRAIN_HEADS, write_head_card
from .head_data import DATA_FIELDS, FeatureData, feature_data
from .head_spec import FULL, QUICK, TRAIN_TEXTS, HeadsSpec
from .head_measure import code_prompts, draft_cost_ratios, eagle_accuracy, greedy_acceptance, medusa_accuracy
from .model_training import lr_at, optimizer_step

REPORT_FILE = "training_report.json"


COST_PROMPTS = 4  # code prompts the cost ratio c is timed on


def _train_loop(module: torch.nn.Module, steps: int, spec: HeadsSpec, batch_loss: Callable[[torch.Tensor], tuple],
                num_windows: int, name: str, log: list) -> dict:
    """``steps`` AdamW steps on ``module``'s parameters; ``batch_loss(window_indices)`` -> (loss, parts dict).

    The family's schedule (`lr_at`: warm-up then cosine to a tenth of the peak), gradient clipping at 1, a seeded
    window order; logs an exponential moving average of the parts every 20 steps. Returns the summary of the run."""
    generator = torch.Generator().manual_seed(spec.seed)
    optimizer = torch.optim.AdamW(module.parameters(), lr=spec.learning_rate, betas=(0.9, 0.95), weight_decay=0.0)
    module.train()
    start, running = time.perf_counter(), {}
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, spec, steps)
        loss, parts = batch_loss(torch.randint(0, num_windows, (spec.batch_windows,), generator=generator))
        optimizer_step(module, optimizer, loss)
        running = {k: v if k not in running else 0.95 * running[k] + 0.05 * v for k, v in parts.items()}
        if step % 20 == 0 or step == steps - 1:
            seconds = round(time.perf_counter() - start, 1)
            log.append({"model": name, "step": step, **{k: round(v, 4) for k, v in running.items()}, "seconds": seconds})
            print(f"{name} step {step}/{steps} {seconds:.0f}s " + " ".join(f"{k}={v:.3f}" for k, v in running.items()),
                  flush=True)
    module.eval()
    return {"steps": steps, "batch_windows": spec.batch_windows, "tokens": steps * spec.batch_windows * spec.window,
            "seconds": round(time.perf_counter() - start, 1), "final": {k: round(v, 4) for k, v in running.items()}}


def medusa_loss(heads: MedusaHeads, lm_head: torch.nn.Module, features: torch.Tensor, tokens: torch.Tensor,
                decay: float) -> tuple[torch.Tensor, dict]:
    """Weighted CE of heads 1 .. K: head j on ``features: [B, T, D]`` (h_t) against ``tokens: [B, T + 1]``
    (x_{t+1+j}, for the t that have one)."""
    length = features.shape[1]
    total, parts = 0.0, {}
    for j, block in enumerate(heads.blocks, start=1):
        h = features[:, : length - j]  # [B, T - j, D]: the h_t whose x_{t+1+j} is in the window
        logits = lm_head(h + F.silu(block(h)))  # [B, T - j, V]
        loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1 + j :].flatten())
        total = total + decay ** (j - 1) * loss
        parts[f"head{j}"] = loss.item()
    return total, parts


def draft_step_attention(length: int, step: int) -> torch.Tensor:
    """Training-time test's attention for draft step ``step`` (1-based) over ``length`` positions: ``BoolTensor[n,
    step * n]`` (n = ``length``), the slots of steps 1 .. step - 1 (n each, in the cache) then the step's own n.

    At step j, query i is the j-th draft of the chain that began at the true pair ``i - j + 1``: at draft time it
    sees the true pairs up to where its chain began and its own chain's earlier drafts, so here it sees step 1's
    slots ``p <= i - j + 1`` and, for s = 2 .. j, step s's slot ``i - j + s`` (s = j: itself). Step 1 is causal.
    Queries whose chain would begin before position 0 see only their own chain (their loss is left out)."""
    query = torch.arange(length)[:, None]
    key = torch.arange(length)[None, :]
    blocks = [key <= query - step + 1] + [key == query - step + s for s in range(2, step + 1)]
    return torch.cat(blocks, dim=1)


def unrolled_predictions(module: EagleModule, features: torch.Tensor, next_ids: torch.Tensor,
                         steps: int) -> list[torch.Tensor]:
    """Training-time test: the features ``[B, n, D]`` that ``module`` predicts at draft steps 1 .. ``steps``.

    ``features: [B, n, H * D]`` are the target's hidden states at positions 0 .. n-1 (fused into the true features
    h_0 .. h_{n-1} by `EagleModule.fuse_features`), ``next_ids: LongTensor[B, n]`` the true x_1 .. x_n. Step 1
    reads the true pairs (h_i, x_{i+1}) causally: its output at i is h^_{i+1}. Step j reads step j - 1's
    prediction of h_i (its output at i - 1) with x_{i+1}, at position i, attending as `draft_step_attention` says: its
    output at i is what the drafter predicts for h_{i+1} as the j-th draft of a chain that began at the true pair
    i - j + 1. One forward per step over all n positions, each step's keys and values cached for the next."""
    cache, length = new_cache(module), features.shape[1]
    positions = torch.arange(length, device=features.device)[None]
    inputs, predictions = module.fuse_features(features), []
    for step in range(1, steps + 1):
        later = step > 1  # step 1 runs causally after an empty cache: run_layers' defaults
        predicted = module(inputs, next_ids, cache, positions=positions if later else None,
                           allowed=draft_step_attention(length, step).to(features.device) if later else None)
        predictions.append(predicted)
        inputs = torch.cat([torch.zeros_like(predicted[:, :1]), predicted[:, :-1]], dim=1)  # h^_i at position i
    return predictions


def eagle_loss(module: EagleModule, features: torch.Tensor, tokens: torch.Tensor, cls_weight: float,
               steps: int = 1, decay: float = 0.8, regression_weight: float = 1.0) -> tuple[torch.Tensor, dict]:
    """EAGLE's loss on ``features: [B, T, H * D]`` (the target's hidden states of the module's feature layers, the
    last one the post-norm h) and ``tokens: [B, T + 1]``, over ``steps`` draft steps.

    Step 1 (EAGLE-1): predict h_{t+1} from the true pair (h_t, x_{t+1}) for t = 0 .. T-2; ``regression_weight`` x
    smooth L1 on the features + ``cls_weight`` x CE(target's p_{t+2} || LM head on h^_{t+1}) (EAGLE-3 keeps only
    the cross-entropy: ``regression_weight=0``). Training-time test (EAGLE-3), steps 2 ..
    ``steps``: step j reads step j - 1's *predicted* features (`unrolled_predictions`) and is scored the same way
    on the positions whose chain began at a true pair (i >= j - 1), weighted ``decay ** (j - 1)``; gradients flow
    through the unrolled steps. Parts: step 1's regression, cross-entropy and top-1 agreement with the target, and
    the top-1 of every later step."""
    truth = features[:, 1:, -module.config.hidden_size :]  # [B, n, D]: the last layer's h_1 .. h_{T-1}, n = T - 1
    with torch.no_grad():
        target_probs = torch.softmax(module.logits(truth), dim=-1)  # [B, n, V]
    total, parts = 0.0, {}
    for step, predicted in enumerate(unrolled_predictions(module, features[:, :-1], tokens[:, 1:-1], steps), 1):
        kept = slice(step - 1, None)  # chains that began at a true pair
        regression = F.smooth_l1_loss(predicted[:, kept], truth[:, kept])
        log_q = torch.log_softmax(module.logits(predicted[:, kept]), dim=-1)
        classification = -(target_probs[:, kept] * log_q).sum(-1).mean()
        total = total + decay ** (step - 1) * (regression_weight * regression + cls_weight * classification)
        top1 = (log_q.argmax(-1) == target_probs[:, kept].argmax(-1)).float().mean().item()
        if step == 1:
            parts.update(regression=regression.item(), cls=classification.item(), top1=top1)
        else:
            parts[f"top1_step{step}"] = top1
    return total, parts


def _round_to_fp16(module: torch.nn.Module) -> None:
    """Round the weights in place to float16 values (kept float32): measure exactly what ships."""
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(parameter.half().float())


def _write(folder: Path, kind: str, module: torch.nn.Module, architecture: dict, fingerprint: dict, report: dict) -> None:
    save_drafter(folder, kind, architecture, fingerprint, module.state_dict())
    report["parameters"] = sum(p.numel() for p in module.parameters())
    report["weights_bytes"] = (folder / WEIGHTS_FILE).stat().st_size
    (folder / REPORT_FILE).write_text(json.dumps(report, indent=2) + "\n")
    write_head_card(folder)


def train_heads(spec: HeadsSpec, out_dir: Path, target_folder: Path, eagle_name: str = EAGLE_KIND,
                command: str | None = None, data: FeatureData | None = None) -> dict[str, dict]:
    """Train the drafters of ``spec.kinds`` for the model in ``target_folder`` into ``out_dir/heads`` and
    ``out_dir/<eagle_name>`` (default ``eagle``); the reports record ``command`` (default: `reproduce_command`).

    ``data``: features already computed by `feature_data` with the same data fields (`DATA_FIELDS`) and the
    spec's layers among theirs (default: computed here). Returns the training reports (also written beside the
    weights). Runs on ``spec.threads`` threads (the caller's setting is restored afterwards)."""
    with torch_threads(spec.threads):
        if data is None:
            data = feature_data(spec, target_folder)
        source = {field: getattr(spec, field) for field in DATA_FIELDS}
        if source != data.source:
            raise ConfigError(f"These features were made with {data.source}, not this spec's {source}: compute "
                              "them with feature_data(spec, ...) for this spec.")
        return _train_both(spec, Path(out_dir), data, eagle_name, command or reproduce_command(spec, eagle_name))


def _train_both(spec: HeadsSpec, out_dir: Path, data: FeatureData, eagle_name: str, command: str) -> dict[str, dict]:
    started = time.perf_counter()
    target, windows, val = data.target, data.windows, data.val
    layers = check_feature_layers(spec.eagle_feature_layers, target)
    features, val_features = data.columns(data.features, layers), data.columns(data.val_features, layers)
    last_features, last_val_features = data.columns(data.features, LAST_HIDDEN), data.columns(data.val_features, LAST_HIDDEN)
    fingerprint = data.report["target"]

    lm_head = target.get_output_embeddings()
    prompts = code_prompts(data.tokenizer, spec.acceptance_prompts)

    reference = reference_drafters(data.folder)  # loaded once, timed beside each drafter

    def cost(name: str, drafter, gamma: int) -> dict:
        return draft_cost_ratios(target, {name: drafter} | reference, prompts[:COST_PROMPTS], gamma, spec.new_tokens)

    common = {**data.report, "spec": asdict(spec), "threads": spec.threads, "torch": torch.__version__,
              "python": platform.python_version(), "command": command}
    reports = {}

    if HEADS_KIND in spec.kinds:
        torch.manual_seed(spec.seed)
        heads = MedusaHeads(spec.num_heads, target.config.hidden_size)
        log: list[dict] = []
        training = _train_loop(heads, spec.medusa_steps, spec, lambda i: medusa_loss(
            heads, lm_head, last_features[i], windows[i], spec.head_decay), len(windows), "medusa", log)
        _round_to_fp16(heads)
        measure_start = time.perf_counter()
        drafter = HeadsDrafter(heads, target)
        reports[HEADS_KIND] = {**common, "kind": HEADS_KIND, "training": training, "log": log,
                               "validation": medusa_accuracy(heads, lm_head, last_val_features, val),
                               "acceptance": greedy_acceptance(target, drafter, prompts, (spec.num_heads,),
                                                               spec.new_tokens),
                               "cost": cost(HEADS_KIND, drafter, spec.num_heads),
                               "measure_seconds": round(time.perf_counter() - measure_start, 1)}
        _write(out_dir / "heads", HEADS_KIND, heads, heads.architecture, fingerprint, reports[HEADS_KIND])

    if EAGLE_KIND in spec.kinds:
        torch.manual_seed(spec.seed + 1)
        architecture = eagle_architecture(target, spec.eagle_intermediate, layers)
        module = EagleModule(architecture, target)
        with torch.no_grad():  # start in the target's feature scale
            module.norm.weight.copy_(target.get_decoder().norm.weight)
        log = []
        training = _train_loop(module, spec.eagle_steps, spec, lambda i: eagle_loss(
            module, features[i], windows[i], spec.eagle_cls_weight, spec.eagle_test_steps, spec.eagle_step_decay,
            spec.eagle_regression_weight),
            len(windows), "eagle", log)
        _round_to_fp16(module)
        measure_start = time.perf_counter()
        drafter = EagleDrafter(module)
        reports[EAGLE_KIND] = {**common, "kind": EAGLE_KIND, "training": training, "log": log,
                               "validation": eagle_accuracy(module, val_features[: spec.eagle_eval_windows],
                                                            val[: spec.eagle_eval_windows], spec.eval_steps),
                               "acceptance": greedy_acceptance(target, drafter, prompts, spec.eagle_gammas,
                                                               spec.new_tokens),
                               "cost": cost(EAGLE_KIND, drafter, max(spec.eagle_gammas)),
                               "measure_seconds": round(time.perf_counter() - measure_start, 1)}
        _write(out_dir / eagle_name, EAGLE_KIND, module, architecture, fingerprint, reports[EAGLE_KIND])
    print(f"trained and measured in {(time.perf_counter() - started) / 60:.1f} min", flush=True)
    return reports


#: The spec fields `main` sets from the command line, and their options.
SPEC_OPTIONS = {"eagle_feature_layers": "--eagle-feature-layers", "eagle_test_steps": "--eagle-test-steps",
                "eagle_regression_weight": "--eagle-regression-weight", "eagle_cls_weight": "--eagle-cls-weight",
                "eagle_steps": "--eagle-steps", "train_windows": "--train-windows", "window": "--window",
                "train_text": "--train-text", "learning_rate": "--learning-rate", "threads": "--threads"}


def reference_drafters(target_folder: Path) -> dict[str, DraftModelDrafter]:
    """``{"draft model": drafter}``: the family's draft model (``target_folder``'s sibling ``draft``), whose c is
    measured beside a trained drafter's for scale; empty when there is none."""
    draft_folder = Path(target_folder).parent / "draft"
    if not draft_folder.is_dir():
        return {}
    return {"draft model": DraftModelDrafter(load_model_folder(draft_folder, device="cpu")[0])}


def remeasure_cost(folder: Path, target_folder: Path) -> dict:
    """Measure again the cost ratio c of the drafter saved in ``folder`` (trained for the model in
    ``target_folder``), at the gamma training measured it at, with its spec's prompts, tokens and threads, and
    rewrite the report's ``cost`` (marked ``remeasured``) and the card: after a change to how a drafter runs, not to
    its weights. Returns the new ``cost``."""
    folder = Path(folder)
    report = json.loads((folder / REPORT_FILE).read_text())
    spec = report["spec"]
    gamma = spec["num_heads"] if report["kind"] == HEADS_KIND else max(spec["eagle_gammas"])
    with torch_threads(spec["threads"]):
        target, tokenizer = load_model_folder(target_folder, device="cpu")
        drafter = (load_heads if report["kind"] == HEADS_KIND else load_eagle)(target, folder)
        prompts = code_prompts(tokenizer, spec["acceptance_prompts"])
        drafters = {report["kind"]: drafter} | reference_drafters(target_folder)
        report["cost"] = {**draft_cost_ratios(target, drafters, prompts[:COST_PROMPTS], gamma, spec["new_tokens"]),
                          "remeasured": True}
    (folder / REPORT_FILE).write_text(json.dumps(report, indent=2) + "\n")
    write_head_card(folder)
    return report["cost"]


def reproduce_command(spec: HeadsSpec, eagle_name: str = EAGLE_KIND, quick: bool = False) -> str:
    """The ``train heads`` command line that trains ``spec``: its fields that differ from `FULL` (``quick``:
    from `QUICK`, with ``--quick``) as options."""
    base = QUICK if quick else FULL
    words = [TRAIN_HEADS] + (["--quick"] if quick else [])
    if spec.kinds != base.kinds:
        words += ["--only", ",".join(spec.kinds)]
    for field, option in SPEC_OPTIONS.items():
        value = getattr(spec, field)
        if value != getattr(base, field):
            words += [option, ",".join(map(str, value)) if isinstance(value, tuple) else str(value)]
    if eagle_name != EAGLE_KIND:
        words += ["--eagle-name", eagle_name]
    return " ".join(words)


def parse_layers(text: str) -> tuple[int, ...]:
    """``"4,12,-1"`` -> ``(4, 12, -1)``; a clear error for anything else (the layer indices are checked against the
    target when the EAGLE layer is built)."""
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ConfigError(f"--eagle-feature-layers takes comma-separated integers such as 4,12,-1, got {text!r}.") from None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m specdec_tools train heads", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO_DATA_DIR / "models",
                        help="where heads/ and eagle/ go (default: data/models)")
    parser.add_argument("--target", type=Path, default=REPO_DATA_DIR / "models" / "target",
                        help="the model folder to train for (default: the embedded target)")
    parser.add_argument("--quick", action="store_true", help="a few steps on a corpus slice (seconds; for tests)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (default: the spec's, 2 for the full run like the family's, 1 for --quick)")
    parser.add_argument("--only", choices=(HEADS_KIND, EAGLE_KIND), default=None,
                        help="train one of the two drafters (default: both)")
    parser.add_argument("--eagle-feature-layers", default=None, metavar="I,J,-1",
                        help="the target's hidden states the EAGLE layer reads, e.g. 4,12,-1 (EAGLE-3's fusion of a "
                             "low, a middle and the last layer; default: the spec's, -1 alone)")
    parser.add_argument("--eagle-test-steps", type=int, default=None, metavar="K",
                        help="EAGLE draft steps unrolled in training (training-time test; default: the spec's, 1)")
    parser.add_argument("--eagle-regression-weight", type=float, default=None, metavar="W",
                        help="weight of the EAGLE feature regression (default: the spec's, 1 as in EAGLE-1; EAGLE-3 "
                             "trains on the cross-entropy alone: 0)")
    parser.add_argument("--eagle-cls-weight", type=float, default=None, metavar="W",
                        help="weight of the EAGLE cross-entropy against the target (default: the spec's, 0.1)")
    parser.add_argument("--eagle-steps", type=int, default=None, metavar="N",
                        help="EAGLE optimiser steps (default: the spec's)")
    parser.add_argument("--train-windows", type=int, default=None, metavar="W",
                        help="corpus windows whose target features are computed for training (default: the spec's)")
    parser.add_argument("--window", type=int, default=None, metavar="T",
                        help="tokens of features per training window (default: the spec's, 256)")
    parser.add_argument("--train-text", choices=TRAIN_TEXTS, default=None,
                        help="corpus: random corpus windows (default); target: each window a corpus prompt and the "
                             "target's own greedy continuation to the window's end (self-distillation)")
    parser.add_argument("--learning-rate", type=float, default=None, metavar="LR",
                        help="peak learning rate of both trainings (default: the spec's, 0.003)")
    parser.add_argument("--eagle-name", default=EAGLE_KIND, metavar="FOLDER",
                        help="the EAGLE layer's folder under --out (default: eagle)")
    parser.add_argument("--measure-cost", type=Path, default=None, metavar="FOLDER",
                        help="train nothing: measure again the cost ratio c of the drafter saved in FOLDER (trained "
                             "for --target) and rewrite its report and card, after a change to how it drafts")
    args = parser.parse_args(argv)
    if args.measure_cost is not None:
        if not (args.measure_cost / REPORT_FILE).is_file():
            raise ConfigError(f"--measure-cost reads a trained drafter's {REPORT_FILE}, and {args.measure_cost} has "
                              "none: pass a folder that `train heads` wrote, e.g. data/models/eagle.")
        cost = remeasure_cost(args.measure_cost, args.target)
        print(", ".join(f"{name}: c {m['c']:.3f}" for name, m in cost["drafters"].items()))
        return
    for option, value in (("--eagle-steps", args.eagle_steps), ("--train-windows", args.train_windows),
                          ("--window", args.window)):
        if value is not None:
            check_count(option, value, minimum=1, hint="It counts optimiser steps, windows or tokens per window.")
    if args.eagle_test_steps is not None:
        check_count("--eagle-test-steps", args.eagle_test_steps, minimum=1,
                    hint="1 trains EAGLE-1's one-step loss; 2 to 4 unroll that many draft steps.")
    for option, value in (("--eagle-regression-weight", args.eagle_regression_weight),
                          ("--eagle-cls-weight", args.eagle_cls_weight)):
        if value is not None and not value >= 0:
            raise ConfigError(f"{option} is a loss weight and must be 0 or more, got {value}.")
    if args.learning_rate is not None and not 0 < args.learning_rate < 1:
        raise ConfigError(f"--learning-rate is AdamW's peak step size, between 0 and 1 (e.g. 0.006), got "
                          f"{args.learning_rate}.")
    chosen = {field: getattr(args, option[2:].replace("-", "_")) for field, option in SPEC_OPTIONS.items()}
    if args.eagle_feature_layers is not None:
        chosen["eagle_feature_layers"] = parse_layers(args.eagle_feature_layers)
    if args.only is not None:
        chosen["kinds"] = (args.only,)
    spec = replace(QUICK if args.quick else FULL, **{field: value for field, value in chosen.items() if value is not None})
    if spec.train_text == "target" and spec.window <= spec.target_text_prompt:
        raise ConfigError(f"--train-text target continues a {spec.target_text_prompt}-token corpus prompt to the "
                          f"window's end, so --window must be more than {spec.target_text_prompt}, got {spec.window}.")
    train_heads(spec, args.out, args.target, args.eagle_name, reproduce_command(spec, args.eagle_name, args.quick))
