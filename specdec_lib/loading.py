"""Loading the models the course runs on: the embedded family (offline) and opt-in hub presets (internet).

The embedded models live in ``data/models/<name>/`` at the repository root, in standard transformers format
(config.json, fp16 model.safetensors, tokenizer.json + tokenizer_config.json, a README.md model card), so
``from_pretrained(path)`` loads them like any hub model. They are reproduced by ``python -m specdec_tools train``.

A *pair* is what speculative decoding needs: a large target and a small draft. `PRESETS` names every pair;
hub presets download real models and are meant for learners with internet (and ideally a GPU).
"""

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import logging as transformers_logging

from .core.devices import get_device
from .core.errors import ConfigError, HubUnavailableError, ModelNotFoundError
from .core.numerics import get_dtype
from .core.paths import data_dir
from .core.pair import ModelPair


EMBEDDED_MODELS: dict[str, str] = {
    "target": "the target: a deep Llama on tokenizer A, trained on Python source code",
    "draft": "a much smaller Llama draft on the target's tokenizer (A)",
    "draft_b": "a small Llama draft on a different tokenizer (B), for cross-tokenizer drafting",
}

REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


@dataclass(frozen=True)
class Preset:
    """A named target/draft pair: embedded model names (source "embedded") or hub repo ids (source "hub")."""

    description: str
    source: Literal["embedded", "hub"]
    target: str
    draft: str


PRESETS: dict[str, Preset] = {
    "embedded": Preset(
        "embedded target + draft, same tokenizer (offline, CPU-friendly)", "embedded", "target", "draft"
    ),
    "embedded-cross": Preset(
        "embedded target + draft_b, different tokenizers (offline, cross-tokenizer drafting)",
        "embedded",
        "target",
        "draft_b",
    ),
    "hub-qwen2.5": Preset(
        "Qwen2.5-1.5B-Instruct target + Qwen2.5-0.5B-Instruct draft, same tokenizer (needs internet, GPU advised)",
        "hub",
        "Qwen/Qwen2.5-1.5B-Instruct",
        "Qwen/Qwen2.5-0.5B-Instruct",
    ),
    "hub-cross": Preset(
        "Qwen2.5-1.5B-Instruct target + SmolLM2-135M-Instruct draft, different tokenizers (needs internet)",
        "hub",
        "Qwen/Qwen2.5-1.5B-Instruct",
        "HuggingFaceTB/SmolLM2-135M-Instruct",
    ),
    "hub-smollm2": Preset(
        "SmolLM2-1.7B-Instruct target + SmolLM2-135M-Instruct draft, same tokenizer (needs internet, GPU advised)",
        "hub",
        "HuggingFaceTB/SmolLM2-1.7B-Instruct",
        "HuggingFaceTB/SmolLM2-135M-Instruct",
    ),
    "hub-qwen2.5-7b": Preset(
        "Qwen2.5-7B-Instruct target + Qwen2.5-0.5B-Instruct draft, same tokenizer (needs internet and a GPU)",
        "hub",
        "Qwen/Qwen2.5-7B-Instruct",
        "Qwen/Qwen2.5-0.5B-Instruct",
    ),
    "hub-llama3": Preset(
        "Llama-3.1-8B-Instruct target + Llama-3.2-1B-Instruct draft, same tokenizer (needs internet and a GPU; "
        "gated: accept Meta's licence on the Hub and log in with a Hugging Face token)",
        "hub",
        "meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Llama-3.2-1B-Instruct",
    ),
}


def list_presets() -> dict[str, str]:
    """Preset name -> one-line description, for every pair `load_pair` knows."""
    return {name: preset.description for name, preset in PRESETS.items()}


def _check_model_folder(folder: Path) -> None:
    """Raise `ModelNotFoundError` unless ``folder`` holds a complete model whose weights were downloaded."""
    fix = (
        "Fetch it with `git lfs pull` (or re-clone the repository with Git LFS installed), "
        "or retrain it with `python -m specdec_tools train`."
    )
    if not folder.is_dir():
        raise ModelNotFoundError(f"Model folder {folder} does not exist. {fix}")
    missing = [file for file in REQUIRED_FILES if not (folder / file).is_file()]
    if missing:
        raise ModelNotFoundError(f"Model folder {folder} is incomplete: it lacks {', '.join(missing)}. {fix}")
    weights = folder / "model.safetensors"
    with weights.open("rb") as handle:
        if handle.read(64).startswith(b"version https://git-lfs"):
            raise ModelNotFoundError(f"{weights} is a Git LFS pointer, not the weights. {fix}")


def _load_model_and_tokenizer(
    source: str | Path, device: torch.device, dtype: torch.dtype
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """``from_pretrained`` a causal LM (eval mode, on ``device``, in ``dtype``) and its tokenizer."""
    model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype).to(device).eval()
    tokenizer = AutoTokenizer.from_pretrained(source)
    return model, tokenizer


@contextmanager
def _without_progress_bars() -> Iterator[None]:
    """Hide transformers' "Loading weights" bar while loading a small local model (it is instant, and a bar
    on stderr would clutter every notebook); restores the previous setting afterwards."""
    was_enabled = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            transformers_logging.enable_progress_bar()


def load_model_folder(
    folder: str | Path, *, device: torch.device | str | None = None, dtype: torch.dtype = torch.float32
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a model folder in the embedded format (see the module docstring) and its tokenizer.

    The model is in eval mode, on ``device`` (default `get_device()`), in ``dtype`` (float32 by default: the
    fp16 weights on disk are upcast, which keeps CPU arithmetic exact and fast).
    """
    folder = Path(folder)
    _check_model_folder(folder)
    with _without_progress_bars():
        return _load_model_and_tokenizer(folder, get_device(device), dtype)


def load_embedded(
    name: str, *, device: torch.device | str | None = None, dtype: torch.dtype | str | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load embedded model ``name`` ("target", "draft" or "draft_b") and its tokenizer from ``data/models/``.

    Same conventions as `load_model_folder`: eval mode, on ``device`` (default `get_device()`), in ``dtype``
    (default `get_dtype()`: ``SPECDEC_DTYPE``, else float32).
    """
    if name not in EMBEDDED_MODELS:
        raise ConfigError(f"Unknown embedded model {name!r}. Known names: {', '.join(EMBEDDED_MODELS)}.")
    return load_model_folder(data_dir() / "models" / name, device=device, dtype=get_dtype(dtype))


def _load_from_hub(
    preset_name: str, repo_id: str, device: torch.device, dtype: torch.dtype
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load ``repo_id`` from the Hugging Face Hub (or its local cache), explaining a failed download.

    Progress bars stay on here: a first download of a hub model takes minutes and the bar is useful."""
    try:
        return _load_model_and_tokenizer(repo_id, device, dtype)
    except OSError as error:
        raise HubUnavailableError(
            f"Preset {preset_name!r} needs {repo_id!r} from the Hugging Face Hub, which could not be loaded "
            f"({error.__class__.__name__}: {str(error).splitlines()[0]}). It needs internet access (and "
            f"HF_HUB_OFFLINE unset) the first time. Use the offline preset 'embedded' instead."
        ) from error


def load_preset_model(
    preset: str, name: str, device: torch.device, dtype: torch.dtype
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """One model of ``preset`` (``name``: an embedded model name or a hub repo id, as in `PRESETS`)."""
    if PRESETS[preset].source == "embedded":
        return load_embedded(name, device=device, dtype=dtype)
    return _load_from_hub(preset, name, device, dtype)


def load_pair(
    preset: str = "embedded", *, device: torch.device | str | None = None, dtype: torch.dtype | str | None = None
) -> ModelPair:
    """Load the target/draft pair named ``preset`` (see `list_presets`) on ``device`` (default `get_device()`).

    ``dtype``: None means `get_dtype()` (``SPECDEC_DTYPE``, else float32, in which greedy speculative output is
    token-identical to the target's). On a GPU, ``torch.bfloat16`` halves the memory of hub models, and the
    verification forward then rounds differently from one-token decoding: at a near-tie of the target's top two
    logits the two may choose different tokens (`specdec_lib.explain_fork` tells such a fork from a bug).
    """
    if preset not in PRESETS:
        raise ConfigError(f"Unknown preset {preset!r}. Available presets: {', '.join(PRESETS)}.")
    spec = PRESETS[preset]
    resolved = get_device(device)
    dtype = get_dtype(dtype)
    target, target_tokenizer = load_preset_model(preset, spec.target, resolved, dtype)
    draft, draft_tokenizer = load_preset_model(preset, spec.draft, resolved, dtype)
    return ModelPair(target, draft, target_tokenizer, draft_tokenizer, preset, resolved)
