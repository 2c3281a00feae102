"""`python -m specdec_tools serve`: a load test against a real OpenAI-compatible server, ``transformers serve``.

    python -m specdec_tools serve                                   # concurrency 1,4,8; 8 code prompts; 32 tokens
    python -m specdec_tools serve --prompt-lookup 4 --task grounded --json runs/serve.json
    python -m specdec_tools serve --concurrency 4 --continuous-batching   # the server's batching scheduler
    python -m specdec_tools serve --threads 1     # one server thread: far steadier on a busy 2-core machine

It starts ``transformers serve`` on localhost with the embedded target (`running_server`), sends each prompt once
as a greedy streaming request with at most ``concurrency`` requests in flight (`specdec_tools.serve_client`,
where the protocol and every number are defined), prints one row per concurrency (x with / without prompt lookup;
`specdec_lib.bench.latency.format_serve_table`) and stops the server. It needs the optional ``serve`` extra
(``pip install -e ".[serve]"``, `check_serve_dependencies`).

What ``transformers serve`` (5.24) does, read in ``transformers/cli/serve.py`` and ``cli/serving/`` and tried here:

- **A local folder, offline**: ``transformers serve data/models/target`` pins (preloads) that model before the
  server listens; a path that exists is taken as a local model, so it runs with ``HF_HUB_OFFLINE=1`` (set for the
  server by `running_server`). The port and address are ``--port`` / ``--host``; ``--device`` and ``--dtype``
  choose where and how it runs (``--dtype auto`` would keep the fp16 of the files, slow on CPU, so float32 is
  passed, as the library loads it). A request's ``model`` may be omitted; if given it must equal the pinned name.
  ``GET /health`` answers 200 once the model is loaded: that is the readiness check.
- **Endpoint**: ``/v1/completions`` (raw text prompt, no chat template). The embedded tokenizer has no chat
  template, so ``/v1/chat/completions`` fails with HTTP 500 (``apply_chat_template``: "tokenizer.chat_template
  is not set"), and ``/v1/responses`` builds its input with the same template.
- **Streaming**: ``"stream": true`` gives Server-Sent Events, one ``data:`` chunk per ``streamer.put`` of
  ``generate`` (one token in plain decoding), then a final chunk with ``finish_reason`` and ``usage``.
- **Greedy**: ``"temperature": 0`` makes the server set ``do_sample=False`` (and log that ``temperature`` is
  ignored); the target's own generation config is greedy too.
- **Concurrency**: by default every request runs ``model.generate`` on one inference thread per model, one
  after the other: concurrent requests *queue* (TTFT grows with concurrency, throughput does not).
  ``--continuous-batching`` batches them (paged attention), with a scheduler's work at every step that a small
  CPU pays for (the load test compares it with the sequential path), and it ignores prompt lookup (one token per
  chunk, no speed-up).
- **Prompt lookup through the request: honoured** (sequential path). The body field ``generation_config`` is a
  JSON string; the handler builds the request's ``GenerationConfig`` from it (``_build_generation_config``, then
  ``max_tokens`` sets ``max_new_tokens``), and ``generate`` fills the unset fields from the model's config (EOS
  kept). With ``{"prompt_lookup_num_tokens": 4}`` ``generate`` runs assisted decoding with the prompt-lookup
  candidate generator. How to tell it is honoured: the stream has fewer chunks than tokens, several tokens each
  (assisted decoding puts the accepted tokens of a round at once, ``streamer.put(valid_tokens)``), and the text is
  identical to plain greedy; the table's ``tok/chunk`` (above 1) and ``identical`` columns check both on every
  run. Caveat: the server counts ``usage.completion_tokens`` as ``streamer.put`` calls, so under prompt lookup it
  reports rounds, not tokens, and ``finish_reason`` says "stop" where it hit the length limit; tokens are
  therefore counted here by re-encoding the text (`token_counter`).

Exit codes: 0 done; 1 the serve extra is missing, the model folder or prompts are missing, or the server failed;
2 bad arguments.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from importlib.util import find_spec
from pathlib import Path

from specdec_lib.core.devices import get_device
from specdec_lib.core.errors import ConfigError, SpecdecError
from specdec_lib.loading import _check_model_folder
from specdec_lib.core.paths import data_dir
from specdec_lib.prompts import TASKS, load_prompts
from specdec_lib.bench.cli import _positive_int, machine_info, write_json
from specdec_lib.bench.latency import SERVE_LEGEND, format_serve_table
from .serve_client import load_test

#: What ``transformers serve`` imports (transformers' ``is_serve_available``): import name -> pip name.
SERVE_PACKAGES = {"fastapi": "fastapi", "uvicorn": "uvicorn", "openai": "openai", "pydantic": "pydantic"}
FIX_SERVE = 'pip install -e ".[serve]"'

DEFAULT_CONCURRENCY = (1, 4, 8)
DEFAULT_PROMPTS = 8
DEFAULT_MAX_TOKENS = 32
STARTUP_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 10.0
LOG_TAIL_LINES = 15


class ServerError(SpecdecError, RuntimeError):
    """``transformers serve`` did not start (it exited, or did not answer ``/health`` in time)."""


def check_serve_dependencies() -> None:
    """Raise `ConfigError` naming the packages ``transformers serve`` needs and lacks, and the fix."""
    missing = [pip_name for module, pip_name in SERVE_PACKAGES.items() if find_spec(module) is None]
    if missing:
        raise ConfigError(
            f"`transformers serve` needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} not "
            f"installed. Install the serve extra: {FIX_SERVE}"
        )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def serve_command(model_folder: Path, port: int, device: str, dtype: str, extra_args: Sequence[str]) -> list[str]:
    """The ``transformers serve`` command line, run with this interpreter (so the same environment serves)."""
    return [sys.executable, "-m", "transformers.cli.transformers", "serve", str(model_folder),
            "--host", "127.0.0.1", "--port", str(port), "--device", device, "--dtype", dtype, *extra_args]


def _log_tail(log) -> str:
    log.flush()
    log.seek(0)
    lines = log.read().decode("utf-8", "replace").splitlines()
    return "\n".join(lines[-LOG_TAIL_LINES:]) or "(no output)"


def _healthy(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(base_url + "/health", timeout=2) as response:
            return response.status == 200
    except (OSError, urllib.error.URLError):
        return False


def stop_server(process: subprocess.Popen, timeout: float = STOP_TIMEOUT_S) -> None:
    """Terminate ``process`` (uvicorn shuts down gracefully on SIGTERM); kill it if it is still alive after
    ``timeout`` seconds (a graceful shutdown waits for open streams)."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def running_server(model_folder: str | Path, port: int | None = None, extra_args: Sequence[str] = (), *,
                   device: str | None = None, dtype: str = "float32", threads: int | None = None,
                   startup_timeout: float = STARTUP_TIMEOUT_S) -> Iterator[str]:
    """Run ``transformers serve`` on ``model_folder`` for the ``with`` block; yield its base URL.

    The server listens on 127.0.0.1:``port`` (a free port when None), on ``device`` (default `get_device()`),
    offline (``HF_HUB_OFFLINE=1`` unless set), with ``threads`` CPU threads (``OMP_NUM_THREADS``; default torch's
    own choice). Ready means ``GET /health`` answered 200; if the server exits
    first or is not ready within ``startup_timeout`` seconds, `ServerError` carries its last log lines. On exit
    from the block, however it ends, the server is stopped (`stop_server`). ``extra_args`` are more
    ``transformers serve`` options, e.g. ``("--continuous-batching",)``.
    """
    check_serve_dependencies()
    folder = Path(model_folder)
    _check_model_folder(folder)
    port = free_port() if port is None else port
    base_url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    env.setdefault("HF_HUB_OFFLINE", "1")
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    command = serve_command(folder, port, str(get_device(device)), dtype, extra_args)
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        try:
            deadline = time.monotonic() + startup_timeout
            while not _healthy(base_url):
                if process.poll() is not None:
                    raise ServerError(f"`transformers serve` exited with code {process.returncode} before it was "
                                      f"ready. Its last output:\n{_log_tail(log)}")
                if time.monotonic() > deadline:
                    raise ServerError(f"`transformers serve` did not answer {base_url}/health within "
                                      f"{startup_timeout:.0f} s. Its last output:\n{_log_tail(log)}")
                time.sleep(0.2)
            yield base_url
        finally:
            stop_server(process)


def token_counter(model_folder: str | Path) -> Callable[[str, str], int]:
    """``count(prompt, completion)``: the completion's tokens under the folder's tokenizer, as
    ``len(encode(prompt + completion)) - len(encode(prompt))`` (the boundary merges as the model saw it)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(Path(model_folder) / "tokenizer.json"))

    def count(prompt: str, completion: str) -> int:
        return len(tokenizer.encode(prompt + completion).ids) - len(tokenizer.encode(prompt).ids)

    return count


# --------------------------------------------------------------------------- the command


def parse_concurrency(text: str) -> tuple[int, ...]:
    """``"1,4,8"`` -> ``(1, 4, 8)``: comma-separated levels >= 1, sorted, duplicates dropped."""
    try:
        levels = [int(piece) for piece in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated whole numbers such as 1,4,8; got {text!r}") from None
    if any(level < 1 for level in levels):
        raise argparse.ArgumentTypeError(f"every concurrency must be >= 1, got {text!r}")
    return tuple(sorted(set(levels)))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m specdec_tools serve",
        description="Load-test `transformers serve` (OpenAI-compatible, started and stopped here) with the embedded "
        "target: greedy streaming /v1/completions requests at each concurrency, with and without prompt lookup "
        "(sent in the request's generation_config). Needs the serve extra: " + FIX_SERVE,
        epilog="Exit codes: 0 done, 1 missing dependencies, model or prompts, or the server failed, 2 bad "
        "arguments. The numbers are defined in specdec_tools/serve_client.py.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--concurrency", type=parse_concurrency, default=DEFAULT_CONCURRENCY, metavar="C1,C2,...",
                        help="requests in flight at most, one row each")
    parser.add_argument("--prompts", type=_positive_int, default=DEFAULT_PROMPTS, help="first N prompts of the set")
    parser.add_argument("--max-tokens", type=_positive_int, default=DEFAULT_MAX_TOKENS,
                        help="max_tokens of each request (fewer when EOS comes first)")
    parser.add_argument("--prompt-lookup", type=_positive_int, default=None, metavar="K",
                        help="also run every concurrency with prompt_lookup_num_tokens=K in the generation_config")
    parser.add_argument("--task", choices=TASKS, default="code", help="prompt set")
    parser.add_argument("--continuous-batching", action="store_true",
                        help="start the server with --continuous-batching (slow on CPU; ignores prompt lookup)")
    parser.add_argument("--port", type=_positive_int, default=None, help="server port (default: a free one)")
    parser.add_argument("--threads", type=_positive_int, default=None,
                        help="the server's CPU threads (OMP_NUM_THREADS; default: torch's own choice)")
    parser.add_argument("--device", default=None, help="the server's device (default: SPECDEC_DEVICE, else the best)")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write every number here")
    return parser


def run_rows(base_url: str, prompts: Sequence[str], *, concurrency: Sequence[int], max_tokens: int,
             prompt_lookup: int | None, count_tokens: Callable[[str, str], int]) -> list[dict]:
    """One warm-up request per setting (not timed: the first generate pays one-off set-up), then one
    `load_test` per concurrency x (without, with prompt lookup); rows for the table and the JSON."""
    configs = [None] + ([{"prompt_lookup_num_tokens": prompt_lookup}] if prompt_lookup else [])
    for config in configs:
        load_test(base_url, prompts[:1], concurrency=1, max_tokens=max_tokens, generation_config=config)
    rows = []
    for level in concurrency:
        plain_texts = None
        for config in configs:
            result = load_test(base_url, prompts, concurrency=level, max_tokens=max_tokens,
                               generation_config=config, count_tokens=count_tokens)
            texts = [r["text"] for r in result["per_request"]]
            identical = None
            if config is None:
                plain_texts = texts
            elif result["errors"] == 0:
                identical = texts == plain_texts
            worst = result["worst_request"]
            rows.append({**result, "prompt_lookup": prompt_lookup if config else "off",
                         "worst_s": worst["total_s"] if worst else None, "identical": identical})
    return rows


def _fail(message: str) -> int:
    print(f"python -m specdec_tools serve: error: {message}", file=sys.stderr)
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        check_serve_dependencies()
        folder = data_dir() / "models" / "target"
        prompts = load_prompts(args.task)
        if args.prompts > len(prompts):
            raise ConfigError(f"--prompts {args.prompts}: the {args.task} set has only {len(prompts)} prompts")
        texts = [p.prompt for p in prompts[: args.prompts]]
        device = get_device(args.device)
        extra = ("--continuous-batching",) if args.continuous_batching else ()
        with running_server(folder, args.port, extra, device=str(device), threads=args.threads) as base_url:
            rows = run_rows(base_url, texts, concurrency=args.concurrency, max_tokens=args.max_tokens,
                            prompt_lookup=args.prompt_lookup, count_tokens=token_counter(folder))
    except (SpecdecError, OSError, ValueError) as error:
        return _fail(str(error))
    settings = {"model": str(folder), "task": args.task, "prompts": len(texts), "max_tokens": args.max_tokens,
                "concurrency": list(args.concurrency), "prompt_lookup": args.prompt_lookup,
                "continuous_batching": args.continuous_batching, "server_threads": args.threads,
                "decoding": "greedy (temperature 0)"}
    machine = machine_info(device)
    print(f"machine:  {device}, {machine['cpu_count']} CPUs ({machine['cpu_model']}), "
          f"transformers {machine['transformers']}, torch {machine['torch']}")
    threads = f"{args.threads} thread{'s' if args.threads != 1 else ''}" if args.threads else "default threads"
    batching = ", continuous batching" if extra else ""
    print(f"settings: transformers serve {folder.name} (float32, {threads}{batching}), "
          f"task {args.task}, {len(texts)} prompts, max_tokens {args.max_tokens}, greedy, streaming /v1/completions")
    print(format_serve_table(rows))
    for row in rows:
        if row["first_error"]:
            print(f"errors at concurrency {row['concurrency']}, lookup {row['prompt_lookup']}: {row['errors']}, "
                  f"first: {row['first_error']}")
    print(SERVE_LEGEND)
    if args.json is not None:
        write_json(args.json, {"machine": machine, "settings": settings, "rows": rows})
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
