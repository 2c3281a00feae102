"""scripts/make_wheelhouse.sh, the offline classroom kit, without downloading anything: it parses, it explains
itself, and its dry runs print the commands with constraints.txt's torch pin, under constraints.txt, and pyproject's
extras."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import load_bootstrap

from specdec_lib.teaching import doctor

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "make_wheelhouse.sh"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60, cwd=ROOT)


def locked_torch_pin() -> str:
    pins = re.findall(r"^(torch==\S+)$", (ROOT / "constraints.txt").read_text(), flags=re.M)
    assert len(pins) == 1, f"constraints.txt should pin torch once, found {pins}"
    return pins[0]


def pyproject_extras() -> str:
    import tomllib  # Python >= 3.11 here; the script itself reads pyproject without it on 3.10

    return ",".join((tomllib.loads((ROOT / "pyproject.toml").read_text()))["project"]["optional-dependencies"])


def bootstrap_extras() -> tuple[set[str], tuple[str, ...]]:
    """(every extra the set-up installs for some command, the extras of `make course`), from scripts/bootstrap.py."""
    module = load_bootstrap()
    return {extra for extras in module.EXTRAS.values() for extra in extras}, module.COURSE_EXTRAS


def test_the_script_parses():
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0


def test_help_describes_both_modes_and_the_options():
    result = run("--help")
    assert result.returncode == 0
    for word in ("download", "install", "--dry-run", "--torch-index", "--extras", "--no-index"):
        assert word in result.stdout, word


def test_the_download_dry_run_uses_the_lock_and_every_extra_of_pyproject(tmp_path):
    kit = tmp_path / "kit"
    result = run("--dry-run", str(kit))
    assert result.returncode == 0, result.stderr
    pin, extras = locked_torch_pin(), pyproject_extras()
    assert bootstrap_extras()[0] <= set(extras.split(",")), "the kit must hold every extra the set-up installs"
    commands = [line for line in result.stdout.splitlines() if line.startswith("+ ")]
    assert f"+ python3 -m pip download --dest {kit} -c constraints.txt {pin}" in commands
    assert f"+ python3 -m pip download --dest {kit} --find-links {kit} -c constraints.txt {pin} '.[{extras}]'" in commands
    assert any("pip download" in line and "'setuptools>=64'" in line for line in commands)  # the build backend
    assert not kit.exists(), "a dry run must not create the kit"
    assert f"copy {kit} to wheelhouse/" in result.stdout and "make course" in result.stdout  # how to use it


def test_a_torch_index_is_passed_to_the_torch_download_only(tmp_path):
    result = run("download", str(tmp_path), "--dry-run", "--torch-index", "https://example.invalid/cpu")
    torch_lines = [line for line in result.stdout.splitlines() if "--extra-index-url" in line]
    assert torch_lines == [f"+ python3 -m pip download --dest {tmp_path} --extra-index-url "
                           f"https://example.invalid/cpu -c constraints.txt {locked_torch_pin()}"]


def test_the_install_dry_run_prints_the_two_offline_installs(tmp_path):
    result = run("install", str(tmp_path), "--dry-run", "--extras", "course")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[:2] == [
        f"+ python3 -m pip install --no-index --find-links {tmp_path} -c constraints.txt {locked_torch_pin()}",
        f"+ python3 -m pip install --no-index --find-links {tmp_path} -c constraints.txt -e '.[course]'",
    ]
    default = run("install", str(tmp_path), "--dry-run")
    course_extras = ",".join(bootstrap_extras()[1])
    assert f"-e '.[{course_extras}]'" in default.stdout  # what `make course` installs
    assert f'-e ".[{course_extras}]"' in doctor.FIX_INSTALL  # and the doctor's fix


def test_install_without_a_kit_and_bad_arguments_fail_with_a_message(tmp_path):
    missing = run("install", str(tmp_path / "nothing"))
    assert missing.returncode == 1 and "no torch wheel" in missing.stderr
    bad = run("--no-such-option")
    assert bad.returncode == 2 and "unknown option" in bad.stderr
    two = run(str(tmp_path), str(tmp_path / "other"), "--dry-run")
    assert two.returncode == 2 and "one directory only" in two.stderr
