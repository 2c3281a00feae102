"""Block verification's gain, measured where it can be seen: ``python -m specdec_lib.bench.block_gain``.

Whether block verification (`specdec_lib.core.block_verify`) keeps more drafts than token-wise exact verification
(`specdec_lib.core.verify`) is a statement about an *expectation*, and both rules are pure functions of one round's
``(p, q, drafts)``. So the comparison does not need the models in the loop, only real rows:

1. **collect** (`collect_rows`): for every prompt and temperature T, the target samples a continuation; at every
   ``stride``-th position of it (a *context*), the draft draws ``draws`` chains of ``K = max(gammas)`` tokens from
   its own distribution q at T, and one target forward over context + chain gives p at every position of each
   chain. A chain's first gamma drafts, their q and the first gamma + 1 rows of p are one round at draft length
   gamma, exactly what a speculative decoder at gamma would verify there;
2. **re-verify** (`verify_rows`): every row ``repeats`` times, seeded, with both rules (`verify_exact` and
   `verify_block`, whole batches of rows at once), and once more without sampling: the exact expectation of
   each rule's accepted drafts given the row (`expected_accepted`), which the sampled means must agree with;
3. **summarise** (`summarise`): per rule, the mean accepted drafts per round with a 95-percent interval, and the paired
   gain (block minus token-wise, on the same rows and the same seeds). Rows of one context are not independent
   (same prefix, same p), so the unit of the interval is the context: ``mean +- t sd / sqrt(contexts)`` over the
   per-context means (Student's t with contexts - 1 degrees of freedom: few contexts, a wide interval).

The rows stay in memory; the JSON (``--json``, the course reads ``data/bench/block-gain.json``) holds the settings
and one summary per (temperature, gamma). No clock is read: the numbers do not depend on the machine's speed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ..core.block_verify import block_thresholds, verify_block
from ..core.forward import forward_with_cache
from ..core.pair import ModelPair
from ..core.sampling import SamplingConfig, draw, logits_to_probs
from ..core.stats import cluster_mean_interval
from ..core.verify import verify_exact
from ..decoders import autoregressive_generate
from ..loading import load_pair
from ..prompts import TASKS
from .cli import write_json
from .drafters import task_prompt_ids

RULES = ("token-wise", "block")
DEFAULTS = {"tasks": ("code", "prose", "grounded"), "prompts": 4, "continuation": 40, "stride": 5, "draws": 6,
            "temperatures": (0.5, 1.0, 1.5), "gammas": (2, 4, 6), "repeats": 16, "seed": 0}


@dataclass(frozen=True)
class Rows:
    """Rounds of draft length ``K`` at one temperature: ``p: [N, K + 1, V]`` the target's distributions along each
    chain (row i after i drafts), ``q: [N, K, V]`` the draft's (what each draft was drawn from), ``tokens: [N, K]``
    the drafts, ``context: [N]`` the context each chain was drafted from (the unit of the intervals)."""

    p: torch.Tensor
    q: torch.Tensor
    tokens: torch.Tensor
    context: torch.Tensor

    def at(self, gamma: int) -> Rows:
        """The same chains cut to their first ``gamma`` drafts: a prefix of a chain drawn from q is one too."""
        return Rows(self.p[:, : gamma + 1], self.q[:, :gamma], self.tokens[:, :gamma], self.context)


def toy_rows(p: torch.Tensor, q: torch.Tensor, gamma: int, n: int, seed: int = 0) -> Rows:
    """``n`` rounds of ``gamma`` drafts drawn from ``q: [V]`` against the target ``p: [V]``, the same at every
    position (no context: each row is its own context). For tests and the notebooks' toys."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.multinomial(q.expand(n * gamma, -1), 1, replacement=True, generator=generator).view(n, gamma)
    return Rows(p.expand(n, gamma + 1, -1).clone(), q.expand(n, gamma, -1).clone(), tokens, torch.arange(n))


@torch.inference_mode()
def draft_chains(pair: ModelPair, context: torch.Tensor, sampling: SamplingConfig, length: int, draws: int,
                 generator: torch.Generator) -> Rows:
    """``draws`` chains of ``length`` drafts after ``context: [1, T]``, each token drawn from the draft's q at
    ``sampling`` (the library's `draw`, as every model drafter does), then one target forward over all of them."""
    ids = context.expand(draws, -1)
    q_rows = []
    for _ in range(length):  # no cache: a handful of short forwards of a one-layer draft
        tokens, q = draw(forward_with_cache(pair.draft, ids, None, logits_to_keep=1)[:, -1], sampling, generator)
        q_rows.append(q)
        ids = torch.cat([ids, tokens[:, None]], dim=1)
    logits = forward_with_cache(pair.target, ids, None, logits_to_keep=length + 1)  # [draws, length + 1, V]
    chain = ids[:, context.shape[1] :]
    return Rows(logits_to_probs(logits, sampling), torch.stack(q_rows, dim=1), chain,
                torch.zeros(draws, dtype=torch.long))


def collect_rows(pair: ModelPair, prompt_ids: Sequence[torch.Tensor], temperature: float, *, length: int,
                 continuation: int, stride: int, draws: int, seed: int = 0) -> Rows:
    """Real rounds at ``temperature`` (module docstring, step 1): for each prompt, a sampled continuation of
    ``continuation`` tokens by the target; at its positions 0, stride, 2 stride, ... (each a context), ``draws``
    chains of ``length`` drafts. Seeded: the same arguments give the same rows."""
    sampling = SamplingConfig(temperature=temperature)
    generator = torch.Generator().manual_seed(seed)
    parts, contexts = [], 0
    for index, ids in enumerate(prompt_ids):
        text = autoregressive_generate(pair.target, ids, max_new_tokens=continuation, sampling=sampling,
                                       eos_token_id=None, seed=seed + index)
        full = torch.cat([ids[0].cpu(), torch.tensor(text.new_token_list)]).view(1, -1).to(ids.device)
        for cut in range(0, continuation, stride):
            rows = draft_chains(pair, full[:, : ids.shape[1] + cut], sampling, length, draws, generator)
            parts.append(Rows(rows.p.cpu(), rows.q.cpu(), rows.tokens.cpu(), rows.context + contexts))
            contexts += 1
    return Rows(*(torch.cat([getattr(part, name) for part in parts]) for name in ("p", "q", "tokens", "context")))


def expected_accepted(rows: Rows) -> dict[str, torch.Tensor]:
    """Each rule's exact expected accepted drafts for every row, ``[N]`` per rule (no sampling):
    token-wise ``E[N] = sum_n prod_{i < n} min(1, p_i(x_i) / q_i(x_i))``, block ``E[tau] = sum_i i P(tau = i)``
    from `block_thresholds(...).length_distribution()`."""
    p_draft = rows.p[:, :-1].gather(-1, rows.tokens[..., None])[..., 0]  # [N, K]: p_i(x_i)
    q_draft = rows.q.gather(-1, rows.tokens[..., None])[..., 0]  # [N, K]: q_i(x_i) > 0 (x_i was drawn from q_i)
    token_wise = torch.cumprod((p_draft / q_draft).clamp(max=1.0), dim=1).sum(dim=1)
    lengths = torch.arange(rows.tokens.shape[1] + 1, dtype=rows.p.dtype)
    block = (block_thresholds(rows.p, rows.q, rows.tokens).length_distribution() * lengths).sum(dim=1)
    return {"token-wise": token_wise, "block": block}


def verify_rows(rows: Rows, repeats: int, *, seed: int = 0, chunk: int = 256) -> dict[str, torch.Tensor]:
    """Module docstring, step 2: accepted drafts ``[repeats, N]`` per rule, every row verified ``repeats`` times
    by each rule, ``chunk`` rows per call. Draw r of both rules uses the generator seeded ``seed + r``."""
    verifiers = {"token-wise": verify_exact, "block": verify_block}
    accepted = {rule: torch.empty(repeats, rows.tokens.shape[0], dtype=torch.long) for rule in RULES}
    for rule, verify in verifiers.items():
        for repeat in range(repeats):
            generator = torch.Generator().manual_seed(seed + repeat)
            for start in range(0, rows.tokens.shape[0], chunk):
                part = slice(start, start + chunk)
                verdict = verify(rows.p[part], rows.q[part], rows.tokens[part], generator=generator)
                accepted[rule][repeat, part] = verdict.accepted
    return accepted


def summarise(rows: Rows, accepted: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> dict:
    """Module docstring, step 3: per rule the sampled mean accepted drafts with its interval and the exact
    expectation's mean; the paired gain (block - token-wise) sampled and expected, with intervals."""
    per_row = {rule: accepted[rule].double().mean(dim=0) for rule in RULES}  # [N]: each row's mean over repeats
    summary = {rule: {**cluster_mean_interval(per_row[rule], rows.context), "expected": float(expected[rule].double().mean())}
               for rule in RULES}
    summary["gain"] = cluster_mean_interval(per_row["block"] - per_row["token-wise"], rows.context)
    summary["expected_gain"] = cluster_mean_interval(expected["block"] - expected["token-wise"], rows.context)
    summary["rows"] = int(rows.tokens.shape[0])
    summary["draws"] = int(accepted["block"].numel())
    return summary


def measure_block_gain(pair: ModelPair, *, tasks: Sequence[str] = DEFAULTS["tasks"], prompts: int = DEFAULTS["prompts"],
                       continuation: int = DEFAULTS["continuation"], stride: int = DEFAULTS["stride"],
                       draws: int = DEFAULTS["draws"], temperatures: Sequence[float] = DEFAULTS["temperatures"],
                       gammas: Sequence[int] = DEFAULTS["gammas"], repeats: int = DEFAULTS["repeats"],
                       seed: int = DEFAULTS["seed"], progress: bool = False) -> dict:
    """The whole measurement (module docstring) as a JSON-ready document: ``settings`` and one entry of
    `summarise` per (temperature, gamma) in ``rows``."""
    device = pair.target.device
    prompt_ids = [ids for task in tasks for ids in task_prompt_ids(pair, task, prompts, device)]
    results = []
    for temperature in temperatures:
        rows = collect_rows(pair, prompt_ids, temperature, length=max(gammas), continuation=continuation,
                            stride=stride, draws=draws, seed=seed)
        for gamma in gammas:
            cut = rows.at(gamma)
            summary = summarise(cut, verify_rows(cut, repeats, seed=seed), expected_accepted(cut))
            results.append({"temperature": temperature, "gamma": gamma, **summary})
            if progress:
                print(f"T={temperature:g} gamma={gamma}: token-wise {summary['token-wise']['mean']:.3f}, "
                      f"block {summary['block']['mean']:.3f}, gain {summary['gain']['mean']:+.3f} "
                      f"[{summary['gain']['low']:+.3f}, {summary['gain']['high']:+.3f}]", flush=True)
    settings = {"tasks": list(tasks), "prompts_per_task": prompts, "continuation": continuation, "stride": stride,
                "draws_per_context": draws, "temperatures": list(temperatures), "gammas": list(gammas),
                "repeats": repeats, "seed": seed, "interval": "95-percent, Student's t over per-context means"}
    return {"settings": settings, "rows": results}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec_lib.bench.block_gain", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default=",".join(DEFAULTS["tasks"]), help="comma-separated, from " + ", ".join(TASKS))
    parser.add_argument("--prompts", type=int, default=DEFAULTS["prompts"], help="prompts per task")
    parser.add_argument("--continuation", type=int, default=DEFAULTS["continuation"])
    parser.add_argument("--stride", type=int, default=DEFAULTS["stride"])
    parser.add_argument("--draws", type=int, default=DEFAULTS["draws"], help="chains drafted per context")
    parser.add_argument("--temperatures", default=",".join(map(str, DEFAULTS["temperatures"])))
    parser.add_argument("--gammas", default=",".join(map(str, DEFAULTS["gammas"])))
    parser.add_argument("--repeats", type=int, default=DEFAULTS["repeats"], help="verifications of every row")
    parser.add_argument("--seed", type=int, default=DEFAULTS["seed"])
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (one: small batches gain nothing "
                        "from a second, and a busy machine makes it much slower)")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH")
    args = parser.parse_args(argv)
    tasks = [t for t in args.tasks.split(",") if t]
    if unknown := [t for t in tasks if t not in TASKS]:
        parser.error(f"unknown task(s) {unknown}; choose from {', '.join(TASKS)}")
    if args.threads:
        torch.set_num_threads(args.threads)
    document = measure_block_gain(
        load_pair("embedded", device="cpu"), tasks=tasks, prompts=args.prompts, continuation=args.continuation,
        stride=args.stride, draws=args.draws, temperatures=[float(t) for t in args.temperatures.split(",")],
        gammas=[int(g) for g in args.gammas.split(",")], repeats=args.repeats, seed=args.seed, progress=True)
    if args.json:
        write_json(args.json, document)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
