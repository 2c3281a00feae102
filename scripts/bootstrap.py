"""Set up the course's environment, then open the course or run the tests: what `make course` and `make test` run.

    python3 scripts/bootstrap.py course [-- JUPYTERLAB OPTIONS]   # make course   (Windows: py scripts\\bootstrap.py course)
    python3 scripts/bootstrap.py test                             # make test
    python3 scripts/bootstrap.py test-bf16                        # make test-bf16: the notebooks in bfloat16
    python3 scripts/bootstrap.py site                             # make site: the course as a static web site
    python3 scripts/bootstrap.py lock                             # make lock: refresh constraints.txt

Every command first makes sure the environment in ``.venv`` (``SPECDEC_VENV`` elsewhere) holds what it needs:

1. Python >= 3.10, and a ``venv`` module that can install pip (Debian and Ubuntu ship it as ``python3-venv``).
2. ``.venv`` created if missing, recreated if its Python no longer starts.
3. torch at the version ``constraints.txt`` pins, from the first source that has it: the offline kit in
   ``wheelhouse/`` (``SPECDEC_WHEELHOUSE`` elsewhere; scripts/make_wheelhouse.sh builds it); a local wheel that
   pip's own configuration already finds (as on CI, or a lab's mirror); else the network: PyPI, plus PyTorch's CPU
   index on a Linux machine without a working ``nvidia-smi`` (PyPI's Linux wheel is a CUDA build of several GB).
   ``SPECDEC_TORCH_INDEX`` names another index (a CUDA build for an older driver, say).
4. The project, editable, with the extras the command needs, under ``constraints.txt``: the versions the test
   suite passed with (``SPECDEC_LOCK=off`` installs the newest ones pyproject.toml allows instead, untested).
5. The doctor (``python -m specdec_lib doctor``); a FAIL line stops the set-up and says how to fix it.

A file in the environment records a completed install (a hash of constraints.txt, pyproject.toml, the extras and
the torch source). When it matches and the main packages import, the set-up is skipped: a second run starts its
real work within seconds. An install that was interrupted leaves no record, so the next run finishes it.

Only the standard library, and syntax that old Pythons can parse: this script must be able to tell a Python 3.8
that it is too old. Exit status: that of the command it ran; 1 when the set-up failed (the message says why); 2
bad arguments; 130 interrupted.
"""

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIN_PYTHON = (3, 10)  # pyproject.toml's requires-python (tests/test_bootstrap.py checks it)
CONSTRAINTS = os.path.join(ROOT, "constraints.txt")
PYPROJECT = os.path.join(ROOT, "pyproject.toml")
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
RECORD = "specdec-install.json"  # inside the environment

#: the extras each command installs (the course: the notebooks, their nbval tests, the load test's server; the
#: tests add the site builder, which tests/test_site.py checks)
COURSE_EXTRAS = ("course", "dev", "serve")
TEST_EXTRAS = COURSE_EXTRAS + ("site",)
EXTRAS = {"course": COURSE_EXTRAS, "test": TEST_EXTRAS, "test-bf16": TEST_EXTRAS, "site": TEST_EXTRAS,
          "lock": TEST_EXTRAS}
#: what must be importable for an environment to count as installed (found, not imported: a second run stays fast;
#: the doctor imports them after each install)
MODULES = {"course": ("torch", "transformers", "specdec_lib", "jupyterlab", "ipywidgets", "matplotlib"),
           "dev": ("pytest", "nbval", "xdist", "scipy"), "serve": ("fastapi", "uvicorn", "openai"),
           "site": ("sphinx", "myst_nb", "selenium")}

#: The README's test command: the unit tests and every notebook under nbval, strict.
TEST_COMMAND = ("-m", "pytest", "-n", "2", "--dist", "loadscope", "-m", "not slow", "course", "tests", "--nbval",
                "--nbval-current-env", "--nbval-sanitize-with", "course/sanitize.cfg", "-p", "no:cacheprovider")
#: The second tier: every notebook in bfloat16, where identity holds up to forks at near-ties (notebook 09).
BF16_COMMAND = ("-m", "pytest", "-n", "2", "--dist", "loadscope", "course", "--nbval-lax", "--nbval-current-env",
                "-p", "no:cacheprovider")
#: Quiet, offline, reproducible tests: nothing downloads, figures render off screen, hashes are stable.
TEST_ENVIRONMENT = {"PYDEVD_DISABLE_FILE_VALIDATION": "1", "TOKENIZERS_PARALLELISM": "false",
                    "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
                    "MPLBACKEND": "Agg", "PYTHONHASHSEED": "0"}

NETWORK_SIGNS = ("NewConnectionError", "Temporary failure in name resolution", "Name or service not known",
                 "Network is unreachable", "Connection refused", "ConnectTimeoutError", "ProxyError",
                 "Failed to establish a new connection", "nodename nor servname", "getaddrinfo failed")


class SetupError(Exception):
    """A set-up step failed; the message says what was wrong and how to fix it."""


def say(text):
    print("[set-up] " + text, flush=True)


# --------------------------------------------------------------------------- Python and venv


def lock_python():
    """The Python minor version constraints.txt was made with ('3.11'), from its header; None when unknown."""
    try:
        with open(CONSTRAINTS, encoding="utf-8") as handle:
            match = re.search(r"with Python (\d+\.\d+)", handle.read(2000))
    except OSError:
        return None
    return match.group(1) if match else None


def python_problem(version_info, executable):
    """Why this Python cannot run the course, or None. Names a newer Python of this machine when there is one,
    the lock's own first."""
    if tuple(version_info[:2]) >= MIN_PYTHON:
        return None
    found = ".".join(str(v) for v in version_info[:3])
    names = ["python" + minor for minor in ("3.13", "3.12", "3.11", "3.10")]
    preferred = "python{}".format(lock_python())
    names.sort(key=lambda name: name != preferred)
    newer = [name for name in names if shutil.which(name)]
    hint = ("This machine also has {0}: make course PYTHON={0} (or {0} scripts/bootstrap.py course).".format(newer[0])
            if newer else "Install Python {}.{} or newer (python.org, or your system's packages), then run this "
                          "again with it: make course PYTHON=python3.X".format(*MIN_PYTHON))
    return "Python {} at {} is too old: the course needs Python {}.{} or newer. {}".format(
        found, executable, MIN_PYTHON[0], MIN_PYTHON[1], hint)


def venv_problem():
    """Why this Python cannot create an environment with pip in it, or None."""
    missing = []
    for module in ("venv", "ensurepip"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if not missing:
        return None
    version = "{}.{}".format(*sys.version_info[:2])
    return ("this Python cannot create a virtual environment with pip in it (module {} missing). Debian and Ubuntu "
            "ship it separately: sudo apt install python{}-venv (or python3-venv), then run this again.".format(
                " and ".join(missing), version))


def venv_python(venv):
    if os.name == "nt":
        return os.path.join(venv, "Scripts", "python.exe")
    return os.path.join(venv, "bin", "python")


def environment_health(venv):
    """'missing', 'broken' (its Python or its pip does not start) or 'ok'."""
    python = venv_python(venv)
    if not os.path.isdir(venv):
        return "missing"
    if not os.path.exists(python):
        return "broken"
    done = subprocess.run([python, "-c", "import sys, pip; assert sys.version_info >= {!r}".format(MIN_PYTHON)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return "ok" if done.returncode == 0 else "broken"


def create_environment(venv):
    problem = venv_problem()
    if problem:
        raise SetupError(problem)
    say("creating the environment in {} with Python {}".format(venv, platform.python_version()))
    done = subprocess.run([sys.executable, "-m", "venv", venv])
    if done.returncode != 0:
        shutil.rmtree(venv, ignore_errors=True)
        raise SetupError("`{} -m venv {}` failed (see above). On Debian and Ubuntu: sudo apt install python{}.{}-venv,"
                         " then run this again.".format(sys.executable, venv, *sys.version_info[:2]))


# --------------------------------------------------------------------------- the lock and the install record


def read_constraints(path=CONSTRAINTS):
    """{canonical name: pinned version} of constraints.txt (``name==version`` lines; # comments)."""
    pins = {}
    if not os.path.exists(path):
        raise SetupError("{} is missing: restore it (git checkout -- constraints.txt) or make a new one (make lock)"
                         .format(path))
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)$", line)
            if not match:
                raise SetupError("{}: cannot read the line {!r}: each line is name==version".format(path, line))
            pins[canonical(match.group(1))] = match.group(2)
    return pins


def canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_enabled():
    value = os.environ.get("SPECDEC_LOCK", "on").strip().lower()
    if value not in ("on", "off", "1", "0", "true", "false", "yes", "no"):
        raise SetupError("SPECDEC_LOCK={!r}: use on (the tested versions of constraints.txt, the default) or off "
                         "(the newest versions pyproject.toml allows)".format(value))
    return value in ("on", "1", "true", "yes")


def wheelhouse():
    """The offline kit's folder when there is one with a torch wheel in it, else None."""
    folder = os.environ.get("SPECDEC_WHEELHOUSE") or os.path.join(ROOT, "wheelhouse")
    if os.path.isdir(folder) and any(name.startswith("torch-") for name in os.listdir(folder)):
        return folder
    if os.environ.get("SPECDEC_WHEELHOUSE"):
        raise SetupError("SPECDEC_WHEELHOUSE={} holds no torch wheel: build the kit first, on a machine with the "
                         "network (scripts/make_wheelhouse.sh download {})".format(folder, folder))
    return None


def nvidia_gpu():
    """Whether `nvidia-smi` runs: an NVIDIA driver is there, so PyPI's CUDA build of torch can use it."""
    if not shutil.which("nvidia-smi"):
        return False
    try:
        return subprocess.run(["nvidia-smi"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def install_key(extras, lock):
    """What an install depends on: a change to any of it makes the next run install again."""
    digest = hashlib.sha256()
    for path in (CONSTRAINTS, PYPROJECT):
        with open(path, "rb") as handle:
            digest.update(handle.read())
    digest.update(json.dumps([sorted(extras), lock, os.environ.get("SPECDEC_TORCH_INDEX", "")]).encode())
    return digest.hexdigest()


def read_record(venv):
    try:
        with open(os.path.join(venv, RECORD), encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def write_record(venv, key, extras):
    with open(os.path.join(venv, RECORD), "w", encoding="utf-8") as handle:
        json.dump({"key": key, "extras": sorted(extras)}, handle)


def missing_modules(python, extras):
    """The modules of `MODULES` that the environment's Python cannot find ('' when it finds them all)."""
    names = [name for extra in extras for name in MODULES[extra]]
    code = ("import importlib.util, sys\n"
            "print(' '.join(n for n in sys.argv[1:] if importlib.util.find_spec(n) is None))")
    done = subprocess.run([python, "-c", code] + names, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True)
    return done.stdout.strip() if done.returncode == 0 else "the check itself failed: " + done.stdout.strip()


# --------------------------------------------------------------------------- pip


def pip_failure(output, returncode):
    """What a failed pip run means, in words that say how to fix it."""
    if any(sign in output for sign in NETWORK_SIGNS):
        return ("pip could not reach the network to download packages. Without internet, install from the offline "
                "kit: on a machine with internet and the same system and Python, run "
                "scripts/make_wheelhouse.sh download, copy the wheelhouse/ folder it makes into this repository, then "
                "run this command again (it installs from wheelhouse/ without the network; docs/install.md says more).")
    match = re.search(r"Ignored the following versions that require a different python version: (.*)", output)
    if match or "Requires-Python" in output:
        detail = match.group(1).strip() if match else "see above"
        return ("a version pinned in constraints.txt does not support Python {} ({}). Use the Python the lock was "
                "made with (its first line names it): make course PYTHON=python3.X; or install the newest versions "
                "pyproject.toml allows, which no test run has checked together: SPECDEC_LOCK=off make course".format(
                    platform.python_version(), detail))
    return ("pip failed (exit status {}); the lines above say why. Run the same command again to retry: the set-up "
            "starts over where it stopped.".format(returncode))


def pip(python, args, what):
    """Run `python -m pip install ARGS`, showing its output; raise SetupError with the reason when it fails."""
    command = [python, "-m", "pip", "install", "--disable-pip-version-check", "--retries", "2"] + list(args)
    say(what + ":  " + " ".join(command[1:]))
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                               cwd=ROOT)
    seen = []
    for line in process.stdout:
        seen.append(line)
        sys.stdout.write(line)
    returncode = process.wait()
    if returncode != 0:
        raise SetupError(pip_failure("".join(seen), returncode))


def local_torch_wheel(python, version):
    """A torch wheel of `version` for this Python in a folder that pip's own configuration (pip config, PIP_FIND_LINKS)
    points at, as on a CI machine or a lab's mirror; None when there is none."""
    listed = subprocess.run([python, "-m", "pip", "config", "list"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, universal_newlines=True).stdout
    folders = re.findall(r"find-links='([^']*)'", listed) + [os.environ.get("PIP_FIND_LINKS", "")]
    tag = "-cp{}{}-".format(*sys.version_info[:2])
    for value in folders:
        for folder in value.split():
            folder = folder[len("file://"):] if folder.startswith("file://") else folder
            if "://" in folder or not os.path.isdir(folder):
                continue
            for name in sorted(os.listdir(folder)):
                if re.match(r"torch-{}(\+[^-]+)?-".format(re.escape(version)), name) and tag in name:
                    return os.path.join(folder, name)
    return None


def torch_source(python, version, kit, gpu, system):
    """(description, pip arguments) for torch==version: the offline kit when there is one; else a local wheel that
    pip's configuration already finds (installed with pip as configured); else the network, adding PyTorch's CPU
    index on a Linux machine without an NVIDIA GPU (PyPI's Linux wheel is a CUDA build of several GB)."""
    requirement = "torch==" + version
    if kit:
        return "torch from the offline kit " + kit, ["--no-index", "--find-links", kit, requirement]
    local = local_torch_wheel(python, version)
    if local:
        return "torch from the wheel pip's configuration finds, " + local, [requirement]
    index = os.environ.get("SPECDEC_TORCH_INDEX")
    if index:
        return "torch from " + index, ["--extra-index-url", index, requirement]
    if system == "Linux" and not gpu:
        return ("torch, CPU build (no NVIDIA GPU found: PyPI's Linux wheel would be a CUDA build of several GB)",
                ["--extra-index-url", CPU_INDEX, requirement])
    if gpu:
        return "torch, CUDA build (nvidia-smi found an NVIDIA GPU)", [requirement]
    return "torch", [requirement]


def install_torch(python, version, constraint_args, kit):
    """torch first, so that installing the project pulls no other torch."""
    what, args = torch_source(python, version, kit, nvidia_gpu(), platform.system())
    pip(python, constraint_args + args, "installing " + what)


def install(python, extras, lock):
    """torch at the pinned version, then the project with its extras, under constraints.txt unless `lock` is off."""
    pins = read_constraints()
    if "torch" not in pins:
        raise SetupError("constraints.txt pins no torch: refresh it with `make lock`")
    locked = ["-c", CONSTRAINTS] if lock else []
    kit = wheelhouse()
    install_torch(python, pins["torch"], locked, kit)
    offline = ["--no-index", "--find-links", kit] if kit else []
    pip(python, offline + locked + ["-e", ".[{}]".format(",".join(extras))],
        "installing the project with its extras " + ",".join(extras)
        + (" at the versions of constraints.txt" if lock else " (SPECDEC_LOCK=off: newest allowed versions)"))


def ensure_environment(command, venv):
    """Make `venv` hold what `command` needs; return its Python. Fast when an earlier run completed the install."""
    problem = python_problem(sys.version_info, sys.executable)
    if problem:
        raise SetupError(problem)
    extras = EXTRAS[command]
    lock = lock_enabled()
    health = environment_health(venv)
    if health == "broken":
        say("the environment in {} is broken (its Python or pip does not start): recreating it".format(venv))
        shutil.rmtree(venv)
        health = "missing"
    if health == "missing":
        create_environment(venv)
    python = venv_python(venv)
    key = install_key(extras, lock)
    record = read_record(venv)
    if record and record.get("key") == key:
        missing = missing_modules(python, extras)
        if not missing:
            return python
        say("the environment in {} is incomplete (not found: {}): repairing it".format(venv, missing))
    elif record is None and health == "ok":
        say("the environment in {} has no completed install (an earlier run stopped before the end, or it was "
            "made by hand): finishing it".format(venv))
    elif record is not None:
        say("constraints.txt, pyproject.toml or the extras changed since the last install: updating {}".format(venv))
    install(python, extras, lock)
    say("checking the machine: python -m specdec_lib doctor")
    if subprocess.run([python, "-m", "specdec_lib", "doctor"], cwd=ROOT).returncode != 0:
        raise SetupError("the doctor found a problem (the FAIL lines above, each with its fix); fix it and run the "
                         "same command again")
    write_record(venv, key, extras)
    return python


# --------------------------------------------------------------------------- the commands


def run(python, args, extra_environment=None):
    environment = dict(os.environ)
    environment.update(extra_environment or {})
    return subprocess.run([python] + list(args), cwd=ROOT, env=environment).returncode


def run_tests(python, arguments, environment):
    status = run(python, arguments, environment)
    if status == 5:
        print("bootstrap: pytest collected no tests (exit status 5), which counts as a failure", file=sys.stderr)
        return 1
    return status


def refresh_lock(arguments):
    """Install the newest versions pyproject.toml allows into a scratch environment and write them to
    constraints.txt; `make test` then says whether the suite passes with them. torch stays at its pin unless an
    argument ``torch==VERSION`` moves it: a new torch is a choice (its CUDA build needs a newer driver)."""
    pins = read_constraints() if os.path.exists(CONSTRAINTS) else {}
    moved = [argument.split("==", 1)[1] for argument in arguments if argument.startswith("torch==")]
    if len(moved) != len(arguments) or len(moved) > 1 or not (moved or "torch" in pins):
        raise SetupError("make lock takes at most one argument, torch==VERSION (got {}); without it torch stays at "
                         "constraints.txt's pin".format(" ".join(arguments) or "none, and constraints.txt pins no torch"))
    torch_version = moved[0] if moved else pins["torch"]
    scratch = tempfile.mkdtemp(prefix="specdec-lock-")
    try:
        create_environment(scratch)
        scratch_python = venv_python(scratch)
        install_torch(scratch_python, torch_version, [], wheelhouse())
        pip(scratch_python, ["-e", ".[{}]".format(",".join(TEST_EXTRAS))], "installing the newest allowed versions")
        listed = subprocess.run([scratch_python, "-m", "pip", "list", "--format=freeze", "--exclude-editable"],
                                stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    lines = sorted((line.split("+")[0] for line in listed.splitlines()
                    if "==" in line and canonical(line.split("==")[0]) not in ("pip", "setuptools", "wheel")),
                   key=str.lower)
    header = ["# The versions the test suite passed with, which `make course` and `make test` install (pip -c).",
              "# Made by `make lock` with Python {} on {} {}; refresh: make lock && make test, then commit.".format(
                  platform.python_version(), platform.system(), platform.machine()),
              "# Ranges live in pyproject.toml; SPECDEC_LOCK=off installs without this file."]
    with open(CONSTRAINTS, "w", encoding="utf-8") as handle:
        handle.write("\n".join(header + lines) + "\n")
    changed = sorted(line for line in lines if pins.get(canonical(line.split("==")[0])) != line.split("==")[1])
    say("wrote {} pins to constraints.txt; {} changed: {}".format(len(lines), len(changed), ", ".join(changed) or "none"))
    say("now run `make test`: commit constraints.txt only if it passes")
    return 0


USAGE = "\n\n".join(__doc__.split("\n\n")[:2])


def main(argv):
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in EXTRAS:
        print(USAGE, file=sys.stderr if argv and argv[0] not in ("-h", "--help") else sys.stdout)
        if argv and argv[0] not in ("-h", "--help"):
            print("bootstrap: unknown command {!r}: use one of {}".format(argv[0], ", ".join(EXTRAS)), file=sys.stderr)
            return 2
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    started = time.time()
    venv = os.path.abspath(os.environ.get("SPECDEC_VENV") or os.path.join(ROOT, ".venv"))
    try:
        if command == "lock":
            problem = python_problem(sys.version_info, sys.executable)
            if problem:
                raise SetupError(problem)
            return refresh_lock(rest)
        python = ensure_environment(command, venv)
        say("environment ready after {:.1f} s; now: {}".format(time.time() - started, command))
    except SetupError as error:
        print("bootstrap: " + str(error), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nbootstrap: interrupted; run the same command again to finish the set-up", file=sys.stderr)
        return 130
    if command == "course":
        return run(python, ["-m", "specdec_lib", "course"] + rest)
    if command == "site":
        return run(python, ["-m", "specdec_tools", "site", "--out", os.path.join("build", "site")] + rest)
    if command == "test":
        return run_tests(python, list(TEST_COMMAND) + rest, TEST_ENVIRONMENT)
    return run_tests(python, list(BF16_COMMAND) + rest, dict(TEST_ENVIRONMENT, SPECDEC_DTYPE="bfloat16"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
