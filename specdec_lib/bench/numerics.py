"""Greedy speculative decoding in float32, bfloat16 and float16: how often it forks from the target's own greedy
output, where, with what margins, and whether the fork analysis can tell those forks from a bug:
``python -m specdec_lib bench numerics``.

For each dtype the embedded pair is loaded in that dtype and, on every prompt set, the target alone writes the
reference (greedy, ``--max-new-tokens`` tokens, no early stop). Then:

- **forks**: every drafter (the draft model, the EAGLE-1 layer, prompt lookup) at every gamma, one row at a time
  and as a batch of the set's prompts (the drafters that batch), each output judged by `explain_fork` against the
  reference: ``identical``, ``near-tie`` or ``disagreement``, with the fork's position and its top-2 margin; one-row
  runs are also replayed (`replay_verification`: every emitted token must be the argmax of the logits its
  verification computed, in any dtype).
- **drift**: the largest gap between a logit computed by a verification forward and the same logit computed by
  one-token steps: over the two logits that decide the token (the top two under one-token steps), in the dtype's
  rounding steps at the top logit, beside the near-tie tolerance (which must hold twice that: a margin moves by
  both logits' drift); and over the whole vocabulary, in nats.
- **control** (the negative control): the same runs with a *planted bug* in greedy verification (`planted_bug`: a
  draft token the target ranks second, behind by more than `PLANTED_MARGIN`, is accepted as if it were the
  first). Every run whose output the bug changed must be judged ``disagreement``, in every dtype; and a reference
  with one token replaced where the target is most confident must be too.

Nothing here is timed: the counts do not depend on the machine's load. The tables in docs/benchmarks.md are printed
from the stored JSON by `numerics_tables`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import torch

from ..core import engine
from ..core.devices import get_device
from ..core.errors import ConfigError
from ..core.forks import ForkReport, Replay, explain_fork, one_token_logits, replay_verification
from ..core.numerics import DTYPES, dtype_name, near_tie_tolerance, spacing
from ..core.verify import Verdict, greedy_rule
from ..decoders import autoregressive_generate, batched_speculative_generate, speculative_generate
from ..loading import load_pair
from ..prompts import TASKS, encode_prompts, load_prompts
from .cli import machine_info, parse_gammas, write_json
from .drafters import DRAFTERS

DEFAULT_GAMMAS = (1, 3, 7)
DEFAULT_PROMPTS = 5
DEFAULT_MAX_NEW_TOKENS = 48
FORK_DRAFTERS = ("draft-model", "eagle", "prompt-lookup")  # rows of bench.drafters.DRAFTERS
BATCH_DRAFTERS = ("draft-model", "prompt-lookup")  # the drafters that draft for a batch of rows
QUOTED_LOGIT = 8.0  # a typical top logit of the embedded target: where the table quotes the near-tie tolerance
PLANTED_MARGIN = 1.0  # nats: the planted bug accepts a second choice only when the target clearly prefers another


def planted_bug_verify(target_logits: torch.Tensor, draft_tokens: torch.Tensor,
                       num_drafts: torch.Tensor | None = None) -> Verdict:
    """Greedy verification with a planted bug: where draft ``d_i`` is the target's *second* choice and the top
    choice leads it by more than `PLANTED_MARGIN`, ``d_i`` is accepted as if it were the first (``target_logits:
    [B, K + 1, V]``, ``draft_tokens: [B, K]``). Everywhere else it is the round engine's greedy rule
    (`specdec_lib.core.verify.greedy_rule`)."""
    top = target_logits[:, :-1].topk(2, dim=-1)  # [B, K, 2]
    second = (top.indices[..., 1] == draft_tokens) & (top.values[..., 0] - top.values[..., 1] > PLANTED_MARGIN)
    doctored = target_logits.clone()
    rows, columns = second.nonzero(as_tuple=True)
    doctored[rows, columns, draft_tokens[rows, columns]] = top.values[rows, columns, 0] + 1.0
    return greedy_rule(doctored, draft_tokens, num_drafts)


@contextmanager
def planted_bug() -> Iterator[None]:
    """Every greedy round verified by `planted_bug_verify` inside the block (the round engine's verifier patched)."""
    with mock.patch.object(engine, "greedy_rule", planted_bug_verify):
        yield


def confident_replacement(target, reference: torch.Tensor, prompt_length: int) -> list[int]:
    """The reference's new tokens with one replaced by the target's second choice, where its top-2 margin under
    one-token steps is largest: a candidate that is clearly not the target's greedy output."""
    logits = one_token_logits(target, reference, prompt_length)  # [N, V]
    top = logits.topk(2, dim=-1)
    position = int((top.values[:, 0] - top.values[:, 1]).argmax())
    tokens = reference[prompt_length:].tolist()
    tokens[position] = int(top.indices[position, 1])
    return tokens


def verification_drift(target, result, replay: Replay) -> tuple[float, float]:
    """How far the logits of ``result``'s verification rounds (``replay``, its `replay_verification`) are from
    one-token steps over the same tokens:
    ``(steps, nats)``, the largest drift of a position's top two logits (under one-token steps) in rounding steps
    of the target's dtype at that position's top logit, and the largest drift of any logit, in nats."""
    dtype = target.dtype
    steps = nats = 0.0
    one_token = one_token_logits(target, result.sequence[0], result.prompt_length)  # [N, V]
    for replayed in replay.rounds[1:]:
        rows = len(replayed.emitted)
        reference = one_token[replayed.first:replayed.first + rows]  # [rows, V]
        drift = (replayed.logits[:rows] - reference).abs()
        top = reference.topk(2, dim=-1)
        deciding = drift.gather(1, top.indices).max(dim=-1).values  # [rows]
        steps = max(steps, max(float(d) / spacing(dtype, float(t)) for d, t in zip(deciding, top.values[:, 0])))
        nats = max(nats, float(drift.max()))
    return steps, nats


def _fork_entry(report: ForkReport) -> dict:
    return {"verdict": report.verdict, "position": report.position, "margin": report.margin,
            "verification_margin": report.verification_margin, "tolerance": report.tolerance,
            "worst_gap": None if report.worst is None else report.worst.gap}


def dtype_rows(dtype: torch.dtype, tasks: Sequence[str], prompts: int, gammas: Sequence[int], max_new_tokens: int,
               batch: bool = True, progress: bool = True, device: torch.device | str = "cpu") -> dict:
    """Every measurement of one dtype on ``device`` (module docstring): ``{"rows", "drift_steps", "control",
    "replaced", ...}``."""
    device = torch.device(device)
    pair = load_pair("embedded", device=device, dtype=dtype)
    target = pair.target
    rows, control, replaced, drift = [], Counter(), Counter(), [(0.0, 0.0)]
    for task in tasks:
        prompt_ids = encode_prompts(pair.target_tokenizer, [p.prompt for p in load_prompts(task, limit=prompts)],
                                    device)
        references = [autoregressive_generate(target, ids, max_new_tokens=max_new_tokens, eos_token_id=None)
                      for ids in prompt_ids]
        for reference, ids in zip(references, prompt_ids):
            report = explain_fork(target, reference, confident_replacement(target, reference.sequence[0],
                                                                           ids.shape[1]), prompt=ids)
            replaced[report.verdict] += 1
        for name in FORK_DRAFTERS:
            for gamma in gammas:
                drafter = DRAFTERS[name].build(pair, None)
                forks, replays_ok, outputs = [], 0, []
                for reference, ids in zip(references, prompt_ids):
                    result = speculative_generate(target, drafter, ids, gamma=gamma, max_new_tokens=max_new_tokens,
                                                  eos_token_id=None)
                    forks.append(_fork_entry(explain_fork(target, reference, result)))
                    replay = replay_verification(target, result)
                    replays_ok += replay.ok
                    outputs.append(result.new_token_list)
                    if name == "draft-model" and gamma == max(gammas):
                        drift.append(verification_drift(target, result, replay))
                rows.append({"task": task, "drafter": name, "gamma": gamma, "batch": 1, "forks": forks,
                             "replay_ok": replays_ok})
                if name == "draft-model":  # the negative control, against this clean run
                    with planted_bug():
                        for clean, reference, ids in zip(outputs, references, prompt_ids):
                            bugged = speculative_generate(target, drafter, ids, gamma=gamma,
                                                          max_new_tokens=max_new_tokens, eos_token_id=None)
                            if bugged.new_token_list == clean:
                                continue
                            control["changed"] += 1
                            control[explain_fork(target, reference, bugged).verdict] += 1
                            control["replay_caught"] += not replay_verification(target, bugged).ok
                if batch and name in BATCH_DRAFTERS:
                    result = batched_speculative_generate(target, DRAFTERS[name].build(pair, None), prompt_ids,
                                                          gamma=gamma, max_new_tokens=max_new_tokens,
                                                          eos_token_id=None)
                    forks = [_fork_entry(explain_fork(target, reference, result.sequences[b],
                                                      prompt=result.prompt_lengths[b]))
                             for b, reference in enumerate(references)]
                    rows.append({"task": task, "drafter": name, "gamma": gamma, "batch": len(prompt_ids),
                                 "forks": forks, "replay_ok": None})
                if progress:
                    print(f"  {dtype_name(dtype)} {task} {name} gamma {gamma}: "
                          f"{sum(f['verdict'] != 'identical' for f in rows[-1]['forks'])} forks", file=sys.stderr)
    return {"rows": rows, "drift_steps": max(steps for steps, _ in drift),
            "drift_nats": max(nats for _, nats in drift), "control": dict(control),
            "replaced": dict(replaced), "tolerance_at_8": near_tie_tolerance(dtype, QUOTED_LOGIT),
            "spacing_at_8": spacing(dtype, QUOTED_LOGIT)}


# ------------------------------------------------------------------------------------------------ reading the JSON
def summary_rows(document: dict) -> list[dict]:
    """One row per dtype x drafter x batch (gammas and tasks pooled): runs, forks, near-ties, disagreements, the
    share of runs that fork, the first fork's median position and the largest margin at a fork."""
    groups: dict[tuple, list[dict]] = {}
    for dtype, measured in document["dtypes"].items():
        for row in measured["rows"]:
            groups.setdefault((dtype, row["drafter"], row["batch"] > 1), []).extend(row["forks"])
    table = []
    for (dtype, drafter, batched), forks in groups.items():
        forked = [f for f in forks if f["verdict"] != "identical"]
        positions = sorted(f["position"] for f in forked)
        table.append({"dtype": dtype, "drafter": drafter, "batch": "batch" if batched else "one row",
                      "runs": len(forks), "forks": len(forked),
                      "near_tie": sum(f["verdict"] == "near-tie" for f in forked),
                      "disagreement": sum(f["verdict"] == "disagreement" for f in forked),
                      "fork_share": len(forked) / len(forks) if forks else 0.0,
                      "median_position": positions[len(positions) // 2] if positions else None,
                      "largest_margin": max((f["margin"] for f in forked), default=None)})
    return table


def by_gamma(document: dict) -> dict[str, dict[int, float]]:
    """Per dtype, per gamma: the share of runs (every drafter, task and batch) that fork."""
    shares: dict[str, dict[int, float]] = {}
    for dtype, measured in document["dtypes"].items():
        counts: dict[int, list[int]] = {}
        for row in measured["rows"]:
            runs = counts.setdefault(row["gamma"], [0, 0])
            runs[0] += len(row["forks"])
            runs[1] += sum(f["verdict"] != "identical" for f in row["forks"])
        shares[dtype] = {gamma: forked / runs for gamma, (runs, forked) in sorted(counts.items())}
    return shares


def numerics_tables(document: dict) -> str:
    """The Markdown tables of a numerics JSON document (what docs/benchmarks.md holds between its markers)."""
    settings = document["settings"]
    lines = [f"{settings['prompts']} prompts of each set ({', '.join(settings['tasks'])}) x "
             f"{settings['max_new_tokens']} new tokens, gamma {', '.join(map(str, settings['gammas']))}, greedy, "
             f"torch {document['machine']['torch']} on {document['machine']['device']}.", "",
             "| dtype | drafter | rows | runs | forks | near-tie | disagreement | fork share | median fork position | "
             "largest margin at a fork |", "|---|---|---|---|---|---|---|---|---|---|"]
    for row in summary_rows(document):
        margin = "" if row["largest_margin"] is None else f"{row['largest_margin']:.4g}"
        position = "" if row["median_position"] is None else str(row["median_position"])
        lines.append(f"| {row['dtype']} | {row['drafter']} | {row['batch']} | {row['runs']} | {row['forks']} | "
                     f"{row['near_tie']} | {row['disagreement']} | {row['fork_share']:.0%} | {position} | "
                     f"{margin} |")
    lines += ["", "| dtype | largest drift of the top two logits (rounding steps) | largest drift of any logit (nats) | "
              "near-tie tolerance at a logit of 8 | "
              "planted bug: runs changed | judged disagreement | caught by the replay | one confident token "
              "replaced: disagreement |", "|---|---|---|---|---|---|---|---|"]
    for dtype, measured in document["dtypes"].items():
        control, replaced = measured["control"], measured["replaced"]
        lines.append(f"| {dtype} | {measured['drift_steps']:.3g} | {measured['drift_nats']:.2g} | "
                     f"{measured['tolerance_at_8']:.3g} "
                     f"({measured['tolerance_at_8'] / measured['spacing_at_8']:.0f} steps) | "
                     f"{control.get('changed', 0)} | {control.get('disagreement', 0)} | "
                     f"{control.get('replay_caught', 0)} | {replaced.get('disagreement', 0)} of "
                     f"{sum(replaced.values())} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec_lib bench numerics", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated (default: every one)")
    parser.add_argument("--tasks", default=",".join(TASKS), help="comma-separated prompt sets (default: every one)")
    parser.add_argument("--prompts", type=int, default=DEFAULT_PROMPTS, help="first N prompts of each set")
    parser.add_argument("--gammas", type=parse_gammas, default=DEFAULT_GAMMAS, metavar="G1,G2,...")
    parser.add_argument("--max-new-tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS)
    parser.add_argument("--no-batch", action="store_true", help="leave out the batched rows")
    parser.add_argument("--device", default=None, help="cpu, cuda, ... (default: get_device(), SPECDEC_DEVICE)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH")
    parser.add_argument("--tables", type=Path, default=None, metavar="JSON",
                        help="print the tables of a stored run (what docs/benchmarks.md holds) and measure nothing")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if args.tables is not None:
        print(numerics_tables(json.loads(args.tables.read_text())))
        return 0
    dtypes = [name.strip() for name in args.dtypes.split(",")]
    tasks = [name.strip() for name in args.tasks.split(",")]
    unknown = [name for name in dtypes if name not in DTYPES] + [name for name in tasks if name not in TASKS]
    if unknown:
        parser.error(f"unknown dtype or prompt set: {', '.join(unknown)} (dtypes: {', '.join(DTYPES)}; "
                     f"sets: {', '.join(TASKS)})")
    gammas = list(args.gammas)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    try:
        device = get_device(args.device)
    except ConfigError as error:
        parser.error(str(error))
    document = {"settings": {"dtypes": dtypes, "tasks": tasks, "prompts": args.prompts, "gammas": gammas,
                             "max_new_tokens": args.max_new_tokens, "batch": not args.no_batch,
                             "planted_margin": PLANTED_MARGIN, "decoding": "greedy"},
                "machine": machine_info(device),
                "dtypes": {name: dtype_rows(DTYPES[name], tasks, args.prompts, gammas, args.max_new_tokens,
                                            batch=not args.no_batch, progress=not args.no_progress, device=device)
                           for name in dtypes}}
    print(numerics_tables(document))
    if args.json is not None:
        write_json(args.json, document)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
