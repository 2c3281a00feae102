"""`python -m specdec_tools COMMAND [ARGS...]`: the maintainer's commands.

What only a maintainer runs (the learner's commands are ``python -m specdec_lib``): each command is a module with
``main(argv) -> int`` that parses its own arguments, imported only when it runs, and `specdec_lib.__main__` runs
the table. To add a command, add one line to COMMANDS.
"""

from __future__ import annotations

import sys
from typing import Sequence

from specdec_lib import __main__ as library_commands

PROG = "python -m specdec_tools"
DESCRIPTION = ("The maintainer's tools of the specdec course: the model family, the site, the learner-time table, "
               "the load test against a server.")

# name -> (module with main(argv) -> int, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("specdec_tools.training.cli", "reproduce the embedded model family, or one stage of it"),
    "site": ("specdec_tools.site", "build the executed course into an offline static web site (stored outputs)"),
    "learner-time": ("specdec_tools.learner_time",
                     "estimate a learner's minutes per notebook (the teacher guide's table)"),
    "serve": ("specdec_tools.serve",
              "load-test `transformers serve` on the embedded target, with and without prompt lookup"),
}


def main(argv: Sequence[str] | None = None) -> int:
    return library_commands.main(argv, COMMANDS, PROG, DESCRIPTION)


def run_command_line() -> int:
    """`main` for a person at a shell: a refused input is one line on stderr, exit status 2, not a traceback."""
    return library_commands.run_command_line(main)


if __name__ == "__main__":
    sys.exit(run_command_line())
