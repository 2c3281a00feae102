"""`python -m specdec_lib course`: a learner's own copy of the course, opened in JupyterLab.

JupyterLab never starts here: `learner_copy.launch` is replaced by a fake that records the command and the folder.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from specdec_lib.__main__ import COMMANDS
from specdec_lib.core.paths import REPO_DATA_DIR, data_dir
from specdec_lib.teaching import learner_copy
from specdec_lib.teaching.learner_copy import COURSE_DIR, copy_course, course_files


@pytest.fixture
def fake_lab(monkeypatch):
    """Every JupyterLab launch, recorded instead of run: a list of (command, folder)."""
    launched = []
    monkeypatch.setattr(learner_copy, "launch", lambda command, cwd: launched.append((command, Path(cwd))) or 0)
    monkeypatch.setattr(learner_copy, "jupyterlab_installed", lambda: True)
    monkeypatch.setattr(learner_copy, "is_root", lambda: False)
    return launched


def test_the_command_is_wired():
    assert COMMANDS["course"][0] == "specdec_lib.teaching.learner_copy"


def test_the_copy_holds_the_notebooks_solutions_and_glossary_and_no_checkpoints(tmp_path):
    files = {path.as_posix() for path in course_files()}
    numbered = {path.name for path in COURSE_DIR.glob("[0-9][0-9]_*.ipynb")}
    assert numbered and numbered <= files
    assert "glossary.md" in files and any(name.startswith("solutions/") for name in files)
    assert not any(".ipynb_checkpoints" in name or name.endswith(".cfg") for name in files)
    report = copy_course(tmp_path / "mine")
    assert {path.as_posix() for path in report.copied} == files and report.kept == []
    for name in files:
        assert (tmp_path / "mine" / name).read_bytes() == (COURSE_DIR / name).read_bytes(), name


def test_checkpoints_are_never_copied(tmp_path):
    course = tmp_path / "course"
    (course / ".ipynb_checkpoints").mkdir(parents=True)
    (course / "00_a.ipynb").write_text("{}")
    (course / ".ipynb_checkpoints" / "00_a-checkpoint.ipynb").write_text("{}")
    copy_course(tmp_path / "mine", course)
    assert sorted(p.name for p in (tmp_path / "mine").rglob("*")) == ["00_a.ipynb"]


def test_a_learners_files_are_never_overwritten(tmp_path, fake_lab, capsys):
    mine = tmp_path / "mine"
    assert learner_copy.main([str(mine)]) == 0
    assert "copied" in capsys.readouterr().out
    notebook = mine / "01_greedy_matching.ipynb"
    notebook.write_text("my own work", encoding="utf-8")
    (mine / "glossary.md").unlink()  # a file the learner deleted comes back, the others stay as they are
    assert learner_copy.main([str(mine)]) == 0
    out = capsys.readouterr().out
    assert notebook.read_text(encoding="utf-8") == "my own work"
    assert (mine / "glossary.md").read_bytes() == (COURSE_DIR / "glossary.md").read_bytes()
    assert "never overwritten" in out and "copied 1 files" in out
    assert [folder for _, folder in fake_lab] == [mine.resolve(), mine.resolve()]


def test_jupyterlab_starts_in_the_copy_with_this_python(tmp_path, fake_lab, capsys):
    assert learner_copy.main([str(tmp_path / "mine")]) == 0
    (command, folder), = fake_lab
    assert command == [sys.executable, "-m", "jupyterlab"] and folder == (tmp_path / "mine").resolve()
    assert "--allow-root" not in capsys.readouterr().out


def test_options_after_a_double_dash_go_to_jupyterlab(tmp_path, fake_lab):
    assert learner_copy.main([str(tmp_path / "mine"), "--", "--no-browser", "--ip", "0.0.0.0"]) == 0
    assert fake_lab[0][0][-3:] == ["--no-browser", "--ip", "0.0.0.0"]


def test_as_root_it_passes_allow_root_and_says_why(tmp_path, fake_lab, monkeypatch, capsys):
    monkeypatch.setattr(learner_copy, "is_root", lambda: True)
    assert learner_copy.main([str(tmp_path / "mine")]) == 0
    (command, _), = fake_lab
    assert command[-1] == "--allow-root"
    notes = [line for line in capsys.readouterr().out.splitlines() if "--allow-root" in line]
    assert len(notes) == 1 and "root" in notes[0] and "refuses" in notes[0]


def test_without_jupyterlab_it_names_the_extra_and_copies_nothing(tmp_path, fake_lab, monkeypatch, capsys):
    monkeypatch.setattr(learner_copy, "jupyterlab_installed", lambda: False)
    assert learner_copy.main([str(tmp_path / "mine")]) == 1
    captured = capsys.readouterr()
    assert 'pip install -e ".[course]"' in captured.err and "Traceback" not in captured.err
    assert fake_lab == [] and not (tmp_path / "mine").exists()


def test_no_lab_copies_only(tmp_path, fake_lab, monkeypatch, capsys):
    monkeypatch.setattr(learner_copy, "jupyterlab_installed", lambda: False)  # not needed to copy
    assert learner_copy.main([str(tmp_path / "mine"), "--no-lab"]) == 0
    assert fake_lab == [] and (tmp_path / "mine" / "00_setup_and_baseline.ipynb").is_file()
    assert "jupyter lab" in capsys.readouterr().out


def test_the_course_folder_itself_is_refused(tmp_path, fake_lab, capsys):
    for inside in (COURSE_DIR, COURSE_DIR / "mine"):
        assert learner_copy.main([str(inside)]) == 1
        assert "inside the course folder" in capsys.readouterr().err
    assert fake_lab == [] and not (COURSE_DIR / "mine").exists()
    (tmp_path / "a_file").write_text("x")
    assert learner_copy.main([str(tmp_path / "a_file")]) == 1
    assert "not a folder" in capsys.readouterr().err


def test_the_default_folder_is_in_the_home_folder(tmp_path, fake_lab, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert learner_copy.main([]) == 0
    assert fake_lab[0][1] == (tmp_path / "specdec-course").resolve()


def test_a_copied_notebook_still_finds_the_data(tmp_path, monkeypatch):
    """The notebooks read data/ through data_dir(), which looks beside specdec_lib, not beside the notebook: from
    the copy (its own working folder) it is the repository's data/; and no code cell opens a path relative to
    the course folder (``../``, ``data/...``)."""
    copy_course(tmp_path / "mine")
    monkeypatch.chdir(tmp_path / "mine")
    monkeypatch.delenv("SPECDEC_DATA_DIR", raising=False)
    assert data_dir() == REPO_DATA_DIR and (data_dir() / "models" / "target").is_dir()
    relative = re.compile(r"""["'](?:\.\./|\./)?(?:data|course|specdec_lib)/|["']\.\./""")
    found = []
    for notebook in sorted((tmp_path / "mine").rglob("*.ipynb")):
        for index, cell in enumerate(json.loads(notebook.read_text(encoding="utf-8"))["cells"]):
            if cell["cell_type"] == "code":
                code = "\n".join(line for line in "".join(cell["source"]).splitlines()
                                 if not line.lstrip().startswith("#"))
                found += [f"{notebook.name} cell {index}" for _ in relative.finditer(code)]
    assert not found, f"code cells that read a path relative to the course folder: {found}"
