"""Where tensors live and how runs are made reproducible and timed honestly.

The course runs unchanged on a laptop CPU, an Apple GPU (mps) or an NVIDIA GPU (cuda): notebooks ask
`get_device()` instead of hard-coding a device. GPU kernels run asynchronously, so a timer read right after a
forward would measure only the kernel *launch*; `synchronize()` waits for the device before every timestamp.
"""

import os
import random
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from .errors import ConfigError
from .numerics import get_dtype
from .validation import check_count, is_whole

DEVICE_ENV_VAR = "SPECDEC_DEVICE"


def _available_devices() -> list[str]:
    """Names of the devices usable here, best first, e.g. ``["cuda:0", "cpu"]``."""
    names = [f"cuda:{index}" for index in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    if torch.backends.mps.is_available():
        names.append("mps")
    names.append("cpu")
    return names


def _resolve(request: str, source: str) -> torch.device:
    """Turn a requested device name into an available `torch.device`, or explain why it cannot be used."""
    available = ", ".join(_available_devices())
    try:
        device = torch.device(request)
    except (RuntimeError, ValueError):
        raise ConfigError(
            f"{source} asks for device {request!r}, which is not a valid device name. "
            f"Use one of: {available}."
        ) from None
    if device.type == "cpu":
        return torch.device("cpu")
    if device.type == "cuda" and torch.cuda.is_available():
        index = torch.cuda.current_device() if device.index is None else device.index
        if index < torch.cuda.device_count():
            return torch.device("cuda", index)
    if device.type == "mps" and torch.backends.mps.is_available():
        return torch.device("mps", 0)
    raise ConfigError(
        f"{source} asks for device {request!r}, which is not available on this machine. Use one of: {available}."
    )


def get_device(prefer: torch.device | str | None = None) -> torch.device:
    """The device to run on: cuda > mps > cpu, unless told otherwise.

    Precedence: the ``prefer`` argument, then the ``SPECDEC_DEVICE`` environment variable (e.g. ``"cpu"``,
    ``"cuda"``, ``"cuda:1"``), then the best available device. A requested device that is invalid or not
    available raises `ConfigError` naming it and listing what is available, rather than silently falling back.
    """
    if prefer is not None:
        return _resolve(str(prefer), "get_device(prefer=...)")
    from_env = os.environ.get(DEVICE_ENV_VAR, "").strip()
    if from_env:
        return _resolve(from_env, f"The environment variable {DEVICE_ENV_VAR}")
    return _resolve(_available_devices()[0], "The automatic device choice")


def seed_everything(seed: int) -> None:
    """Seed Python's `random`, NumPy (when installed) and torch (CPU and every GPU) with one integer.

    Used at the top of notebooks so that sampled outputs and random-weight models are the same on every run.
    Generation functions take their own ``seed`` for a private `torch.Generator`; this seeds the global state.
    """
    if not is_whole(seed):
        raise ConfigError(f"seed must be an integer, got {seed!r}. Pass a whole number such as 0 or 1234.")
    random.seed(seed)
    try:
        import numpy
    except ImportError:
        pass
    else:
        numpy.random.seed(seed % 2**32)  # NumPy accepts only 0 <= seed < 2**32
    torch.manual_seed(seed)  # also seeds cuda and mps generators
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


#: CPU threads every notebook runs with (set by `course_setup`). One, because the course's models are tiny: a
#: second thread buys them little and costs a lot when the other core is busy (a classroom laptop, nbval in CI),
#: and every notebook's baseline is then measured under the same setting.
COURSE_THREADS = 1


def course_setup(seed: int = 0, threads: int = COURSE_THREADS) -> torch.device:
    """What the first cell of every notebook does: seed everything (`seed_everything`), use ``threads`` CPU threads
    for torch, check the dtype the models will load in (`specdec_lib.core.numerics.get_dtype`: ``SPECDEC_DTYPE``,
    float32 by default; a bad name fails here, in the first cell) and return the device to compute on
    (`get_device`: cuda > mps > cpu, or ``SPECDEC_DEVICE``)."""
    check_count("threads", threads, minimum=1)
    get_dtype()
    seed_everything(seed)
    torch.set_num_threads(threads)
    return get_device()


@contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """Run the block with ``threads`` torch CPU threads, then restore the caller's count (training commands
    called from tests or notebooks must not change the session's setting)."""
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def synchronize(device: torch.device | str) -> None:
    """Wait until all queued work on ``device`` has finished, so the next timestamp is honest; no-op on cpu."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def describe_device(device: torch.device | str) -> str:
    """A short human-readable description, e.g. ``"cpu (2 threads)"`` or ``"cuda:0 (NVIDIA H200)"``."""
    device = torch.device(device)
    if device.type == "cuda":
        index = torch.cuda.current_device() if device.index is None else device.index
        return f"cuda:{index} ({torch.cuda.get_device_name(index)})"
    if device.type == "mps":
        return "mps (Apple GPU)"
    threads = torch.get_num_threads()
    return f"{device.type} ({threads} thread{'' if threads == 1 else 's'})"
