"""A streaming load-test client for an OpenAI-compatible ``/v1/completions`` endpoint, standard library only.

`load_test` sends each prompt once as a streaming completion request (``"stream": true``), with at most
``concurrency`` requests in flight (one thread per slot), and times what a reader of each stream sees. The server
side (starting ``transformers serve``, what it honours) is `specdec_tools.serve`.

The protocol, as ``transformers serve`` 5.24 speaks it (and OpenAI's legacy Completions API): the response is
Server-Sent Events, ``data: {json}`` lines each ended by a blank line; every event is one *chunk*,
``{"choices": [{"text": ..., "finish_reason": null}]}``; the last one has ``finish_reason`` and ``usage``
(OpenAI servers then send ``data: [DONE]``, transformers sends nothing more). A failure inside the stream comes as
``data: {"error": "..."}``.

What is measured, per request (seconds from the moment the request is sent):

- **arrival times**: one per chunk carrying text, the time the client read the bytes holding it; chunks that
  came in the same read share one time (the server writes the chunks queued since its last write together).
- **TTFT**: the first arrival (`specdec_lib.core.trace.time_to_first_token` over the arrivals).
- **inter-token gaps (ITL)**: gaps between consecutive *distinct* arrival times
  (`specdec_lib.core.trace.inter_token_latencies`): the waits a reader of the stream sees.
- **chunks**: text-carrying chunks received. A chunk is not a token: transformers' streamer turns each
  ``streamer.put`` into one chunk, i.e. one token in plain decoding but *all the tokens of a round* in assisted
  (prompt-lookup) decoding; a chunk can also hold no visible text yet (an incomplete UTF-8 sequence is held back
  and merged into the next one). Tokens are therefore counted separately: ``count_tokens(prompt, text)``
  when given, else None. ``usage_tokens`` is the server's own ``usage.completion_tokens``, which transformers
  5.24 computes by counting ``streamer.put`` calls (rounds, not tokens, under prompt lookup).

The summary pools the requests: TTFT and ITL p50/p95 (`specdec_lib.core.trace.latency_percentiles`, linear
interpolation), the worst request (largest total time), throughput (chunks, and tokens when counted, per second
of wall time from the first request sent to the last one finished) and errors (count and first message).
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from urllib.parse import urlsplit

from specdec_lib.core.errors import ConfigError
from specdec_lib.core.trace import Trace, inter_token_latencies, latency_percentiles, time_to_first_token

#: Seconds a request may wait for the next bytes of its stream before it counts as failed.
READ_TIMEOUT_S = 120.0


class SSEParser:
    """Incremental Server-Sent Events parser: bytes in (any split), the ``data`` of each complete event out.

    An event ends at a blank line; its ``data:`` lines are joined by newlines (the SSE rule); comment lines
    (``:``) and other fields (``event:``, ``id:``) are dropped. CRLF and LF line ends both work.
    """

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[str]:
        """Add bytes read from the stream; return the data of every event they complete, in order."""
        self._buffer += chunk
        events = []
        while b"\n" in self._buffer:
            raw, self._buffer = self._buffer.split(b"\n", 1)
            line = raw.rstrip(b"\r").decode("utf-8")
            if not line:  # blank line: the event is complete
                if self._data:
                    events.append("\n".join(self._data))
                    self._data = []
            elif line.startswith("data:"):
                value = line[5:]
                self._data.append(value[1:] if value.startswith(" ") else value)
        return events


@dataclass
class StreamEvent:
    """What one ``data:`` payload of a completions stream says."""

    text: str = ""  # choices[0].text ("" for the final chunk)
    finish_reason: str | None = None  # "length" / "stop" on the final chunk
    usage_tokens: int | None = None  # usage.completion_tokens, on the final chunk
    error: str | None = None  # {"error": ...} sent inside the stream
    done: bool = False  # the OpenAI end marker ``[DONE]``


def parse_event(data: str) -> StreamEvent:
    """One SSE ``data`` payload of a ``/v1/completions`` stream as a `StreamEvent` (malformed JSON -> an error)."""
    if data.strip() == "[DONE]":
        return StreamEvent(done=True)
    try:
        payload = json.loads(data)
    except json.JSONDecodeError:
        return StreamEvent(error=f"not JSON: {data[:200]!r}")
    if "error" in payload:
        error = payload["error"]
        return StreamEvent(error=error if isinstance(error, str) else json.dumps(error))
    choice = (payload.get("choices") or [{}])[0]
    usage = payload.get("usage") or {}
    return StreamEvent(
        text=choice.get("text") or "",
        finish_reason=choice.get("finish_reason"),
        usage_tokens=usage.get("completion_tokens"),
    )


@dataclass
class RequestResult:
    """One streamed request, timed from the moment it was sent."""

    index: int  # position of its prompt in the list given to `load_test`
    sent_at: float = 0.0  # seconds after the load test started
    arrivals: list[float] = field(default_factory=list)  # one per text-carrying chunk (see the module docstring)
    text: str = ""  # the completion, all chunks joined
    total_s: float = 0.0  # until the stream ended (or failed)
    tokens: int | None = None  # count_tokens(prompt, text), when a counter was given
    usage_tokens: int | None = None  # the server's usage.completion_tokens
    finish_reason: str | None = None
    error: str | None = None

    @property
    def chunks(self) -> int:
        return len(self.arrivals)

    def _trace(self) -> Trace:
        return Trace(start_time=0.0, token_times=self.arrivals)

    @property
    def ttft_s(self) -> float | None:
        return time_to_first_token(self._trace())

    @property
    def gaps_s(self) -> list[float]:
        return inter_token_latencies(self._trace())

    def as_dict(self) -> dict:
        return {**asdict(self), "chunks": self.chunks, "ttft_s": self.ttft_s}


def completion_body(prompt: str, *, max_tokens: int, model: str | None = None,
                    generation_config: dict | None = None) -> dict:
    """The JSON body of a greedy streaming completion request.

    ``temperature: 0`` makes transformers set ``do_sample=False`` (greedy); ``generation_config`` travels as a JSON
    *string*, which transformers turns into the request's ``GenerationConfig``. ``model`` may be left out when the
    server is pinned to one model (it must then equal the pinned name exactly)."""
    body: dict = {"prompt": prompt, "max_tokens": max_tokens, "stream": True, "temperature": 0}
    if model is not None:
        body["model"] = model
    if generation_config is not None:
        body["generation_config"] = json.dumps(generation_config)
    return body


def stream_completion(base_url: str, body: dict, result: RequestResult, *, timeout: float = READ_TIMEOUT_S) -> None:
    """POST ``body`` to ``base_url``/v1/completions and fill ``result`` while reading the stream.

    Bytes are taken as they come (``read1``: one read of what the socket holds), so each chunk is timed when it
    reached the client. Failures (connection, HTTP status, an error event, a stream that ends without a final
    chunk) are stored in ``result.error``, never raised: a load test counts them."""
    url = urlsplit(base_url)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout)
    start = time.perf_counter()
    try:
        connection.request("POST", url.path.rstrip("/") + "/v1/completions", json.dumps(body),
                           {"Content-Type": "application/json", "Accept": "text/event-stream"})
        response = connection.getresponse()
        if response.status != 200:
            detail = response.read(500).decode("utf-8", "replace").strip()
            result.error = f"HTTP {response.status}: {detail}"
            return
        parser = SSEParser()
        pieces = []
        while result.finish_reason is None and (data := response.read1(65536)):
            now = time.perf_counter() - start
            for event in map(parse_event, parser.feed(data)):
                if event.error is not None:
                    result.error = event.error
                    return
                if event.text:
                    pieces.append(event.text)
                    result.arrivals.append(now)
                if event.finish_reason is not None:
                    result.finish_reason, result.usage_tokens = event.finish_reason, event.usage_tokens
        result.text = "".join(pieces)
        if result.finish_reason is None:
            result.error = "the stream ended without a final chunk (finish_reason)"
    except (OSError, http.client.HTTPException) as error:
        result.error = f"{type(error).__name__}: {error}"
    finally:
        result.total_s = time.perf_counter() - start
        connection.close()


def summarize_requests(results: Sequence[RequestResult], wall_s: float) -> dict:
    """The load test's numbers over ``results`` (see the module docstring); percentiles are None without data."""
    ok = [r for r in results if r.error is None]
    errors = [r for r in results if r.error is not None]
    ttft = latency_percentiles([r.ttft_s for r in ok if r.ttft_s is not None])
    itl = latency_percentiles([gap for r in ok for gap in r.gaps_s])
    chunks = sum(r.chunks for r in ok)
    counted = all(r.tokens is not None for r in ok) and bool(ok)
    tokens = sum(r.tokens for r in ok) if counted else None
    worst = max(results, key=lambda r: r.total_s, default=None)
    return {
        "requests": len(results),
        "completed": len(ok),
        "errors": len(errors),
        "first_error": errors[0].error if errors else None,
        "wall_s": wall_s,
        "ttft_p50_s": ttft[50],
        "ttft_p95_s": ttft[95],
        "itl_p50_s": itl[50],
        "itl_p95_s": itl[95],
        "chunks": chunks,
        "chunks_per_s": chunks / wall_s if wall_s > 0 else None,
        "tokens": tokens,
        "tokens_per_s": tokens / wall_s if tokens is not None and wall_s > 0 else None,
        "tokens_per_chunk": tokens / chunks if tokens is not None and chunks else None,
        "usage_tokens": sum(r.usage_tokens or 0 for r in ok),
        "worst_request": None if worst is None else {
            "index": worst.index, "total_s": worst.total_s, "ttft_s": worst.ttft_s, "chunks": worst.chunks},
    }


def load_test(base_url: str, prompts: Sequence[str], *, concurrency: int, max_tokens: int,
              generation_config: dict | None = None, model: str | None = None,
              count_tokens: Callable[[str, str], int] | None = None) -> dict:
    """Send every prompt once (greedy, streaming) with at most ``concurrency`` requests in flight; time them.

    Returns `summarize_requests`'s numbers plus the settings and ``per_request`` (each `RequestResult` as a
    dict). ``count_tokens(prompt, completion)`` counts the tokens of a completion (chunks are not tokens: see
    the module docstring); `specdec_tools.serve.token_counter` builds one from a model folder.
    """
    if concurrency < 1 or max_tokens < 1:
        raise ConfigError(f"concurrency and max_tokens must be >= 1, got {concurrency} and {max_tokens}.")
    if not prompts:
        raise ConfigError("load_test needs at least one prompt.")
    results = [RequestResult(index=i) for i in range(len(prompts))]
    start = time.perf_counter()

    def run(i: int) -> None:
        results[i].sent_at = time.perf_counter() - start
        body = completion_body(prompts[i], max_tokens=max_tokens, model=model, generation_config=generation_config)
        stream_completion(base_url, body, results[i])
        if count_tokens is not None and results[i].error is None:
            results[i].tokens = count_tokens(prompts[i], results[i].text)

    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="load-test") as pool:
        list(pool.map(run, range(len(prompts))))
    wall_s = time.perf_counter() - start
    return {
        "concurrency": concurrency,
        "max_tokens": max_tokens,
        "generation_config": generation_config,
        **summarize_requests(results, wall_s),
        "per_request": [r.as_dict() for r in results],
    }
