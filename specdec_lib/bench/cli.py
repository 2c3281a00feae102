"""`python -m specdec_lib bench`: our speculative decoding against the baseline and transformers, one table.

    python -m specdec_lib bench                                  # greedy: 8 code prompts, 64 new tokens, gammas 1..8
    python -m specdec_lib bench --task prose --gammas 2,4 --repeats 5 --json runs/bench.json
    python -m specdec_lib bench --temperature 0.8 --top-p 0.95 --seed 7   # sampling, exact verification
    python -m specdec_lib bench --cross --gammas 2,4             # + the cross-tokenizer draft (draft_b) rows
    python -m specdec_lib bench --no-eos                         # every method generates exactly max-new-tokens

The other suites run as ``python -m specdec_lib bench SUITE [ARGS...]`` (`SUITES`; ``SUITE --help`` for each):
``drafters`` (every drafter by task type), ``tuning`` (gamma sweep and adaptive draft length by task type),
``batches`` (batch sizes 1-16, disable-by-batch-size), ``trees`` (token trees), ``block-gain`` (block against
token-wise verification on real (p, q) rows), ``plots`` (the figures of the tuning and batch JSON files),
``numerics`` (forks from the target's greedy output in float32, bfloat16 and float16, and the planted-bug control
of the fork analysis). The load test against a real server, ``transformers serve``, is a maintainer's tool:
``python -m specdec_tools serve``.

One row per method (and draft length gamma), all on the same prompts, the same pair, the same stopping rule and
the same decoding: our autoregressive baseline, transformers' plain ``generate``, our speculative decoding, the
``lean`` reference loop (greedy; "ours / lean" under the table is what our loop costs above the bare algorithm)
and transformers' assisted generation; ``--cross`` adds the rows of the preset's cross-tokenizer draft and the
drafter overhead per round (``ovh/rnd``). The methods are `specdec_lib.bench.methods`, how they are timed
`specdec_lib.bench.protocol`, how the columns are derived `specdec_lib.bench.report`, the overhead
`specdec_lib.bench.profiling`; this module parses arguments and prints. With sampling, ``identical`` is
``n/a (sampling)`` (`DISTRIBUTION_NOTE`).

Exit codes: 0 done; 1 the models or prompts could not be loaded; 2 bad arguments (argparse style).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path
from typing import Sequence

import torch
import transformers

from ..core.devices import describe_device, get_device
from ..core.errors import ConfigError, ContextOverflowError, SpecdecError
from ..core.validation import check_fits_context
from ..loading import PRESETS, ModelPair, load_preset_model
from ..prompts import TASKS, encode_prompts
from ..core.sampling import SamplingConfig
from . import run_benchmark
from .methods import HF_ASSISTED_CROSS, SPECULATIVE, resolve_eos

DEFAULT_GAMMAS = (1, 2, 3, 4, 6, 8)
DEFAULT_TASK = "code"
DEFAULT_PROMPTS = 8
DEFAULT_MAX_NEW_TOKENS = 64
DEFAULT_REPEATS = 3

# column key -> (header, format of a value); None values print blank
COLUMNS: dict[str, tuple[str, str]] = {
    "method": ("method", "{}"),
    "gamma": ("gamma", "{}"),
    "tokens_per_s": ("tokens/s", "{:.1f}"),
    "speedup": ("speed-up", "{:.2f}x"),
    "mean_acceptance_length": ("mean acc len", "{:.2f}"),
    "acceptance_rate": ("acc rate", "{:.2f}"),
    "drafter_overhead_ms": ("ovh/rnd", "{:.2f}ms"),
    "c": ("c", "{:.3f}"),
    "alpha": ("alpha", "{:.3f}"),
    "predicted_speedup": ("predicted", "{:.2f}x"),
    "measured_over_predicted": ("meas/pred", "{:.2f}"),
    "identical": ("identical", "{}"),
}

# columns printed only when some row has a value (the overhead is measured only with --cross)
OPTIONAL_COLUMNS = frozenset({"drafter_overhead_ms"})

#: --cross: the preset whose draft is on another tokenizer, for each preset with a same-tokenizer draft (same target)
CROSS_PRESETS = {"embedded": "embedded-cross", "hub-qwen2.5": "hub-cross"}

DISTRIBUTION_NOTE = (
    "identical = n/a (sampling): each method samples from its own random stream, so tokens cannot match the "
    "baseline's. That our speculative sampling is distributed exactly like the target's own sampling is shown "
    "statistically by tests/test_sampling_distribution.py and notebook 02, not by this benchmark."
)

_LEGEND_HEAD = """\
tokens/s      median over repeats of (new tokens / wall seconds) over all prompts
speed-up      median over repeats of tokens/s divided by the baseline's (autoregressive) in the same repeat
mean acc len  mean acceptance length: tokens per verification round (accepted drafts + 1), rounds without drafts excluded
acc rate      acceptance rate: accepted / drafted tokens (drafts after a rejection count as drafted)
alpha         per-token acceptance: accepted / examined drafts (a round examines drafts up to its first rejection)
              ours: all three from the traces; hf-assisted: from forward counts in the warm-up pass, its alpha
              the one under which Leviathan et al.'s model gives its mean acceptance length (theory inverted)
c             our median draft time per drafted token / the baseline's median time per target forward
predicted     expected_speedup(alpha, gamma, c); meas/pred = speed-up / predicted"""
_JSON_LEGEND = "JSON          also per-position acceptance (ours: P(draft i accepted)), tokens per target forward (every forward)"

_LEAN_LEGEND = """\
lean          a minimal speculative loop in plain transformers (same rounds as ours, no trace, no checks);
              ours / lean = median over repeats of our seconds / its seconds: what our loop costs on top of it"""

LEGEND = f"""{_LEGEND_HEAD}
{_LEAN_LEGEND}
identical     the method's tokens equal the baseline's for every prompt, in every run
{_JSON_LEGEND}"""

SAMPLING_LEGEND = f"""{_LEGEND_HEAD}
identical     n/a with sampling (different random streams); distribution equality is tested statistically by
              tests/test_sampling_distribution.py and notebook 02. Seeds: one per prompt and pass, derived from
              --seed (same seed, same tokens for our methods)
{_JSON_LEGEND}"""

CROSS_LEGEND = """\
ovh/rnd       drafter time outside the draft model's forwards, per round, in one extra pass of each of our
              speculative rows: (propose + accept, timed by a wrapper around the drafter's public calls) - (draft
              forwards, timed by forward hooks). speculative-cross: the text translation (decode, re-encode with
              lookbehind windows, boundary alignment, both ways) + the bookkeeping every drafter has (argmax, cache
              crops); speculative: that bookkeeping alone. The difference is the translation's cost. c of the
              cross rows includes it
*-cross       speculative-cross: our drafter with the draft on another tokenizer (greedy: CrossTokenizerDrafter;
              sampling: CrossVocabularySamplingDrafter, drafts only shared tokens, exact verification);
              hf-assisted-cross: transformers' universal assisted decoding (greedy only), gamma = draft tokens per
              round; its acc rate/alpha stay blank (drafts counted in draft tokens, acceptances in target tokens)"""


# --------------------------------------------------------------------------- arguments


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value}")
    return value


def parse_gammas(text: str) -> tuple[int, ...]:
    """``"1,2,4"`` -> ``(1, 2, 4)``: comma-separated draft lengths >= 1, sorted, duplicates dropped."""
    pieces = [piece.strip() for piece in text.split(",")]
    if not text.strip() or any(not piece for piece in pieces):
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers >= 1 such as 1,2,4; got {text!r}")
    gammas = []
    for piece in pieces:
        try:
            gamma = int(piece)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{piece!r} is not a whole number; give draft lengths such as 1,2,4"
            ) from None
        if gamma < 1:
            raise argparse.ArgumentTypeError(f"every gamma must be >= 1 (a round drafts at least one token), got {gamma}")
        gammas.append(gamma)
    return tuple(sorted(set(gammas)))


def sampling_from_args(args: argparse.Namespace):
    """The run's `SamplingConfig` (validated by it: a bad value raises `ConfigError` with its message)."""
    config = SamplingConfig(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    if config.is_greedy and (args.top_k != 0 or args.top_p != 1.0):
        raise ConfigError(
            "--top-k and --top-p filter a sampling distribution; with --temperature 0 (greedy) they would be "
            "ignored. Give a temperature > 0 (e.g. --temperature 0.8) or leave them out."
        )
    return config


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m specdec_lib bench",
        description="Benchmark decoding on one model pair: our autoregressive baseline, transformers' "
        "plain generate, our speculative decoding, a lean reference loop (greedy) and transformers' assisted "
        "generation (for each gamma), on the same prompts, greedy (default) or sampling (--temperature > 0; ours "
        "then verifies by exact rejection sampling). Prints a table; the measuring protocol is in "
        "specdec_lib/bench/protocol.py.",
        epilog="Exit codes: 0 done, 1 models or prompts could not be loaded, 2 bad arguments. Timings depend on the "
        "machine's load: close other programs, and compare runs made on the same quiet machine.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--task", choices=TASKS, default=DEFAULT_TASK, help="prompt set")
    parser.add_argument("--prompts", type=_positive_int, default=DEFAULT_PROMPTS, help="first N prompts of the set")
    parser.add_argument("--max-new-tokens", type=_positive_int, default=DEFAULT_MAX_NEW_TOKENS,
                        help="tokens to generate per prompt (fewer when EOS comes first, unless --no-eos)")
    parser.add_argument("--block", action="store_true",
                        help="sampling: also our speculative decoding with block verification (rows "
                        "speculative-block, the same drafter, timed side by side with the token-wise rows)")
    parser.add_argument("--no-eos", action="store_true",
                        help="never stop at EOS: every method generates exactly --max-new-tokens tokens")
    parser.add_argument("--gammas", type=parse_gammas, default=DEFAULT_GAMMAS, metavar="G1,G2,...",
                        help="draft lengths to compare, comma-separated")
    parser.add_argument("--repeats", type=_positive_int, default=DEFAULT_REPEATS,
                        help="timed passes over the prompts (after one warm-up pass)")
    parser.add_argument("--temperature", type=float, default=0.0, metavar="T",
                        help="0: greedy (every method must emit the same tokens); > 0: sample at this temperature")
    parser.add_argument("--top-k", type=int, default=0, metavar="K",
                        help="sampling: keep the K most likely tokens (0: off)")
    parser.add_argument("--top-p", type=float, default=1.0, metavar="P",
                        help="sampling: keep the smallest set of most likely tokens with mass P, in (0, 1] (1: off)")
    parser.add_argument("--seed", type=int, default=0, metavar="S",
                        help="sampling: base seed; each prompt and pass gets a seed derived from it (reruns "
                        "reproduce our methods' tokens)")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="embedded",
                        help="model pair (see specdec_lib.list_presets(); hub presets need internet)")
    parser.add_argument("--device", default=None,
                        help="cpu, cuda, cuda:1, mps (default: SPECDEC_DEVICE, else the best available)")
    parser.add_argument("--threads", type=_positive_int, default=None,
                        help="torch CPU threads (default: torch's own choice)")
    parser.add_argument("--cross", action="store_true",
                        help="also benchmark the cross-tokenizer draft (the draft of the preset's cross twin, e.g. "
                        "draft_b of embedded-cross, on the same target): rows speculative-cross (and, greedy, "
                        "hf-assisted-cross) for each gamma, and the translation overhead per round")
    parser.add_argument("--no-transformers", action="store_true",
                        help="leave out transformers' generate and assisted generation (faster)")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH",
                        help="also write every number (and per-prompt raw times) to this JSON file")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    return parser


# --------------------------------------------------------------------------- printing


def format_cell(key: str, value: object) -> str:
    """One value of column ``key`` as the table prints it (blank for None, yes/NO for identical)."""
    if value is None:
        return ""
    if key == "identical" and isinstance(value, bool):
        return "yes" if value else "NO"
    return COLUMNS[key][1].format(value)


def format_table(rows: Sequence[dict]) -> str:
    """The rows as aligned text: one header line, then one line per row (text left-aligned, numbers right).
    An `OPTIONAL_COLUMNS` column is left out when no row has a value in it."""
    keys = [key for key in COLUMNS if key not in OPTIONAL_COLUMNS or any(row.get(key) is not None for row in rows)]
    cells = [[COLUMNS[key][0] for key in keys]] + [[format_cell(key, row.get(key)) for key in keys] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(keys))]
    left = {"method", "identical"}
    lines = []
    for line in cells:
        parts = [text.ljust(w) if key in left else text.rjust(w) for key, text, w in zip(keys, line, widths)]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def format_profile(profile: dict | None) -> str:
    if profile is None:
        return "profile: no speculative run to profile"
    return (
        f"where our time goes at the best gamma ({profile['method']}, gamma={profile['gamma']}; one extra pass with "
        f"timed forwards, {profile['total_s']:.2f} s): draft forwards {profile['draft_pct']:.0f}%, "
        f"target forwards (verify) {profile['verify_pct']:.0f}%, other {profile['other_pct']:.0f}% "
        "(acceptance, cache bookkeeping, Python overhead = total - draft - verify)"
    )


def cpu_model() -> str:
    """The CPU's model name (the ``model name`` line of ``/proc/cpuinfo`` on Linux), else what ``platform`` knows: tiny
    models' speed-ups depend on the CPU's caches and memory, so a benchmark must say which CPU it ran on."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name") and ":" in line:
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def machine_info(device: object) -> dict:
    """Device, CPU, library versions and threads: what a reader needs to compare two benchmark runs."""
    return {
        "device": describe_device(device),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_model": cpu_model(),
    }


def describe_decoding(settings: dict) -> str:
    """``greedy``, or the sampling settings and seed in words (for the settings line)."""
    sampling = settings.get("sampling") or {"temperature": 0.0}
    if not sampling["temperature"]:
        return "greedy"
    top_k = sampling.get("top_k", 0)
    top_p = sampling.get("top_p", 1.0)
    verification = {"exact and block": "exact token-wise and block verification"}.get(
        settings.get("verification"), "exact rejection-sampling verification")
    return (
        f"sampling (temperature {sampling['temperature']:g}, top-k {top_k or 'off'}, "
        f"top-p {'off' if top_p == 1 else f'{top_p:g}'}; ours: {verification}), "
        f"seed {settings.get('seed')} (one derived seed per prompt and pass)"
    )


def describe_eos(settings: dict) -> str:
    """Where generation stops early, in words (for the settings line)."""
    if settings.get("no_eos"):
        return f"no EOS stop (--no-eos: exactly {settings['max_new_tokens']} new tokens per prompt)"
    return f"EOS id {settings['eos_token_id']}"


def format_comparisons(rows: Sequence[dict]) -> str:
    """One line per gamma: our loop's time over the lean loop's, and how many times faster ours runs than
    transformers' assisted generation with the same drafter (empty without those rows)."""
    lean = [f"ours / lean at gamma={row['gamma']}: {row['over_lean']:.2f}x time"
            for row in rows if row["method"] == SPECULATIVE and row.get("over_lean") is not None]
    transformers = [f"{row['method']} at gamma={row['gamma']}: {row['over_transformers']:.2f}x the speed of "
                    f"transformers' assisted generation with the same drafter"
                    for row in rows if row.get("over_transformers") is not None]
    return "\n".join(lean + transformers)


def format_machine(machine: dict, settings: dict) -> str:
    gammas = ",".join(str(g) for g in settings["gammas"])
    return "\n".join(
        [
            f"machine:  {machine['device']}, {machine['cpu_count']} CPUs ({machine['cpu_model']}), "
            f"torch {machine['torch']} ({machine['torch_threads']} thread{'' if machine['torch_threads'] == 1 else 's'}), "
            f"transformers {machine['transformers']}, "
            f"python {machine['python']}",
            f"settings: preset {settings['preset']}, task {settings['task']}, {settings['prompts']} prompts, "
            f"max {settings['max_new_tokens']} new tokens, gammas {gammas}, {settings['repeats']} timed "
            f"repeat{'s' if settings['repeats'] != 1 else ''} after 1 warm-up pass, {describe_decoding(settings)}, "
            f"{describe_eos(settings)}",
        ]
    )


def cross_refusal(preset: str) -> str:
    """Why ``--cross`` cannot run with ``preset`` (one without a cross-tokenizer twin)."""
    twins = ", ".join(f"{a} -> {b}" for a, b in CROSS_PRESETS.items())
    return (
        f"--cross needs a preset with a same-tokenizer draft whose target also has a cross-tokenizer draft "
        f"({twins}); {preset!r} has none. For the embedded cross pair give --preset embedded --cross."
    )


def load_cross_pair(preset: str, pair):
    """The ``--cross`` pair: ``pair``'s target object (not a second copy) with the draft of
    ``CROSS_PRESETS[preset]``, which is on another tokenizer. ConfigError for a preset without a cross twin."""
    if preset not in CROSS_PRESETS:
        raise ConfigError(cross_refusal(preset))
    name = CROSS_PRESETS[preset]
    spec = PRESETS[name]
    if spec.target != PRESETS[preset].target:  # pragma: no cover (a mistake in CROSS_PRESETS)
        raise ConfigError(f"{name!r} and {preset!r} do not share a target.")
    draft, tokenizer = load_preset_model(name, spec.draft, pair.device, pair.target.dtype)
    return ModelPair(pair.target, draft, pair.target_tokenizer, tokenizer, name, pair.device)


# --------------------------------------------------------------------------- command


def write_json(path: Path, document: dict) -> None:
    """Write a bench document as indented JSON, creating its folder (the ``--json PATH`` of every bench command)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


def _fail(message: str) -> int:
    print(f"python -m specdec_lib bench: error: {message}", file=sys.stderr)
    return 1


#: ``python -m specdec_lib bench SUITE ...`` -> the module whose ``main(argv)`` runs that suite.
SUITES = {"drafters": "specdec_lib.bench.drafters", "tuning": "specdec_lib.bench.tuning",
          "batches": "specdec_lib.bench.batches", "trees": "specdec_lib.bench.trees",
          "block-gain": "specdec_lib.bench.block_gain", "plots": "specdec_lib.bench.plots",
          "numerics": "specdec_lib.bench.numerics"}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUITES:
        import importlib

        return int(importlib.import_module(SUITES[argv[0]]).main(argv[1:]) or 0)
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        sampling = sampling_from_args(args)
    except ConfigError as error:
        parser.error(str(error))
    if args.cross and args.preset not in CROSS_PRESETS:
        parser.error(cross_refusal(args.preset))
    if args.block and sampling.is_greedy:
        parser.error("--block compares block with token-wise verification of *sampled* drafts; at temperature 0 "
                     "they coincide. Give a temperature > 0 (e.g. --temperature 1.0).")

    from ..loading import load_pair  # looked up when called (tests replace the loaders)
    from ..prompts import load_prompts

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    try:
        device = get_device(args.device)
    except ConfigError as error:
        parser.error(str(error))
    try:
        prompts = load_prompts(args.task)
    except (OSError, ValueError) as error:
        return _fail(str(error))
    if args.prompts > len(prompts):
        parser.error(f"--prompts {args.prompts}: the {args.task} set has only {len(prompts)} prompts")
    prompts = prompts[: args.prompts]
    try:
        pair = load_pair(args.preset, device=device)
        prompt_ids = encode_prompts(pair.target_tokenizer, [p.prompt for p in prompts], device)
        for prompt, ids in zip(prompts, prompt_ids):
            check_fits_context(pair.target, ids.shape[1], args.max_new_tokens)
            check_fits_context(pair.draft, ids.shape[1], args.max_new_tokens)
    except ContextOverflowError as error:
        parser.error(f"prompt {prompt.id}: {error}")
    except (SpecdecError, OSError) as error:
        return _fail(str(error))
    cross = None
    if args.cross:
        try:
            cross = load_cross_pair(args.preset, pair)
        except (SpecdecError, OSError) as error:
            return _fail(str(error))

    try:
        report = run_benchmark(
            pair,
            prompt_ids,
            gammas=args.gammas,
            max_new_tokens=args.max_new_tokens,
            repeats=args.repeats,
            transformers=not args.no_transformers,
            progress=not args.no_progress,
            sampling=sampling,
            seed=args.seed,
            cross=cross,
            stop_at_eos=not args.no_eos,
            block=args.block,
        )
    except SpecdecError as error:  # e.g. a pair whose draft does not share the target's tokenizer
        parser.error(str(error))

    settings = {
        "preset": args.preset,
        "task": args.task,
        "prompts": len(prompts),
        "max_new_tokens": args.max_new_tokens,
        "gammas": list(args.gammas),
        "repeats": args.repeats,
        "eos_token_id": None if args.no_eos else resolve_eos(pair),
        "no_eos": args.no_eos,
        "transformers": not args.no_transformers,
        "sampling": {"temperature": sampling.temperature, "top_k": sampling.top_k, "top_p": sampling.top_p},
        "greedy": sampling.is_greedy,
        "seed": None if sampling.is_greedy else args.seed,
        "seeding": None if sampling.is_greedy else "run_seed(seed, pass, prompt): sha256-derived; pass 0 = warm-up, "
        "r + 1 = repeat r, repeats + 1 = profile; the same seed for every method",
        "verification": "greedy" if sampling.is_greedy else ("exact and block" if args.block else "exact"),
        "cross": None if cross is None else {
            "preset": cross.preset,
            "draft_vocab_size": cross.draft.config.get_text_config().vocab_size,
            "drafter": "CrossTokenizerDrafter(lookbehind=8)" if sampling.is_greedy
            else "CrossVocabularySamplingDrafter(lookbehind=8) (vocabulary intersection, exact verification)",
            "hf_assisted_cross": any(row["method"] == HF_ASSISTED_CROSS for row in report.rows),
            "overhead": "drafter_overhead: one extra pass (pass repeats + 2) per speculative row; "
            "(propose + accept timed around the drafter's public calls) - (draft forwards timed by hooks), per round",
        },
    }
    machine = machine_info(device)
    table = "\n".join(filter(None, [format_table(report.rows), format_comparisons(report.rows)]))
    legend = (LEGEND if sampling.is_greedy else SAMPLING_LEGEND) + ("" if cross is None else "\n" + CROSS_LEGEND)
    blocks = [table, format_profile(report.profile), format_machine(machine, settings), legend]
    print("\n\n".join(blocks if sampling.is_greedy else [DISTRIBUTION_NOTE] + blocks))

    if args.json is not None:
        document = {
            "settings": settings,
            "machine": machine,
            "prompts": [{"id": p.id, "prompt_tokens": int(ids.shape[1])} for p, ids in zip(prompts, prompt_ids)],
            "rows": report.rows,
            "profile": report.profile,
            "raw": report.raw,
            "seeds": report.seeds,
        }
        try:
            write_json(args.json, document)
        except OSError as error:
            return _fail(f"could not write {args.json}: {error}")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
