"""The stored copies of the course notebooks: what a reader sees without running them.

nbval (see the README) re-runs every notebook and compares the outputs it checks; it cannot see what a stored copy
lacks. These tests read the ``.ipynb`` files only (no kernel, a fraction of a second):

- a notebook that plots stores its figures (an ``image/png`` output), so that a reader of the stored copy
  (GitHub, nbviewer, a quick look before running it) sees the plots the text talks about;
- it was executed top to bottom in one run (execution counts 1, 2, 3, ...): nbval does not check the outputs of a
  cell stored unexecuted, and a cell re-run on its own may show outputs the notebook no longer produces;
- no cell stored an error or anything on stderr (warnings belong fixed or silenced, not shipped);
- its first code cell calls ``course_setup`` (seed, CPU threads and device set the same way everywhere);
- nbval's instructions are cell tags (``nbval-ignore-output``), not ``# NBVAL_...`` comments a learner would read,
  and the kernel's display name is the one ipykernel writes, so that opening a notebook does not modify it.

To store figures, execute with the inline backend, i.e. *without* ``MPLBACKEND=Agg`` in the environment:
``jupyter nbconvert --to notebook --execute --inplace course/<notebook>.ipynb``.
"""

import json
import re
from pathlib import Path

import pytest

COURSE = Path(__file__).resolve().parents[1] / "course"
NOTEBOOKS = sorted(COURSE.rglob("*.ipynb"))
NOTEBOOK_IDS = [str(path.relative_to(COURSE)) for path in NOTEBOOKS]

# code that draws with matplotlib: pyplot (plt.), the library's plot_* helpers, Axes methods (ax.), .plot(
PLOTTING = re.compile(r"\bplt\.|\bplot_\w+\(|\.plot\(|\bax\.")


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def code_cells(notebook: dict) -> list[dict]:
    return [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]


def source(cell: dict) -> str:
    text = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))  # comments do not plot


def plots(notebook: dict) -> bool:
    """Whether any code cell calls matplotlib plotting."""
    return any(PLOTTING.search(source(cell)) for cell in code_cells(notebook))


def stored_images(notebook: dict) -> int:
    """The number of stored ``image/png`` outputs."""
    outputs = [output for cell in code_cells(notebook) for output in cell.get("outputs", [])]
    return sum("image/png" in output.get("data", {}) for output in outputs)


def missing_figures(notebook: dict, name: str) -> str | None:
    """Why the notebook ``name`` fails the figure rule (None: it plots nothing, or stores at least one figure)."""
    if plots(notebook) and stored_images(notebook) == 0:
        return (
            f"{name} plots with matplotlib but stores no figure (no image/png output): execute it with the inline "
            "backend (MPLBACKEND unset), e.g. jupyter nbconvert --to notebook --execute --inplace"
        )
    return None


def test_there_are_notebooks_to_check():
    assert len(NOTEBOOKS) >= 10 and any(path.parent.name == "solutions" for path in NOTEBOOKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_a_notebook_that_plots_stores_its_figures(path):
    problem = missing_figures(load(path), str(path.relative_to(COURSE)))
    assert problem is None, problem


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_stored_from_one_run_top_to_bottom(path):
    counts = [cell.get("execution_count") for cell in code_cells(load(path))]
    assert counts == list(range(1, len(counts) + 1)), (
        f"{path.relative_to(COURSE)} was not stored from one run top to bottom (execution counts {counts}): "
        "re-execute the whole notebook"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_no_errors_or_stderr_stored(path):
    bad = [
        index
        for index, cell in enumerate(load(path)["cells"])
        for output in cell.get("outputs", [])
        if output["output_type"] == "error" or (output["output_type"] == "stream" and output.get("name") == "stderr")
    ]
    assert not bad, f"{path.relative_to(COURSE)} stores an error or stderr output in cells {bad}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_nbval_instructions_are_tags_and_opening_changes_nothing(path):
    notebook = load(path)
    comments = [index for index, cell in enumerate(notebook["cells"])
                if cell["cell_type"] == "code" and "NBVAL_" in "".join(cell["source"])]
    assert not comments, (f"{path.relative_to(COURSE)} cells {comments}: use the cell tag nbval-ignore-output "
                          "instead of a # NBVAL_IGNORE_OUTPUT comment")
    tags = {tag for cell in notebook["cells"] for tag in cell.get("metadata", {}).get("tags", [])}
    assert tags <= {"nbval-ignore-output", "nbval-skip", "nbval-raises-exception"}, tags
    assert notebook["metadata"]["kernelspec"] == {"display_name": "Python 3 (ipykernel)", "language": "python",
                                                  "name": "python3"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NOTEBOOK_IDS)
def test_the_first_code_cell_calls_course_setup(path):
    first = source(code_cells(load(path))[0])
    assert "course_setup(" in first, f"{path.relative_to(COURSE)}: its first code cell does not call course_setup()"
    assert "set_num_threads" not in first and "seed_everything" not in first


# --- the figure rule itself, on hand-made notebooks ---------------------------------------------------------------


def notebook_with(*cells: dict) -> dict:
    return {"cells": list(cells), "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def code(text: str, *outputs: dict) -> dict:
    return {"cell_type": "code", "execution_count": 1, "metadata": {}, "source": text, "outputs": list(outputs)}


PNG = "iVBORw0KGgo="  # the first bytes of a PNG file, base64: enough for a test that only looks for the key
FIGURE = {"output_type": "display_data", "metadata": {}, "data": {"image/png": PNG, "text/plain": "<Figure>"}}
TEXT = {"output_type": "stream", "name": "stdout", "text": "hello\n"}


@pytest.mark.parametrize(
    "text", ["plt.show()", "ax = plot_acceptance_by_position(rates)", "axes[0].plot(x, y)", "ax.bar(x, y)"]
)
def test_plotting_code_is_recognised(text):
    assert plots(notebook_with(code(text)))


@pytest.mark.parametrize("text", ["print(1)", "# plt.show() is left for later", "explot = 3", "max.value"])
def test_other_code_is_not_plotting(text):
    assert not plots(notebook_with(code(text)))


@pytest.mark.parametrize(
    "notebook, fails",
    [
        (notebook_with(code("plt.plot([1, 2])\nplt.show()", TEXT)), True),  # plotted, stored without its figure
        (notebook_with(code("plt.plot([1, 2])\nplt.show()")), True),  # plotted, never executed
        (notebook_with(code("plt.plot([1, 2])\nplt.show()", FIGURE)), False),
        (notebook_with(code("print(1)", TEXT)), False),  # no plotting, nothing to store
    ],
)
def test_missing_figures_names_the_notebook(notebook, fails):
    problem = missing_figures(notebook, "solutions/99_hand_made.ipynb")
    assert (problem is not None) == fails
    if fails:
        assert problem.startswith("solutions/99_hand_made.ipynb plots with matplotlib but stores no figure")
