"""The teacher guide's learner minutes are computed from the notebooks, and stay calibrated on the reviewed ones.

`specdec_tools.learner_time` counts each notebook's prose, code, exercises and stored execution time and
turns them into minutes; the guide holds its table between ``<!-- learner-time: ... -->`` markers, as the README
holds its generated benchmark tables (tests/test_bench.py).
"""

import json
import shutil
import subprocess

import pytest

from specdec_tools import learner_time as lt


def write_notebook(path, cells):
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}), encoding="utf-8")
    return path


def markdown(text):
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def code(text, start=None, end=None):
    metadata = {}
    if start:
        metadata["execution"] = {"iopub.execute_input": start, "shell.execute_reply": end}
    return {"cell_type": "code", "metadata": metadata, "source": text, "outputs": [], "execution_count": None}


def test_read_notebook_counts_prose_code_exercises_and_the_stored_run(tmp_path):
    path = write_notebook(tmp_path / "09_toy.ipynb", [
        markdown("Two words.\n```python\nnot counted here\n```\nγ = 4 drafts, 3 rounds"),  # 2 + 3 words: "γ", "drafts", "rounds"
        code("# a comment\nx = 1\n\ny = 2\n", "2026-01-01T00:00:00.000000Z", "2026-01-01T00:00:01.500000Z"),
        code("check.my_function(my_function)\ncheck.my_function(my_function)\n"),  # one exercise, however often checked
        code('answer = None\ncheck.a_question(answer)\ncheck.other_question("b")\n',
             "2026-01-01T00:00:02Z", "2026-01-01T00:00:04Z"),
    ])
    content = lt.read_notebook(path)
    assert (content.words, content.code_lines, content.code_cells) == (5, 7, 3)
    assert (content.build_exercises, content.choice_exercises) == (1, 2)
    assert content.execution_s == pytest.approx(3.5)
    assert content.exercise_minutes == lt.MINUTES_PER_BUILD_EXERCISE + 2 * lt.MINUTES_PER_CHOICE_EXERCISE
    assert content.core_minutes % lt.ROUND_TO == 0 and content.core_minutes >= lt.ROUND_TO
    assert content.minutes == content.core_minutes + content.exercise_minutes


def test_a_long_cell_counts_only_the_lines_a_learner_reads_closely(tmp_path):
    long = "\n".join(f"x{i} = {i}" for i in range(3 * lt.LINES_READ_PER_CELL))
    content = lt.read_notebook(write_notebook(tmp_path / "long.ipynb", [code(long), code("y = 1\n")]))
    assert content.code_lines == lt.LINES_READ_PER_CELL + 1


def test_the_minutes_grow_with_each_thing_a_learner_works_through():
    base = lt.NotebookContent("x", words=2000, code_lines=200, code_cells=20, build_exercises=2, choice_exercises=1,
                              execution_s=60.0)
    more = [lt.NotebookContent("x", 2800, 200, 20, 2, 1, 60.0), lt.NotebookContent("x", 2000, 300, 20, 2, 1, 60.0),
            lt.NotebookContent("x", 2000, 200, 30, 2, 1, 60.0), lt.NotebookContent("x", 2000, 200, 20, 3, 1, 60.0),
            lt.NotebookContent("x", 2000, 200, 20, 2, 2, 60.0), lt.NotebookContent("x", 2000, 200, 20, 2, 1, 600.0)]
    assert all(other.minutes > base.minutes for other in more)


@pytest.mark.parametrize("notebook", sorted(lt.REVIEWED_MINUTES))
def test_the_estimate_falls_in_the_reviewers_range(notebook):
    """The constants are calibrated on a reviewer's walkthrough of 05, 06 and 07 as they were at `REVIEWED_AT`:
    each of those estimates lies in its range, and each notebook today holds at least what was reviewed."""
    low, high = lt.REVIEWED_MINUTES[notebook]
    reviewed = lt.REVIEWED_CONTENT[notebook]
    assert low <= reviewed.minutes <= high, (f"{reviewed.name}: {reviewed.minutes} min, the reviewer's walkthrough "
                                             f"took {low}-{high}: recalibrate the constants of "
                                             "specdec_tools/learner_time.py")
    (today,) = [c for c in lt.estimates() if c.name == reviewed.name]
    assert today.words >= 0.9 * reviewed.words and today.build_exercises >= reviewed.build_exercises


def reviewed_revision_in_history() -> bool:
    if shutil.which("git") is None:
        return False
    found = subprocess.run(["git", "cat-file", "-e", f"{lt.REVIEWED_AT}^{{commit}}"], cwd=lt.REPO_ROOT,
                           capture_output=True)
    return found.returncode == 0


@pytest.mark.parametrize("notebook", sorted(lt.REVIEWED_CONTENT))
def test_the_stored_reviewed_counts_are_what_the_reviewed_revision_holds(notebook):
    """`REVIEWED_CONTENT` is derived, not typed: the counts of each reviewed notebook at `REVIEWED_AT`, read back
    from git (skipped where the history does not hold that revision, as in a shallow clone)."""
    if not reviewed_revision_in_history():
        pytest.skip(f"the git history does not hold {lt.REVIEWED_AT} (a shallow clone, or no git)")
    stored = lt.REVIEWED_CONTENT[notebook]
    assert lt.read_notebook_at(lt.REVIEWED_AT, stored.name) == stored


def test_the_table_lists_every_course_notebook_and_the_total():
    table = lt.render_table()
    rows = lt.estimates()
    numbered = sorted(r.name for r in rows if r.name[:2].isdigit())
    assert [r.name for r in rows][:len(numbered)] == numbered and len(numbered) >= 9
    assert all(f"`{r.name}`" in table for r in rows) and "solutions" not in table
    assert f"**{sum(r.minutes for r in rows if r.name[:2].isdigit())}**" in table.splitlines()[-1]
    assert table.splitlines()[-1].startswith(f"| **{numbered[0][:2]}-{numbered[-1][:2]}** |")


def test_the_teacher_guides_table_is_what_the_code_computes_now():
    guide = lt.GUIDE.read_text(encoding="utf-8")
    assert lt.guide_table(guide) == lt.render_table().strip(), (
        "the teacher guide's learner-time table is stale: run python -m specdec_tools learner-time --write")


def test_replace_table_rewrites_only_the_block_and_needs_the_markers():
    text = "before\n<!-- learner-time: cmd -->\nold\n<!-- /learner-time -->\nafter\n"
    new = lt.replace_table(text, "| new |")
    assert new == "before\n<!-- learner-time: cmd -->\n| new |\n<!-- /learner-time -->\nafter\n"
    assert lt.guide_table(new) == "| new |" and lt.replace_table(new, "| new |") == new
    with pytest.raises(ValueError, match="learner-time"):
        lt.replace_table("no markers here", "| new |")


def test_the_command_prints_or_writes_the_table(tmp_path, capsys):
    guide = tmp_path / "guide.md"
    guide.write_text("x\n<!-- learner-time: cmd -->\n<!-- /learner-time -->\n", encoding="utf-8")
    assert lt.main(["--guide", str(guide), "--write"]) == 0
    assert lt.guide_table(guide.read_text(encoding="utf-8")) == lt.render_table().strip()
    assert lt.main([]) == 0 and lt.render_table() in capsys.readouterr().out
