"""Every drafter on every task type, side by side: ``python -m specdec_lib.bench.drafters``.

One table for the course's question "which drafter, for which task?": for each prompt set (code, prose,
input-grounded) the target alone and our `speculative_generate` with each drafter, plus transformers' own version
of the same idea where it has one, all measured with the protocol of ``python -m specdec_lib bench`` (one warm-up
pass, interleaved timed repeats, medians: `specdec_lib.bench.protocol`) and reported by the same `build_report`
rows (speed-up over the baseline, alpha, acceptance rate, mean acceptance length, identical tokens). Greedy, so
every row must emit the baseline's tokens.

    draft-model      the embedded draft (a 1-layer model on the target's tokenizer)
    cross-tokenizer  draft B on tokenizer B, through text (`CrossTokenizerDrafter`)
    prompt-lookup    n-gram copy from the prompt and the generated text (`PromptLookupDrafter`, rule "first");
                     prompt-lookup-latest: the same n-grams, the most recent occurrence
    suffix           suffix tree with continuation counts, adaptive draft length (`SuffixDrafter`)
    early-exit       the target's first layers and its exit head, one shared KV cache (`EarlyExitDrafter`)
    medusa-heads     extra heads on the target's last hidden state (`HeadsDrafter`, data/models/heads)
    eagle            one decoder layer autoregressing on the target's hidden states (`EagleDrafter`, data/models/eagle)
    eagle3           the same, reading fused low/middle/last layers, trained with training-time test (data/models/eagle3)
    hf-assisted      transformers' assisted generation with the same draft model   (twin of draft-model)
    hf-assisted-heuristic, hf-assisted-default
                     the same with transformers' own draft-length schedules (`assistant_config`)
    hf-prompt-lookup transformers' ``prompt_lookup_num_tokens``                     (twin of prompt-lookup)
    hf-early-exit    transformers' ``assistant_early_exit`` at the same exit layer  (twin of early-exit)

A twin runs at each of its drafter's gammas; ``over_transformers`` in a row is the twin's seconds over ours at the
same gamma (per repeat, median). The headline (`headline`) sets the fastest of our rows against the fastest of
transformers' on each task. Each task also gets the rows split by prompt length (``buckets``: the prompts at or
below the task's median prompt length, and those above), because acceptance depends on how much context there is
to match or to condition on.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ..drafters import CrossTokenizerDrafter, DraftModelDrafter, EarlyExitDrafter, PromptLookupDrafter, SuffixDrafter
from ..core.drafting import Drafter
from ..drafters.eagle import eagle3_folder, load_eagle
from ..drafters.heads import load_heads
from ..core.pair import ModelPair
from ..loading import load_pair
from ..prompts import TASKS, encode_prompts, load_prompts
from ..core.trace import mean_acceptance_length
from .captions import describe_machine, format_value, machine_summary
from .cli import load_cross_pair, machine_info, parse_gammas, write_json
from .hf import HFAssisted, HFEarlyExit, HFPromptLookup, fastest_against_transformers
from .methods import Autoregressive, GenerationSpec, Method, Speculative, resolve_eos
from .protocol import Measurements, measure
from .report import build_report, pooled_trace
from .results_table import json_blocks


class DrafterSpeculative(Speculative):
    """Our `speculative_generate` with one drafter; the row is named after the drafter (``name[gamma=g]``)."""

    def __init__(self, name: str, target, drafter: Drafter, gamma: int, spec: GenerationSpec) -> None:
        super().__init__(target, drafter, gamma, spec)
        self.name = name


@dataclass(frozen=True)
class DrafterRow:
    """A drafter of the table: its row name, how to build it, and transformers' twin of it (None: none)."""

    name: str
    build: Callable[[ModelPair, ModelPair], Drafter]  # (pair, cross pair) -> a fresh drafter
    twin: Callable[[ModelPair, int, GenerationSpec], Method] | None = None  # at each of the row's gammas
    # transformers' other ways of running the same idea, given the row's largest gamma
    more_twins: Callable[[ModelPair, int, GenerationSpec], list[Method]] | None = None


def _exit_layer(pair: ModelPair) -> int:
    return pair.target.config.early_exit_layer


DRAFTERS: dict[str, DrafterRow] = {row.name: row for row in (
    DrafterRow("draft-model", lambda pair, cross: DraftModelDrafter.for_pair(pair),
               lambda pair, gamma, spec: HFAssisted(pair.target, pair.draft, gamma, spec),
               lambda pair, gamma, spec: [HFAssisted(pair.target, pair.draft, gamma, spec, "heuristic"),
                                          HFAssisted(pair.target, pair.draft, gamma, spec, "default")]),
    DrafterRow("cross-tokenizer", lambda pair, cross: CrossTokenizerDrafter.for_pair(cross)),
    DrafterRow("prompt-lookup", lambda pair, cross: PromptLookupDrafter(rule="first"),
               lambda pair, gamma, spec: HFPromptLookup(pair.target, gamma, spec)),
    DrafterRow("prompt-lookup-latest", lambda pair, cross: PromptLookupDrafter(rule="latest")),
    DrafterRow("suffix", lambda pair, cross: SuffixDrafter()),
    DrafterRow("early-exit", lambda pair, cross: EarlyExitDrafter(pair.target),
               lambda pair, gamma, spec: HFEarlyExit(pair.target, _exit_layer(pair), gamma, spec)),
    DrafterRow("medusa-heads", lambda pair, cross: load_heads(pair.target)),
    DrafterRow("eagle", lambda pair, cross: load_eagle(pair.target)),
    DrafterRow("eagle3", lambda pair, cross: load_eagle(pair.target, eagle3_folder())),
)}

#: The gammas each drafter runs at by default: short drafts for the model drafters (every drafted token costs a
#: forward; `python -m specdec_lib bench tuning` sweeps them), up to 7 for the cheapest of them, whose later
#: positions are still often accepted (a CPU's matrix kernels work on blocks of rows, so verifying 8 tokens need not
#: cost more than 6 or 7), longer drafts for the model-free ones (a wrong copied token costs little when drafting is
#: free). The draft model's gammas are its transformers twin's too.
DEFAULT_GAMMAS = {"draft-model": (3, 5, 7), "cross-tokenizer": (3,), "prompt-lookup": (4, 8),
                  "prompt-lookup-latest": (8,), "suffix": (8,), "early-exit": (3, 5), "medusa-heads": (3,),
                  "eagle": (3, 5, 7), "eagle3": (3, 5, 7)}
DEFAULT_TASKS = TASKS


def build_task_methods(pair: ModelPair, cross: ModelPair, gammas: dict[str, Sequence[int]],
                       spec: GenerationSpec, transformers: bool = True,
                       registry: dict[str, DrafterRow] = DRAFTERS) -> list[Method]:
    """The baseline, then per drafter (a name of ``registry``) its rows at each gamma and (``transformers``) its
    twin at each gamma, then transformers' other schedules at the largest."""
    methods: list[Method] = [Autoregressive(pair.target, spec)]
    for name, row_gammas in gammas.items():
        row = registry[name]
        drafter = row.build(pair, cross)
        methods += [DrafterSpeculative(name, pair.target, drafter, gamma, spec) for gamma in row_gammas]
        if transformers and row.twin is not None:
            methods += [row.twin(pair, gamma, spec) for gamma in row_gammas]
        if transformers and row.more_twins is not None:
            methods += row.more_twins(pair, max(row_gammas), spec)
    return methods


def _bucket_numbers(measurements: Measurements, method: Method, indices: list[int]) -> dict:
    """Speed-up (median over repeats of the baseline's seconds over the method's, summed over ``indices``) and
    mean acceptance length (our rows: pooled warm-up traces) for a subset of the prompts."""
    baseline = measurements.methods[0].key
    ratios = [sum(base[i].seconds for i in indices) / sum(runs[i].seconds for i in indices)
              for base, runs in zip(measurements.timed[baseline], measurements.timed[method.key])]
    warm = [measurements.warmup[method.key][i] for i in indices]
    traced = all(run.result is not None for run in warm) and method.gamma is not None
    return {"speedup": statistics.median(ratios),
            "mean_acceptance_length": mean_acceptance_length(pooled_trace(warm)) if traced else None}


def length_buckets(prompt_ids: Sequence[torch.Tensor]) -> dict[str, list[int]]:
    """Prompt indices at or below the median prompt length (``short``) and above it (``long``)."""
    lengths = [ids.shape[1] for ids in prompt_ids]
    middle = statistics.median(lengths)
    return {"short": [i for i, n in enumerate(lengths) if n <= middle],
            "long": [i for i, n in enumerate(lengths) if n > middle]}


ROW_KEYS = ("method", "gamma", "speedup", "tokens_per_s", "alpha", "acceptance_rate", "mean_acceptance_length",
            "tokens_per_target_forward", "over_transformers", "identical")


def task_prompt_ids(pair: ModelPair, task: str, limit: int, device: torch.device) -> list[torch.Tensor]:
    """The first ``limit`` prompts of ``task``, each as LongTensor[1, T] on ``device`` (the target's tokenizer)."""
    return encode_prompts(pair.target_tokenizer, [p.prompt for p in load_prompts(task, limit=limit)], device)


def measure_task(pair: ModelPair, cross: ModelPair, prompt_ids: Sequence[torch.Tensor],
                 gammas: dict[str, Sequence[int]], *, max_new_tokens: int, repeats: int, transformers: bool = True,
                 progress: bool = True, registry: dict[str, DrafterRow] = DRAFTERS) -> tuple[list[Method], Measurements]:
    """Build one task's methods (`build_task_methods`) and measure them on its prompts (the bench protocol)."""
    spec = GenerationSpec(max_new_tokens, resolve_eos(pair), pair.target_tokenizer.pad_token_id)
    methods = build_task_methods(pair, cross, gammas, spec, transformers, registry)
    measurements = measure(methods, prompt_ids, repeats=repeats, device=pair.target.device, progress=progress,
                           count_models={"target": pair.target, "draft": pair.draft})
    return methods, measurements


def task_rows(pair: ModelPair, cross: ModelPair, prompt_ids: Sequence[torch.Tensor], gammas: dict[str, Sequence[int]],
              *, max_new_tokens: int, repeats: int, transformers: bool = True, progress: bool = True) -> list[dict]:
    """Measure every method on one task's prompts; one dict per row (`ROW_KEYS` plus ``buckets``)."""
    methods, measurements = measure_task(pair, cross, prompt_ids, gammas, max_new_tokens=max_new_tokens,
                                         repeats=repeats, transformers=transformers, progress=progress)
    buckets = length_buckets(prompt_ids)
    rows = []
    for method, row in zip(methods, build_report(measurements).rows):
        rows.append({**{key: row[key] for key in ROW_KEYS}, "method": method.name,
                     "buckets": {name: _bucket_numbers(measurements, method, indices)
                                 for name, indices in buckets.items() if indices}})
    return rows


_cell = format_value  # a table cell, blank when there is no value


def format_rows(task: str, rows: Sequence[dict]) -> str:
    """One task's rows as a fixed-width table."""
    head = (f"{'method':22} {'gamma':>5} {'speed-up':>8} {'alpha':>6} {'acc rate':>8} {'mean acc len':>12} "
            f"{'short/long speed-up':>19} {'ours/transformers':>17}  identical")
    lines = [f"task: {task}", head]
    for row in rows:
        short, long = row["buckets"].get("short", {}), row["buckets"].get("long", {})
        split = f"{_cell(short.get('speedup'))} / {_cell(long.get('speedup'))}"
        lines.append(f"{row['method']:22} {_cell(row['gamma']):>5} {_cell(row['speedup'], suffix='x'):>8} "
                     f"{_cell(row['alpha'], 3):>6} {_cell(row['acceptance_rate'], 3):>8} "
                     f"{_cell(row['mean_acceptance_length']):>12} {split:>19} "
                     f"{_cell(row['over_transformers'], suffix='x'):>17}  {_cell(row['identical'])}")
    return "\n".join(lines)


def describe_document(document: dict) -> str:
    """One sentence: where and how a drafters-bench JSON document was measured (from the document itself)."""
    machine, settings = document["machine"], document["settings"]
    return (f"{describe_machine(machine)}, "
            f"transformers {machine['transformers']}; {settings['prompts']} prompts per task x "
            f"{settings['max_new_tokens']} new tokens, {settings['repeats']} timed repeats, greedy")


def headline(rows: Sequence[dict]) -> dict:
    """One task's fastest lossless decoder of ours and of transformers' (the drafting rows whose tokens equal the
    target's own), and how much faster ours is: the ratio of the two speed-ups over the same baseline in the same
    run."""
    ours, theirs, ratio = fastest_against_transformers(
        [row for row in rows if row["gamma"] is not None and row["identical"]])
    return {"ours": ours, "transformers": theirs, "ratio": ratio}


def _named(row: dict | None) -> str:
    return "" if row is None else f"{row['method']} (γ {row['gamma']}) {_cell(row['speedup'], suffix='x')}"


def headline_markdown(document: dict) -> str:
    """The headline of a drafters-bench JSON document as a Markdown table: per task, the fastest of our rows and
    of transformers' rows (speed-up over the target alone) and ours over theirs."""
    lines = ["| task | fastest of ours | fastest of transformers' | ours / transformers |", "| --- | --- | --- | --- |"]
    for task, rows in document["tasks"].items():
        best = headline(rows)
        lines.append(f"| {task} | {_named(best['ours'])} | {_named(best['transformers'])} | "
                     f"{_cell(best['ratio'], suffix='x')} |")
    return "\n".join(lines)


def drafters_markdown(document: dict) -> str:
    """A drafters-bench JSON document as Markdown: the headline (`headline_markdown`), then one table with a row
    per method and gamma, per task its speed-up (short / long prompts) and mean acceptance length, and ours /
    transformers where the row has a twin."""
    return headline_markdown(document) + "\n\n" + _rows_markdown(document)


def _rows_markdown(document: dict) -> str:
    tasks = document["tasks"]
    first = next(iter(tasks.values()))
    head = ["method", "gamma"] + [f"{task}: speed-up (short / long), mean acc len" for task in tasks]
    head.append("ours / transformers (" + ", ".join(tasks) + ")")
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    for method, gamma in [(row["method"], row["gamma"]) for row in first]:
        cells, ratios = [method, _cell(gamma)], []
        for rows in tasks.values():
            row = next(r for r in rows if (r["method"], r["gamma"]) == (method, gamma))
            short, long = row["buckets"].get("short", {}), row["buckets"].get("long", {})
            length = _cell(row["mean_acceptance_length"])
            cells.append(f"{_cell(row['speedup'], suffix='x')} ({_cell(short.get('speedup'))} / "
                         f"{_cell(long.get('speedup'))})" + (f", {length}" if length else ""))
            ratios.append(_cell(row["over_transformers"], suffix="x"))
        cells.append(", ".join(ratios) if any(ratios) else "")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def tables_markdown(paths: Sequence[Path], root: Path | None = None) -> str:
    """For each JSON file (relative to ``root``, default the working directory): its run in one line, its table
    (what docs/benchmarks.md holds between ``<!-- drafters-table: FILES -->`` markers)."""
    return json_blocks(paths, describe_document, drafters_markdown, root)


def parse_drafters(text: str) -> dict[str, tuple[int, ...]]:
    """``"draft-model:3,4 prompt-lookup:8 suffix"`` -> {name: gammas} (a name alone takes its default gammas)."""
    chosen = {}
    for part in text.split():
        name, _, gammas = part.partition(":")
        if name not in DRAFTERS:
            raise argparse.ArgumentTypeError(f"unknown drafter {name!r}; choose from {', '.join(DRAFTERS)}")
        chosen[name] = parse_gammas(gammas) if gammas else DEFAULT_GAMMAS[name]
    if not chosen:
        raise argparse.ArgumentTypeError("--drafters needs at least one drafter name")
    return chosen


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec_lib.bench.drafters", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    default = " ".join(f"{name}:{','.join(map(str, g))}" for name, g in DEFAULT_GAMMAS.items())
    parser.add_argument("--drafters", type=parse_drafters, default=parse_drafters(default),
                        help=f"drafters and their gammas (default: '{default}')")
    parser.add_argument("--tasks", default=",".join(DEFAULT_TASKS), help="comma-separated prompt sets")
    parser.add_argument("--prompts", type=int, default=8, help="prompts per task")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--no-transformers", action="store_true", help="leave transformers' twins out")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--table", type=Path, nargs="+", default=None, metavar="JSON",
                        help="measure nothing: print these JSON files as the Markdown tables of docs/benchmarks.md")
    args = parser.parse_args(argv)
    if args.table:
        print(tables_markdown(args.table))
        return 0
    tasks = [task.strip() for task in args.tasks.split(",") if task.strip()]
    unknown = [task for task in tasks if task not in TASKS]
    if unknown or not tasks:
        parser.error(f"--tasks: choose from {', '.join(TASKS)} (got {args.tasks!r})")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    pair = load_pair("embedded", device=device)
    cross = load_cross_pair("embedded", pair)  # the same target object, with draft B
    results = {}
    for task in tasks:
        prompt_ids = task_prompt_ids(pair, task, args.prompts, device)
        results[task] = task_rows(pair, cross, prompt_ids, args.drafters, max_new_tokens=args.max_new_tokens,
                                  repeats=args.repeats, transformers=not args.no_transformers,
                                  progress=not args.no_progress)
        best = headline(results[task])
        print(format_rows(task, results[task]) + f"\nfastest: ours {_named(best['ours'])}, transformers "
              f"{_named(best['transformers']) or '(not run)'}, ours / transformers {_cell(best['ratio'], suffix='x')}\n",
              flush=True)
    machine = machine_info(device)
    print(f"machine: {machine_summary(machine)}; {args.prompts} prompts per task x {args.max_new_tokens} tokens, "
          f"{args.repeats} timed repeats after a warm-up, greedy; speed-up: median over repeats of the baseline's "
          "seconds / the row's; ours/transformers: the twin's seconds / ours, same gamma")
    if args.json is not None:
        settings = {"tasks": tasks, "prompts": args.prompts, "max_new_tokens": args.max_new_tokens,
                    "repeats": args.repeats, "drafters": {k: list(v) for k, v in args.drafters.items()},
                    "decoding": "greedy", "transformers": not args.no_transformers}
        write_json(args.json, {"settings": settings, "machine": machine, "tasks": results})
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
