"""`python -m specdec_lib COMMAND [ARGS...]`.

Each command is a module with ``main(argv) -> int`` that parses its own
arguments; it is imported only when it runs, so one broken command cannot stop
the others. To add a command, add one line to COMMANDS.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

from .core.errors import SpecdecError

# name -> (module with main(argv) -> int, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "course": ("specdec_lib.teaching.learner_copy", "copy the course into a folder of your own and open it in JupyterLab"),
    "doctor": ("specdec_lib.teaching.doctor", "check the environment, the device and the embedded models"),
    "bench": ("specdec_lib.bench.cli", "benchmark speculative decoding against the baseline and transformers"),
    "site": ("specdec_lib.teaching.site", "build the executed course into an offline static web site (stored outputs)"),
    "train": ("specdec_lib.training.cli", "reproduce the embedded model family, or one stage of it"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m specdec_lib",
        description="Command-line tools of the specdec course.",
        epilog="Run `python -m specdec_lib COMMAND --help` for a command's options.",
    )
    parser.add_argument(
        "command",
        choices=sorted(COMMANDS),
        metavar="COMMAND",
        help="; ".join(f"{name}: {help_}" for name, (_, help_) in sorted(COMMANDS.items())),
    )
    parser.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    module_name, _ = COMMANDS[args.command]
    module = importlib.import_module(module_name)
    return int(module.main(args.args) or 0)


def run_command_line() -> int:
    """`main` for a person at a shell: a refused input (`SpecdecError`) is one line on stderr, exit status 2, not a
    traceback (the message says what was wrong and how to fix it)."""
    try:
        return main()
    except SpecdecError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(run_command_line())
