"""Headless check that `make course` reaches a JupyterLab that serves the course and runs a notebook in its kernel.

    python scripts/check_course_server.py                      # runs `make course` into a scratch folder
    python scripts/check_course_server.py --notebook 01_greedy_matching.ipynb --command "python3 scripts/bootstrap.py course"

It starts the command with a folder, a port and a token of its own (and no browser), waits until the server
answers, opens the notebook through the server's contents API, starts a kernel for it through the sessions API, and
sends every code cell over the kernel's websocket, as JupyterLab does when a learner runs all cells. It prints how
long the server took to answer and each failing cell's error, stops the server, and exits 0 only when the server
answered and every cell ran without an error.

Run it from the repository root with the environment's Python (it needs tornado, which JupyterLab brings).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid

from tornado.websocket import websocket_connect


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def api(base: str, token: str, path: str, method: str = "GET", body: dict | None = None) -> dict:
    request = urllib.request.Request(f"{base}{path}", method=method, headers={"Authorization": f"token {token}"},
                                     data=None if body is None else json.dumps(body).encode())
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"{}")


def wait_for_server(base: str, token: str, process: subprocess.Popen, timeout: float) -> float:
    """Seconds until GET /api/status answers; raises when the command exits first or the time runs out."""
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        if process.poll() is not None:
            raise RuntimeError(f"the command exited with status {process.returncode} before the server answered")
        try:
            api(base, token, "/api/status")
            return time.perf_counter() - start
        except (urllib.error.URLError, ConnectionError, OSError):
            time.sleep(0.5)
    raise RuntimeError(f"no answer from {base} within {timeout:.0f} s")


def message(code: str, session: str) -> dict:
    return {"header": {"msg_id": uuid.uuid4().hex, "username": "check", "session": session,
                       "msg_type": "execute_request", "version": "5.3"},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True}}


async def run_cells(url: str, cells: list[str], cell_timeout: float) -> list[tuple[int, str]]:
    """Send each cell to the kernel's websocket in turn; [(cell number, error)] for the cells that failed."""
    socket_ = await websocket_connect(url)
    session, errors = uuid.uuid4().hex, []
    for number, code in enumerate(cells, start=1):
        request = message(code, session)
        socket_.write_message(json.dumps(request))
        replied = idle = False
        while not (replied and idle):
            raw = await asyncio.wait_for(socket_.read_message(), timeout=cell_timeout)
            if raw is None:
                raise RuntimeError("the kernel's websocket closed")
            reply = json.loads(raw)
            if reply.get("parent_header", {}).get("msg_id") != request["header"]["msg_id"]:
                continue
            kind = reply["header"]["msg_type"]
            if kind == "error":
                errors.append((number, f"{reply['content']['ename']}: {reply['content']['evalue']}"))
            replied |= kind == "execute_reply"
            idle |= kind == "status" and reply["content"]["execution_state"] == "idle"
    socket_.close()
    return errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--command", default="make course", help="what starts the course (default: make course)")
    parser.add_argument("--notebook", default="00_setup_and_baseline.ipynb")
    parser.add_argument("--server-timeout", type=float, default=900.0,
                        help="seconds to wait for the server, set-up included (default 900)")
    parser.add_argument("--cell-timeout", type=float, default=300.0)
    args = parser.parse_args(argv)

    folder, port, token = tempfile.mkdtemp(prefix="specdec-course-check-"), free_port(), uuid.uuid4().hex
    options = f"{folder} -- --no-browser --port {port} --ServerApp.token={token} --ServerApp.ip=127.0.0.1"
    command = shlex.split(args.command)
    command += [f"ARGS={options}"] if command[0] == "make" else shlex.split(options)
    base = f"http://127.0.0.1:{port}"
    started = time.perf_counter()
    process = subprocess.Popen(command, start_new_session=True)
    try:
        answered = wait_for_server(base, token, process, args.server_timeout)
        print(f"check: the server answered {answered:.1f} s after `{args.command}` started", flush=True)
        notebook = api(base, token, f"/api/contents/{args.notebook}")["content"]
        cells = [cell["source"] for cell in notebook["cells"] if cell["cell_type"] == "code"]
        kernel = api(base, token, "/api/sessions", "POST",
                     {"path": args.notebook, "type": "notebook", "kernel": {"name": "python3"}})["kernel"]["id"]
        url = f"ws://127.0.0.1:{port}/api/kernels/{kernel}/channels?token={token}"
        run_start = time.perf_counter()
        errors = asyncio.run(run_cells(url, cells, args.cell_timeout))
        print(f"check: {args.notebook}: {len(cells)} code cells ran in its kernel in "
              f"{time.perf_counter() - run_start:.1f} s, {len(errors)} with an error", flush=True)
        for number, error in errors:
            print(f"check: code cell {number}: {error}", flush=True)
        return 0 if errors == [] else 1
    except Exception as error:  # the server never came up, or the kernel failed: say so, then clean up
        print(f"check: FAILED after {time.perf_counter() - started:.1f} s: {error}", file=sys.stderr)
        return 1
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main())
