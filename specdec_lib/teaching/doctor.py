"""`python -m specdec_lib doctor`: is this machine ready for the course?

One line per check, ``OK`` or ``FAIL`` followed by a detail that says what was
found and, on failure, how to fix it. Exit code 0 when every check passed, 1
otherwise.

Each check is a small function returning a :class:`CheckResult`; the runner
(:func:`run_checks`) prints them and turns them into an exit code. Checks that
need other parts of the library (devices, models) import them lazily, so the
doctor still runs -- and reports the failure -- when those parts are broken.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import re
import subprocess
import sys
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence, TextIO

from ..core.paths import EMBEDDED_MODEL_NAMES, data_dir

# Keep in sync with pyproject.toml (tests/test_packaging.py checks it).
MIN_PYTHON = (3, 10)
MIN_TORCH = (2, 2)
TRANSFORMERS_RANGE = ((5, 17), (5, 25))  # >=5.17,<5.25
TRANSFORMERS_SPEC = ">=5.17,<5.25"


# (module, extra that provides it) for the course and its tests.
COURSE_MODULES = (
    ("jupyterlab", "course"),
    ("ipywidgets", "course"),
    ("matplotlib", "course"),
    ("nbval", "dev"),
)
#: The set-up that installs everything the course needs (scripts/bootstrap.py); in an environment of one's own, the
#: pip line of docs/install.md.
FIX_INSTALL = "make course (or, in your own environment: pip install -c constraints.txt -e \".[course,dev,serve]\")"


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check: what was checked, whether it passed, and why."""

    name: str
    ok: bool
    detail: str

    def line(self, width: int = 14) -> str:
        status = "OK" if self.ok else "FAIL"
        return f"{status:<4}  {self.name:<{width}}  {self.detail}"


def version_tuple(version: str) -> tuple[int, ...]:
    """Leading numeric release of a version string: '5.24.0.dev0' -> (5, 24, 0),
    '2.13.0+cpu' -> (2, 13, 0)."""
    parts: list[int] = []
    for piece in version.split("+")[0].split("."):
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) != len(piece):  # '0rc1': stop after the number
            break
    return tuple(parts)


def _fmt(version: Sequence[int]) -> str:
    return ".".join(str(v) for v in version)


def _error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


# --------------------------------------------------------------------------- checks


def check_python(version_info: Sequence[int] | None = None) -> CheckResult:
    """Python >= 3.10."""
    version = tuple(version_info if version_info is not None else sys.version_info[:3])
    found = _fmt(version[:3])
    if version[:2] >= MIN_PYTHON:
        return CheckResult("python", True, f"{found} ({platform.python_implementation()}, >= {_fmt(MIN_PYTHON)})")
    return CheckResult(
        "python", False,
        f"{found} is too old: the course needs Python >= {_fmt(MIN_PYTHON)}; "
        f"fix: make course PYTHON=python3.X with a newer Python (it creates .venv with it)",
    )


def check_torch() -> CheckResult:
    """torch importable, >= 2.2; says which build (CPU/CUDA) it is."""
    try:
        torch = importlib.import_module("torch")
    except Exception as exc:  # ImportError, or a broken binary
        return CheckResult(
            "torch", False,
            f"not importable ({_error(exc)}); fix: {FIX_INSTALL}",
        )
    version = getattr(torch, "__version__", "?")
    if version_tuple(version)[:2] < MIN_TORCH:
        return CheckResult(
            "torch", False,
            f"{version} is too old: need torch >= {_fmt(MIN_TORCH)}; fix: {FIX_INSTALL}",
        )
    cuda = getattr(getattr(torch, "version", None), "cuda", None)
    build = f"CUDA {cuda} build" if cuda else "CPU build"
    return CheckResult("torch", True, f"{version} ({build})")


def check_transformers(version: str | None = None) -> CheckResult:
    """transformers importable and within `TRANSFORMERS_SPEC` (the cache API moved between releases, and 5.25's
    universal assisted decoding fails on the embedded cross-tokenizer pair; pyproject.toml says why)."""
    if version is None:
        try:
            transformers = importlib.import_module("transformers")
        except Exception as exc:
            return CheckResult(
                "transformers", False,
                f"not importable ({_error(exc)}); fix: {FIX_INSTALL}",
            )
        version = getattr(transformers, "__version__", "0")
    low, high = TRANSFORMERS_RANGE
    found = version_tuple(version)
    if low <= found < high:
        return CheckResult("transformers", True, f"{version} (within {TRANSFORMERS_SPEC})")
    return CheckResult(
        "transformers", False,
        f"{version} is outside {TRANSFORMERS_SPEC}, which the library is tested with; "
        f"fix: {FIX_INSTALL}",
    )


def check_course_tools(modules: Iterable[tuple[str, str]] = COURSE_MODULES) -> CheckResult:
    """The notebook tools: jupyterlab, ipywidgets, matplotlib (extra `course`), nbval (extra `dev`)."""
    found: list[str] = []
    missing: list[str] = []
    for name, _extra in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:
            missing.append(f"{name} ({_error(exc)})")
        else:
            found.append(name)
    if missing:
        return CheckResult(
            "course tools", False,
            f"missing: {', '.join(missing)}; fix: {FIX_INSTALL}",
        )
    return CheckResult("course tools", True, ", ".join(found))


def nvidia_smi() -> str | None:
    """The output of `nvidia-smi` (its header names the newest CUDA the driver supports), or None without one."""
    try:
        done = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def driver_cuda(smi_output: str | None) -> tuple[int, ...] | None:
    """The newest CUDA version the NVIDIA driver supports, from nvidia-smi's header ('CUDA Version: 12.4')."""
    match = re.search(r"CUDA Version:\s*([0-9.]+)", smi_output or "")
    return version_tuple(match.group(1)) if match else None


def gpu_left_unused(device: str, torch_cuda: str | None, smi_output: str | None) -> str | None:
    """Why the course runs on the CPU of a machine with an NVIDIA GPU, or None when it does not (or means to).

    A CUDA build of torch that finds no GPU while nvidia-smi answers is the usual sign of a driver older than the
    build: torch then falls back to the CPU without a word."""
    if not device.startswith("cpu") or smi_output is None or not torch_cuda:
        return None
    supported = driver_cuda(smi_output)
    needed = version_tuple(torch_cuda)
    if supported is not None and supported[:2] >= needed[:2]:
        driver = f"the driver supports CUDA up to {_fmt(supported)}, yet torch finds no usable GPU"
    else:
        driver = ("the driver supports CUDA only up to " + _fmt(supported) if supported
                  else "nvidia-smi names no CUDA version")
    return (f"nvidia-smi sees an NVIDIA GPU, but this torch is built for CUDA {torch_cuda} and {driver}, so the course "
            "would run on the CPU. Fix: update the NVIDIA driver; or install a torch build for the driver's CUDA "
            "(SPECDEC_TORCH_INDEX=https://download.pytorch.org/whl/cuXYZ make course, with XYZ from pytorch.org); "
            "or SPECDEC_DEVICE=cpu to use the CPU on purpose")


def check_device() -> CheckResult:
    """The device every notebook will use: specdec_lib.get_device() (SPECDEC_DEVICE overrides); a FAIL when an NVIDIA
    GPU is there but torch cannot use it (`gpu_left_unused`), unless SPECDEC_DEVICE asks for the CPU."""
    try:
        import torch

        from specdec_lib.core.devices import describe_device, get_device

        device = get_device()
        described = str(describe_device(device))
    except Exception as exc:
        hint = ""
        if os.environ.get("SPECDEC_DEVICE") and "SPECDEC_DEVICE" not in str(exc):
            hint = f" (SPECDEC_DEVICE={os.environ['SPECDEC_DEVICE']!r} is set: is that device available?)"
        return CheckResult("device", False, f"{_error(exc)}{hint}")
    if not os.environ.get("SPECDEC_DEVICE"):
        problem = gpu_left_unused(described, torch.version.cuda, nvidia_smi())
        if problem:
            return CheckResult("device", False, f"{described}: {problem}")
    return CheckResult("device", True, described)


def check_dtype() -> CheckResult:
    """The dtype every notebook loads its models in: specdec_lib.core.numerics.get_dtype() (SPECDEC_DTYPE overrides)."""
    try:
        from specdec_lib.core.numerics import dtype_name, get_dtype, is_exact_dtype

        dtype = get_dtype()
    except Exception as exc:
        return CheckResult("dtype", False, f"{_error(exc)} (unset SPECDEC_DTYPE for float32)")
    promise = ("greedy output token-identical to the target's" if is_exact_dtype(dtype) else
               "greedy output identical to the target's up to forks at near-ties (explain_fork tells them from bugs)")
    return CheckResult("dtype", True, f"{dtype_name(dtype)}: {promise}")


def _parameter_count(loaded: object) -> int | None:
    """Parameters of whatever load_embedded returned (a model, a pair, or an object with .model)."""
    candidates = [loaded]
    if isinstance(loaded, (tuple, list)):
        candidates = list(loaded)
    elif hasattr(loaded, "model"):
        candidates = [getattr(loaded, "model")]
    for candidate in candidates:
        parameters = getattr(candidate, "parameters", None)
        if callable(parameters):
            try:
                return sum(p.numel() for p in parameters())
            except Exception:
                return None
    return None


def check_model(name: str) -> CheckResult:
    """One embedded model loads with specdec_lib.loading.load_embedded(name)."""
    label = f"model {name}"
    try:
        from specdec_lib.loading import load_embedded

        loaded = load_embedded(name)
    except Exception as exc:
        detail = _error(exc)
        if "specdec_tools train" not in detail:
            detail += " (the models ship in data/models/; `python -m specdec_tools train` rebuilds them)"
        return CheckResult(label, False, detail)
    count = _parameter_count(loaded)
    detail = f"loaded ({count / 1e6:.2f}M parameters)" if count is not None else "loaded"
    return CheckResult(label, True, detail)


def _model_check(name: str, check_one: Callable[[str], CheckResult] = check_model) -> Callable[[], CheckResult]:
    """``check_one(name)`` as a check without arguments, named after the model for the report."""
    def check() -> CheckResult:
        return check_one(name)

    check.__name__ = f"check_model_{name}"
    return check


#: The drafters trained on the frozen embedded target (``data/models/<name>/``), each loaded from its folder.
TARGET_DRAFTERS = {"heads": "load_heads", "eagle": "load_eagle", "eagle3": "load_eagle"}


def check_target_drafter(name: str) -> CheckResult:
    """One drafter trained for the embedded target (the Medusa heads, the EAGLE layers) loads against it: its files
    are there and its recorded fingerprint matches the shipped target."""
    label = f"model {name}"
    try:
        from specdec_lib import drafters
        from specdec_lib.loading import load_embedded

        loaded = load_embedded("target")
        target = loaded[0] if isinstance(loaded, tuple) else loaded
        getattr(drafters, TARGET_DRAFTERS[name])(target, data_dir() / "models" / name)
    except Exception as exc:
        return CheckResult(label, False, f"{_error(exc)} (the drafters ship in data/models/; "
                                         f"`python -m specdec_tools train` rebuilds them)")
    return CheckResult(label, True, "loaded against the embedded target")


def default_checks() -> list[Callable[[], CheckResult]]:
    """Every check, in the order it is printed."""
    return [
        check_python,
        check_torch,
        check_transformers,
        check_course_tools,
        check_device,
        check_dtype,
        *(_model_check(name) for name in EMBEDDED_MODEL_NAMES),
        *(_model_check(name, check_target_drafter) for name in TARGET_DRAFTERS),
    ]


# --------------------------------------------------------------------------- runner


def run_checks(checks: Iterable[Callable[[], CheckResult]], out: TextIO | None = None) -> int:
    """Run each check, print one line per check and a summary; return the exit code
    (0 when all passed, 1 otherwise). A check that raises counts as a FAIL."""
    out = out if out is not None else sys.stdout
    results: list[CheckResult] = []
    for check in checks:
        try:
            result = check()
        except Exception as exc:  # a bug in a check must not hide the others
            name = getattr(check, "__name__", "check").removeprefix("check_").replace("_", " ")
            result = CheckResult(name, False, f"the check itself crashed: {_error(exc)}")
        results.append(result)
        print(result.line(), file=out, flush=True)
    failed = [r.name for r in results if not r.ok]
    if failed:
        print(f"doctor: {len(failed)} of {len(results)} checks FAILED ({', '.join(failed)})", file=out)
        return 1
    print(f"doctor: all {len(results)} checks OK", file=out)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m specdec_lib doctor",
        description="Check Python, torch, transformers, the notebook tools, the device "
        "and the embedded models; exit 0 when all are OK.",
    )
    parser.parse_args(argv)
    return run_checks(default_checks())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
