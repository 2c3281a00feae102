"""From measurements to rows (`build_report`): throughput, speed-up, acceptance, c, alpha and the prediction.

Acceptance uses the library's one vocabulary (`specdec_lib.core.trace`'s docstring): **alpha** (per-token acceptance,
accepted / examined drafts), **acceptance rate** (accepted / drafted), **mean acceptance length** (tokens per
verification round, rounds that drafted nothing excluded) and **per-position acceptance** (P(draft i accepted)).

Our rows (``speculative``, ``speculative-cross``) take all four from the traces of the first timed pass, the
rounds of every prompt pooled into one `Trace` (`pooled_trace`) and read by the trace functions themselves
(`per_token_acceptance`, `acceptance_rate`, `mean_acceptance_length`, `per_position_acceptance`,
`tokens_per_target_forward`); their ``alpha_from`` is ``"trace"``. Further, for our speculative rows:

- **c** (draft cost / target cost) comes from the same timed traces: median over rounds after the first of
  ``draft_time / draft_forwards`` (what one drafted token really costs our loop, proposing and bookkeeping
  included), over the median ``verify_time`` of the baseline's rounds after its first (one target forward per
  token; a first round also reads the prompt). It is measured in the same interleaved runs, so it sees the same machine load;
- **predicted** is `theory.expected_speedup(alpha, gamma, c)`. measured / predicted below 1 is the cost the model
  ignores: verifying gamma + 1 positions costs more than one, and Python bookkeeping;
- **verify_cost** (JSON details) is that first cost, measured the same way: the median ``verify_time`` of our rounds
  after the first that verified a full draft of gamma tokens, over the baseline's median one-token round. ``predicted_with_verify``
  is `theory.expected_speedup(alpha, gamma, c, verify_cost)` and ``measured_over_predicted_with_verify`` the
  measured speed-up over it: what is left is bookkeeping and the deviation of real acceptance from i.i.d.;
- **over_lean** (``speculative`` only, greedy): per repeat, our seconds over the ``lean`` loop's seconds at the same
  gamma (all prompts), median over repeats: what the library's loop costs above the bare algorithm.
- **over_transformers** (``speculative`` and ``speculative-cross``): per repeat, transformers' assisted generation's
  seconds on the same drafter at the same gamma (``hf-assisted``, ``hf-assisted-cross``) over ours, median over
  repeats: how many times faster our loop runs than transformers' on the same pair.

transformers' assisted rows have no trace: their numbers come from the warm-up's forward counts. Every target
forward is a verification (the first one also reads the prompt), one draft forward drafts one token, so
``accepted = tokens - target forwards`` (exact unless an EOS cut a round short), ``drafted = draft forwards`` and
the mean acceptance length is ``tokens / target forwards``. This holds with sampling too: transformers' speculative
sampling also emits ``accepted + 1`` tokens per round. Counts cannot tell examined drafts from wasted ones, so their
alpha is the per-token acceptance under which Leviathan et al.'s model gives the measured mean acceptance length
(`theory.alpha_from_tokens_per_round`; ``alpha_from`` says so), and they have no per-position acceptance. Their
per-forward times are not observable without hooks in the timed runs, so their c and prediction stay blank.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..core.theory import alpha_from_tokens_per_round, expected_speedup
from ..core.trace import (
    Trace,
    acceptance_rate,
    draft_forwards,
    mean_acceptance_length,
    per_position_acceptance,
    per_token_acceptance,
    target_forwards,
    tokens_per_target_forward,
)
from .methods import (
    HF_ASSISTED,
    HF_ASSISTED_CROSS,
    HF_EARLY_EXIT,
    HF_PROMPT_LOOKUP,
    LEAN,
    SPECULATIVE,
    SPECULATIVE_CROSS,
    Method,
)
from .protocol import Measurements, Run

#: What the ``identical`` column holds in a sampling run: token equality with the baseline cannot hold there.
NOT_APPLICABLE = "n/a (sampling)"

#: Where a row's alpha comes from (``alpha_from`` in its JSON).
ALPHA_FROM_TRACE = "trace"
ALPHA_FROM_THEORY = "theory inverted on mean acceptance length"

#: The columns of a report row, in table order (`specdec_lib.bench.cli.format_table` prints exactly these).
ROW_COLUMNS = (
    "method",
    "gamma",
    "tokens_per_s",
    "speedup",
    "mean_acceptance_length",
    "acceptance_rate",
    "drafter_overhead_ms",
    "c",
    "alpha",
    "predicted_speedup",
    "measured_over_predicted",
    "identical",
)


@dataclass
class Report:
    """Rows (one per method and gamma, columns `ROW_COLUMNS` plus details), raw times, the profile of our
    best gamma (`profile_method`; None until one is run), and the seeds used (``[pass][prompt]``, None if unseeded)."""

    rows: list[dict]
    profile: dict | None
    raw: dict[str, dict]
    seeds: list[list[int]] | None = None

    def row(self, method: str, gamma: int | None = None) -> dict:
        """The row of ``method`` (and ``gamma``); KeyError if absent."""
        for row in self.rows:
            if row["method"] == method and row["gamma"] == gamma:
                return row
        raise KeyError((method, gamma))


def _seconds(runs: list[Run]) -> float:
    return sum(run.seconds for run in runs)


def _tokens_per_second(runs: list[Run]) -> float | None:
    seconds = _seconds(runs)
    return sum(run.new_tokens for run in runs) / seconds if seconds > 0 else None


def _median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _alpha(mean_length: float | None, gamma: int | None) -> float | None:
    """Leviathan et al.'s alpha for a mean acceptance length (clamped into [1, gamma + 1])."""
    if mean_length is None or not gamma:
        return None
    return alpha_from_tokens_per_round(min(max(float(mean_length), 1.0), gamma + 1.0), gamma)


def pooled_trace(runs: list[Run]) -> Trace:
    """One `Trace` holding every round of ``runs`` (one pass over the prompts), so that the trace metrics pool the
    prompts: each is a ratio of sums over all rounds, as if the prompts were one long generation."""
    return Trace(start_time=0.0, rounds=[record for run in runs if run.result for record in run.result.trace.rounds])


def _trace_numbers(runs: list[Run]) -> dict:
    """Forwards and the four acceptance numbers of our traces of one pass (`pooled_trace`)."""
    trace = pooled_trace(runs)
    return {
        "new_tokens": sum(run.new_tokens for run in runs),
        "target_forwards": target_forwards(trace),
        "draft_forwards": draft_forwards(trace),
        "tokens_per_target_forward": tokens_per_target_forward(trace),
        "mean_acceptance_length": mean_acceptance_length(trace),
        "acceptance_rate": acceptance_rate(trace),
        "alpha": per_token_acceptance(trace),
        "alpha_from": ALPHA_FROM_TRACE,
        "per_position_acceptance": per_position_acceptance(trace),
    }


def _count_numbers(runs: list[Run], counts: dict[str, int], method: Method) -> dict:
    """The same numbers from the warm-up's forward counts (methods without a trace; module docstring)."""
    tokens = sum(run.new_tokens for run in runs)
    forwards = counts.get("target")
    drafts = counts.get(method.draft_role) if method.gamma is not None else 0
    drafting = method.gamma is not None and bool(forwards)
    mean_length = tokens / forwards if drafting and method.counts_rounds else None
    acceptance = None
    if drafting and method.counts_acceptance and drafts:
        acceptance = max(tokens - forwards, 0) / drafts
    return {
        "new_tokens": tokens,
        "target_forwards": forwards,
        "draft_forwards": drafts,
        "tokens_per_target_forward": tokens / forwards if forwards else None,
        "mean_acceptance_length": mean_length,
        "acceptance_rate": acceptance,
        "alpha": _alpha(mean_length, method.gamma) if method.counts_acceptance else None,
        "alpha_from": ALPHA_FROM_THEORY,
        "per_position_acceptance": None,
    }


def baseline_forward_seconds(runs: list[list[Run]]) -> float | None:
    """Median seconds of one target forward of the baseline: its rounds after the first (the prompt's forward)."""
    times = [record.verify_time for repeat in runs for run in repeat if run.result for record in run.result.trace.rounds[1:]]
    return _median(times)


def _draft_token_seconds(runs: list[list[Run]]) -> float | None:
    """Median over our rounds after the first of draft time per draft forward (what one drafted token costs,
    bookkeeping included)."""
    times = [
        record.draft_time / record.draft_forwards
        for repeat in runs
        for run in repeat
        if run.result
        for record in run.result.trace.rounds[1:]  # the first round's drafting also reads the prompt
        if record.draft_forwards > 0
    ]
    return _median(times)


def _verify_seconds(runs: list[list[Run]], gamma: int) -> float | None:
    """Median ``verify_time`` of our rounds after the first that verified a full draft of ``gamma`` tokens (None: no
    such round)."""
    times = [
        record.verify_time
        for repeat in runs
        for run in repeat
        if run.result
        for record in run.result.trace.rounds[1:]  # the first round's forward also reads the prompt
        if record.drafted == gamma
    ]
    return _median(times)


#: transformers' version of each of our rows (by row name), compared at the same gamma (``over_transformers``);
#: the drafter names are `specdec_lib.bench.drafters`' rows.
TRANSFORMERS_TWIN = {SPECULATIVE: HF_ASSISTED, SPECULATIVE_CROSS: HF_ASSISTED_CROSS, "draft-model": HF_ASSISTED,
                     "prompt-lookup": HF_PROMPT_LOOKUP, "early-exit": HF_EARLY_EXIT}


def _seconds_ratio(measurements: Measurements, numerator: str, denominator: str) -> list[float | None] | None:
    """Per repeat, method ``numerator``'s seconds over method ``denominator``'s (keys; None: one is missing)."""
    if numerator not in measurements.timed or denominator not in measurements.timed:
        return None
    pairs = zip(measurements.timed[numerator], measurements.timed[denominator])
    return [_seconds(top) / _seconds(bottom) if _seconds(bottom) > 0 else None for top, bottom in pairs]


def _over_lean(measurements: Measurements, method: Method) -> list[float | None] | None:
    """Per repeat, ``method``'s seconds over the lean loop's at the same gamma (None: no lean row to compare)."""
    if method.name != SPECULATIVE:
        return None
    return _seconds_ratio(measurements, method.key, f"{LEAN}[gamma={method.gamma}]")


def _over_transformers(measurements: Measurements, method: Method) -> list[float | None] | None:
    """Per repeat, transformers' assisted seconds with the same drafter and gamma over ``method``'s (None: no twin)."""
    twin = TRANSFORMERS_TWIN.get(method.name)
    return None if twin is None else _seconds_ratio(measurements, f"{twin}[gamma={method.gamma}]", method.key)


def build_report(measurements: Measurements) -> Report:
    """Rows of `ROW_COLUMNS` (plus details) for every method, and raw times (the profile is `profile_method`'s)."""
    methods = measurements.methods
    baseline = methods[0]
    reference = measurements.reference
    base_runs = measurements.timed[baseline.key]
    repeats = len(base_runs)
    base_tps = [_tokens_per_second(base_runs[r]) for r in range(repeats)]
    target_seconds = baseline_forward_seconds(base_runs)

    rows: list[dict] = []
    raw: dict[str, dict] = {}
    for method in methods:
        timed = measurements.timed[method.key]
        warm = measurements.warmup[method.key]
        tps = [_tokens_per_second(timed[r]) for r in range(repeats)]
        ratios = [t / b if t is not None and b else None for t, b in zip(tps, base_tps)]
        every_run = [warm] + timed
        if measurements.sampling.is_greedy:
            per_prompt = [all(passes[i].tokens == reference[i] for passes in every_run) for i in range(len(reference))]
            identical: bool | str = all(per_prompt)
        else:  # different random streams: equality in distribution is the tests' job, not the benchmark's
            per_prompt, identical = None, NOT_APPLICABLE

        if method.source == "trace":
            numbers = _trace_numbers(timed[0])
        else:
            numbers = _count_numbers(warm, measurements.forward_counts[method.key], method)
        alpha = numbers["alpha"]

        c = predicted = verify_cost = predicted_with_verify = None
        if method.source == "trace" and method.gamma is not None and target_seconds:
            draft_seconds = _draft_token_seconds(timed)
            if draft_seconds is not None:
                c = draft_seconds / target_seconds
            verify_seconds = _verify_seconds(timed, method.gamma)
            if verify_seconds is not None:
                verify_cost = verify_seconds / target_seconds
        if alpha is not None and c:
            predicted = expected_speedup(alpha, method.gamma, c)
            if verify_cost:
                predicted_with_verify = expected_speedup(alpha, method.gamma, c, verify_cost)
        speedup = _median(ratios)
        over_lean = _over_lean(measurements, method)
        over_transformers = _over_transformers(measurements, method)

        rows.append(
            {
                "method": method.name,
                "gamma": method.gamma,
                "tokens_per_s": _median(tps),
                "speedup": speedup,
                "mean_acceptance_length": numbers["mean_acceptance_length"],
                "acceptance_rate": numbers["acceptance_rate"],
                "drafter_overhead_ms": None,  # `drafter_overhead`'s (run_benchmark fills it for our rows)
                "c": c,
                "alpha": alpha,
                "predicted_speedup": predicted,
                "measured_over_predicted": speedup / predicted if speedup is not None and predicted else None,
                "identical": identical,
                # details (JSON only)
                "key": method.key,
                "counts_from": method.source,
                "alpha_from": numbers["alpha_from"] if alpha is not None else None,
                "per_position_acceptance": numbers["per_position_acceptance"],
                "verify_cost": verify_cost,
                "predicted_with_verify": predicted_with_verify,
                "measured_over_predicted_with_verify": (
                    speedup / predicted_with_verify if speedup is not None and predicted_with_verify else None),
                "tokens_per_target_forward": numbers["tokens_per_target_forward"],
                "over_lean": None if over_lean is None else _median(over_lean),
                "over_lean_per_repeat": over_lean,
                "over_transformers": None if over_transformers is None else _median(over_transformers),
                "over_transformers_per_repeat": over_transformers,
                "identical_per_prompt": per_prompt,
                "tokens_per_s_per_repeat": tps,
                "speedup_per_repeat": ratios,
                "new_tokens": numbers["new_tokens"],
                "target_forwards": numbers["target_forwards"],
                "draft_forwards": numbers["draft_forwards"],
                "drafter_overhead": None,
            }
        )
        raw[method.key] = {
            "seconds": [[run.seconds for run in repeat] for repeat in timed],
            "new_tokens": [[run.new_tokens for run in repeat] for repeat in timed],
            "warmup_seconds": [run.seconds for run in warm],
        }

    return Report(rows=rows, profile=None, raw=raw, seeds=measurements.seeds)


def best_speculative(report: Report) -> dict | None:
    """Our speculative row with the highest median speed-up (None if there is none)."""
    ours = [row for row in report.rows if row["method"] == SPECULATIVE and row["speedup"] is not None]
    return max(ours, key=lambda row: row["speedup"]) if ours else None
