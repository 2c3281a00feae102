"""Token trees against the chain, side by side: ``python -m specdec_lib.bench.trees``.

For each tree (a static `TreeShape` or a `DynamicTree` grown by the drafter's confidence, EAGLE-2) and each chain
length: the nodes the target verifies per round, the measured cost of that verification forward relative to a
one-token forward (v(n), n = nodes + 1), the drafting's cost per round in one-token target forwards, tokens per
target forward, mean acceptance length, tokens/s and the speed-up over the target alone, on the same prompts with
the same protocol as ``python -m specdec_lib bench`` (one warm-up pass, interleaved timed repeats, medians:
`specdec_lib.bench.protocol`). The drafter is the EAGLE layer (``--drafter eagle``, the default) or the draft
model. Greedy, so every row must emit the baseline's tokens (``identical``). A tree pays where its extra tokens per
forward outgrow the extra cost of verifying its nodes; for each depth and top-k of the dynamic trees, the budget
`specdec_lib.core.theory.best_budget` picks from the measured v(n) is printed beside the fastest one measured.

transformers has no token trees; its fastest lossless option on these models is assisted generation with the draft
model (``hf-assisted``, `specdec_lib.bench.hf.HFAssisted`), timed in the same run at each of ``--transformers``'
draft lengths, so the ``headline`` (the fastest row of ours, over the fastest of transformers') is measured side by
side, not across files.

``--calibrate dynamic:D,K,B`` first fits the temperature of `DynamicTree(D, K, B)`: the tokens per target forward
it gets at each of ``--temperatures``, counted (not timed) on the ``--prompts`` prompts that follow the bench's, so
the fit never sees the prompts it is judged on.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from ..drafters import DraftModelDrafter
from ..drafters.eagle import load_eagle
from ..core.devices import get_device
from ..core.drafting import Drafter
from ..core.errors import SpecdecError
from ..core.theory import best_budget
from ..loading import load_pair
from ..prompts import TASKS, encode_prompts, load_prompts
from ..core.result import GenerationResult
from ..core.trace import Trace, tokens_per_target_forward
from .model_measures import interleaved_forward_costs
from ..decoders import tree_speculative_generate
from ..core.trees import DynamicTree, TreeShape
from .cli import machine_info, parse_gammas, write_json
from .hf import HFAssisted, fastest_against_transformers
from .methods import Autoregressive, GenerationSpec, Method, Speculative, resolve_eos
from .protocol import measure
from .report import baseline_forward_seconds, build_report

DEFAULT_SHAPES = ("2,1,1,1,1,1 2,2,1,1,1,1 dynamic:7,4,16 dynamic:10,2,16 dynamic:10,2,8,0.3 dynamic:10,2,12,0.3 "
                  "dynamic:10,2,16,0.3 dynamic:10,2,24,0.3")
DEFAULT_GAMMAS = "5,7,9,12"
DEFAULT_TRANSFORMERS_GAMMAS = "5,7"  # where the drafters bench finds transformers' assisted generation fastest on code
DRAFTERS = ("eagle", "draft-model")
DEFAULT_TEMPERATURES = "1,0.5,0.3,0.2,0.1"


def shape_key(shape: TreeShape | DynamicTree) -> str:
    """The row name of a tree: ``tree[2,2,1]``, ``dynamic[depth=7,top_k=4,budget=16]`` (``,temperature=0.3``
    where it is not 1)."""
    if isinstance(shape, DynamicTree):
        temperature = "" if shape.temperature == 1 else f",temperature={shape.temperature:g}"
        return f"dynamic[depth={shape.depth},top_k={shape.top_k},budget={shape.budget}{temperature}]"
    return f"tree[{','.join(map(str, shape.branching))}]"


class TreeSpeculative(Method):
    """Our tree speculative decoding with one tree shape, static or dynamic (row `shape_key`)."""

    name, source = "tree", "trace"

    def __init__(self, target, drafter: Drafter, shape: TreeShape | DynamicTree, spec: GenerationSpec) -> None:
        self.target, self.drafter, self.shape, self.spec = target, drafter, shape, spec

    @property
    def key(self) -> str:
        return shape_key(self.shape)

    def generate(self, input_ids: torch.Tensor, seed: int | None = None) -> tuple[list[int], GenerationResult | None]:
        result = tree_speculative_generate(self.target, self.drafter, input_ids, shape=self.shape,
                                           max_new_tokens=self.spec.max_new_tokens, eos_token_id=self.spec.eos_token_id)
        return result.new_token_list, result


def parse_shapes(text: str) -> list[TreeShape | DynamicTree]:
    """``"2,2,1 dynamic:7,4,16 dynamic:10,2,16,0.3"`` -> [TreeShape((2, 2, 1)), DynamicTree(7, 4, 16),
    DynamicTree(10, 2, 16, temperature=0.3)] (argparse type)."""
    problem = "no shape given" if not text.split() else None
    shapes: list[TreeShape | DynamicTree] = []
    try:
        for part in text.split():
            if part.startswith("dynamic:"):
                numbers = part.removeprefix("dynamic:").split(",")
                if len(numbers) not in (3, 4):
                    raise ValueError(f"{part!r} needs 3 or 4 numbers")
                shapes.append(DynamicTree(*(int(n) for n in numbers[:3]), *(float(t) for t in numbers[3:])))
            else:
                shapes.append(TreeShape(tuple(int(b) for b in part.split(","))))
    except (ValueError, TypeError, SpecdecError) as error:
        problem = str(error)
    if problem is not None:
        raise argparse.ArgumentTypeError(
            "--shapes takes space-separated shapes: comma-separated branchings for a static tree ('2,2,1,1') or "
            f"'dynamic:DEPTH,TOP_K,BUDGET[,TEMPERATURE]' for a dynamic one ('dynamic:7,4,16'): {problem}"
        )
    return shapes


def load_drafter(pair, name: str) -> Drafter:
    """The drafter ``name`` (one of `DRAFTERS`) for ``pair``'s target: the embedded EAGLE layer or the draft model."""
    return load_eagle(pair.target) if name == "eagle" else DraftModelDrafter.for_pair(pair)


def _draft_cost(method_runs, forward_seconds: float | None) -> float | None:
    """A round's drafting in one-token target forwards: the median ``draft_time`` of the rounds after each run's
    first that drafted, over the baseline's median forward."""
    times = [record.draft_time for repeat in method_runs for run in repeat if run.result
             for record in run.result.trace.rounds[1:] if record.drafted > 0]
    return statistics.median(times) / forward_seconds if times and forward_seconds else None


def tree_rows(pair, prompt_ids: Sequence[torch.Tensor], shapes: Sequence[TreeShape | DynamicTree], *,
              gammas: Sequence[int], drafter: str = "eagle", max_new_tokens: int, repeats: int,
              transformers: Sequence[int] = (), progress: bool = True) -> list[dict]:
    """Measure the baseline, a chain per gamma and every shape with one drafter, then transformers' assisted
    generation with the pair's draft model at each of ``transformers``' draft lengths; one dict per row (module
    docstring; a transformers row has no trace, so no drafting cost)."""
    spec = GenerationSpec(max_new_tokens, resolve_eos(pair), pair.target_tokenizer.pad_token_id)
    one = load_drafter(pair, drafter)  # chains and trees
    methods: list[Method] = [Autoregressive(pair.target, spec)]
    methods += [Speculative(pair.target, one, gamma, spec) for gamma in gammas]
    methods += [TreeSpeculative(pair.target, one, shape, spec) for shape in shapes]
    methods += [HFAssisted(pair.target, pair.draft, gamma, spec) for gamma in transformers]
    measurements = measure(methods, prompt_ids, repeats=repeats, device=pair.target.device, progress=progress,
                           count_models={"target": pair.target, "draft": pair.draft})
    context = prompt_ids[0][:, :64]
    nodes_of = [method.shape.size if isinstance(method, TreeSpeculative) else method.gamma or 0 for method in methods]
    # what verifying each tree or chain costs: a target forward over its nodes + 1 positions, over one position
    costs = interleaved_forward_costs({nodes: (pair.target, context, nodes + 1) for nodes in {0, *nodes_of}}, repeats=10)
    forward = baseline_forward_seconds(measurements.timed[methods[0].key])
    rows = []
    for method, nodes, row in zip(methods, nodes_of, build_report(measurements).rows):  # speed, acceptance, identity
        rows.append({
            "method": method.key,
            "nodes": nodes,
            "verify_cost": costs[nodes] / costs[0],
            "draft_cost": _draft_cost(measurements.timed[method.key], forward) if nodes else None,
            **{key: row[key] for key in ("tokens_per_target_forward", "mean_acceptance_length", "tokens_per_s",
                                         "speedup", "identical")},
        })
    return rows


def headline(rows: Sequence[dict]) -> dict:
    """The fastest row of ours (chain or tree) and, where the run timed transformers (``hf-`` rows), the fastest
    of transformers' and the ratio of the two speed-ups (both over the same baseline, in the same run)."""
    ours, theirs, ratio = fastest_against_transformers(rows[1:])  # rows[0]: the baseline
    return {"fastest": ours["method"], "speedup": ours["speedup"],
            "transformers_fastest": None if theirs is None else theirs["method"],
            "transformers_speedup": None if theirs is None else theirs["speedup"], "over_transformers": ratio}


def budget_choices(shapes: Sequence[TreeShape | DynamicTree], rows: Sequence[dict]) -> list[dict]:
    """For each depth, top-k and temperature of the dynamic trees measured (with two budgets or more): the budget
    `best_budget` picks from the rows' tokens per target forward, the measured v(n) and their median drafting cost,
    next to the fastest budget measured."""
    by_key = {row["method"]: row for row in rows}
    groups: dict[tuple[int, int, float], list[DynamicTree]] = {}
    for shape in shapes:
        if isinstance(shape, DynamicTree):
            groups.setdefault((shape.depth, shape.top_k, shape.temperature), []).append(shape)
    choices = []
    for (depth, top_k, temperature), members in groups.items():
        if len(members) < 2:
            continue
        measured = [by_key[shape_key(shape)] for shape in members]
        draft_costs = [row["draft_cost"] for row in measured if row["draft_cost"] is not None]
        if not draft_costs:
            continue
        chosen = best_budget({shape.budget: row["tokens_per_target_forward"] for shape, row in zip(members, measured)},
                             {1: 1.0, **{row["nodes"] + 1: row["verify_cost"] for row in measured}},
                             statistics.median(draft_costs))
        fastest = max(zip(members, measured), key=lambda pair: pair[1]["speedup"])[0].budget
        choices.append({"depth": depth, "top_k": top_k, "temperature": temperature, "chosen_budget": chosen,
                        "fastest_budget": fastest})
    return choices


def calibrate_temperature(target, drafter: Drafter, prompt_ids: Sequence[torch.Tensor], shape: DynamicTree,
                          temperatures: Sequence[float], max_new_tokens: int) -> dict[float, float]:
    """``{temperature: tokens per target forward}`` of ``shape`` at each of ``temperatures``, pooled over greedy runs
    on ``prompt_ids``: the temperature that scores the drafter's candidates best is the one whose trees the target
    accepts deepest, and acceptance is a count, the same on any clock."""
    counts = {}
    for temperature in temperatures:
        tree = DynamicTree(shape.depth, shape.top_k, shape.budget, temperature)
        runs = [tree_speculative_generate(target, drafter, ids, shape=tree, max_new_tokens=max_new_tokens)
                for ids in prompt_ids]
        counts[temperature] = tokens_per_target_forward(
            Trace(start_time=0.0, rounds=[record for run in runs for record in run.trace.rounds]))
    return counts


def format_rows(rows: Sequence[dict]) -> str:
    lines = [f"{'method':40} {'nodes':>5} {'verify cost':>11} {'draft cost':>10} {'tokens/forward':>14} "
             f"{'mean acc len':>12} {'tokens/s':>9} {'speed-up':>8}  identical"]
    for row in rows:
        mal = "" if row["mean_acceptance_length"] is None else f"{row['mean_acceptance_length']:.2f}"
        draft = "" if row["draft_cost"] is None else f"{row['draft_cost']:.2f}"
        lines.append(f"{row['method']:40} {row['nodes']:5} {row['verify_cost']:10.2f}x {draft:>10} "
                     f"{row['tokens_per_target_forward']:14.2f} {mal:>12} {row['tokens_per_s']:9.1f} "
                     f"{row['speedup']:7.2f}x  {'yes' if row['identical'] else 'NO'}")
    return "\n".join(lines)


def parse_temperatures(text: str) -> list[float]:
    """``"1,0.5,0.3"`` -> [1.0, 0.5, 0.3]; each must be a positive number."""
    try:
        values = [float(part) for part in text.split(",")]
    except ValueError:
        values = []
    if not values or not all(0 < value < float("inf") for value in values):
        raise argparse.ArgumentTypeError(f"{text!r}: give positive temperatures separated by commas, e.g. 1,0.5,0.3")
    return values


def calibrate(pair, prompt_ids: Sequence[torch.Tensor], args: argparse.Namespace) -> dict:
    """Run `calibrate_temperature` for ``args.calibrate``'s one dynamic tree with ``args``' drafter, length and
    temperatures; the record the JSON stores."""
    shapes = args.calibrate
    if len(shapes) != 1 or not isinstance(shapes[0], DynamicTree):
        raise SpecdecError("--calibrate takes one dynamic tree, dynamic:D,K,B (depth, top_k, budget), not "
                           + " ".join(map(shape_key, shapes)) + ".")
    if not prompt_ids:
        raise SpecdecError(f"--calibrate needs {args.task} prompts beyond the bench's {args.prompts}: lower --prompts.")
    counts = calibrate_temperature(pair.target, load_drafter(pair, args.drafter), prompt_ids, shapes[0],
                                   args.temperatures, args.max_new_tokens)
    return {"shape": shape_key(shapes[0]), "prompts": len(prompt_ids), "tokens_per_target_forward": counts,
            "best_temperature": max(counts, key=counts.get)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec_lib.bench.trees", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", type=parse_shapes, default=parse_shapes(DEFAULT_SHAPES),
                        help=f"tree shapes (default: '{DEFAULT_SHAPES}')")
    parser.add_argument("--gammas", type=parse_gammas, default=parse_gammas(DEFAULT_GAMMAS),
                        help=f"chain lengths to compare with (default: {DEFAULT_GAMMAS})")
    parser.add_argument("--drafter", choices=DRAFTERS, default="eagle", help="who drafts chains and trees")
    parser.add_argument("--transformers", type=parse_gammas, default=parse_gammas(DEFAULT_TRANSFORMERS_GAMMAS),
                        help="draft lengths of transformers' assisted generation, timed in the same run (default: "
                             f"{DEFAULT_TRANSFORMERS_GAMMAS})")
    parser.add_argument("--no-transformers", action="store_true", help="time no transformers rows")
    parser.add_argument("--task", choices=TASKS, default="code")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--device", default=None, help="cpu, cuda, ... (default: get_device(), SPECDEC_DEVICE)")
    parser.add_argument("--calibrate", type=parse_shapes, default=None, metavar="dynamic:D,K,B",
                        help="first fit the temperature of DynamicTree(D, K, B) on the prompts after the bench's")
    parser.add_argument("--temperatures", type=parse_temperatures, default=parse_temperatures(DEFAULT_TEMPERATURES),
                        help=f"with --calibrate: the temperatures tried (default: {DEFAULT_TEMPERATURES})")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = get_device(args.device)
    pair = load_pair("embedded", device=device)
    prompts = load_prompts(args.task, limit=2 * args.prompts if args.calibrate else args.prompts)
    prompt_ids = encode_prompts(pair.target_tokenizer, [p.prompt for p in prompts], device)
    calibration = None
    if args.calibrate:
        calibration = calibrate(pair, prompt_ids[args.prompts :], args)
        prompt_ids = prompt_ids[: args.prompts]
    rows = tree_rows(pair, prompt_ids, args.shapes, gammas=args.gammas, drafter=args.drafter,
                     max_new_tokens=args.max_new_tokens, repeats=args.repeats,
                     transformers=() if args.no_transformers else args.transformers, progress=not args.no_progress)
    choices = budget_choices(args.shapes, rows)
    top = headline(rows)
    machine = machine_info(device)
    settings = {"task": args.task, "prompts": args.prompts, "max_new_tokens": args.max_new_tokens,
                "repeats": args.repeats, "drafter": args.drafter, "gammas": list(args.gammas),
                "shapes": [shape_key(s) for s in args.shapes], "decoding": "greedy",
                "transformers": [] if args.no_transformers else list(args.transformers)}
    print(format_rows(rows))
    if calibration:
        print(f"calibration of {calibration['shape']} on {calibration['prompts']} other {args.task} prompts, "
              "tokens per target forward by temperature: " + ", ".join(
                  f"{t:g}: {c:.2f}" for t, c in calibration["tokens_per_target_forward"].items())
              + f"; best {calibration['best_temperature']:g}")
    for choice in choices:
        print(f"dynamic trees of depth {choice['depth']}, top_k {choice['top_k']}, temperature "
              f"{choice['temperature']:g}: the budget v(n) picks "
              f"(best_budget) is {choice['chosen_budget']}; the fastest measured, {choice['fastest_budget']}")
    print(f"fastest: {top['fastest']}, {top['speedup']:.2f}x the target alone" + (
        "" if top["transformers_fastest"] is None else
        f"; transformers' fastest, {top['transformers_fastest']}, {top['transformers_speedup']:.2f}x; ours over "
        f"transformers' {top['over_transformers']:.2f}x"))
    print(f"\nmachine: {machine['device']}, {machine['cpu_count']} CPUs, torch {machine['torch']} "
          f"({machine['torch_threads']} threads); {args.prompts} {args.task} prompts x {args.max_new_tokens} tokens, "
          f"{args.repeats} timed repeats after a warm-up, greedy, drafter: {args.drafter}")
    print("verify cost: median time of one target forward over nodes + 1 positions / over 1 position (64-token "
          "context); draft cost: a round's median drafting time / the baseline's median forward; speed-up: median "
          "over repeats of the baseline's seconds / the row's, same prompts")
    if args.json is not None:
        write_json(args.json, {"settings": settings, "machine": machine, "rows": rows, "headline": top,
                               "budget_choices": choices,
                               **({"calibration": calibration} if calibration else {})})
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
