"""Checks of notebook 00's exercises (set-up and the baseline): top-k by hand, the price of no cache, prose vs code.

- ``top_k_probs(top_k_probs)``: the learner's ``top_k_probs(logits, k)`` against
  ``logits_to_probs(logits, SamplingConfig(top_k=k))`` on hidden logits (k = 1, k = V, a tie at the k-th largest,
  a batch ``[B, V]``);
- ``fit_step_cost(fit_step_cost)``: the learner's least-squares line ``(seconds_per_token, fixed_seconds)``
  on hidden synthetic step times;
- ``prose_versus_code("b")``: why TTFT differs between the prompt sets and the inter-token latency does not.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ...core.sampling import SamplingConfig, logits_to_probs
from .core import Case, CheckReport, check_choice, close, describe, mismatch, run_cases, tensor_problem

# --- exercise 1: top-k by hand --------------------------------------------------------------------------------


def _top_k_cases() -> list[Case]:
    """Hidden logits ``[V]`` or ``[B, V]`` and k; expected: the library's top-k distribution."""
    generator = torch.Generator().manual_seed(0)
    row = torch.randn(8, generator=generator) * 2  # [8]: no ties
    tied = torch.tensor([1.0, 3.0, 2.0, 2.0, -1.0, 0.5])  # the 2nd and 3rd largest tie at 2.0
    batch = torch.randn(2, 6, generator=generator) * 2  # [2, 6]: one distribution per row
    cases = [("k = 3 on one row of 8 logits", row, 3), ("k = 1: only the top token", row, 1),
             ("k = V = 8: nothing removed", row, 8), ("k = 2 on a row whose 2nd and 3rd largest logits tie", tied, 2),
             ("k = 2 on a batch [2, 6]: one top-k per row", batch, 2)]
    return [Case(name, (logits, k), logits_to_probs(logits, SamplingConfig(top_k=k))) for name, logits, k in cases]


def _kept(probs: torch.Tensor) -> list[int]:
    """The number of tokens with probability > 0 in each row of ``probs: [..., V]`` (a flat list)."""
    return (probs.reshape(-1, probs.shape[-1]) > 0).sum(dim=-1).tolist()


def _judge_top_k(case: Case, got: Any) -> str | None:
    logits, k = case.args
    expected: torch.Tensor = case.expected
    problem = tensor_problem(got, expected)
    if problem is None:
        return None
    if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
        return problem
    values = got.detach().cpu().double()
    if not bool(torch.isfinite(values).all()) or bool((values < 0).any()):
        return mismatch(expected, got, "your output still holds logits (−∞, negative numbers): apply "
                                       "torch.softmax(..., dim=-1) to the masked logits as the last step.")
    sums = values.reshape(-1, values.shape[-1]).sum(dim=-1)
    if not torch.allclose(sums, torch.ones_like(sums), atol=1e-4):
        return mismatch(expected, got, "the probabilities do not sum to 1: mask the logits first (others to −∞), "
                                       "then take the softmax; a softmax before the masking needs renormalising.")
    kept, wanted = _kept(values), _kept(expected)
    if "tie" in case.name and kept == [k]:
        return mismatch(expected, got, "ties with the k-th largest logit are kept, as logits_to_probs does: keep every "
                                       "logit >= the k-th largest value instead of exactly the k indices topk returns.")
    if logits.ndim == 2:
        wrong_dim = logits_to_probs(logits.T, SamplingConfig(top_k=k)).T  # top-k down the columns
        by_column = torch.softmax(logits.masked_fill(wrong_dim == 0, -math.inf), dim=-1)
        if torch.allclose(values, by_column.double(), atol=1e-5):
            return mismatch(expected, got, "top-k must act on the last dimension, separately for each row of a batch: "
                                           "torch.topk(logits, k, dim=-1).values[..., -1:] is the k-th largest of "
                                           "every row, shaped to broadcast against logits.")
    if kept != wanted and all(abs(a - b) == 1 for a, b in zip(kept, wanted)):
        return mismatch(expected, got, f"you keep {kept[0]} tokens where k = {k} should keep {wanted[0]}: an "
                                       "off-by-one in the threshold (the k-th largest is topk(...).values[..., k - 1], "
                                       "and tokens equal to it stay).")
    return mismatch(expected, got, "compare your output with logits_to_probs(logits, SamplingConfig(top_k=k)) on the "
                                   "logits of section 4.")


def _with_hint(report: CheckReport, hint: str) -> CheckReport:
    """``report`` with ``hint`` appended to its problem (for errors, which carry no hint of their own)."""
    return CheckReport(report.exercise, report.cases, report.failed_case, report.case_name,
                       f"{report.problem}\nHint: {hint}", report.note)


TOP_K_ERROR_HINTS = {  # a word of the case name -> what an error on that case usually means
    "batch": "on a batch [B, V], take the k-th largest of every row, with dim=-1 and shaped [B, 1] to broadcast: "
             "torch.topk(logits, k, dim=-1).values[..., -1:].",
    "k = V": "k may be as large as V: the k-th largest logit is topk(...).values[..., k - 1] (the last one), "
             "not values[..., k].",
}


def top_k_probs(learner: Any) -> CheckReport:
    """Check ``top_k_probs(logits, k) -> probs`` (same shape as ``logits: [..., V]``) on hidden cases."""
    report = run_cases("top_k_probs", learner, _top_k_cases(), _judge_top_k)
    if not report and report.problem.startswith("Your function raised"):
        for word, hint in TOP_K_ERROR_HINTS.items():
            if word in report.case_name:
                return _with_hint(report, hint)
        if "IndexError" in report.problem:
            return _with_hint(report, TOP_K_ERROR_HINTS["k = V"])
    return report


# --- exercise 2: the price of no cache -----------------------------------------------------------------------------


def _least_squares(lengths: torch.Tensor, seconds: torch.Tensor) -> tuple[float, float]:
    """``(slope, intercept)`` of the least-squares line ``seconds ~ intercept + slope * lengths``."""
    x, y = lengths.double(), seconds.double()
    slope = float(((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum())
    return slope, float(y.mean() - slope * x.mean())


def _fit_cases() -> list[Case]:
    """Synthetic step times ``[n]`` against sequence lengths ``[n]`` (float64), exact and noisy lines."""
    generator = torch.Generator().manual_seed(0)
    lengths = torch.arange(63, 223, dtype=torch.float64)  # [160]: prompt of 62 tokens, 160 steps, as in section 6
    noisy = 0.0164 + 6.3e-4 * lengths + 1e-3 * torch.randn(len(lengths), generator=generator, dtype=torch.float64)
    short = torch.tensor([10.0, 20.0, 30.0, 40.0], dtype=torch.float64)
    lines = [("an exact line: intercept 0.020, slope 0.0005 per token", lengths, 0.020 + 5e-4 * lengths),
             ("a noisy line like section 6's measurement", lengths, noisy),
             ("four points: intercept 0.002, slope 0.0001 per token", short, 0.002 + 1e-4 * short)]
    return [Case(name, (x, y), _least_squares(x, y)) for name, x, y in lines]


def _judge_fit(case: Case, got: Any) -> str | None:
    slope, intercept = case.expected
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return f"Expected a pair (seconds_per_token, fixed_seconds), got {describe(got)}."
    try:
        got_slope, got_intercept = float(got[0]), float(got[1])
    except (TypeError, ValueError):
        return f"Expected two numbers (seconds_per_token, fixed_seconds), got {describe(got)}."
    if close(got_slope, slope, rel_tol=1e-4) and close(got_intercept, intercept, rel_tol=1e-4, abs_tol=1e-9):
        return None
    pair = (got_slope, got_intercept)
    if close(got_slope, intercept, rel_tol=1e-4) and close(got_intercept, slope, rel_tol=1e-4):
        return mismatch(case.expected, pair, "the two numbers are swapped: return (seconds_per_token, fixed_seconds), "
                                             "the slope first (a least-squares solution over columns [1, length] "
                                             "comes out as (intercept, slope)).")
    for name, value, truth in (("seconds_per_token", got_slope, slope), ("fixed_seconds", got_intercept, intercept)):
        for factor, unit in ((1e3, "milliseconds"), (1e6, "microseconds")):
            if close(value, truth * factor, rel_tol=1e-3):
                return mismatch(case.expected, pair, f"a unit slip: your {name} is in {unit}. Return seconds "
                                                     "(convert only when you print).")
    through_origin = float((case.args[0] * case.args[1]).sum() / (case.args[0] ** 2).sum())
    if close(got_slope, through_origin, rel_tol=1e-4) or close(got_intercept, 0.0, abs_tol=1e-12):
        return mismatch(case.expected, pair, "the line needs an intercept: fit seconds ≈ fixed_seconds + "
                                             "seconds_per_token × length (a design matrix with a column of ones).")
    return mismatch(case.expected, pair, "fit the least-squares line seconds ≈ fixed_seconds + seconds_per_token × "
                                         "length, e.g. with torch.linalg.lstsq over the columns [1, length].")


def fit_step_cost(learner: Any) -> CheckReport:
    """Check ``fit_step_cost(lengths, seconds) -> (seconds_per_token, fixed_seconds)`` on hidden synthetic lines."""
    return run_cases("fit_step_cost", learner, _fit_cases(), _judge_fit)


# --- exercise 3: prose versus code ---------------------------------------------------------------------------------

PROSE_VERSUS_CODE = {
    "a": "A forward's cost does not depend on what the tokens mean, only on how many it reads: prose is not 'easier' "
         "for the hardware.",
    "b": "TTFT is the prefill, one forward over the whole prompt, so it follows the prompt length (the prose prompts "
         "are shorter); every decoding step is one forward over one new token whatever the text, so the ITL barely "
         "changes. (The fixed per-forward overhead of these tiny models keeps even the TTFT difference small.)",
    "c": "The KV cache stores keys and values whatever the text is; it saves the same work on prose as on code.",
    "d": "Noise moves both numbers, but the TTFT follows the prompt length run after run: the prefill reads every "
         "prompt token, while a decoding step reads one.",
}


def prose_versus_code(answer: Any) -> CheckReport:
    """Multiple choice: why the TTFT differs between the code and prose prompts and the ITL hardly does."""
    return check_choice("prose_versus_code", answer, "b", PROSE_VERSUS_CODE)
