"""Token trees against the chain, side by side: ``python -m specdec_lib.bench.trees``.

For each tree shape: the nodes the target verifies per round, the measured cost of that verify forward relative to
a one-token forward, tokens per target forward, mean acceptance length, tokens/s and the speed-up over the target
alone, next to the chain of the same depth (our `speculative_generate` with gamma = depth) and the baseline, on the
same prompts with the same protocol as ``python -m specdec_lib bench`` (one warm-up pass, interleaved timed
repeats, medians: `specdec_lib.bench.protocol`). Greedy, so every row must emit the baseline's tokens
(``identical``). A tree pays where its extra tokens per forward outgrow the extra cost of verifying its nodes.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from ..drafters import DraftModelDrafter
from ..core.errors import SpecdecError
from ..loading import load_pair
from ..prompts import TASKS, encode_prompts, load_prompts
from ..core.result import GenerationResult
from .model_measures import interleaved_forward_costs
from ..decoders import tree_speculative_generate
from ..core.trees import TreeShape
from .cli import machine_info, write_json
from .methods import Autoregressive, GenerationSpec, Method, Speculative, resolve_eos
from .protocol import measure
from .report import build_report

DEFAULT_SHAPES = "1,1,1,1 2,1,1,1 2,2,1,1 3,2,1,1 4,2,2,1"


class TreeSpeculative(Method):
    """Our tree speculative decoding with one static shape (row ``tree[b1,b2,..]``)."""

    name, source = "tree", "trace"

    def __init__(self, target, drafter: DraftModelDrafter, shape: TreeShape, spec: GenerationSpec) -> None:
        self.target, self.drafter, self.shape, self.spec = target, drafter, shape, spec

    @property
    def key(self) -> str:
        return f"tree[{','.join(map(str, self.shape.branching))}]"

    def generate(self, input_ids: torch.Tensor, seed: int | None = None) -> tuple[list[int], GenerationResult | None]:
        result = tree_speculative_generate(self.target, self.drafter, input_ids, shape=self.shape,
                                           max_new_tokens=self.spec.max_new_tokens, eos_token_id=self.spec.eos_token_id)
        return result.new_token_list, result


def parse_shapes(text: str) -> list[TreeShape]:
    """``"1,1,1 2,2,1"`` -> [TreeShape((1, 1, 1)), TreeShape((2, 2, 1))] (argparse type)."""
    problem = "no shape given" if not text.split() else None
    try:
        shapes = [TreeShape(tuple(int(b) for b in part.split(","))) for part in text.split()]
    except (ValueError, SpecdecError) as error:
        problem = str(error)
    if problem is not None:
        raise argparse.ArgumentTypeError(
            f"--shapes takes space-separated shapes of comma-separated branchings, e.g. '1,1,1,1 2,2,1,1': {problem}"
        )
    return shapes


def tree_rows(pair, prompt_ids: Sequence[torch.Tensor], shapes: Sequence[TreeShape], *, max_new_tokens: int,
              repeats: int, progress: bool = True) -> list[dict]:
    """Measure the baseline, one chain per tree depth and every shape; one dict per row (module docstring)."""
    spec = GenerationSpec(max_new_tokens, resolve_eos(pair))
    chain_drafter = tree_drafter = DraftModelDrafter.for_pair(pair)  # one drafter, whatever shape it drafts
    depths = sorted({shape.depth for shape in shapes})
    methods: list[Method] = [Autoregressive(pair.target, spec)]
    methods += [Speculative(pair.target, chain_drafter, depth, spec) for depth in depths]
    methods += [TreeSpeculative(pair.target, tree_drafter, shape, spec) for shape in shapes]
    measurements = measure(methods, prompt_ids, repeats=repeats, device=pair.target.device, progress=progress)
    context = prompt_ids[0][:, :64]
    nodes_of = [method.shape.size if isinstance(method, TreeSpeculative) else method.gamma or 0 for method in methods]
    # what verifying each tree or chain costs: a target forward over its nodes + 1 positions, over one position
    costs = interleaved_forward_costs({nodes: (pair.target, context, nodes + 1) for nodes in {0, *nodes_of}}, repeats=10)
    rows = []
    for method, nodes, row in zip(methods, nodes_of, build_report(measurements).rows):  # speed, acceptance, identity
        rows.append({
            "method": method.key,
            "nodes": nodes,
            "verify_cost": costs[nodes] / costs[0],
            **{key: row[key] for key in ("tokens_per_target_forward", "mean_acceptance_length", "tokens_per_s",
                                         "speedup", "identical")},
        })
    return rows


def format_rows(rows: Sequence[dict]) -> str:
    lines = [f"{'method':18} {'nodes':>5} {'verify cost':>11} {'tokens/forward':>14} {'mean acc len':>12} "
             f"{'tokens/s':>9} {'speed-up':>8}  identical"]
    for row in rows:
        mal = "" if row["mean_acceptance_length"] is None else f"{row['mean_acceptance_length']:.2f}"
        lines.append(f"{row['method']:18} {row['nodes']:5} {row['verify_cost']:10.2f}x "
                     f"{row['tokens_per_target_forward']:14.2f} {mal:>12} {row['tokens_per_s']:9.1f} "
                     f"{row['speedup']:7.2f}x  {'yes' if row['identical'] else 'NO'}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec_lib.bench.trees", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", type=parse_shapes, default=parse_shapes(DEFAULT_SHAPES),
                        help=f"tree shapes (default: '{DEFAULT_SHAPES}')")
    parser.add_argument("--task", choices=TASKS, default="code")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    pair = load_pair("embedded", device=device)
    prompts = load_prompts(args.task, limit=args.prompts)
    prompt_ids = encode_prompts(pair.target_tokenizer, [p.prompt for p in prompts], device)
    rows = tree_rows(pair, prompt_ids, args.shapes, max_new_tokens=args.max_new_tokens, repeats=args.repeats,
                     progress=not args.no_progress)
    machine = machine_info(device)
    settings = {"task": args.task, "prompts": args.prompts, "max_new_tokens": args.max_new_tokens,
                "repeats": args.repeats, "shapes": [list(s.branching) for s in args.shapes], "decoding": "greedy"}
    print(format_rows(rows))
    print(f"\nmachine: {machine['device']}, {machine['cpu_count']} CPUs, torch {machine['torch']} "
          f"({machine['torch_threads']} threads); {args.prompts} {args.task} prompts x {args.max_new_tokens} tokens, "
          f"{args.repeats} timed repeats after a warm-up, greedy")
    print("verify cost: median time of one target forward over nodes + 1 positions / over 1 position (64-token "
          "context); speed-up: median over repeats of the baseline's seconds / the row's, same prompts")
    if args.json is not None:
        write_json(args.json, {"settings": settings, "machine": machine, "rows": rows})
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
