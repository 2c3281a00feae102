"""The load test against `transformers serve`: SSE parsing and statistics on synthetic data, the client against a
tiny standard-library SSE server, the missing-dependency message, and (slow) the real server on the embedded
target, started and stopped."""

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from specdec_tools import serve
from specdec_tools.serve_client import (
    RequestResult,
    SSEParser,
    completion_body,
    load_test,
    parse_event,
    summarize_requests,
)
from specdec_lib.core.errors import ConfigError
from specdec_lib.core.paths import data_dir


def chunk(text, finish_reason=None, usage=None):
    payload = {"choices": [{"index": 0, "text": text, "finish_reason": finish_reason}]}
    if usage is not None:
        payload["usage"] = {"completion_tokens": usage}
    return f"data: {json.dumps(payload)}\n\n".encode()


# --------------------------------------------------------------------------- SSE parsing


def test_sse_parser_reassembles_events_split_anywhere():
    stream = chunk("def") + b": a comment\n\n" + chunk(" f") + b"event: x\r\ndata: [DONE]\r\n\r\n"
    for size in (1, 3, 7, len(stream)):
        parser = SSEParser()
        events = [e for i in range(0, len(stream), size) for e in parser.feed(stream[i : i + size])]
        assert [parse_event(e).text for e in events[:2]] == ["def", " f"]
        assert parse_event(events[2]).done


def test_sse_parser_joins_multiline_data():
    assert SSEParser().feed(b"data: a\ndata:b\n\n") == ["a\nb"]


def test_parse_event_reads_text_finish_usage_and_errors():
    final = parse_event(chunk("", "length", 8).decode()[6:].strip())
    assert (final.text, final.finish_reason, final.usage_tokens) == ("", "length", 8)
    assert parse_event('{"error": "boom"}').error == "boom"
    assert parse_event("not json").error.startswith("not JSON")


def test_completion_body_is_greedy_streaming_with_a_json_string_generation_config():
    body = completion_body("x", max_tokens=4, generation_config={"prompt_lookup_num_tokens": 3})
    assert body["stream"] is True and body["temperature"] == 0 and "model" not in body
    assert json.loads(body["generation_config"]) == {"prompt_lookup_num_tokens": 3}


# --------------------------------------------------------------------------- statistics


def test_summary_statistics_on_synthetic_requests():
    a = RequestResult(0, arrivals=[0.1, 0.2, 0.2, 0.4], total_s=0.5, tokens=6)  # same-read chunks: one arrival
    b = RequestResult(1, arrivals=[0.3, 0.6], total_s=0.7, tokens=2)
    failed = RequestResult(2, total_s=0.1, error="HTTP 500: boom")
    assert a.ttft_s == 0.1 and a.gaps_s == pytest.approx([0.1, 0.2])
    summary = summarize_requests([a, b, failed], wall_s=2.0)
    assert summary["ttft_p50_s"] == pytest.approx(0.2)  # (0.1, 0.3): linear interpolation
    assert summary["ttft_p95_s"] == pytest.approx(0.29)
    assert summary["itl_p50_s"] == pytest.approx(0.2)  # gaps 0.1, 0.2, 0.3
    assert summary["itl_p95_s"] == pytest.approx(0.29)
    assert summary["chunks"] == 6 and summary["chunks_per_s"] == pytest.approx(3.0)
    assert summary["tokens"] == 8 and summary["tokens_per_s"] == pytest.approx(4.0)
    assert summary["worst_request"]["index"] == 1
    assert (summary["errors"], summary["first_error"], summary["completed"]) == (1, "HTTP 500: boom", 2)


def test_summary_without_token_counts_or_data():
    summary = summarize_requests([RequestResult(0, arrivals=[0.1], total_s=0.1)], wall_s=1.0)
    assert summary["tokens"] is None and summary["tokens_per_s"] is None and summary["itl_p50_s"] is None


def test_parse_concurrency():
    assert serve.parse_concurrency("8,1,4,4") == (1, 4, 8)
    for bad in ("0,1", "a", ""):
        with pytest.raises(Exception):
            serve.parse_concurrency(bad)


# --------------------------------------------------------------------------- the client on a fake server

GAP_S = 0.05


class FakeCompletions(BaseHTTPRequestHandler):
    """Streams three one-word chunks GAP_S apart, then a final chunk; prompt "fail" -> HTTP 500, "err" -> an
    error event; counts requests in flight."""

    protocol_version = "HTTP/1.1"
    in_flight = 0
    most_in_flight = 0
    lock = threading.Lock()

    def log_message(self, *args):
        pass

    def _send(self, data: bytes) -> None:
        try:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):  # the client hung up, as it does at an error event
            pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if body["prompt"] == "fail":
            self.send_response(500)
            self.send_header("Content-Length", "4")
            self.end_headers()
            self.wfile.write(b"boom")
            return
        cls = type(self)
        with cls.lock:
            cls.in_flight += 1
            cls.most_in_flight = max(cls.most_in_flight, cls.in_flight)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for word in ("a", " b", " c")[: body["max_tokens"]]:
            time.sleep(GAP_S)
            self._send(b'data: {"error": "bad"}\n\n' if body["prompt"] == "err" else chunk(word))
        with cls.lock:  # before the stream ends: once it has, the client may rightly start its next request
            cls.in_flight -= 1
        self._send(chunk("", "length", 3))
        self._send(b"")


@pytest.fixture
def fake_server():
    FakeCompletions.in_flight = FakeCompletions.most_in_flight = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeCompletions)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_load_test_times_streams_and_bounds_concurrency(fake_server):
    result = load_test(fake_server, ["p"] * 5, concurrency=2, max_tokens=3,
                       count_tokens=lambda prompt, text: len(text.split()))
    assert result["errors"] == 0 and result["completed"] == 5
    assert FakeCompletions.most_in_flight == 2
    assert all(r["chunks"] == 3 and r["text"] == "a b c" and r["usage_tokens"] == 3 for r in result["per_request"])
    assert result["ttft_p50_s"] >= GAP_S * 0.9
    assert result["itl_p50_s"] == pytest.approx(GAP_S, abs=0.03)
    assert result["tokens"] == 15 and result["chunks"] == 15


def test_load_test_counts_http_and_stream_errors(fake_server):
    result = load_test(fake_server, ["p", "fail", "err"], concurrency=3, max_tokens=2)
    assert result["errors"] == 2 and result["completed"] == 1
    errors = sorted(r["error"] for r in result["per_request"] if r["error"])
    assert errors == ["HTTP 500: boom", "bad"]


def test_load_test_refuses_bad_settings(fake_server):
    with pytest.raises(ConfigError):
        load_test(fake_server, ["p"], concurrency=0, max_tokens=1)
    with pytest.raises(ConfigError):
        load_test(fake_server, [], concurrency=1, max_tokens=1)


# --------------------------------------------------------------------------- missing dependencies


@pytest.fixture
def without_openai(monkeypatch):
    real = serve.find_spec
    monkeypatch.setattr(serve, "find_spec", lambda name: None if name == "openai" else real(name))


def test_missing_dependency_is_a_config_error_with_the_fix(without_openai):
    with pytest.raises(ConfigError) as caught:
        serve.check_serve_dependencies()
    message = str(caught.value)
    assert "openai" in message and "fastapi" not in message and 'pip install -e ".[serve]"' in message
    with pytest.raises(ConfigError):
        with serve.running_server(data_dir() / "models" / "target"):
            pass  # pragma: no cover (never started)


def test_cli_exits_1_with_one_line_when_dependencies_are_missing(without_openai, capsys):
    assert serve.main(["--prompts", "1"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "openai" in err and ".[serve]" in err


# --------------------------------------------------------------------------- the real server


def serve_installed() -> bool:
    try:
        serve.check_serve_dependencies()
    except ConfigError:
        return False
    return True


needs_serve = pytest.mark.skipif(not serve_installed(), reason='the serve extra is not installed '
                                 '(pip install -e ".[serve]"); CI installs it')


def port_is_free(port: int) -> bool:
    """Nothing listens on ``port``: a connection is refused, and a server could bind it (SO_REUSEADDR, as uvicorn
    sets it: the closed connections' TIME_WAIT entries do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as client:
        if client.connect_ex(("127.0.0.1", port)) == 0:
            return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.mark.slow
@needs_serve
def test_real_server_streams_every_request_and_stops():
    from specdec_lib.prompts import load_prompts

    folder = data_dir() / "models" / "target"
    prompts = [p.prompt for p in load_prompts("code", limit=4)]
    with serve.running_server(folder, device="cpu") as base_url:
        port = int(base_url.rsplit(":", 1)[1])
        result = load_test(base_url, prompts, concurrency=2, max_tokens=8,
                           count_tokens=serve.token_counter(folder))
    assert result["errors"] == 0, result["first_error"]
    assert all(r["chunks"] > 0 and r["ttft_s"] > 0 and r["tokens"] > 0 for r in result["per_request"])
    assert result["ttft_p50_s"] > 0 and result["chunks_per_s"] > 0
    assert port_is_free(port)


@pytest.mark.slow
@needs_serve
def test_a_server_that_cannot_listen_reports_its_log():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(serve.ServerError, match="exited with code") as caught:
            with serve.running_server(data_dir() / "models" / "target", port, device="cpu"):
                pass  # pragma: no cover (never ready)
    assert "address already in use" in str(caught.value)
