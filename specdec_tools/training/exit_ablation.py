"""Does the auxiliary early-exit loss matter? Two targets trained alike, with and without it, drafting for
themselves from the same shallow exit: ``python -m specdec_tools.training.exit_ablation``.

Self-speculative decoding drafts with the target's first E layers through its final norm and LM head. Nothing in
ordinary training asks layer E's output to be readable by that head: LayerSkip (Elhoushi et al. 2024) adds an
early-exit loss for exactly this reason, and the embedded target was trained with one at layer 4 of 24. Retraining
the 24-layer target without it costs about an hour here, so this ablation trains two smaller targets (8 layers,
exit after layer 2: the same 1/4 of the depth as the embedded base had) from the same initialisation on the same
batches, identical except for the auxiliary loss's weight, and measures for each:

- validation loss (nats/token) of the full model and of the exit head, on the held-out stdlib files;
- greedy self-speculative acceptance from that exit (`EarlyExitDrafter`, alpha and mean acceptance length) on the
  code prompts, checking token identity with each model's own greedy output.

The models are not shipped (the numbers are: ``data/models/exit_ablation.json``, read by notebook 05); the run
takes 10 to 15 minutes on 2 CPU cores (the shipped one: 8.4 and 5.1 minutes of training, the first beside
other jobs).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from specdec_lib.decoders import autoregressive_generate
from specdec_lib.core.devices import torch_threads
from specdec_lib.drafters.early_exit import EarlyExitDrafter
from specdec_lib.loading import load_embedded
from specdec_lib.core.paths import REPO_DATA_DIR
from specdec_lib.prompts import encode_prompts, load_prompts
from specdec_lib.decoders import speculative_generate
from specdec_lib.core.trace import Trace, mean_acceptance_length, per_token_acceptance
from .corpus import collect_stdlib_sources, split_files
from .model_training import ModelSpec, build_model, train_model, validation_loss
from .tokenizer_training import tokenize_texts

WITH_LOSS = ModelSpec(layers=8, hidden=128, intermediate=344, heads=4, context=256, steps=700, batch_size=6,
                      learning_rate=2e-3, warmup_steps=50, early_exit_layer=2, early_exit_weight=0.3)
QUICK = ModelSpec(layers=3, hidden=32, intermediate=64, heads=2, context=64, steps=3, batch_size=2,
                  learning_rate=1e-3, warmup_steps=1, early_exit_layer=1, early_exit_weight=0.3)
ABLATION_FILE = "exit_ablation.json"


def self_speculative_acceptance(model, prompts: list[torch.Tensor], exit_layer: int, gamma: int,
                                new_tokens: int) -> dict:
    """Pooled alpha and mean acceptance length of greedy early-exit drafting on ``prompts``, and whether every
    output equals the model's own greedy output."""
    drafter = EarlyExitDrafter(model, exit_layer)
    results = [speculative_generate(model, drafter, ids, gamma=gamma, max_new_tokens=new_tokens, eos_token_id=None)
               for ids in prompts]
    identical = all(
        result.new_token_list == autoregressive_generate(model, ids, max_new_tokens=new_tokens,
                                                         eos_token_id=None).new_token_list
        for ids, result in zip(prompts, results))
    trace = Trace(start_time=0.0, rounds=[record for result in results for record in result.trace.rounds])
    return {"gamma": gamma, "alpha": round(per_token_acceptance(trace), 4),
            "mean_acceptance_length": round(mean_acceptance_length(trace), 4), "identical": identical}


def run_ablation(spec: ModelSpec, *, max_files: int | None = None, prompts: int = 8, new_tokens: int = 48,
                 gamma: int = 3, seed: int = 99) -> dict:
    """Train the pair (exit-loss weight ``spec.early_exit_weight`` and 0) and measure both (module docstring)."""
    _, tokenizer = load_embedded("target")  # tokenizer A, the embedded family's
    train_files, val_files = split_files(collect_stdlib_sources(max_files=max_files))
    train_tokens = tokenize_texts(tokenizer, [f.text for f in train_files])
    val_tokens = tokenize_texts(tokenizer, [f.text for f in val_files])
    prompt_ids = encode_prompts(tokenizer, [p.prompt for p in load_prompts("code", limit=prompts)],
                                torch.device("cpu"))
    prompt_ids = [ids[:, -(spec.context - new_tokens - gamma - 1):] for ids in prompt_ids]  # fit the context
    runs = {}
    for name, weight in (("with exit loss", spec.early_exit_weight), ("without exit loss", 0.0)):
        variant = replace(spec, early_exit_weight=weight)
        model = build_model(variant, len(tokenizer), tokenizer.eos_token_id, seed)  # same seed: same start
        summary = train_model(model, variant, train_tokens, seed=seed, name=name)  # same seed: same batches
        runs[name] = {
            "early_exit_weight": weight,
            "train_seconds": summary["seconds"],
            "validation_loss": round(validation_loss(model, val_tokens, spec.context), 4),
            "exit_validation_loss": round(validation_loss(model, val_tokens, spec.context,
                                                          exit_layer=spec.early_exit_layer), 4),
            "self_speculative": self_speculative_acceptance(model, prompt_ids, spec.early_exit_layer, gamma,
                                                            new_tokens),
        }
    return {"spec": asdict(spec), "exit_layer": spec.early_exit_layer, "threads": torch.get_num_threads(),
            "torch": torch.__version__, "prompts": len(prompt_ids), "new_tokens": new_tokens, "runs": runs}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m specdec_tools.training.exit_ablation", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO_DATA_DIR / "models" / ABLATION_FILE)
    parser.add_argument("--quick", action="store_true", help="tiny models on a corpus slice (seconds; for tests)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    with torch_threads(2):
        if args.quick:
            result = run_ablation(QUICK, max_files=12, prompts=2, new_tokens=8, gamma=2)
        else:
            result = run_ablation(WITH_LOSS)
    result["total_seconds"] = round(time.perf_counter() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["runs"], indent=2))


if __name__ == "__main__":  # pragma: no cover
    main()
