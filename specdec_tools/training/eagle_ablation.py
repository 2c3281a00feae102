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
``data/models/eagle3_control.json``. ``--control --published-loss`` trains the other control: the shipped layer's
whole recipe with EAGLE-3's published loss (tokens only, no feature regression), written to
``data/models/eagle3_published_loss.json`` in the same shape.

**The scaling curve** (``--scaling``): EAGLE-3's central claim is that its acceptance keeps growing with training
data where EAGLE-1's saturates. ``--scaling`` trains the designs of `SCALING_DESIGNS` (EAGLE-1; EAGLE-3 with this
layer's loss; EAGLE-3 as published, without the feature regression) at each data size of `SCALING_WINDOWS`: the
first W of the shipped layers' target-written windows (one feature pass of the largest size, every smaller set a
prefix of it), each for `SCALING_EPOCHS` passes over its W windows, so both the data and the optimiser steps grow
with W and every design gets the same windows and steps at a point. Each run reads alpha and the per-position
acceptance at gamma `SCALING_GAMMA` on the code prompts (held out from training) and its training seconds (an
unrolled step costs about three single steps); ``data/models/eagle_scaling.json``, read by notebook 05.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path

from specdec_lib.core.devices import torch_threads
from specdec_lib.core.errors import ConfigError
from specdec_lib.core.paths import REPO_DATA_DIR
from .head_data import FeatureData, feature_data
from .heads import EAGLE_KIND, FULL, QUICK, REPORT_FILE, HeadsSpec, train_heads

ABLATION_FILE = "eagle_ablation.json"
CONTROL_FILE = "eagle3_control.json"
PUBLISHED_CONTROL_FILE = "eagle3_published_loss.json"
SCALING_FILE = "eagle_scaling.json"
SCALING_WINDOWS = (384, 768, 1536, 3072)  # training windows per point (the largest: the shipped layers' data)
SCALING_EPOCHS = 3  # passes over a point's windows: optimiser steps = W x epochs / windows per step
SCALING_GAMMA = 5
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


def summarise(report: dict, gamma: int = ABLATION_GAMMA) -> dict:
    """The numbers the ablation compares, from one EAGLE training report (acceptance at ``gamma``)."""
    acceptance = report["acceptance"][str(gamma)]
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


def run_control(shipped_folder: Path, target_folder: Path, quick: bool = False, *,
                published_loss: bool = False) -> dict:
    """Train a control of the layer in ``shipped_folder`` and put both layers' numbers side by side (module
    docstring): the EAGLE-1 control (last layer, one step, the rest of its recipe) or, with ``published_loss``, the
    shipped layer's own design (its feature layers and unrolled steps) with no feature regression
    (``eagle_regression_weight`` 0). ``quick``: `QUICK`'s budget with the control's design."""
    shipped = json.loads((Path(shipped_folder) / REPORT_FILE).read_text())
    shipped_spec = spec_of(shipped)
    recipe = replace(QUICK, eagle_gammas=(ABLATION_GAMMA,)) if quick else shipped_spec
    if published_loss:
        design = {"eagle_feature_layers": shipped_spec.eagle_feature_layers,
                  "eagle_test_steps": shipped_spec.eagle_test_steps, "eagle_regression_weight": 0.0}
    else:
        design = {"eagle_feature_layers": (-1,), "eagle_test_steps": 1}
    control = replace(recipe, kinds=(EAGLE_KIND,), **design)
    with tempfile.TemporaryDirectory() as work:
        report = train_heads(control, Path(work), target_folder)[EAGLE_KIND]
    return {"gamma": ABLATION_GAMMA, "shipped_folder": Path(shipped_folder).name, "control_spec": asdict(control),
            "shipped": summarise(shipped), "control": summarise(report),
            "control_total_seconds": round(report["data"]["feature_seconds"] + report["training"]["seconds"]
                                           + report["measure_seconds"], 1)}


#: (feature layers, unrolled training steps, feature-regression weight) of each design on the scaling curve.
SCALING_DESIGNS = {"EAGLE-1": ((-1,), 1, 1.0), "EAGLE-3, this layer's loss": (FUSED_LAYERS, TEST_STEPS, 1.0),
                   "EAGLE-3, no feature regression": (FUSED_LAYERS, TEST_STEPS, 0.0)}


def prefix_data(data: FeatureData, windows: int) -> FeatureData:
    """``data`` cut to its first ``windows`` training windows (validation unchanged), recorded as made for that many:
    a smaller data set drawn the same way (the windows are in random order)."""
    if not 0 < windows <= len(data.windows):
        raise ConfigError(f"Cannot take {windows} of {len(data.windows)} training windows: pick 1 .. "
                          f"{len(data.windows)}.")
    return replace(data, windows=data.windows[:windows], features=data.features[:windows],
                   source={**data.source, "train_windows": windows})


def run_scaling(shipped_folder: Path, target_folder: Path, sizes: tuple[int, ...] = SCALING_WINDOWS,
                epochs: int = SCALING_EPOCHS, quick: bool = False) -> dict:
    """Train every `SCALING_DESIGNS` design at every data size in ``sizes`` (module docstring) with the rest of the
    recipe of the layer in ``shipped_folder`` (``quick``: `QUICK`'s) and summarise each run."""
    shipped = json.loads((Path(shipped_folder) / REPORT_FILE).read_text())
    recipe = replace(QUICK if quick else spec_of(shipped), kinds=(EAGLE_KIND,), eagle_gammas=(SCALING_GAMMA,),
                     train_windows=max(sizes))
    with torch_threads(recipe.threads):
        data = feature_data(recipe, target_folder, layers=FUSED_LAYERS)
    points = []
    with tempfile.TemporaryDirectory() as work:
        for windows in sizes:
            steps = max(1, windows * epochs // recipe.batch_windows)
            runs = {}
            for name, (layers, test_steps, regression) in SCALING_DESIGNS.items():
                print(f"--- {windows} windows, {steps} steps: {name}", flush=True)
                spec = replace(recipe, train_windows=windows, eagle_steps=steps, eagle_feature_layers=layers,
                               eagle_test_steps=test_steps, eagle_regression_weight=regression)
                report = train_heads(spec, Path(work) / f"{windows}-{len(runs)}", target_folder,
                                     data=prefix_data(data, windows))[EAGLE_KIND]
                runs[name] = summarise(report, SCALING_GAMMA) | {"regression_weight": regression}
            points.append({"train_windows": windows, "train_tokens": windows * recipe.window, "steps": steps,
                           "runs": runs})
    return {"recipe": asdict(recipe), "shipped_folder": Path(shipped_folder).name, "gamma": SCALING_GAMMA,
            "epochs": epochs, "feature_seconds": data.report["data"]["feature_seconds"], "points": points}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m specdec_tools.training.eagle_ablation", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO_DATA_DIR / "models" / ABLATION_FILE)
    parser.add_argument("--target", type=Path, default=REPO_DATA_DIR / "models" / "target")
    parser.add_argument("--quick", action="store_true", help="a few steps on a corpus slice (seconds; for tests)")
    parser.add_argument("--control", action="store_true",
                        help=f"train the EAGLE-1 control of the shipped EAGLE-3 layer instead (writes {CONTROL_FILE} "
                             "beside --out's folder)")
    parser.add_argument("--published-loss", action="store_true",
                        help="with --control: the control is the shipped layer with EAGLE-3's published loss (no "
                             f"feature regression) instead (writes {PUBLISHED_CONTROL_FILE})")
    parser.add_argument("--scaling", action="store_true",
                        help=f"train the scaling curve instead (writes {SCALING_FILE} beside --out's folder)")
    parser.add_argument("--shipped", type=Path, default=REPO_DATA_DIR / "models" / "eagle3",
                        help="with --control or --scaling: the layer whose recipe they copy "
                             "(default: data/models/eagle3)")
    args = parser.parse_args(argv)
    if args.published_loss and not args.control:
        parser.error("--published-loss goes with --control (it names which control to train)")
    if args.control:
        result = run_control(args.shipped, args.target, args.quick, published_loss=args.published_loss)
        _write(args.out.parent / (PUBLISHED_CONTROL_FILE if args.published_loss else CONTROL_FILE), result,
               {name: result[name] for name in ("shipped", "control")})
        return
    started = time.perf_counter()
    if args.scaling:
        sizes = (QUICK.train_windows // 2, QUICK.train_windows) if args.quick else SCALING_WINDOWS
        result = run_scaling(args.shipped, args.target, sizes, quick=args.quick)
        path = args.out.parent / SCALING_FILE
        runs = {f"{point['train_windows']} windows, {name}": run
                for point in result["points"] for name, run in point["runs"].items()}
    else:
        result = run_ablation(QUICK if args.quick else ABLATION_SPEC, args.target, FUSED_LAYERS, TEST_STEPS)
        path, runs = args.out, result["runs"]
    result["total_seconds"] = round(time.perf_counter() - started, 1)
    _write(path, result, runs)


def _write(path: Path, result: dict, runs: dict[str, dict]) -> None:
    """Write ``result`` as JSON to ``path`` and print each of ``runs``' alpha, per-position acceptance and time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({name: {k: run[k] for k in ("alpha", "per_position_acceptance", "train_seconds")}
                      for name, run in runs.items()}, indent=2))


if __name__ == "__main__":  # pragma: no cover
    main()
