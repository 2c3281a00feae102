"""Measure decoding methods side by side on the same prompts (``python -m specdec_lib bench``), one module per job:

- `specdec_lib.bench.methods`: what is compared (the baseline, ours, the ``lean`` reference loop)
- `specdec_lib.bench.hf`: transformers' ``generate`` and assisted generation, asked for the same thing
- `specdec_lib.bench.protocol`: how it is timed (warm-up, interleaved repeats, seeds: `measure`)
- `specdec_lib.bench.report`: what the rows say (acceptance, c, alpha, prediction, ours / lean: `build_report`)
- `specdec_lib.bench.profiling`: where the time goes (`profile_method`, `drafter_overhead`)
- `specdec_lib.bench.cli`: the command line (arguments, table, JSON)

`build_methods` assembles the rows from methods.py and hf.py (which builds on methods.py), `run_benchmark` runs
them all in order.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..drafters import DraftModelDrafter
from ..core.errors import ConfigError
from ..core.pair import ModelPair
from ..core.sampling import GREEDY, SamplingConfig
from ..core.validation import check_gamma
from .hf import HFAssisted, HFAssistedCross, HFGenerate, assistant_config, hf_sampling_kwargs
from .methods import (
    BASELINE,
    HF_ASSISTED,
    HF_ASSISTED_CROSS,
    HF_GREEDY,
    HF_SAMPLE,
    LEAN,
    SPECULATIVE,
    SPECULATIVE_BLOCK,
    SPECULATIVE_CROSS,
    Autoregressive,
    GenerationSpec,
    Lean,
    Method,
    Speculative,
    SpeculativeBlock,
    SpeculativeCross,
    check_cross_pair,
    cross_drafter,
    lean_generate,
    resolve_eos,
)
from .profiling import TimedDrafter, drafter_overhead, profile_method, time_forwards
from .protocol import Measurements, Run, count_forwards, measure, run_seed, timed_run
from .report import (
    ALPHA_FROM_THEORY,
    ALPHA_FROM_TRACE,
    NOT_APPLICABLE,
    ROW_COLUMNS,
    Report,
    best_speculative,
    build_report,
    pooled_trace,
)


def build_methods(
    pair: ModelPair,
    gammas: Sequence[int],
    spec: GenerationSpec,
    *,
    transformers: bool = True,
    cross: ModelPair | None = None,
    block: bool = False,
) -> list[Method]:
    """The benchmark's methods for ``pair``: baseline, hf-greedy (hf-sample when ``spec`` samples), ours for each
    gamma, [ours with block verification for each gamma: ``block=True``, sampling only], [lean for each gamma,
    greedy only], [ours with the cross draft for each gamma], hf-assisted for each gamma, [hf-assisted-cross for
    each gamma, greedy only].

    ``transformers=False`` leaves out transformers' methods (``lean``, our reference loop, stays). One
    `DraftModelDrafter` serves every gamma (it resets its cache at each generation); building it checks that the
    pair shares a tokenizer. ``cross``: the same target with a draft on another tokenizer (`check_cross_pair`);
    one `cross_drafter` serves every gamma.
    """
    if not gammas:
        raise ConfigError("gammas is empty: give at least one draft length, e.g. (2, 4).")
    for gamma in gammas:
        check_gamma(gamma)
    drafter = DraftModelDrafter.for_pair(pair)
    greedy = spec.sampling.is_greedy
    if block and greedy:
        raise ConfigError(
            "Block verification coincides with token-wise verification at temperature 0 (greedy): its rows would "
            "repeat the speculative rows. Sample (e.g. --temperature 1.0) to compare them."
        )
    methods: list[Method] = [Autoregressive(pair.target, spec)]
    if transformers:
        methods.append(HFGenerate(pair.target, spec))
    methods += [Speculative(pair.target, drafter, gamma, spec) for gamma in gammas]
    if block:
        methods += [SpeculativeBlock(pair.target, drafter, gamma, spec) for gamma in gammas]
    if greedy:
        methods += [Lean(pair.target, pair.draft, gamma, spec) for gamma in gammas]
    if cross is not None:
        check_cross_pair(pair, cross)
        translating = cross_drafter(cross, spec.sampling)
        methods += [SpeculativeCross(pair.target, translating, gamma, spec) for gamma in gammas]
    if transformers:
        methods += [HFAssisted(pair.target, pair.draft, gamma, spec) for gamma in gammas]
        if cross is not None and greedy:
            methods += [HFAssistedCross(cross, gamma, spec) for gamma in gammas]
    return methods


def run_benchmark(
    pair: ModelPair,
    prompts: Sequence[torch.Tensor],
    *,
    gammas: Sequence[int],
    max_new_tokens: int,
    repeats: int,
    transformers: bool = True,
    progress: bool = True,
    sampling: SamplingConfig = GREEDY,
    seed: int | None = 0,
    cross: ModelPair | None = None,
    overhead: bool | None = None,
    stop_at_eos: bool = True,
    block: bool = False,
) -> Report:
    """Benchmark ``pair`` on ``prompts`` (``LongTensor[1, T]`` each, target token ids): `build_methods`, `measure`,
    `build_report`, then `profile_method` at our best gamma. Every method stops at the same EOS (`resolve_eos`)
    or after ``max_new_tokens``; ``stop_at_eos=False``: never early, every method generates exactly
    ``max_new_tokens``. Every method decodes with ``sampling`` (greedy by default). With sampling, ``seed`` is the
    base seed of `run_seed` (the profile pass is pass ``repeats + 1``); greedy runs use no seed.

    ``cross``: the same target object with a draft on another tokenizer; adds the ``speculative-cross`` (and,
    greedy, ``hf-assisted-cross``) rows. ``overhead``: measure `drafter_overhead` for each of our speculative rows
    (pass ``repeats + 2``); None: only when ``cross`` is given. ``block``: also our rows with block verification
    (``speculative-block``, sampling only)."""
    eos = resolve_eos(pair) if stop_at_eos else None
    spec = GenerationSpec(max_new_tokens, eos, pair.target_tokenizer.pad_token_id, sampling)
    seed = None if sampling.is_greedy else seed
    methods = build_methods(pair, gammas, spec, transformers=transformers, cross=cross, block=block)
    prompts = [p.to(pair.device) for p in prompts]
    count_models = {"target": pair.target, "draft": pair.draft}
    if cross is not None:
        count_models["cross_draft"] = cross.draft
    measurements = measure(
        methods,
        prompts,
        repeats=repeats,
        device=pair.device,
        count_models=count_models,
        progress=progress,
        sampling=sampling,
        seed=seed,
    )
    report = build_report(measurements)
    if overhead is None:
        overhead = cross is not None
    if overhead:
        seeds = None if seed is None else [run_seed(seed, repeats + 2, i) for i in range(len(prompts))]
        for method in methods:
            if isinstance(method, Speculative):
                numbers = drafter_overhead(method, prompts, device=pair.device, seeds=seeds)
                row = next(row for row in report.rows if row["key"] == method.key)
                row["drafter_overhead"] = numbers
                row["drafter_overhead_ms"] = numbers["overhead_ms_per_round"]
    best = best_speculative(report)
    if best is not None:
        method = next(method for method in methods if method.key == best["key"])
        seeds = None if seed is None else [run_seed(seed, repeats + 1, i) for i in range(len(prompts))]
        report.profile = profile_method(
            method, prompts, draft=pair.draft, target=pair.target, device=pair.device, seeds=seeds
        )
    return report


__all__ = [
    "ALPHA_FROM_THEORY",
    "ALPHA_FROM_TRACE",
    "Autoregressive",
    "BASELINE",
    "GenerationSpec",
    "HFAssisted",
    "HFAssistedCross",
    "HFGenerate",
    "HF_ASSISTED",
    "HF_ASSISTED_CROSS",
    "HF_GREEDY",
    "HF_SAMPLE",
    "LEAN",
    "Lean",
    "Measurements",
    "Method",
    "NOT_APPLICABLE",
    "ROW_COLUMNS",
    "Report",
    "Run",
    "SPECULATIVE",
    "SPECULATIVE_BLOCK",
    "SPECULATIVE_CROSS",
    "Speculative",
    "SpeculativeBlock",
    "SpeculativeCross",
    "TimedDrafter",
    "assistant_config",
    "best_speculative",
    "build_methods",
    "build_report",
    "check_cross_pair",
    "count_forwards",
    "cross_drafter",
    "drafter_overhead",
    "hf_sampling_kwargs",
    "lean_generate",
    "measure",
    "pooled_trace",
    "profile_method",
    "resolve_eos",
    "run_benchmark",
    "run_seed",
    "time_forwards",
    "timed_run",
]
