"""The benchmark tables of docs/benchmarks.md, generated from bench JSON files (never typed by hand).

    python -m specdec_lib.bench.results_table data/bench/code-1-thread.json data/bench/code-2-threads.json

prints, for each file, one line saying where and how it was measured (machine, threads, settings, from the JSON
itself) and a Markdown table of its rows: the same numbers `python -m specdec_lib bench` printed, in the same
formats. tests/test_bench.py checks that docs/benchmarks.md holds exactly this output for the files it names.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from .captions import describe_machine
from .cli import COLUMNS, OPTIONAL_COLUMNS, describe_decoding, describe_eos, format_cell

#: Columns the printed table puts on lines of their own: our time over the lean loop's; our speed over transformers'.
RATIO_HEADERS = {"over_lean": "ours / lean (time)", "over_transformers": "ours / transformers (speed)"}
TABLE_COLUMNS = tuple(key for key in COLUMNS if key not in OPTIONAL_COLUMNS) + tuple(RATIO_HEADERS)
HEADERS = {**{key: header for key, (header, _) in COLUMNS.items()}, **RATIO_HEADERS}


def describe_run(document: dict) -> str:
    """One sentence: the machine, the threads and the settings of a bench JSON document."""
    machine, settings = document["machine"], document["settings"]
    gammas = ", ".join(str(g) for g in settings["gammas"])
    return (
        f"{describe_machine(machine)}, "
        f"transformers {machine['transformers']}; preset {settings['preset']}, task {settings['task']}, "
        f"{settings['prompts']} prompts x {settings['max_new_tokens']} new tokens, gamma {gammas}, "
        f"{settings['repeats']} timed repeats, {describe_decoding(settings)}, {describe_eos(settings)}"
    )


def markdown_table(document: dict) -> str:
    """The rows of a bench JSON document as a Markdown table (blank cells where a method has no value)."""

    def cell(key: str, row: dict) -> str:
        value = row.get(key)
        if key in RATIO_HEADERS:
            return "" if value is None else f"{value:.3f}x"
        return format_cell(key, value)

    lines = ["| " + " | ".join(HEADERS[key] for key in TABLE_COLUMNS) + " |",
             "| " + " | ".join("---" for _ in TABLE_COLUMNS) + " |"]
    lines += ["| " + " | ".join(cell(key, row) for key in TABLE_COLUMNS) + " |" for row in document["rows"]]
    return "\n".join(lines)


def json_blocks(paths: Sequence[Path], describe: Callable[[dict], str], render: Callable[[dict], str],
                root: Path | None = None) -> str:
    """For each JSON file (relative to ``root``, default the working directory): `` `path`: describe(doc).``, a
    blank line, ``render(doc)``; the generated blocks of every bench suite in docs/benchmarks.md are made this way."""
    blocks = []
    for path in paths:
        document = json.loads((Path(root or ".") / path).read_text(encoding="utf-8"))
        blocks.append(f"`{Path(path).as_posix()}`: {describe(document)}.\n\n{render(document)}")
    return "\n\n".join(blocks)


def results_markdown(paths: Sequence[Path], root: Path | None = None) -> str:
    """For each JSON file (relative to ``root``, default the working directory): its run in one line, its table."""
    return json_blocks(paths, describe_run, markdown_table, root)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec_lib.bench.results_table",
                                     description="Print the results table (as in docs/benchmarks.md) of each JSON file written by "
                                                 "`python -m specdec_lib bench --json PATH`.")
    parser.add_argument("paths", nargs="+", type=Path, metavar="BENCH.json")
    paths = parser.parse_args(sys.argv[1:] if argv is None else argv).paths
    missing = [str(path) for path in paths if not path.is_file()]
    if missing:
        parser.error(f"no such file: {', '.join(missing)}; give the JSON files `python -m specdec_lib bench --json "
                     "PATH` wrote (e.g. data/bench/code-1-thread.json)")
    print(results_markdown(paths))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
