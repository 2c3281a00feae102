"""scripts/bootstrap.py, the set-up behind `make course` and `make test`, without installing anything: its decisions
(where torch comes from, when to install again, what a failed pip run means) and its messages for the bad states a
learner's machine can be in. The real installs are checked end to end on a fresh clone (the issue's note says how).
"""

import ast
import os
import sys
import types
from pathlib import Path

import pytest
from helpers import load_bootstrap

bootstrap = load_bootstrap()
ROOT = Path(__file__).resolve().parents[1]


def test_the_script_parses_as_python_3_6_so_that_an_old_python_hears_it_is_too_old():
    source = (ROOT / "scripts" / "bootstrap.py").read_text()
    ast.parse(source, feature_version=(3, 6))
    assert "from __future__ import annotations" not in source  # a SyntaxError before 3.7


# --------------------------------------------------------------------------- Python and venv


def test_an_old_python_is_refused_with_its_version_and_a_newer_python_on_this_machine(monkeypatch):
    monkeypatch.setattr(bootstrap.shutil, "which", lambda name: "/usr/bin/" + name if name == "python3.12" else None)
    message = bootstrap.python_problem((3, 8, 10), "/usr/bin/python3")
    assert "Python 3.8.10 at /usr/bin/python3 is too old" in message and "3.10 or newer" in message
    assert "make course PYTHON=python3.12" in message
    lock = "python" + bootstrap.lock_python()  # the lock's own Python comes first when the machine has it
    monkeypatch.setattr(bootstrap.shutil, "which", lambda name: "/usr/bin/" + name)
    assert "make course PYTHON={}".format(lock) in bootstrap.python_problem((3, 8, 10), "/usr/bin/python3")
    monkeypatch.setattr(bootstrap.shutil, "which", lambda name: None)
    assert "Install Python 3.10 or newer" in bootstrap.python_problem((3, 9, 0), "python3")
    assert bootstrap.python_problem((3, 10, 0), "python3") is None


def test_a_python_without_ensurepip_is_told_which_package_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ensurepip", None)  # as on Debian without python3-venv
    message = bootstrap.venv_problem()
    assert "ensurepip" in message and "sudo apt install python{}.{}-venv".format(*sys.version_info[:2]) in message
    monkeypatch.undo()
    assert bootstrap.venv_problem() is None


def test_environment_health(tmp_path):
    assert bootstrap.environment_health(str(tmp_path / "none")) == "missing"
    assert bootstrap.environment_health(str(tmp_path)) == "broken"  # a folder without a Python
    python = Path(bootstrap.venv_python(str(tmp_path)))
    python.parent.mkdir(parents=True)
    python.symlink_to(sys.executable)  # this Python has pip and is new enough
    assert bootstrap.environment_health(str(tmp_path)) == "ok"


# --------------------------------------------------------------------------- the lock and where torch comes from


def test_the_lock_is_read_and_a_bad_or_missing_lock_is_explained(tmp_path):
    pins = bootstrap.read_constraints()
    assert pins["torch"].count(".") == 2 and "transformers" in pins and "jupyterlab" in pins
    bad = tmp_path / "constraints.txt"
    bad.write_text("# fine\ntorch>=2\n")
    with pytest.raises(bootstrap.SetupError, match="each line is name==version"):
        bootstrap.read_constraints(str(bad))
    with pytest.raises(bootstrap.SetupError, match="make lock"):
        bootstrap.read_constraints(str(tmp_path / "missing.txt"))


@pytest.mark.parametrize("system, gpu, index, expected", [
    ("Linux", False, None, ["--extra-index-url", "https://download.pytorch.org/whl/cpu", "torch==2.13.0"]),
    ("Linux", True, None, ["torch==2.13.0"]),  # PyPI's Linux wheel is the CUDA build
    ("Darwin", False, None, ["torch==2.13.0"]),  # PyPI's macOS and Windows wheels are CPU builds already
    ("Linux", True, "https://example.invalid/cu118", ["--extra-index-url", "https://example.invalid/cu118",
                                                      "torch==2.13.0"]),
])
def test_torch_comes_from_the_network_by_machine(monkeypatch, system, gpu, index, expected):
    monkeypatch.setattr(bootstrap, "local_torch_wheel", lambda python, version: None)
    monkeypatch.delenv("SPECDEC_TORCH_INDEX", raising=False)
    if index:
        monkeypatch.setenv("SPECDEC_TORCH_INDEX", index)
    what, args = bootstrap.torch_source(sys.executable, "2.13.0", None, gpu, system)
    assert args == expected
    assert ("CPU build" in what) == (system == "Linux" and not gpu and not index)


def test_the_offline_kit_comes_first_then_a_local_wheel_that_pip_already_finds(monkeypatch, tmp_path):
    what, args = bootstrap.torch_source(sys.executable, "2.13.0", str(tmp_path), False, "Linux")
    assert args == ["--no-index", "--find-links", str(tmp_path), "torch==2.13.0"] and "offline kit" in what
    tag = "cp{}{}".format(*sys.version_info[:2])
    (tmp_path / f"torch-2.13.0+cpu-{tag}-{tag}-manylinux_2_28_x86_64.whl").write_bytes(b"")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    found = bootstrap.local_torch_wheel(sys.executable, "2.13.0")
    assert found and found.startswith(str(tmp_path))
    assert bootstrap.local_torch_wheel(sys.executable, "2.14.0") is None  # another version is not this pin
    what, args = bootstrap.torch_source(sys.executable, "2.13.0", None, False, "Linux")
    assert args == ["torch==2.13.0"] and "pip's configuration" in what  # pip as configured, no CPU index


def test_an_offline_kit_named_but_empty_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECDEC_WHEELHOUSE", str(tmp_path))
    with pytest.raises(bootstrap.SetupError, match="holds no torch wheel"):
        bootstrap.wheelhouse()


def test_a_bad_lock_switch_is_refused(monkeypatch):
    monkeypatch.setenv("SPECDEC_LOCK", "maybe")
    with pytest.raises(bootstrap.SetupError, match="SPECDEC_LOCK"):
        bootstrap.lock_enabled()
    monkeypatch.setenv("SPECDEC_LOCK", "off")
    assert bootstrap.lock_enabled() is False


# --------------------------------------------------------------------------- what a failed pip run means


NO_NETWORK = """WARNING: Retrying (Retry(total=1, connect=None, read=None, redirect=None, status=None)) after connection
broken by 'NewConnectionError('<HTTPSConnection object>: Failed to establish a new connection: [Errno -3] Temporary
failure in name resolution')': /simple/torch/
ERROR: Could not find a version that satisfies the requirement torch==2.13.0 (from versions: none)
ERROR: No matching distribution found for torch==2.13.0"""
OTHER_PYTHON = """ERROR: Ignored the following versions that require a different python version: 2.4.6 Requires-Python >=3.11
ERROR: Could not find a version that satisfies the requirement numpy==2.4.6"""


def test_pip_failures_are_explained():
    network = bootstrap.pip_failure(NO_NETWORK, 1)
    assert "could not reach the network" in network and "make_wheelhouse.sh download" in network
    python = bootstrap.pip_failure(OTHER_PYTHON, 1)
    assert "2.4.6 Requires-Python >=3.11" in python and "SPECDEC_LOCK=off" in python
    other = bootstrap.pip_failure("ERROR: some build failed", 1)
    assert "exit status 1" in other and "again" in other


# --------------------------------------------------------------------------- install once, repair, reuse


@pytest.fixture
def fake_machine(monkeypatch, tmp_path):
    """bootstrap with every step that would install or run something replaced by a recorder."""
    calls = types.SimpleNamespace(installed=0, created=0, doctor=0, doctor_status=0, imports="", health="ok")
    venv = tmp_path / "venv"
    venv.mkdir()

    def install(python, extras, lock):
        calls.installed += 1

    def create(path):
        calls.created += 1
        Path(path).mkdir(exist_ok=True)

    def doctor(command, **kwargs):
        calls.doctor += 1
        return types.SimpleNamespace(returncode=calls.doctor_status)

    monkeypatch.setattr(bootstrap, "install", install)
    monkeypatch.setattr(bootstrap, "create_environment", create)
    monkeypatch.setattr(bootstrap, "environment_health", lambda path: calls.health)
    monkeypatch.setattr(bootstrap, "missing_modules", lambda python, extras: calls.imports)
    monkeypatch.setattr(bootstrap.subprocess, "run", doctor)
    monkeypatch.delenv("SPECDEC_LOCK", raising=False)
    return calls, str(venv)


def test_a_first_run_installs_checks_and_records_then_a_second_run_reuses(fake_machine, capsys):
    calls, venv = fake_machine
    bootstrap.ensure_environment("course", venv)
    assert (calls.installed, calls.doctor) == (1, 1)
    assert "no completed install" in capsys.readouterr().out
    bootstrap.ensure_environment("course", venv)
    assert (calls.installed, calls.doctor) == (1, 1), "a completed set-up must not install again"
    bootstrap.ensure_environment("test", venv)  # more extras: install what is missing
    assert calls.installed == 2 and "changed since the last install" in capsys.readouterr().out


def test_a_recorded_install_whose_packages_no_longer_import_is_repaired(fake_machine, capsys):
    calls, venv = fake_machine
    bootstrap.ensure_environment("course", venv)
    calls.imports = "transformers"
    bootstrap.ensure_environment("course", venv)
    assert calls.installed == 2 and "is incomplete" in capsys.readouterr().out


def test_a_failing_doctor_stops_the_set_up_and_leaves_no_record(fake_machine):
    calls, venv = fake_machine
    calls.doctor_status = 1
    with pytest.raises(bootstrap.SetupError, match="the doctor found a problem"):
        bootstrap.ensure_environment("course", venv)
    assert bootstrap.read_record(venv) is None  # the next run tries again


def test_a_broken_environment_is_recreated(fake_machine, capsys):
    calls, venv = fake_machine
    calls.health = "broken"
    bootstrap.ensure_environment("course", venv)
    assert calls.created == 1 and calls.installed == 1 and "broken" in capsys.readouterr().out


def test_a_changed_lock_means_a_new_install(monkeypatch, tmp_path):
    lock = tmp_path / "constraints.txt"
    lock.write_text("torch==2.13.0\n")
    monkeypatch.setattr(bootstrap, "CONSTRAINTS", str(lock))
    before = bootstrap.install_key(["course"], True)
    assert bootstrap.install_key(["course"], False) != before
    lock.write_text("torch==2.14.0\n")
    assert bootstrap.install_key(["course"], True) != before


# --------------------------------------------------------------------------- the command line


def test_unknown_commands_and_interruptions(monkeypatch, capsys):
    assert bootstrap.main(["bogus"]) == 2 and "unknown command 'bogus'" in capsys.readouterr().err

    def interrupted(command, venv):
        raise KeyboardInterrupt

    monkeypatch.setattr(bootstrap, "ensure_environment", interrupted)
    assert bootstrap.main(["course"]) == 130 and "run the same command again" in capsys.readouterr().err


def test_pytest_collecting_nothing_is_a_failure(monkeypatch, capsys):
    monkeypatch.setattr(bootstrap, "run", lambda python, arguments, environment: 5)
    assert bootstrap.run_tests(sys.executable, ["-m", "pytest"], {}) == 1
    assert "collected no tests" in capsys.readouterr().err


def test_lock_takes_at_most_a_torch_pin(monkeypatch):
    with pytest.raises(bootstrap.SetupError, match="torch==VERSION"):
        bootstrap.refresh_lock(["numpy==2"])


def test_missing_modules_are_found_without_importing_them(monkeypatch):
    assert bootstrap.missing_modules(sys.executable, ["dev"]) == ""
    monkeypatch.setitem(bootstrap.MODULES, "probe", ("json", "no_such_module_here"))
    assert bootstrap.missing_modules(sys.executable, ["probe"]) == "no_such_module_here"
