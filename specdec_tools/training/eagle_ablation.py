"""What do EAGLE-3's two changes buy? Four EAGLE layers trained alike, measured alike:
``python -m specdec_tools.training.eagle_ablation``.

EAGLE-3 (Li et al., 2025) changed two things about the EAGLE drafter: it reads a *fusion* of a low, a middle and
the last target layer instead of the last hidden state alone, and it is trained with *training-time test*: during
training it drafts several steps on its own predicted features, so it meets the inputs it gets at draft positions
2, 3, ... before it is used. This ablation crosses the two (features: the last layer, or layers 4, 12 and the
last; training: one step, or ``test_steps`` unrolled steps) and trains each variant with `train_heads` from the
same seed, on the same corpus windows (one pass of the target computes the fused features; the last-layer variants
read their last block), for the same number of optimiser steps, then reads from each report:

- alpha and the per-position acceptance of greedy speculative decoding on the code prompts at gamma
  ``ABLATION_GAMMA`` (position j: the share of rounds whose j-th draft was accepted; where training-time test
  should help is positions 2 and on);
- the held-out top-1 of each draft step along the layer's own autoregression, and the training time.

The layers themselves are not kept (the numbers are: ``data/models/eagle_ablation.json``, read by notebook 05).
The run costs one feature pass and four EAGLE trainings, two of them with three unrolled steps (the JSON records
``total_seconds``); ``--quick`` takes seconds (for tests).

**The control** (``--control``): the ablation compares the two changes at one small budget; the shipped EAGLE-3
layer (``data/models/eagle3``) was trained longer, on more and other data. To tell what its design buys from what
its budget buys, ``--control`` trains an EAGLE-1 layer (last layer, one step) with everything else of the shipped
layer's recipe (read from its report: data, steps, loss) and writes both layers' numbers side by side to
``data/models/eagle3_control.json``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path

from specdec_lib.core.devices import torch_threads
from specdec_lib.core.paths import REPO_DATA_DIR
from .head_data import feature_data
from .heads import EAGLE_KIND, FULL, QUICK, REPORT_FILE, HeadsSpec, train_heads

ABLATION_FILE = "eagle_ablation.json"
CONTROL_FILE = "eagle3_control.json"
ABLATION_GAMMA = 3
FUSED_LAYERS = (4, 12, -1)  # EAGLE-3's low, middle and last layer of the 24-layer target
TEST_STEPS = 3
#: The ablation's shared recipe: the shipped EAGLE layer's data, optimiser steps and loss weights.
ABLATION_SPEC = FULL


def variants(spec: HeadsSpec, fused: tuple[int, ...], test_steps: int) -> dict[str, HeadsSpec]:
    """The four variants of ``spec``: {last layer, ``fused``} x {1, ``test_steps``} training steps, the EAGLE layer
    alone, everything else (data, seed, optimiser steps, loss weights) unchanged."""
    spec = replace(spec, kinds=(EAGLE_KIND,), eagle_gammas=(ABLATION_GAMMA,))
    return {f"{features}, {steps} step{'s' if steps > 1 else ''}":
            replace(spec, eagle_feature_layers=layers, eagle_test_steps=steps)
            for features, layers in (("last layer", (-1,)), ("fused", fused))
            for steps in (1, test_steps)}


def summarise(report: dict) -> dict:
    """The numbers the ablation compares, from one EAGLE training report."""
    acceptance = report["acceptance"][str(ABLATION_GAMMA)]
    spec = report["spec"]
    return {"feature_layers": spec["eagle_feature_layers"], "test_steps": spec["eagle_test_steps"],
            "alpha": acceptance["alpha"], "per_position_acceptance": acceptance["per_position_acceptance"],
            "mean_acceptance_length": acceptance["mean_acceptance_length"],
            "validation_top1": report["validation"]["top1"], "train_seconds": report["training"]["seconds"],
            "final_training": report["training"]["final"]}


def run_ablation(spec: HeadsSpec, target_folder: Path, fused: tuple[int, ...], test_steps: int) -> dict:
    """Train and measure every variant (module docstring) on one feature pass; the layers go to a temporary
    folder."""
    with torch_threads(spec.threads):
        data = feature_data(spec, target_folder, layers=fused)  # the last-layer variants read its last block
    runs = {}
    with tempfile.TemporaryDirectory() as work:
        for name, variant in variants(spec, fused, test_steps).items():
            print(f"--- {name}", flush=True)
            report = train_heads(variant, Path(work) / name.replace(", ", "-").replace(" ", "-"), target_folder,
                                 data=data)
            runs[name] = summarise(report[EAGLE_KIND])
    return {"spec": asdict(replace(spec, kinds=(EAGLE_KIND,))), "gamma": ABLATION_GAMMA, "fused_layers": list(fused),
            "test_steps": test_steps, "feature_seconds": data.report["data"]["feature_seconds"], "runs": runs}


def spec_of(report: dict) -> HeadsSpec:
    """The `HeadsSpec` a training report records (its lists back to tuples)."""
    return HeadsSpec(**{k: tuple(v) if isinstance(v, list) else v for k, v in report["spec"].items()})


def run_control(shipped_folder: Path, target_folder: Path, quick: bool = False) -> dict:
    """Train the EAGLE-1 control of the layer in ``shipped_folder`` (module docstring: last layer, one step, the
    rest of its recipe; ``quick``: `QUICK`'s budget with the control's layers and steps) and put both layers'
    numbers side by side."""
    shipped = json.loads((Path(shipped_folder) / REPORT_FILE).read_text())
    recipe = replace(QUICK, eagle_gammas=(ABLATION_GAMMA,)) if quick else spec_of(shipped)
    control = replace(recipe, kinds=(EAGLE_KIND,), eagle_feature_layers=(-1,), eagle_test_steps=1)
    with tempfile.TemporaryDirectory() as work:
        report = train_heads(control, Path(work), target_folder)[EAGLE_KIND]
    return {"gamma": ABLATION_GAMMA, "shipped_folder": Path(shipped_folder).name, "control_spec": asdict(control),
            "shipped": summarise(shipped), "control": summarise(report),
            "control_total_seconds": round(report["data"]["feature_seconds"] + report["training"]["seconds"]
                                           + report["measure_seconds"], 1)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m specdec_tools.training.eagle_ablation", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO_DATA_DIR / "models" / ABLATION_FILE)
    parser.add_argument("--target", type=Path, default=REPO_DATA_DIR / "models" / "target")
    parser.add_argument("--quick", action="store_true", help="a few steps on a corpus slice (seconds; for tests)")
    parser.add_argument("--control", action="store_true",
                        help=f"train the EAGLE-1 control of the shipped EAGLE-3 layer instead (writes {CONTROL_FILE} "
                             "beside --out's folder)")
    parser.add_argument("--shipped", type=Path, default=REPO_DATA_DIR / "models" / "eagle3",
                        help="with --control: the layer whose recipe the control copies (default: data/models/eagle3)")
    args = parser.parse_args(argv)
    if args.control:
        result = run_control(args.shipped, args.target, args.quick)
        _write(args.out.parent / CONTROL_FILE, result, {name: result[name] for name in ("shipped", "control")})
        return
    started = time.perf_counter()
    result = run_ablation(QUICK if args.quick else ABLATION_SPEC, args.target, FUSED_LAYERS, TEST_STEPS)
    result["total_seconds"] = round(time.perf_counter() - started, 1)
    _write(args.out, result, result["runs"])


def _write(path: Path, result: dict, runs: dict[str, dict]) -> None:
    """Write ``result`` as JSON to ``path`` and print each of ``runs``' alpha, per-position acceptance and time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({name: {k: run[k] for k in ("alpha", "per_position_acceptance", "train_seconds")}
                      for name, run in runs.items()}, indent=2))


if __name__ == "__main__":  # pragma: no cover
    main()
