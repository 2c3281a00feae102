"""Shared fixtures: the embedded family loaded once per session, tiny random-weight models built in milliseconds,
never downloaded (builders and other shared helpers live in `helpers`).

Session fixtures hand every test the same model objects: treat them as read-only (a test that changes weights or
dtypes works on a ``copy.deepcopy``).

The exhaustive equivalence grids are marked ``slow`` and left out of the README's test command
(``-m "not slow"``); ``python -m pytest -m slow tests`` runs them (so does ``scripts/gpu_check.sh``).
"""

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from transformers import LlamaForCausalLM, PreTrainedModel

from helpers import build_tiny_model, save_tiny_model, sharp_pair


torch.set_num_threads(1)  # session fixtures (loading, the quick family) too, before the first test's `one_thread`


@pytest.fixture(autouse=True)
def one_thread():
    """Every test starts on one torch thread: tiny models run fastest on one (and far faster than two contended
    ones while the other xdist worker is busy), and a command a test runs in-process (a bench or training CLI that
    sets its own thread count) does not slow down the tests after it on the same worker."""
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(1)


# ---------------------------------------------------------------------------------------- the embedded family

@pytest.fixture(scope="session")
def quick_family(tmp_path_factory) -> tuple[Path, dict]:
    """A family trained by the training command's QUICK spec (seconds, not hours) and its training report, once per
    worker: ``(folder, report)``. Read-only: a test that changes the family works on a ``shutil.copytree``."""
    from specdec_tools.training.cli import QUICK, train_family

    out = tmp_path_factory.mktemp("models")
    report = train_family(QUICK, out, tmp_path_factory.mktemp("work"))
    return out, report



@pytest.fixture(scope="session")
def embedded_pair():
    """The shipped target and draft (same tokenizer), on the CPU, as `load_pair("embedded")` gives them."""
    from specdec_lib import load_pair

    return load_pair("embedded", device="cpu")


@pytest.fixture(scope="session")
def embedded_cross_pair(embedded_pair):
    """The shipped target with the draft on tokenizer B (`load_pair("embedded-cross")`)."""
    from specdec_lib import load_pair

    return load_pair("embedded-cross", device="cpu")


@pytest.fixture(scope="session")
def encoded_prompts(embedded_pair) -> dict[str, list[tuple[str, torch.Tensor]]]:
    """Every prompt of every set, encoded for the target: ``{set: [(prompt id, LongTensor[1, T]), ...]}``."""
    from specdec_lib import load_prompts
    from specdec_lib.prompts import TASKS

    encode = embedded_pair.target_tokenizer
    return {task: [(p.id, encode(p.prompt, return_tensors="pt").input_ids) for p in load_prompts(task)]
            for task in TASKS}


# ---------------------------------------------------------------------------------------------------- tiny models


@pytest.fixture(scope="session")
def tiny_llama() -> LlamaForCausalLM:
    """A 2-layer random Llama (vocab 64, hidden 32, context 128) in eval mode; treat as read-only."""
    return build_tiny_model("llama", seed=0, num_layers=2)


@pytest.fixture(scope="session")
def tiny_draft_llama() -> LlamaForCausalLM:
    """A 1-layer random Llama on the same vocabulary as `tiny_llama`, to stand in for a draft model."""
    return build_tiny_model("llama", seed=1, num_layers=1)


@pytest.fixture(scope="session")
def sharp_tiny_pair() -> tuple[PreTrainedModel, PreTrainedModel]:
    """`helpers.sharp_pair()`: a sharpened 2-layer tiny target and its first layer as the draft; read-only."""
    return sharp_pair()


@pytest.fixture
def make_tiny_model() -> Callable[..., PreTrainedModel]:
    """The `build_tiny_model` factory, for tests that need a model with other settings."""
    return build_tiny_model


@pytest.fixture
def make_model_folder() -> Callable[..., Path]:
    """The `save_tiny_model` factory: writes a loadable model folder (config, fp16 weights, tokenizer)."""
    return save_tiny_model


@pytest.fixture
def prompt_ids() -> torch.Tensor:
    """A fixed prompt ``LongTensor[1, 7]`` of ids valid for the tiny models."""
    return torch.tensor([[0, 5, 17, 42, 3, 8, 61]])
