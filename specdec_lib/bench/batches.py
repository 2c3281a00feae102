"""Speculation under batching: ``python -m specdec_lib bench batches``.

Batching and speculation compete for the same thing: spare compute per weight read. At batch size 1 a target
forward is memory-bound and verifying gamma + 1 positions costs little more than one; with B rows every forward
already carries B positions, so the gamma * B extra positions of a speculative forward start to cost real compute,
and the rows' ragged acceptance wastes slots. The gain shrinks with B and can turn into a loss (vLLM users
report slowdowns at batch 32).

For each batch size, on the same prompts (the first B of a fixed list), side by side in one run:

    batched-autoregressive        plain batched decoding (`batched_autoregressive_generate`)
    batched-draft-model[gamma=g]  batched speculative decoding with the embedded draft model
    batched-prompt-lookup[...]    the same with per-row prompt lookup

Each method runs once per repeat after one warm-up, interleaved; a row reports the median over repeats of
throughput (all rows' new tokens / wall seconds), the speed-up over the baseline of the same repeat, TTFT and
inter-token latency p50/p95 over the batch's requests and the worst request (`specdec_lib.bench.latency`), and
memory (weights plus KV caches at the final length, target and draft). Greedy: every row of every method must
emit what the baseline emits for it.

The disable-by-batch-size policy (vLLM's ``disable_by_batch_size``) gets its threshold from the measurement: the
largest batch size up to which speculation beat the baseline at every measured size (`choose_threshold`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from ..decoders import batched_speculative_generate
from ..core.result import GenerationResult
from ..decoders import batched_autoregressive_generate
from ..core.devices import torch_threads
from ..core.memory import kv_cache_bytes_at, weight_bytes
from ..core.pair import ModelPair
from ..loading import load_pair
from ..prompts import TASKS, encode_prompts, load_prompts
from .captions import describe_machine, machine_summary
from .cli import machine_info, parse_gammas, write_json
from .latency import latency_summary
from .methods import resolve_eos
from .results_table import json_blocks

BATCH_SIZES = (1, 2, 4, 8, 16)
BASELINE = "batched-autoregressive"

Generate = Callable[[Sequence[torch.Tensor]], GenerationResult]


def batch_methods(pair: ModelPair, gamma: int, max_new_tokens: int, lookup_gamma: int) -> dict[str, Generate]:
    """The compared methods, each a function of the batch's prompts (module docstring)."""
    eos = resolve_eos(pair)
    return {
        BASELINE: lambda prompts: batched_autoregressive_generate(
            pair.target, prompts, max_new_tokens=max_new_tokens, eos_token_id=eos),
        f"batched-draft-model[gamma={gamma}]": lambda prompts: batched_speculative_generate(
            pair.target, pair.draft, prompts, gamma=gamma, max_new_tokens=max_new_tokens, eos_token_id=eos),
        f"batched-prompt-lookup[gamma={lookup_gamma}]": lambda prompts: batched_speculative_generate(
            pair.target, "prompt-lookup", prompts, gamma=lookup_gamma, max_new_tokens=max_new_tokens,
            eos_token_id=eos),
    }


def memory_bytes(pair: ModelPair, method: str, prompts: Sequence[torch.Tensor], result: GenerationResult) -> dict:
    """Weights plus KV caches at each row's final length (the target's; the draft model's when it drafts)."""
    positions = sum(p.shape[-1] + len(tokens) for p, tokens in zip(prompts, result.tokens))
    uses_draft = "draft-model" in method
    weights = weight_bytes(pair.target) + (weight_bytes(pair.draft) if uses_draft else 0)
    kv = kv_cache_bytes_at(pair.target, positions) + (kv_cache_bytes_at(pair.draft, positions) if uses_draft else 0)
    return {"weights": weights, "kv": kv, "total": weights + kv}


def _row(method: str, batch: int, results: list[GenerationResult], baseline: list[GenerationResult],
         reference: list[list[int]], memory: dict) -> dict:
    speedups = [r.tokens_per_second / b.tokens_per_second for r, b in zip(results, baseline)]
    first = results[0]
    ttfts = [t or 0.0 for t in first.time_to_first_token()]
    totals = [times[-1] if times else 0.0 for times in first.token_times]
    drafted = sum(first.drafted) if first.drafted else 0
    return {
        "method": method, "batch": batch,
        "tokens_per_s": statistics.median(r.tokens_per_second for r in results),
        "speedup": statistics.median(speedups), "speedup_per_repeat": speedups,
        "target_forwards": first.target_forwards,
        "acceptance_rate": sum(first.accepted) / drafted if drafted else None,
        "identical": all(r.tokens == reference for r in results),
        "latency": latency_summary(ttfts, first.inter_token_latencies(), totals),
        "memory_bytes": memory,
    }


def measure_batches(pair: ModelPair, prompts: Sequence[torch.Tensor], batch_sizes: Sequence[int],
                    methods: dict[str, Generate], repeats: int, progress: bool = True) -> list[dict]:
    """One row per (batch size, method): warm-up, then ``repeats`` interleaved passes (module docstring)."""
    from tqdm.auto import tqdm

    rows = []
    bar = tqdm(total=len(batch_sizes) * (repeats + 1) * len(methods), desc="batches", disable=not progress,
               leave=False)
    for batch in batch_sizes:
        chosen = list(prompts[:batch])
        runs: dict[str, list[GenerationResult]] = {name: [] for name in methods}
        bar.set_description(f"batch {batch}")
        for name, generate in methods.items():
            generate(chosen)  # warm-up
            bar.update()
        for repeat in range(repeats):
            names = list(methods)
            names = names[repeat % len(names):] + names[:repeat % len(names)]  # rotate: nobody always runs first
            for name in names:
                runs[name].append(methods[name](chosen))
                bar.update()
        reference = runs[BASELINE][0].tokens
        for name, results in runs.items():
            rows.append(_row(name, batch, results, runs[BASELINE], reference,
                             memory_bytes(pair, name, chosen, results[0])))
        bar.write(f"batch {batch}: " + ", ".join(f"{r['method']} {r['speedup']:.2f}x" for r in rows[-len(methods):]))
    bar.close()
    return rows


def choose_threshold(rows: Sequence[dict], method: str) -> int | None:
    """The largest batch size up to which ``method`` beat the baseline (speed-up > 1) at every measured size
    (None: not even at the smallest): the ``disable_by_batch_size`` to use for it."""
    threshold = None
    for row in sorted((r for r in rows if r["method"] == method), key=lambda r: r["batch"]):
        if row["speedup"] <= 1.0:
            break
        threshold = row["batch"]
    return threshold


def describe_threshold(threshold: int | None, largest_batch: int) -> str:
    """A `choose_threshold` result in words, for a sweep whose largest batch size is ``largest_batch``: a threshold
    equal to it only says speculation never stopped paying within the sweep, and None that it never paid."""
    if threshold is None:
        return "none (slower than plain batching already at the smallest batch size)"
    if threshold >= largest_batch:
        return f"at least {threshold} (faster at every batch size swept)"
    return str(threshold)


def describe_thresholds(document: dict) -> str:
    """Every method's threshold of a batches JSON document, in words (`describe_threshold`)."""
    largest = max(document["settings"]["batch_sizes"])
    return ", ".join(f"{name}: {describe_threshold(value, largest)}" for name, value in document["thresholds"].items())


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f}"


def format_rows(rows: Sequence[dict]) -> str:
    head = (f"{'method':34} {'batch':>5} {'tok/s':>7} {'speed-up':>8} {'acc rate':>8} {'TTFT p95':>8} "
            f"{'ITL p50':>7} {'ITL p95':>7} {'worst':>7} {'memory':>8}  identical")
    lines = [head + "   (times in ms, memory in MB)"]
    for row in rows:
        latency, rate = row["latency"], row["acceptance_rate"]
        lines.append(
            f"{row['method']:34} {row['batch']:5} {row['tokens_per_s']:7.1f} {row['speedup']:7.2f}x "
            f"{'-' if rate is None else f'{rate:.3f}':>8} {_ms(latency['ttft_p95_s']):>8} "
            f"{_ms(latency['itl_p50_s']):>7} {_ms(latency['itl_p95_s']):>7} {_ms(latency['worst_request_s']):>7} "
            f"{row['memory_bytes']['total'] / 1e6:8.1f}  {'yes' if row['identical'] else 'NO'}")
    return "\n".join(lines)


def describe_document(document: dict) -> str:
    """One sentence: where and how a batches JSON document was measured, and the thresholds it chose."""
    machine, settings = document["machine"], document["settings"]
    return (f"{describe_machine(machine)}; "
            f"task {settings['task']}, {settings['max_new_tokens']} new tokens per row, {settings['repeats']} "
            f"repeats, greedy; disable-by-batch-size thresholds {describe_thresholds(document)}")


def batches_markdown(document: dict) -> str:
    """A batches JSON document as a Markdown table: a row per method, per batch size its speed-up over plain
    batched decoding and its ITL p95 in ms."""
    sizes = document["settings"]["batch_sizes"]
    methods = list(dict.fromkeys(row["method"] for row in document["rows"]))
    head = ["method"] + [f"batch {size}: speed-up, ITL p95" for size in sizes]
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    for method in methods:
        cells = [method]
        for size in sizes:
            row = next(r for r in document["rows"] if (r["method"], r["batch"]) == (method, size))
            cells.append(f"{row['speedup']:.2f}x, {_ms(row['latency']['itl_p95_s'])} ms")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def batch_prompts(pair: ModelPair, task: str, count: int, device: torch.device) -> list[torch.Tensor]:
    """The first ``count`` prompts of ``task`` as LongTensor[1, T] (the list repeats when the set is smaller)."""
    texts = [p.prompt for p in load_prompts(task)]
    return encode_prompts(pair.target_tokenizer, [texts[i % len(texts)] for i in range(count)], device)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec_lib bench batches", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-sizes", type=parse_gammas, default=BATCH_SIZES, metavar="B1,B2,...")
    parser.add_argument("--gamma", type=int, default=3, help="draft length of the draft model")
    parser.add_argument("--lookup-gamma", type=int, default=4, help="draft length of prompt lookup")
    parser.add_argument("--task", choices=TASKS, default="code")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (restored afterwards)")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--table", type=Path, nargs="+", default=None, metavar="JSON",
                        help="measure nothing: print these JSON files as the Markdown tables of docs/benchmarks.md")
    args = parser.parse_args(argv)
    if args.table:
        print(json_blocks(args.table, describe_document, batches_markdown))
        return 0
    with torch_threads(args.threads or torch.get_num_threads()):
        device = torch.device("cpu")
        pair = load_pair("embedded", device=device)
        prompts = batch_prompts(pair, args.task, max(args.batch_sizes), device)
        methods = batch_methods(pair, args.gamma, args.max_new_tokens, args.lookup_gamma)
        rows = measure_batches(pair, prompts, args.batch_sizes, methods, args.repeats, not args.no_progress)
        thresholds = {name: choose_threshold(rows, name) for name in methods if name != BASELINE}
        machine = machine_info(device)
    print(format_rows(rows))
    for name, threshold in thresholds.items():
        print(f"disable_by_batch_size for {name}: {describe_threshold(threshold, max(args.batch_sizes))} "
              "(speculate while at most that many rows are active)")
    print(f"machine: {machine_summary(machine)}; task {args.task}, {args.max_new_tokens} new tokens per row, "
          f"{args.repeats} interleaved repeats after a warm-up, greedy; speed-up: median over repeats of the "
          "method's tokens/s over the baseline's at the same batch size")
    if args.json is not None:
        settings = {"batch_sizes": list(args.batch_sizes), "gamma": args.gamma, "lookup_gamma": args.lookup_gamma,
                    "task": args.task, "max_new_tokens": args.max_new_tokens, "repeats": args.repeats,
                    "decoding": "greedy"}
        write_json(args.json, {"settings": settings, "machine": machine, "rows": rows, "thresholds": thresholds})
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
