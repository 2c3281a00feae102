"""What a user of a served model feels, from per-request timings: TTFT, inter-token latency p50/p95, the worst
request. Shared by the single-request benches (our traces) and the batch bench (rows of one batch); the table of a
load test against a real server (`format_serve_table`) prints the same numbers, as measured by the load test of
``python -m specdec_tools serve`` and stored in ``data/bench/serve-*.json``, which notebook 08 reads.

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


# --------------------------------------------------------------------------- the load test's table

#: A load-test row's key -> (header, format) in `format_serve_table`; None prints blank.
SERVE_COLUMNS: dict[str, tuple[str, str]] = {
    "concurrency": ("conc", "{}"),
    "prompt_lookup": ("lookup", "{}"),
    "completed": ("ok", "{}"),
    "ttft_p50_s": ("TTFT p50", "{:.0f}ms"),
    "ttft_p95_s": ("TTFT p95", "{:.0f}ms"),
    "itl_p50_s": ("ITL p50", "{:.1f}ms"),
    "itl_p95_s": ("ITL p95", "{:.1f}ms"),
    "chunks_per_s": ("chunks/s", "{:.1f}"),
    "tokens_per_s": ("tokens/s", "{:.1f}"),
    "tokens_per_chunk": ("tok/chunk", "{:.2f}"),
    "worst_s": ("worst", "{:.2f}s"),
    "wall_s": ("wall", "{:.2f}s"),
    "identical": ("identical", "{}"),
}
#: The columns stored in seconds and printed in milliseconds.
SERVE_MILLISECONDS = {"ttft_p50_s", "ttft_p95_s", "itl_p50_s", "itl_p95_s"}

SERVE_LEGEND = """\
ok            requests completed without error (of --prompts); the first error is printed below the table
TTFT          time to first token: send -> first chunk carrying text, p50/p95 over requests (queueing included)
ITL           gaps between a stream's consecutive chunk arrivals, p50/p95 pooled over requests
chunks/s      text chunks received / wall seconds (a chunk is one token, or a whole round under prompt lookup)
tokens/s      tokens (the completion re-encoded with the target's tokenizer) / wall seconds
worst         total seconds of the slowest request
identical     with prompt lookup: every completion equals the one without it (greedy must not change)"""


def format_serve_table(rows: Sequence[dict]) -> str:
    """A load test's rows as aligned text, one header line, numbers right-aligned (milliseconds for TTFT and ITL)."""
    def cell(key: str, value: object) -> str:
        if value is None:
            return ""
        if isinstance(value, bool):
            return "yes" if value else "NO"
        return SERVE_COLUMNS[key][1].format(value * 1000 if key in SERVE_MILLISECONDS else value)

    header = [title for title, _ in SERVE_COLUMNS.values()]
    lines = [header] + [[cell(key, row.get(key)) for key in SERVE_COLUMNS] for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(SERVE_COLUMNS))]
    return "\n".join("  ".join(text.rjust(w) for text, w in zip(line, widths)).rstrip() for line in lines)
