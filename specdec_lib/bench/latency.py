"""What a user of a served model feels, from per-request timings: TTFT, inter-token latency p50/p95, the worst
request. Shared by the single-request benches (our traces) and the batch bench (rows of one batch).

Averages hide slow requests: a small mean ITL can hide a request whose tokens arrive in bursts, with gaps ten
times that mean between them. So every summary keeps the 95th percentile and the worst request next to the median.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core.trace import Trace, inter_token_latencies, latency_percentiles, mean_acceptance_length, time_to_first_token


def latency_summary(ttfts: Sequence[float], gaps: Sequence[Sequence[float]], totals: Sequence[float]) -> dict:
    """Per request ``i``: ``ttfts[i]`` (seconds to its first token), ``gaps[i]`` (seconds between its token
    arrivals), ``totals[i]`` (seconds until its last token). The ITL percentiles pool every request's gaps."""
    ttft = latency_percentiles(list(ttfts))
    itl = latency_percentiles([gap for request in gaps for gap in request])
    worst = max(range(len(totals)), key=lambda i: totals[i]) if totals else None
    return {"ttft_p50_s": ttft[50], "ttft_p95_s": ttft[95], "itl_p50_s": itl[50], "itl_p95_s": itl[95],
            "worst_request": worst, "worst_request_s": None if worst is None else totals[worst],
            "requests": len(totals)}


def trace_latency(traces: Sequence[Trace]) -> dict:
    """`latency_summary` of one generation per request (our traces), plus the per-request spread of the mean
    acceptance length (min, median, max; None for the baseline): the slow requests are the low-acceptance ones."""
    summary = latency_summary([time_to_first_token(t) or 0.0 for t in traces],
                              [inter_token_latencies(t) for t in traces],
                              [t.token_times[-1] if t.token_times else 0.0 for t in traces])
    lengths = sorted(x for x in (mean_acceptance_length(t) for t in traces) if x is not None)
    summary["acceptance_length_spread"] = (
        None if not lengths else [lengths[0], latency_percentiles(lengths)[50], lengths[-1]])
    return summary
