"""`python -m specdec_lib course [FOLDER]`: a learner's own copy of the course, opened in JupyterLab.

    python -m specdec_lib course                    # copy into ~/specdec-course (once), then start JupyterLab there
    python -m specdec_lib course ~/work/specdec     # anywhere else
    python -m specdec_lib course --no-lab           # copy only, and print where
    python -m specdec_lib course -- --no-browser --ip 0.0.0.0   # after --: options for JupyterLab itself

The notebooks in ``course/`` are the ones the tests (nbval) and the site read, so a learner works in a copy: the
numbered notebooks, the appendix, ``solutions/`` and the glossary (`COPIED`), never Jupyter's checkpoints. A file
that is already in the folder is never overwritten, so running the command again reopens the learner's own work
(and adds only what a newer course brought). The copied notebooks still find the models and the prompt sets: they
import ``specdec_lib`` (installed editable) and read ``data/`` through `specdec_lib.core.paths.data_dir`, which
looks beside the package, not beside the notebook.

JupyterLab refuses to start as root (a container's usual user) unless it is given ``--allow-root``; as root the
command passes it and says why. Without JupyterLab (the ``course`` extra) it says what to install.

Exit codes: 0 copied (and JupyterLab ran); 1 JupyterLab is missing or the folder cannot be used; 2 bad arguments.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ..core.errors import ConfigError
from ..core.paths import REPO_COURSE_DIR

COURSE_DIR = REPO_COURSE_DIR
DEFAULT_FOLDER = Path("~/specdec-course")
#: what a learner gets, relative to the course folder (glob patterns; * stays inside one folder)
COPIED = ("*.ipynb", "solutions/*.ipynb", "glossary.md")
INSTALL_COURSE_EXTRA = 'pip install -e ".[course]"'
ROOT_NOTE = ("running as root (as in a container): passing --allow-root, without which JupyterLab refuses to start "
             "as root")


@dataclass
class CopyReport:
    """What `copy_course` did: the folder, the files it copied, and the learner's files it left as they were."""

    folder: Path
    copied: list[Path] = field(default_factory=list)
    kept: list[Path] = field(default_factory=list)


def course_files(course_dir: Path = COURSE_DIR) -> list[Path]:
    """The files a learner's copy holds, relative to the course folder, in a stable order."""
    found = {path.relative_to(course_dir) for pattern in COPIED for path in course_dir.glob(pattern) if path.is_file()}
    return sorted(found, key=lambda p: (len(p.parts), p.as_posix()))


def copy_course(folder: Path, course_dir: Path = COURSE_DIR) -> CopyReport:
    """Copy the course into ``folder``, file by file, never overwriting a file that is already there."""
    folder = Path(folder).expanduser().resolve()
    course_dir = Path(course_dir).resolve()
    if folder == course_dir or course_dir in folder.parents:
        raise ConfigError(f"{folder} is inside the course folder {course_dir}, which the tests and the site read: "
                          "choose a folder of your own (the default is ~/specdec-course).")
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{folder} exists and is not a folder: choose another folder.")
    files = course_files(course_dir)
    if not files:
        raise ConfigError(f"{course_dir} holds no notebooks to copy.")
    report = CopyReport(folder)
    for relative in files:
        target = folder / relative
        if target.exists():
            report.kept.append(relative)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(course_dir / relative, target)
        report.copied.append(relative)
    return report


def is_root() -> bool:
    """True when this process runs as root (never on Windows, which has no uid)."""
    return hasattr(os, "geteuid") and os.geteuid() == 0


def jupyterlab_installed() -> bool:
    return importlib.util.find_spec("jupyterlab") is not None


def lab_command(root: bool, options: Sequence[str] = ()) -> list[str]:
    """The command that starts JupyterLab with this Python (and its kernel), ``--allow-root`` as root, then
    ``options`` (what followed ``--`` on the command line)."""
    return [sys.executable, "-m", "jupyterlab", *(["--allow-root"] if root else []), *options]


def launch(command: list[str], cwd: Path) -> int:
    """Run JupyterLab in ``cwd`` until the learner stops it; its exit status (Ctrl-C is a normal end)."""
    try:
        return subprocess.call(command, cwd=cwd)
    except KeyboardInterrupt:
        return 0


def describe(report: CopyReport) -> list[str]:
    """What the copy did, in a line or two."""
    lines = []
    if report.copied:
        lines.append(f"course: copied {len(report.copied)} files into {report.folder}")
    if report.kept:
        lines.append(f"course: kept your {len(report.kept)} files already in {report.folder} as they are "
                     "(never overwritten; delete a file, or choose another folder, to get a fresh copy of it)")
    return lines


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m specdec_lib course",
        description="Copy the course's notebooks, solutions and glossary into a folder of your own (once; your "
                    "files are never overwritten) and open it in JupyterLab.",
        epilog="Options after -- go to JupyterLab, e.g. -- --no-browser --ip 0.0.0.0 in a container.",
    )
    parser.add_argument("folder", nargs="?", type=Path, default=DEFAULT_FOLDER,
                        help="your copy of the course (default: ~/specdec-course)")
    parser.add_argument("--no-lab", action="store_true", help="copy only: do not start JupyterLab")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    lab_options = argv[argv.index("--") + 1:] if "--" in argv else []
    args = build_parser().parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if not args.no_lab and not jupyterlab_installed():
        print("course: JupyterLab is not installed; it comes with the course extra: "
              f"{INSTALL_COURSE_EXTRA} (from the repository root), then run this command again.", file=sys.stderr)
        return 1
    try:
        report = copy_course(args.folder)
    except (ConfigError, OSError) as error:
        print(f"course: {error}", file=sys.stderr)
        return 1
    for line in describe(report):
        print(line)
    if args.no_lab:
        print(f"course: open it with: cd {report.folder} && jupyter lab")
        return 0
    root = is_root()
    if root:
        print(f"course: {ROOT_NOTE}")
    print(f"course: starting JupyterLab in {report.folder}; open 00_setup_and_baseline.ipynb first "
          "(Ctrl-C here stops it)")
    return launch(lab_command(root, lab_options), report.folder)


if __name__ == "__main__":
    sys.exit(main())
