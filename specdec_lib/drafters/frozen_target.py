"""Drafters trained on a *frozen* target: what they store about it, and the check that refuses any other model.

Medusa heads and EAGLE read the target's last hidden states and reuse its own embedding table and LM head (shared,
never copied: the files stay small). Their weights therefore mean something only on the exact model they were
trained on: on another model the hidden states live in another space and the drafts are noise. Nothing would
crash (the shapes may well match, as for the embedded draft model, 192 wide with the same 4096 ids); drafting
would just silently stop working. So every such folder records the target's fingerprint, and loading refuses a
target whose fingerprint differs, saying which model the weights were trained for and how to retrain them.

A folder holds two files (the model cards add a ``README.md`` and a ``training_report.json``):

    config.json          {"kind": ..., "architecture": {...}, "target": fingerprint}
    model.safetensors    the drafter's own weights only, float16 (the target's are not repeated)

The fingerprint is the sha256 of the target's embedding table and LM head *as stored* (float16, the embedded
family's format), plus its depth, width, vocabulary and parameter count for a readable message. A target loaded
in float32 or float16 from the shipped files reproduces it exactly. A bfloat16 copy rounds the weights (8 bits of
mantissa against float16's 11), so it is matched by a second hash, ``sha256_bfloat16``, of the same tables rounded
to bfloat16: rounding float16 values to bfloat16 gives the same bytes whether they pass through float32 or not.
"""

import hashlib
import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import PreTrainedModel

from ..core.errors import ConfigError, ModelNotFoundError

RETRAIN = "python -m specdec_tools train heads"
CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"


def target_fingerprint(target: PreTrainedModel, name: str = "target") -> dict:
    """``{"name", "sha256", "layers", "hidden_size", "vocab_size", "parameters"}`` of ``target``.

    ``sha256`` hashes the embedding table and the LM head weights in float16 (a tied head hashes the same
    bytes twice: the check does not depend on tying), ``sha256_bfloat16`` the same rounded to bfloat16 (what a
    bfloat16 copy of the target holds); ``name`` is only for messages (e.g. the folder's name)."""
    digests = {torch.float16: hashlib.sha256(), torch.bfloat16: hashlib.sha256()}
    for part, module in (("embed_tokens", target.get_input_embeddings()), ("lm_head", target.get_output_embeddings())):
        for dtype, digest in digests.items():
            digest.update(part.encode())
            digest.update(module.weight.detach().to("cpu", dtype).contiguous().view(torch.uint8).numpy().tobytes())
    config = target.config
    return {
        "name": name,
        "sha256": digests[torch.float16].hexdigest(),
        "sha256_bfloat16": digests[torch.bfloat16].hexdigest(),
        "layers": int(config.num_hidden_layers),
        "hidden_size": int(config.hidden_size),
        "vocab_size": int(target.get_output_embeddings().out_features),
        "parameters": sum(p.numel() for p in target.parameters()),
    }


def _describe(fingerprint: dict) -> str:
    return (f"{fingerprint['layers']} layers x {fingerprint['hidden_size']}, vocabulary {fingerprint['vocab_size']}, "
            f"{fingerprint['parameters'] / 1e6:.2f} M parameters, fingerprint {fingerprint['sha256'][:12]}")


def check_trained_for(trained_for: dict, target: PreTrainedModel, what: str) -> None:
    """Raise `ConfigError` unless ``target`` is the model whose fingerprint ``trained_for`` records."""
    given = target_fingerprint(target)
    key = "sha256_bfloat16" if target.get_input_embeddings().weight.dtype == torch.bfloat16 else "sha256"
    if given[key] == trained_for.get(key):
        return
    raise ConfigError(
        f"These {what} were trained for the target '{trained_for['name']}' ({_describe(trained_for)}), but the "
        f"model given is another one ({_describe(given)}). They read that target's hidden states and reuse its "
        f"embedding table and LM head, so on any other model their drafts are noise. Pass the model they were "
        f"trained for (load_embedded('target'), in float32, bfloat16 or float16), or train them for this one: {RETRAIN} "
        f"(--target FOLDER to train for another model folder)."
    )


def save_drafter(folder: Path, kind: str, architecture: dict, trained_for: dict, state: dict[str, torch.Tensor]) -> None:
    """Write ``config.json`` and the float16 ``model.safetensors`` of a drafter's own weights ``state``."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {"kind": kind, "architecture": architecture, "target": trained_for}
    (folder / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    weights = {name: tensor.detach().to("cpu", torch.float16).contiguous() for name, tensor in state.items()}
    save_file(weights, str(folder / WEIGHTS_FILE), metadata={"kind": kind})


def load_drafter(folder: Path, kind: str, target: PreTrainedModel, what: str) -> tuple[dict, dict[str, torch.Tensor]]:
    """``(architecture, float32 state dict)`` of the ``kind`` drafter saved in ``folder``, after checking that it
    was trained for ``target`` (`check_trained_for`); `ModelNotFoundError` when the files are missing."""
    folder = Path(folder)
    missing = [name for name in (CONFIG_FILE, WEIGHTS_FILE) if not (folder / name).is_file()]
    if missing:
        raise ModelNotFoundError(
            f"{folder} holds no {what}: it lacks {', '.join(missing)}. Fetch the repository's data/models/ with "
            f"Git LFS, or train them: {RETRAIN}."
        )
    config = json.loads((folder / CONFIG_FILE).read_text())
    if config.get("kind") != kind:
        raise ConfigError(f"{folder} holds a '{config.get('kind')}' drafter, not {what} ('{kind}').")
    check_trained_for(config["target"], target, what)
    state = {name: tensor.float() for name, tensor in load_file(str(folder / WEIGHTS_FILE)).items()}
    return config["architecture"], state
