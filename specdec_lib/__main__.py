"""`python -m specdec_lib COMMAND [ARGS...]`: the learner's commands.

Each command is a module with ``main(argv) -> int`` that parses its own
arguments; it is imported only when it runs, so one broken command cannot stop
the others. To add a command, add one line to COMMANDS. The maintainer's
commands (training the family, the site, the learner-time table, the load test
against a server) are ``python -m specdec_tools COMMAND``, whose table is run by
the same functions.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Callable, Sequence

from .core.errors import SpecdecError

PROG = "python -m specdec_lib"
DESCRIPTION = "Command-line tools of the specdec course."

# name -> (module with main(argv) -> int, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "course": ("specdec_lib.teaching.learner_copy", "copy the course into a folder of your own and open it in JupyterLab"),
    "doctor": ("specdec_lib.teaching.doctor", "check the environment, the device and the embedded models"),
    "bench": ("specdec_lib.bench.cli", "benchmark speculative decoding against the baseline and transformers"),
}


def build_parser(commands: dict[str, tuple[str, str]] = COMMANDS, prog: str = PROG,
                 description: str = DESCRIPTION) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=description,
        epilog=f"Run `{prog} COMMAND --help` for a command's options.",
    )
    parser.add_argument(
        "command",
        choices=sorted(commands),
        metavar="COMMAND",
        help="; ".join(f"{name}: {help_}" for name, (_, help_) in sorted(commands.items())),
    )
    parser.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None, commands: dict[str, tuple[str, str]] = COMMANDS, prog: str = PROG,
         description: str = DESCRIPTION) -> int:
    args = build_parser(commands, prog, description).parse_args(argv)
    module_name, _ = commands[args.command]
    module = importlib.import_module(module_name)
    return int(module.main(args.args) or 0)


def run_command_line(main: Callable[[], int] = main) -> int:
    """``main()`` for a person at a shell: a refused input (`SpecdecError`) is one line on stderr, exit status 2, not
    a traceback (the message says what was wrong and how to fix it)."""
    try:
        return main()
    except SpecdecError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(run_command_line())
