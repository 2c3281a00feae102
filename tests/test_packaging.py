"""Packaging stays honest: pyproject.toml is the source of truth, and environment.yml,
.ci/run, README.md and the doctor agree with it; the README stays a short page a newcomer can start from, and the
longer material lives in docs/.

The checker functions below return a list of problems (empty when all agree), so
the tests can run them both on the real files and on doctored copies, proving
that a disagreement is caught.
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from helpers import load_bootstrap
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"
ENVIRONMENT = ROOT / "environment.yml"
CI_RUN = ROOT / ".ci" / "run"
CONSTRAINTS = ROOT / "constraints.txt"
MAKEFILE = ROOT / "Makefile"
README = ROOT / "README.md"
DOCS = ROOT / "docs"
#: the README's budget, in words of prose (code blocks, comments and link targets not counted)
README_MAX_WORDS = 1200

# conda-only packages that the conda route needs and pyproject cannot name.
CONDA_TOOLING = {"python", "pip"}


def load_pyproject(path: Path = PYPROJECT) -> dict:
    return tomllib.loads(path.read_text())


def load_environment(path: Path = ENVIRONMENT) -> dict:
    return yaml.safe_load(path.read_text())


def pyproject_requirements(pyproject: dict) -> dict[str, list[Requirement]]:
    """Every requirement pyproject allows (runtime and every extra), by canonical name."""
    project = pyproject["project"]
    lines = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        lines.extend(extra)
    allowed: dict[str, list[Requirement]] = {}
    for line in lines:
        req = Requirement(line)
        allowed.setdefault(canonicalize_name(req.name), []).append(req)
    return allowed


def split_environment(env: dict) -> tuple[list[str], list[str]]:
    """(conda entries, pip entries) of an environment.yml."""
    conda: list[str] = []
    pip: list[str] = []
    for entry in env.get("dependencies", []):
        if isinstance(entry, dict):
            pip.extend(entry.get("pip", []))
        else:
            conda.append(str(entry))
    return conda, pip


_PROJECT_LINE = re.compile(r"^(?:-e|--editable)\s+\.(?:\[(?P<extras>[^\]]*)\])?$")


def env_problems(env: dict, pyproject: dict) -> list[str]:
    """Where environment.yml asks for something pyproject.toml does not allow."""
    problems: list[str] = []
    allowed = pyproject_requirements(pyproject)
    project = pyproject["project"]
    extras = set(project.get("optional-dependencies", {}))
    conda, pip = split_environment(env)

    if "conda-forge" not in env.get("channels", []):
        problems.append("environment.yml: channel conda-forge missing")

    # conda section: python must satisfy requires-python; anything else must be in pyproject.
    python_seen = False
    for entry in conda:
        name = re.match(r"[A-Za-z0-9_.\-]+", entry).group(0)
        if name == "python":
            python_seen = True
            version = entry[len(name):].lstrip("=<>!~ ").split(",")[0].rstrip(".*")
            if not version:
                problems.append("environment.yml: python is not pinned to a version")
            elif Version(version) not in SpecifierSet(project["requires-python"]):
                problems.append(
                    f"environment.yml: python={version} does not satisfy requires-python "
                    f"{project['requires-python']!r}"
                )
        elif canonicalize_name(name) not in allowed and name not in CONDA_TOOLING:
            problems.append(f"environment.yml: conda dependency {name!r} is not in pyproject.toml")
    if not python_seen:
        problems.append("environment.yml: no python version")

    # pip section: the project itself with every extra, plus pins pyproject allows.
    project_lines = 0
    for entry in pip:
        entry = entry.strip()
        match = _PROJECT_LINE.match(entry)
        if match:
            project_lines += 1
            wanted = {e.strip() for e in (match.group("extras") or "").split(",") if e.strip()}
            if wanted != extras:
                problems.append(
                    f"environment.yml: the project line installs extras {sorted(wanted)}, "
                    f"pyproject.toml defines {sorted(extras)}"
                )
            continue
        if entry.startswith("-"):  # a pip option such as --extra-index-url
            continue
        req = Requirement(entry)
        name = canonicalize_name(req.name)
        if name not in allowed:
            problems.append(f"environment.yml: pip dependency {req.name!r} is not in pyproject.toml")
            continue
        if not req.specifier:
            continue
        allowed_specs = [r.specifier for r in allowed[name]]
        for spec in req.specifier:
            if spec.operator in ("==", "==="):
                version = Version(spec.version)
                if not all(s.contains(version, prereleases=True) for s in allowed_specs):
                    problems.append(
                        f"environment.yml: {req} is outside pyproject.toml's "
                        f"{' and '.join(str(s) or '(any)' for s in allowed_specs)}"
                    )
            elif str(req.specifier) not in {str(s) for s in allowed_specs}:
                problems.append(
                    f"environment.yml: {req} — use an exact pin or pyproject.toml's own range"
                )
                break
    if project_lines != 1:
        problems.append(
            f"environment.yml: expected one '-e .[{','.join(sorted(extras))}]' line, found {project_lines}"
        )
    return problems


def fenced_after(text: str, marker: str) -> str:
    """The single line of the first fenced code block after an HTML-comment marker."""
    start = text.index(f"<!-- {marker} -->")
    block = re.search(r"```[a-z]*\n(.*?)\n```", text[start:], flags=re.S)
    assert block, f"no fenced block after <!-- {marker} -->"
    lines = [line for line in block.group(1).splitlines() if line.strip()]
    assert len(lines) == 1, f"the {marker} block should be one command, got {lines}"
    return lines[0].strip()


def readme_test_command() -> str:
    return fenced_after(README.read_text(), "test-command")


def locked_torch_pin() -> str:
    """The torch pin of constraints.txt, which `make course`, `make test` and the offline kit install."""
    pins = re.findall(r"^(torch==[0-9.]+)$", CONSTRAINTS.read_text(), flags=re.M)
    assert len(pins) == 1, f"constraints.txt should pin torch once, found {pins}"
    return pins[0]


# --------------------------------------------------------------------------- the real files


def test_environment_yml_agrees_with_pyproject():
    assert env_problems(load_environment(), load_pyproject()) == []


def test_the_lock_environment_and_pyproject_agree_on_torch():
    pin = locked_torch_pin()
    _, pip = split_environment(load_environment())
    assert pin in pip, f"constraints.txt pins {pin}, environment.yml installs another torch"
    assert "-c constraints.txt" in pip, "environment.yml does not install under constraints.txt"
    torch_spec = pyproject_requirements(load_pyproject())["torch"][0].specifier
    assert Version(pin.split("==")[1]) in torch_spec
    # a torch range without a ceiling is fine only as a lower bound that the pin meets
    assert all(s.operator in (">=", ">") for s in torch_spec), "do not pin an unbounded newer torch"


def make_targets() -> dict[str, str]:
    """{target: its recipe} of the Makefile (targets that share a recipe each get it)."""
    targets: dict[str, str] = {}
    for names, recipe in re.findall(r"^([a-z][a-z0-9 -]*):[^\n=]*\n\t(.+)$", MAKEFILE.read_text(), flags=re.M):
        for name in names.split():
            targets[name] = recipe.replace("$@", name)
    return targets


def ci_commands() -> list[str]:
    return [line.strip() for line in CI_RUN.read_text().splitlines() if line.strip() and not line.startswith("#")]


def test_readme_set_up_is_two_commands_that_make_runs_through_the_bootstrap_script():
    text = README.read_text()
    set_up = text[text.index("## Set-up"):text.index("\n## ", text.index("## Set-up") + 1)]
    blocks = re.findall(r"```[a-z]*\n(.*?)\n```", set_up, flags=re.S)
    assert blocks == ["make course", "make test"], f"the set-up section's commands: {blocks}"
    targets = make_targets()
    for command in ("make course", "make test", fenced_after(text, "bf16-command"), fenced_after(text, "site-command")):
        target = command.split()[1]
        assert targets.get(target, "").endswith(f"scripts/bootstrap.py {target} $(ARGS)"), (target, targets)
        assert target in load_bootstrap().EXTRAS


def test_ci_runs_the_readme_commands_and_installs_nothing_else_but_the_browser():
    commands = ci_commands()
    assert readme_test_command() == "make test" and "make test" in commands
    assert fenced_after(README.read_text(), "bf16-command") == "make test-bf16" and "make test-bf16" in commands
    installs = [line for line in commands if re.search(r"\b(pip|conda|venv)\b", line) or "install" in line]
    assert all("apt-get" in line and "chromium" in line for line in installs), installs


def test_the_test_commands_are_the_ones_docs_explain():
    """docs/library.md explains the pytest command behind `make test` option by option: it must be that command."""
    bootstrap = load_bootstrap()
    documented = re.search(r"```bash\n(python -m pytest [^\n]*)\n```", (DOCS / "library.md").read_text()).group(1)
    assert documented == "python " + " ".join(f'"{a}"' if " " in a else a for a in bootstrap.TEST_COMMAND)
    assert "--nbval" in bootstrap.TEST_COMMAND and "--nbval-lax" not in bootstrap.TEST_COMMAND
    assert "--nbval-lax" in bootstrap.BF16_COMMAND


def test_readme_open_course_command():
    """The README opens a learner's own copy (``make course`` runs ``python -m specdec_lib course``), never the
    tracked notebooks that nbval and the site read, and the command exists."""
    from specdec_lib.__main__ import COMMANDS

    assert fenced_after(README.read_text(), "open-course") == "make course"
    assert "course" in COMMANDS


def test_the_lock_pins_what_pyproject_allows_and_the_packages_the_course_depends_on():
    pins = {}
    for line in CONSTRAINTS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            pins[canonicalize_name(name)] = Version(version)
    for name in ("torch", "transformers", "nbval", "jupyterlab", "tokenizers", "pytest"):
        assert name in pins, f"constraints.txt does not pin {name}"
    for name, requirements in pyproject_requirements(load_pyproject()).items():
        for requirement in requirements:
            if name in pins:
                assert requirement.specifier.contains(pins[name], prereleases=True), (
                    f"constraints.txt pins {name}=={pins[name]}, outside pyproject.toml's {requirement}")


def readme_prose(text: str) -> str:
    """The README's prose: no fenced code, HTML comments or link targets (a table's cells count as prose)."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    return re.sub(r"\]\([^)]*\)", "]", text)


def prose_words(text: str) -> int:
    return len([word for word in readme_prose(text).split() if re.search(r"\w", word)])


def test_prose_words_skip_code_comments_and_link_targets():
    text = "Two words\n<!-- a comment here -->\n```bash\npython -m x y z\n```\n[a link](docs/some/long/path.md) | --- |"
    assert prose_words(text) == 4  # Two, words, [a, link]


def test_readme_is_a_short_page_a_newcomer_can_start_from():
    text = README.read_text()
    words = prose_words(text)
    assert words <= README_MAX_WORDS, (
        f"README.md has {words} words of prose, over {README_MAX_WORDS}: move the detail to a page in docs/"
    )
    assert re.search(r"^#+ Start here", text, flags=re.M), "README.md has no 'Start here' section"
    for marker in ("open-course", "test-command", "site-command"):
        assert f"<!-- {marker} -->" in text, f"README.md lost its <!-- {marker} --> command"
    assert fenced_after(text, "site-command") == "make site"
    linked = set(re.findall(r"\]\((docs/[^)#\s]+)", text))
    pages = {page.relative_to(ROOT).as_posix() for page in sorted(DOCS.glob("*.md"))}
    assert pages, "docs/ holds no pages"
    assert not pages - linked, f"README.md does not link {sorted(pages - linked)}"
    assert not {link for link in linked if not (ROOT / link).is_file()}, f"README.md links missing pages: {linked}"


def test_sanitize_file_named_by_the_test_command_exists_and_parses():
    command = load_bootstrap().TEST_COMMAND
    path = ROOT / command[command.index("--nbval-sanitize-with") + 1]
    assert path.is_file()
    from nbval.plugin import get_sanitize_patterns

    patterns = get_sanitize_patterns(path.read_text())
    assert patterns, f"{path} has no regex/replace pairs nbval can read"
    for regex, _replace in patterns:
        re.compile(regex)


def test_ci_run_is_strict_executable_bash():
    text = CI_RUN.read_text()
    assert text.startswith("#!/usr/bin/env bash\n") or text.startswith("#!/bin/bash\n")
    assert "set -euo pipefail" in text
    assert os.access(CI_RUN, os.X_OK), ".ci/run must be executable (git update-index --chmod=+x)"
    done = subprocess.run(["bash", "-n", str(CI_RUN)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_doctor_ranges_match_pyproject():
    from specdec_lib.teaching import doctor

    pyproject = load_pyproject()
    assert pyproject["project"]["requires-python"] == ">=" + ".".join(map(str, doctor.MIN_PYTHON))
    assert load_bootstrap().MIN_PYTHON == doctor.MIN_PYTHON
    allowed = pyproject_requirements(pyproject)
    assert str(allowed["transformers"][0].specifier) == str(SpecifierSet(doctor.TRANSFORMERS_SPEC))
    low, high = doctor.TRANSFORMERS_RANGE
    assert doctor.TRANSFORMERS_SPEC == f">={'.'.join(map(str, low))},<{'.'.join(map(str, high))}"
    assert str(allowed["torch"][0].specifier) == ">=" + ".".join(map(str, doctor.MIN_TORCH))


def test_readme_course_map_matches_the_notebooks():
    text = README.read_text()
    rows = re.findall(r"^\|\s*`?(\d\d_[a-z0-9_]+)(?:\.ipynb)?`?\s*\|(.*)$", text, flags=re.M)
    assert rows, "README has no course map table"
    listed = {name for name, _ in rows}
    for name, rest in rows:
        if "planned" not in rest.lower():
            assert (ROOT / "course" / f"{name}.ipynb").is_file(), (
                f"README lists {name} as available but course/{name}.ipynb does not exist"
            )
    for notebook in sorted((ROOT / "course").glob("[0-9][0-9]_*.ipynb")):
        assert notebook.stem in listed, f"course/{notebook.name} is missing from README's course map"


def test_python_version_of_this_interpreter_is_allowed():
    spec = SpecifierSet(load_pyproject()["project"]["requires-python"])
    assert Version(".".join(map(str, sys.version_info[:3]))) in spec


# --------------------------------------------------------------------------- the checker catches drift


@pytest.fixture
def real():
    return load_environment(), load_pyproject()


def _pip(env: dict) -> list[str]:
    for entry in env["dependencies"]:
        if isinstance(entry, dict):
            return entry["pip"]
    raise AssertionError("no pip section")


def test_checker_catches_a_pip_dependency_added_to_environment_only(real):
    env, pyproject = copy.deepcopy(real)
    _pip(env).append("pandas")
    assert env_problems(env, pyproject) == [
        "environment.yml: pip dependency 'pandas' is not in pyproject.toml"
    ]
    # ...and adding it to pyproject too makes the files agree again.
    pyproject["project"]["optional-dependencies"]["dev"].append("pandas")
    assert env_problems(env, pyproject) == []


def test_checker_catches_a_conda_dependency_added_to_environment_only(real):
    env, pyproject = copy.deepcopy(real)
    env["dependencies"].insert(0, "pandas>=2")
    problems = env_problems(env, pyproject)
    assert problems == ["environment.yml: conda dependency 'pandas' is not in pyproject.toml"]


def test_checker_catches_an_extra_added_to_pyproject_only(real):
    env, pyproject = copy.deepcopy(real)
    pyproject["project"]["optional-dependencies"]["gpu"] = ["nvidia-ml-py"]
    problems = env_problems(env, pyproject)
    assert len(problems) == 1 and "extras" in problems[0] and "gpu" in problems[0]


def test_checker_catches_a_missing_project_line(real):
    env, pyproject = copy.deepcopy(real)
    pip = _pip(env)
    pip[:] = [line for line in pip if not line.startswith("-e")]
    assert any("expected one '-e ." in p for p in env_problems(env, pyproject))


def test_checker_catches_a_pin_pyproject_does_not_allow(real):
    env, pyproject = copy.deepcopy(real)
    pip = _pip(env)
    pip[:] = ["torch==2.1.0" if line.startswith("torch") else line for line in pip]
    problems = env_problems(env, pyproject)
    assert len(problems) == 1 and "torch==2.1.0" in problems[0]
    # and the other way round: pyproject raised so that the env's pin falls outside
    env, pyproject = copy.deepcopy(real)
    deps = pyproject["project"]["dependencies"]
    deps[:] = ["torch>=2.14" if d.startswith("torch") else d for d in deps]
    problems = env_problems(env, pyproject)
    assert len(problems) == 1 and "torch==2.13.0" in problems[0] and ">=2.14" in problems[0]


def test_checker_catches_a_python_version_outside_requires_python(real):
    env, pyproject = copy.deepcopy(real)
    env["dependencies"] = ["python=3.9" if str(d).startswith("python") else d for d in env["dependencies"]]
    problems = env_problems(env, pyproject)
    assert problems == [
        "environment.yml: python=3.9 does not satisfy requires-python '>=3.10'"
    ]
    env, pyproject = copy.deepcopy(real)
    pyproject["project"]["requires-python"] = ">=3.12"
    assert len(env_problems(env, pyproject)) == 1


def test_checker_ignores_pip_options(real):
    env, pyproject = copy.deepcopy(real)
    _pip(env).insert(0, "--extra-index-url https://download.pytorch.org/whl/cpu")
    assert env_problems(env, pyproject) == []


def test_checker_on_a_doctored_file_on_disk(tmp_path):
    """End to end through the YAML parser: one added line in a copy of environment.yml."""
    doctored = tmp_path / "environment.yml"
    doctored.write_text(ENVIRONMENT.read_text().replace("      - torch==", "      - requests\n      - torch=="))
    assert env_problems(load_environment(doctored), load_pyproject()) == [
        "environment.yml: pip dependency 'requests' is not in pyproject.toml"
    ]


def test_library_layout_lists_only_modules_that_exist_as_available():
    page = DOCS / "library.md"
    rows = re.findall(r"^\|\s*(`specdec_(?:lib|tools)/[^|]*)\|[^|]*\|\s*([\w ]+?)\s*\|$", page.read_text(), flags=re.M)
    assert rows, "docs/library.md has no library layout table"
    for paths, status in rows:
        assert status in ("available", "in progress", "planned"), f"unknown status {status!r}"
        if status != "available":
            continue
        for path in re.findall(r"`(specdec_(?:lib|tools)/[^`]+)`", paths):
            assert (ROOT / path).exists(), f"docs/library.md lists {path} as available but it does not exist"
