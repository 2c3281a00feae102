"""How the benchmark measures: one warm-up pass, then interleaved timed repeats (`measure`).

Timing protocol (machines are noisy, so drift must hit every method alike):

1. **warm-up**: one untimed pass of every method over every prompt. It also fixes the reference tokens (the
   baseline's) and counts each method's model forwards with forward hooks (`count_forwards`), which is how the
   methods without a trace (transformers', ``lean``) get their tokens per target forward (the timed runs carry
   no hooks).
2. **repeats**: for each repeat, for each prompt, every method runs back to back (interleaved; the order rotates
   with the prompt and the repeat so that no method always runs first). Each generation is timed as a whole, with
   ``devices.synchronize`` before and after (`timed_run`).
3. **throughput**: per repeat, tokens/s = all new tokens / all seconds over the prompts; the row shows the median over
   repeats. **speed-up**: per repeat, the method's tokens/s over the baseline's in the *same* repeat; median over
   repeats (`specdec_lib.bench.report`).

**Seeds** (sampling): every (pass, prompt) gets a deterministic seed (`run_seed` of the base seed, the pass and the
prompt; the same for every method), so a rerun with the same base seed reproduces our methods' tokens exactly
(transformers' methods are seeded through ``torch.manual_seed``, reproducible on CPU). Passes: 0 is the warm-up,
r + 1 the r-th repeat, ``repeats + 1`` the profile and ``repeats + 2`` the drafter overhead
(`specdec_lib.bench.profiling`).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from ..core.devices import synchronize
from ..core.errors import ConfigError
from ..core.validation import check_count, is_whole
from ..core.sampling import GREEDY, SamplingConfig
from ..core.result import GenerationResult
from .methods import Method


def run_seed(base_seed: int, pass_index: int, prompt_index: int) -> int:
    """The seed of one generation: pass 0 is the warm-up, pass r + 1 the r-th timed repeat (the profile pass comes
    after them). Hashed, so that base seeds 0 and 1 share no stream; in [0, 2**63), which torch accepts."""
    text = f"specdec-bench/{base_seed}/{pass_index}/{prompt_index}".encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big") % 2**63


@contextmanager
def count_forwards(models: dict[str, torch.nn.Module]) -> Iterator[dict[str, int]]:
    """Count calls of each model's forward (``{role: count}``, live) with forward pre-hooks, removed on exit."""
    counts = {role: 0 for role in models}
    handles = []
    for role, model in models.items():

        def hook(module, args, role=role):  # noqa: ARG001 (signature fixed by torch)
            counts[role] += 1

        handles.append(model.register_forward_pre_hook(hook))
    try:
        yield counts
    finally:
        for handle in handles:
            handle.remove()


@dataclass
class Run:
    """One generation: its new tokens, its wall time, and our trace when the method has one."""

    tokens: list[int]
    seconds: float
    result: GenerationResult | None = None

    @property
    def new_tokens(self) -> int:
        return len(self.tokens)


@dataclass
class Measurements:
    """Everything `measure` recorded; `build_report` turns it into rows."""

    methods: list[Method]
    reference: list[list[int]]  # [prompt] the baseline's tokens in the warm-up pass
    warmup: dict[str, list[Run]]  # key -> [prompt]
    timed: dict[str, list[list[Run]]]  # key -> [repeat][prompt]
    forward_counts: dict[str, dict[str, int]]  # key -> {"target": n, "draft": n} over the warm-up pass
    sampling: SamplingConfig = GREEDY  # greedy: `identical` is checked; sampling: it is `NOT_APPLICABLE`
    seeds: list[list[int]] | None = None  # [pass][prompt] (pass 0: warm-up, r + 1: repeat r); None: unseeded


def timed_run(method: Method, input_ids: torch.Tensor, device: torch.device, seed: int | None = None) -> Run:
    """One generation of ``method``, timed as a whole (``synchronize`` before and after)."""
    synchronize(device)
    start = time.perf_counter()
    tokens, result = method.generate(input_ids, seed)
    synchronize(device)
    return Run(tokens, time.perf_counter() - start, result)


def measure(
    methods: Sequence[Method],
    prompts: Sequence[torch.Tensor],
    *,
    repeats: int,
    device: torch.device | str = "cpu",
    count_models: dict[str, torch.nn.Module] | None = None,
    progress: bool = True,
    sampling: SamplingConfig = GREEDY,
    seed: int | None = None,
) -> Measurements:
    """Run the protocol of the module docstring: a warm-up pass (with forward counts of ``count_models``, e.g.
    ``{"target": ..., "draft": ...}``), then ``repeats`` interleaved timed passes over ``prompts`` (each
    ``LongTensor[1, T]``). The first method is the baseline every other is compared with.

    ``sampling`` says how the methods decode (it decides what ``identical`` means in `build_report`; the methods
    carry their own copy in their `GenerationSpec`). ``seed``: the base seed; generation (pass, prompt) gets
    ``run_seed(seed, pass, prompt)``, every method the same one. None: unseeded (greedy needs no seed).
    """
    from tqdm.auto import tqdm

    if not methods:
        raise ConfigError("No methods to benchmark.")
    check_count("repeats", repeats, minimum=1)
    if not prompts:
        raise ConfigError("No prompts to benchmark: give at least one.")
    methods = list(methods)
    keys = [method.key for method in methods]
    if len(set(keys)) != len(keys):
        raise ConfigError(f"Two methods share a name: {keys}.")
    if not isinstance(sampling, SamplingConfig):
        raise ConfigError(f"sampling must be a SamplingConfig, got {type(sampling).__name__}.")
    if seed is not None and not is_whole(seed):
        raise ConfigError(f"seed must be an integer or None, got {seed!r}.")
    device = torch.device(device)
    count_models = count_models or {}
    seeds = None
    if seed is not None:
        seeds = [[run_seed(seed, pass_index, i) for i in range(len(prompts))] for pass_index in range(repeats + 1)]

    def seed_of(pass_index: int, prompt_index: int) -> int | None:
        return None if seeds is None else seeds[pass_index][prompt_index]

    bar = tqdm(total=(repeats + 1) * len(prompts) * len(methods), desc="warm-up", disable=not progress, leave=False)

    warmup: dict[str, list[Run]] = {key: [] for key in keys}
    forward_counts: dict[str, dict[str, int]] = {key: {role: 0 for role in count_models} for key in keys}
    timed: dict[str, list[list[Run]]] = {key: [] for key in keys}
    try:
        with torch.inference_mode():
            for index, input_ids in enumerate(prompts):
                for method in methods:
                    with count_forwards(count_models) as counts:
                        warmup[method.key].append(timed_run(method, input_ids, device, seed_of(0, index)))
                    for role, count in counts.items():
                        forward_counts[method.key][role] += count
                    bar.update()
            for repeat in range(repeats):
                bar.set_description(f"repeat {repeat + 1}/{repeats}")
                for key in keys:
                    timed[key].append([])
                for index, input_ids in enumerate(prompts):
                    shift = (repeat + index) % len(methods)  # rotate who runs first
                    for method in methods[shift:] + methods[:shift]:
                        timed[method.key][repeat].append(
                            timed_run(method, input_ids, device, seed_of(repeat + 1, index))
                        )
                        bar.update()
    finally:
        bar.close()
    return Measurements(
        methods=methods,
        reference=[run.tokens for run in warmup[keys[0]]],
        warmup=warmup,
        timed=timed,
        forward_counts=forward_counts,
        sampling=sampling,
        seeds=seeds,
    )
