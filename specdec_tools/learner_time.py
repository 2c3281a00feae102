"""A learner's minutes per notebook, estimated from what the notebook holds (the teacher guide's table).

    python -m specdec_tools learner-time            # print the table
    python -m specdec_tools learner-time --write    # rewrite it in course/teacher_guide.md

A notebook's machine time (about a minute on 2 CPU cores) says little about a person's: reading, predicting,
running, changing cells and the exercises take one to two hours. Rather than typing a guess per notebook into the
teacher guide, the guide's table is computed here from the notebook's content, so that it follows the notebooks
as they change:

    minutes = markdown words / WORDS_PER_MINUTE                    (reading the prose, the formulas, the predictions)
            + code lines read x MINUTES_PER_CODE_LINE              (reading the code; changing some of it)
            + code cells x MINUTES_PER_CODE_CELL                   (running a cell, reading its output or figure)
            + execution seconds x RERUN_FACTOR / 60                (waiting for the stored run, with some re-runs)
            + build exercises x MINUTES_PER_BUILD_EXERCISE         (a function to write until its check passes)
            + choice exercises x MINUTES_PER_CHOICE_EXERCISE       (a multiple-choice question and its feedback)

The constants, and why:

- ``WORDS_PER_MINUTE = 80``: a third of an adult's pace on ordinary prose; the notebooks' prose is dense (a
  definition or a formula every few lines) and a careful learner re-reads it next to the code.
- ``MINUTES_PER_CODE_LINE = 0.1`` (six seconds a line) and ``MINUTES_PER_CODE_CELL = 0.5``: reading a cell, running
  it and reading what it printed; a few cells are changed and run again, which the averages absorb.
- ``LINES_READ_PER_CELL = 20``: a cell's lines count up to twenty. A longer cell is mostly plumbing that reads the
  stored benchmark files and prints a table or a sentence from them; a learner reads its first lines closely and
  its output, and skims the rest.
- ``RERUN_FACTOR = 2``: the notebook's stored execution time (the sum of its cells' times, from the execution
  metadata nbconvert writes), counted twice: every cell runs once, and the slow ones are often run again.
- ``MINUTES_PER_BUILD_EXERCISE = 12`` and ``MINUTES_PER_CHOICE_EXERCISE = 5``: an exercise whose self-check is
  given a function takes a few tries; one given a letter (``answer = ...``) takes reading the options and the
  feedback, and often a look back at the section it asks about.

Calibration: a reviewer's walkthrough of three notebooks at a careful learner's pace took 100-120 minutes for
05, 120-150 for 06 and 80-100 for 07 (`REVIEWED_MINUTES`). The constants above are round values inside the
range that puts all three, as they were then (`REVIEWED_CONTENT`, counted at `REVIEWED_AT`), inside those
intervals with the widest margin; tests/test_learner_time.py checks that they still do, and, where the git history
holds `REVIEWED_AT`, that `REVIEWED_CONTENT` is what `read_notebook_at` counts there. A notebook that grows
past what was reviewed keeps the same constants. Core minutes (everything but the exercises) are rounded to 5
minutes, because the estimate is not more precise than that and because the execution time changes a little with
every run.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from specdec_lib.core.paths import REPO_COURSE_DIR, REPO_ROOT

COURSE = REPO_COURSE_DIR
GUIDE = COURSE / "teacher_guide.md"

WORDS_PER_MINUTE = 80
MINUTES_PER_CODE_LINE = 0.1
MINUTES_PER_CODE_CELL = 0.5
LINES_READ_PER_CELL = 20
RERUN_FACTOR = 2
MINUTES_PER_BUILD_EXERCISE = 12
MINUTES_PER_CHOICE_EXERCISE = 5
ROUND_TO = 5

#: The reviewer's walkthrough: (low, high) minutes for a careful learner, the ranges the constants are fitted to.
REVIEWED_MINUTES = {"05": (100, 120), "06": (120, 150), "07": (80, 100)}
#: The revision of the course the reviewer walked through (a fact of history: it names the calibration's source);
#: `REVIEWED_CONTENT` is what `read_notebook_at` counts there.
REVIEWED_AT = "985e9cf"

BLOCK = re.compile(r"(<!-- learner-time: [^>]*-->)\n?(.*?)\n?(<!-- /learner-time -->)", re.S)

WORD = re.compile(r"[^\W\d_][\w'’-]*")
FENCED = re.compile(r"```.*?```", re.S)
CHECK_CALL = re.compile(r"\bcheck\.(\w+)\(\s*(\w+|\"[^\"]*\"|'[^']*')?")


@dataclass(frozen=True)
class NotebookContent:
    """What a learner works through in one notebook, counted from its cells."""

    name: str
    words: int  # markdown words, fenced code blocks left out
    code_lines: int  # non-blank, non-comment lines of the code cells, at most LINES_READ_PER_CELL per cell
    code_cells: int
    build_exercises: int  # distinct self-checks given a function (or any value but an answer letter)
    choice_exercises: int  # distinct self-checks given ``answer`` or a quoted letter: multiple choice
    execution_s: float  # the stored run, summed over the cells' execution metadata

    @property
    def core_minutes(self) -> int:
        """Reading, running and reading the outputs: everything but the exercises, rounded to `ROUND_TO`."""
        raw = (self.words / WORDS_PER_MINUTE + self.code_lines * MINUTES_PER_CODE_LINE
               + self.code_cells * MINUTES_PER_CODE_CELL + self.execution_s * RERUN_FACTOR / 60)
        return max(ROUND_TO, ROUND_TO * round(raw / ROUND_TO))

    @property
    def exercise_minutes(self) -> int:
        return (self.build_exercises * MINUTES_PER_BUILD_EXERCISE
                + self.choice_exercises * MINUTES_PER_CHOICE_EXERCISE)

    @property
    def minutes(self) -> int:
        return self.core_minutes + self.exercise_minutes


def _cell_seconds(cell: dict) -> float:
    timing = cell.get("metadata", {}).get("execution", {})
    start, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
    if not (start and end):
        return 0.0
    parse = lambda stamp: datetime.fromisoformat(stamp.replace("Z", "+00:00"))  # noqa: E731
    return max(0.0, (parse(end) - parse(start)).total_seconds())


#: The reviewed notebooks as they were at `REVIEWED_AT` (`read_notebook_at`), stored here so that the calibration
#: holds without git or a full history (a shallow clone, an installed copy): the constants are fitted to these, not
#: to the notebooks as they have grown since.
REVIEWED_CONTENT = {
    "05": NotebookContent("05_drafting_without_a_draft_model", words=2863, code_lines=316, code_cells=26,
                          build_exercises=2, choice_exercises=1, execution_s=154.9),
    "06": NotebookContent("06_tuning_and_measuring", words=3642, code_lines=340, code_cells=31, build_exercises=4,
                          choice_exercises=0, execution_s=36.3),
    "07": NotebookContent("07_beyond_the_chain", words=2624, code_lines=235, code_cells=18, build_exercises=2,
                          choice_exercises=1, execution_s=29.9),
}


def read_notebook(path: str | Path) -> NotebookContent:
    """Count a notebook's words, code, exercises and stored execution time."""
    path = Path(path)
    return count_cells(path.stem, json.loads(path.read_text(encoding="utf-8"))["cells"])


def read_notebook_at(revision: str, name: str, repo: Path = REPO_ROOT) -> NotebookContent:
    """`read_notebook` of the course notebook ``name`` (``05_drafting_without_a_draft_model``) as the git history
    of ``repo`` holds it at ``revision``. Raises `subprocess.CalledProcessError` where that history lacks the revision
    (a shallow clone) and FileNotFoundError where git is missing."""
    where = (REPO_COURSE_DIR / f"{name}.ipynb").relative_to(REPO_ROOT).as_posix()
    shown = subprocess.run(["git", "show", f"{revision}:{where}"], cwd=repo, capture_output=True, text=True,
                           encoding="utf-8", check=True)
    return count_cells(name, json.loads(shown.stdout)["cells"])


def count_cells(notebook: str, cells: list[dict]) -> NotebookContent:
    """What a learner works through in the notebook named ``notebook``, whose cells are ``cells`` (nbformat's
    dicts)."""
    words = code_lines = code_cells = 0
    seconds = 0.0
    checks: dict[str, bool] = {}  # check name -> is multiple choice
    for cell in cells:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "markdown":
            words += len(WORD.findall(FENCED.sub("", source)))
        elif cell["cell_type"] == "code":
            code_cells += 1
            lines = sum(1 for line in source.splitlines() if line.strip() and not line.lstrip().startswith("#"))
            code_lines += min(lines, LINES_READ_PER_CELL)
            seconds += _cell_seconds(cell)
            for name, argument in CHECK_CALL.findall(source):
                checks[name] = argument == "answer" or argument.startswith(("\"", "'"))
    choice = sum(checks.values())
    return NotebookContent(notebook, words, code_lines, code_cells, len(checks) - choice, choice, round(seconds, 1))


def course_notebooks(course: str | Path = COURSE) -> list[Path]:
    """The course's notebooks in order: the numbered ones, then the appendix (not the solutions)."""
    return sorted(Path(course).glob("*.ipynb"), key=lambda p: (not p.name[:2].isdigit(), p.name))


def estimates(course: str | Path = COURSE) -> list[NotebookContent]:
    return [read_notebook(path) for path in course_notebooks(course)]


def hours(minutes: int) -> str:
    return f"{minutes // 60} h {minutes % 60:02d}"


def render_table(course: str | Path = COURSE) -> str:
    """The teacher guide's table: one row per notebook, what was counted and the minutes it gives, and the totals."""
    rows = estimates(course)
    lines = ["| notebook | prose (words) | code (lines read / cells) | exercises (build + choice) | core | exercises | total |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| `{r.name}` | {r.words} | {r.code_lines} / {r.code_cells} | "
                     f"{r.build_exercises} + {r.choice_exercises} | {r.core_minutes} | {r.exercise_minutes} | "
                     f"{r.minutes} |")
    numbered = [r for r in rows if r.name[:2].isdigit()]
    core, total = sum(r.core_minutes for r in numbered), sum(r.minutes for r in numbered)
    span = f"{numbered[0].name[:2]}-{numbered[-1].name[:2]}" if numbered else "none"
    lines.append(f"| **{span}** | | | | {core} | {total - core} | **{total}** ({hours(total)}) |")
    return "\n".join(lines)


def replace_table(guide_text: str, table: str) -> str:
    """The guide's text with the block between the learner-time markers replaced by ``table``."""
    if not BLOCK.search(guide_text):
        raise ValueError("the teacher guide has no <!-- learner-time: ... --> ... <!-- /learner-time --> block")
    return BLOCK.sub(lambda m: f"{m.group(1)}\n{table.strip()}\n{m.group(3)}", guide_text, count=1)


def guide_table(guide_text: str) -> str:
    """The table the guide holds now, between the markers."""
    match = BLOCK.search(guide_text)
    if not match:
        raise ValueError("the teacher guide has no learner-time block")
    return match.group(2).strip()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec_tools learner-time",
                                     description="Estimate a learner's minutes per notebook from its content.")
    parser.add_argument("--write", action="store_true", help="rewrite the table in course/teacher_guide.md")
    parser.add_argument("--course", type=Path, default=COURSE, help="the folder of the notebooks")
    parser.add_argument("--guide", type=Path, default=GUIDE, help="the teacher guide to rewrite")
    args = parser.parse_args(argv)
    table = render_table(args.course)
    if args.write:
        args.guide.write_text(replace_table(args.guide.read_text(encoding="utf-8"), table), encoding="utf-8")
        print(f"wrote the learner-time table into {args.guide}")
    else:
        print(table)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
