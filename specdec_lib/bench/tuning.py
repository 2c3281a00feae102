"""Draft length by task type, fixed and adaptive: ``python -m specdec_lib bench tuning``.

The explainer's tuning step, measured: for each prompt set (code, prose, input-grounded) and each drafter, a sweep
over gamma recording tokens per target forward, the four acceptance numbers and the wall-clock speed-up, each next
to two predictions from the *same* runs' measured alpha and c:

    predicted               expected_speedup(alpha, gamma, c)            Leviathan et al.: verification costs 1
    predicted_with_verify   expected_speedup(alpha, gamma, c, v(gamma))  v: the measured cost of verifying gamma
                                                                         drafts, in one-token target forwards

(`specdec_lib.bench.report` measures c and v from the timed rounds). The best gamma found is compared with the
best one each prediction picks among the swept gammas. Then adaptive draft lengths at a cap of the largest swept
gamma, on every task (`specdec_lib.drafters.schedules`):

    draft-model+heuristic     transformers' schedule: +2 after a full accept, -1 otherwise
    draft-model+confidence    stop the draft when its token's probability < 0.4 (transformers' default threshold)
    draft-model+cost-aware    ours: stop when the product of the draft's confidences < c + marginal verify cost
    prompt-lookup+heuristic   transformers' schedule around prompt lookup

Each row also carries what a user feels per request (`specdec_lib.bench.latency`): TTFT and inter-token latency
p50/p95, the worst request, and the spread of mean acceptance length over the prompts. Greedy: every row must
emit the baseline's tokens. Timing protocol: `specdec_lib.bench.protocol` (warm-up, interleaved repeats, medians).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from ..core.devices import torch_threads
from ..drafters import ConfidenceStop, CostAwareStop, DraftModelDrafter, HeuristicSchedule, PromptLookupDrafter
from ..core.pair import ModelPair
from ..loading import load_pair
from ..prompts import TASKS
from .model_measures import interleaved_forward_costs
from .captions import describe_machine, format_value, machine_summary
from .cli import load_cross_pair, machine_info, parse_gammas, write_json
from .drafters import DRAFTERS, DrafterRow, measure_task, task_prompt_ids
from .latency import trace_latency
from .report import build_report
from .results_table import json_blocks

SWEEP_DRAFTERS = ("draft-model", "prompt-lookup", "early-exit", "eagle")
SWEEP_GAMMAS = (1, 2, 3, 4, 6, 8)
CONFIDENCE_THRESHOLD = 0.4  # transformers' default assistant_confidence_threshold

#: The row keys kept in the JSON (and the table's columns, in order).
ROW_KEYS = ("method", "gamma", "speedup", "tokens_per_target_forward", "alpha", "acceptance_rate",
            "mean_acceptance_length", "per_position_acceptance", "c", "verify_cost", "predicted_speedup",
            "predicted_with_verify", "measured_over_predicted", "measured_over_predicted_with_verify", "identical")


def measured_costs(pair: ModelPair, context: torch.Tensor, gammas: Sequence[int]) -> dict:
    """Forward costs on this machine before the sweep: ``c`` (one draft-model forward / one target forward),
    ``verify_costs`` (gamma -> a target forward over gamma + 1 new positions / over one) and ``marginal_verify``
    (the median of ``(v - 1) / gamma``: what one more verified position costs), the inputs of `CostAwareStop`."""
    costs = interleaved_forward_costs({"target": (pair.target, context, 1), "draft": (pair.draft, context, 1),
                                       **{gamma: (pair.target, context, gamma + 1) for gamma in gammas}})
    c = costs["draft"] / costs["target"]
    verify = {gamma: costs[gamma] / costs["target"] for gamma in gammas}
    marginal = statistics.median(max(v - 1, 0.0) / gamma for gamma, v in verify.items())
    return {"c": c, "verify_costs": verify, "marginal_verify": marginal}


def adaptive_registry(costs: dict) -> dict[str, DrafterRow]:
    """The adaptive rows (module docstring), the cost-aware one priced with ``costs`` (`measured_costs`)."""
    rows = (
        DrafterRow("draft-model+heuristic", lambda pair, cross: HeuristicSchedule(DraftModelDrafter.for_pair(pair))),
        DrafterRow("draft-model+confidence", lambda pair, cross: DraftModelDrafter(
            pair.draft, stop_rule=ConfidenceStop(CONFIDENCE_THRESHOLD))),
        DrafterRow("draft-model+cost-aware", lambda pair, cross: DraftModelDrafter(
            pair.draft, stop_rule=CostAwareStop(costs["c"], costs["marginal_verify"]))),
        DrafterRow("prompt-lookup+heuristic", lambda pair, cross: HeuristicSchedule(PromptLookupDrafter())),
    )
    return {row.name: row for row in rows}


PREDICTION_KEYS = ("predicted_speedup", "predicted_with_verify", "measured_over_predicted",
                   "measured_over_predicted_with_verify", "verify_cost")


def without_adaptive_predictions(row: dict) -> dict:
    """``row`` with its predictions blanked when its draft length adapts (a ``+`` in the name): Leviathan's formula
    assumes gamma drafts every round, which an adaptive row drafts only as a cap."""
    return {**row, **{key: None for key in PREDICTION_KEYS}} if "+" in row["method"] else row


def best_gammas(rows: Sequence[dict], drafter: str) -> dict:
    """For one drafter's sweep rows: the gamma with the best measured speed-up, and the one each prediction picks."""
    sweep = [row for row in rows if row["method"] == drafter and row["speedup"] is not None]

    def argmax(key: str) -> int | None:
        scored = [row for row in sweep if row[key] is not None]
        return max(scored, key=lambda row: row[key])["gamma"] if scored else None

    found = argmax("speedup")
    best_row = next((row for row in sweep if row["gamma"] == found), None)
    return {"found": found, "found_speedup": None if best_row is None else best_row["speedup"],
            "predicted": argmax("predicted_speedup"), "predicted_with_verify": argmax("predicted_with_verify")}


def sweep_task(pair: ModelPair, cross: ModelPair, prompt_ids: Sequence[torch.Tensor], drafters: Sequence[str],
               gammas: Sequence[int], costs: dict, *, max_new_tokens: int, repeats: int, adaptive: bool = True,
               progress: bool = True) -> dict:
    """One task: the rows (`ROW_KEYS` plus ``latency``), and per drafter its best gammas (`best_gammas`)."""
    registry = {**DRAFTERS, **adaptive_registry(costs)}
    plan = {name: tuple(gammas) for name in drafters}
    if adaptive:
        plan.update({name: (max(gammas),) for name in adaptive_registry(costs)})
    methods, measurements = measure_task(pair, cross, prompt_ids, plan, max_new_tokens=max_new_tokens,
                                         repeats=repeats, transformers=False, progress=progress, registry=registry)
    rows = []
    for method, row in zip(methods, build_report(measurements).rows):
        traces = [run.result.trace for run in measurements.timed[method.key][0] if run.result is not None]
        rows.append(without_adaptive_predictions({**{key: row[key] for key in ROW_KEYS}, "method": method.name,
                                                  "latency": trace_latency(traces) if traces else None}))
    return {"rows": rows, "best": {name: best_gammas(rows, name) for name in drafters}}


_cell = functools.partial(format_value, blank="-")  # a table cell, "-" when there is no value


def format_task(task: str, result: dict) -> str:
    """One task's rows and best gammas as a fixed-width table."""
    head = (f"{'method':24} {'gamma':>5} {'speed-up':>8} {'tok/fwd':>7} {'alpha':>6} {'mean acc':>8} {'c':>5} "
            f"{'v':>5} {'pred':>6} {'meas/pred':>9} {'pred+v':>6} {'meas/pred+v':>11} {'ITL p95':>8}  identical")
    lines = [f"task: {task}", head]
    for row in result["rows"]:
        latency = row["latency"] or {}
        itl = latency.get("itl_p95_s")
        lines.append(
            f"{row['method']:24} {_cell(row['gamma']):>5} {_cell(row['speedup'], suffix='x'):>8} "
            f"{_cell(row['tokens_per_target_forward']):>7} {_cell(row['alpha'], 3):>6} "
            f"{_cell(row['mean_acceptance_length']):>8} {_cell(row['c'], 3):>5} {_cell(row['verify_cost']):>5} "
            f"{_cell(row['predicted_speedup'], suffix='x'):>6} {_cell(row['measured_over_predicted']):>9} "
            f"{_cell(row['predicted_with_verify'], suffix='x'):>6} "
            f"{_cell(row['measured_over_predicted_with_verify']):>11} "
            f"{_cell(None if itl is None else itl * 1000, 1, 'ms'):>8}  {_cell(row['identical'])}")
    for name, best in result["best"].items():
        lines.append(f"best gamma, {name}: found {best['found']} ({_cell(best['found_speedup'], suffix='x')}); "
                     f"predicted {best['predicted']}, predicted with verify cost {best['predicted_with_verify']}")
    return "\n".join(lines)


def describe_document(document: dict) -> str:
    """One sentence: where and how a tuning JSON document was measured, and the forward costs it measured."""
    machine, settings, costs = document["machine"], document["settings"], document["costs"]
    return (f"{describe_machine(machine)}; "
            f"{settings['prompts']} prompts per task x {settings['max_new_tokens']} new tokens, "
            f"{settings['repeats']} timed repeats, greedy; c = {costs['c']:.3f}")


def tuning_markdown(document: dict) -> str:
    """A tuning JSON document as one Markdown table: a row per method and gamma; per task the measured speed-up,
    Leviathan's prediction and the prediction with the measured verify cost, and tokens per target forward."""
    tasks = document["tasks"]
    first = next(iter(tasks.values()))["rows"]
    head = ["method", "gamma"] + [f"{task}: speed-up (Leviathan / with v), tokens per forward" for task in tasks]
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    for method, gamma in [(row["method"], row["gamma"]) for row in first]:
        cells = [method, "" if gamma is None else str(gamma)]
        for result in tasks.values():
            row = next(r for r in result["rows"] if (r["method"], r["gamma"]) == (method, gamma))
            predictions = (f" ({_cell(row['predicted_speedup'])} / {_cell(row['predicted_with_verify'])})"
                           if row["predicted_speedup"] is not None else "")
            cells.append(f"{_cell(row['speedup'], suffix='x')}{predictions}, {_cell(row['tokens_per_target_forward'])}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m specdec_lib bench tuning", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--drafters", default=",".join(SWEEP_DRAFTERS),
                        help=f"comma-separated drafters to sweep (from: {', '.join(DRAFTERS)})")
    parser.add_argument("--gammas", type=parse_gammas, default=SWEEP_GAMMAS, metavar="G1,G2,...")
    parser.add_argument("--tasks", default=",".join(TASKS), help="comma-separated prompt sets")
    parser.add_argument("--prompts", type=int, default=4, help="prompts per task")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--no-adaptive", action="store_true", help="leave the adaptive rows out")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (restored afterwards)")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--table", type=Path, nargs="+", default=None, metavar="JSON",
                        help="measure nothing: print these JSON files as the Markdown tables of docs/benchmarks.md")
    return parser


def _names(text: str, allowed: Sequence[str], what: str, parser: argparse.ArgumentParser) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in allowed]
    if unknown or not names:
        parser.error(f"--{what}: choose from {', '.join(allowed)} (got {text!r})")
    return names


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.table:
        print(json_blocks(args.table, describe_document, tuning_markdown))
        return 0
    drafters = _names(args.drafters, list(DRAFTERS), "drafters", parser)
    tasks = _names(args.tasks, TASKS, "tasks", parser)
    with torch_threads(args.threads or torch.get_num_threads()):
        device = torch.device("cpu")
        pair = load_pair("embedded", device=device)
        cross = load_cross_pair("embedded", pair)
        first = task_prompt_ids(pair, tasks[0], 1, device)[0]
        costs = measured_costs(pair, first, args.gammas)
        print(f"costs: c = {costs['c']:.3f}, verify cost v(gamma) = "
              + ", ".join(f"{g}: {v:.2f}" for g, v in costs["verify_costs"].items())
              + f", marginal verify cost {costs['marginal_verify']:.3f} per position", flush=True)
        results = {}
        for task in tasks:
            prompt_ids = task_prompt_ids(pair, task, args.prompts, device)
            results[task] = sweep_task(pair, cross, prompt_ids, drafters, args.gammas, costs,
                                       max_new_tokens=args.max_new_tokens, repeats=args.repeats,
                                       adaptive=not args.no_adaptive, progress=not args.no_progress)
            print(format_task(task, results[task]) + "\n", flush=True)
        machine = machine_info(device)
    print(f"machine: {machine_summary(machine)}; {args.prompts} prompts per task x {args.max_new_tokens} tokens, "
          f"{args.repeats} timed repeats after a warm-up, greedy. speed-up: median over repeats; c, v: from the "
          "timed rounds; pred: Leviathan (v = 1); pred+v: with the measured verify cost")
    if args.json is not None:
        settings = {"tasks": tasks, "drafters": drafters, "gammas": list(args.gammas), "prompts": args.prompts,
                    "max_new_tokens": args.max_new_tokens, "repeats": args.repeats, "decoding": "greedy",
                    "adaptive": not args.no_adaptive}
        costs = {**costs, "verify_costs": {str(g): v for g, v in costs["verify_costs"].items()}}
        write_json(args.json, {"settings": settings, "machine": machine, "costs": costs, "tasks": results})
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
