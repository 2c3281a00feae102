"""The data the heads and the EAGLE layer train on: windows of text and the frozen target's features on them.

    windows    random windows of the training split (tokenizer A, the family's train/validation split:
               `collect_stdlib_sources` / `split_files` / the family's tokenisation, reused, not copied), or
               text the target wrote itself (``train_text="target"``): each window a random corpus prompt of
               ``target_text_prompt`` tokens and the target's greedy continuation to the window's end
               (`specdec_tools.training.target_text`; self-distillation: the contexts met when decoding)
    features   the target's hidden states at the layers the drafters read, [W, T, H * D] float32, computed once
               under ``torch.inference_mode`` (no graph, no gradient through the target's layers)

`feature_data` computes both once, as a `FeatureData` that every drafter trained on the same data shares (the heads
and the EAGLE layer of one run; the EAGLE ablation's four variants), each reading the layers it needs
(`FeatureData.columns`).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import PreTrainedModel

from specdec_lib.core.errors import ConfigError
from specdec_lib.core.forward import LAST_HIDDEN, select_hidden
from specdec_lib.drafters.eagle import check_feature_layers
from specdec_lib.drafters.frozen_target import target_fingerprint
from specdec_lib.loading import load_model_folder
from .corpus import collect_stdlib_sources, corpus_manifest, split_files
from .head_spec import HeadsSpec
from .model_training import sample_windows
from .target_text import target_text_stream
from .tokenizer_training import tokenize_texts

TARGET_TEXT_BATCH = 128  # continuations generated together (the family's batch for its target text)


def target_features(target: PreTrainedModel, windows: torch.Tensor, batch: int = 8,
                    layers: tuple[int, ...] = LAST_HIDDEN) -> torch.Tensor:
    """The target's hidden states ``[W, T, H * D]`` (float32) at the first T tokens of ``windows: LongTensor[W, T +
    1]``, those of the H ``layers`` side by side (`forward_with_cache`'s ``hidden`` indices; default: the post-norm
    last layer, the LM head's input), ``batch`` windows a forward.

    Computed under ``inference_mode`` (no graph through the target), returned as an ordinary tensor that the
    small modules' training graphs may save."""
    decoder, inputs = target.get_decoder(), windows[:, :-1]
    blocks = []
    with torch.inference_mode():
        for i in range(0, inputs.shape[0], batch):
            output = decoder(input_ids=inputs[i : i + batch], use_cache=False, output_hidden_states=True)
            blocks.append(select_hidden(output.hidden_states, layers).float())
    return torch.cat(blocks).clone()


def spread_windows(tokens: torch.Tensor, count: int, length: int) -> torch.Tensor:
    """``count`` windows of ``length`` tokens spread evenly over ``tokens`` (1-D): LongTensor[count, length]."""
    starts = torch.linspace(0, tokens.numel() - length, count).long().tolist()
    return torch.stack([tokens[s : s + length] for s in starts]).long()


def training_windows(target: PreTrainedModel, train_tokens: torch.Tensor, spec: HeadsSpec) -> torch.Tensor:
    """The ``spec.train_windows`` training windows, LongTensor[W, T + 1] (T = ``spec.window``): random windows of
    ``train_tokens`` (the tokenised training split), or with ``train_text == "target"`` one text the target wrote
    per window: a random ``target_text_prompt``-token corpus window, the target's greedy continuation to T tokens,
    and its EOS (only ever a label)."""
    if spec.train_text == "corpus":
        return sample_windows(train_tokens, spec.train_windows, spec.window + 1, torch.Generator().manual_seed(spec.seed))
    stream = target_text_stream(target, train_tokens, sequences=spec.train_windows, prompt_tokens=spec.target_text_prompt,
                                new_tokens=spec.window - spec.target_text_prompt, batch_size=TARGET_TEXT_BATCH,
                                seed=spec.seed)
    return stream.view(spec.train_windows, spec.window + 1)


def corpus_tokens(tokenizer, spec: HeadsSpec) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """(train tokens, validation tokens, manifest): the family's corpus and split, tokenised like the family's."""
    train_files, val_files = split_files(collect_stdlib_sources(max_files=spec.max_files))
    manifest = corpus_manifest(train_files, val_files)
    return (tokenize_texts(tokenizer, [f.text for f in train_files]),
            tokenize_texts(tokenizer, [f.text for f in val_files]), manifest)


#: The spec fields that decide the training data (everything else only decides what is trained on it).
DATA_FIELDS = ("train_windows", "window", "val_windows", "train_text", "target_text_prompt", "max_files", "seed")


@dataclass(frozen=True)
class FeatureData:
    """The frozen target and its features on the training and validation windows, computed once by
    `feature_data` and shared by every drafter trained on them (the heads and the EAGLE layer; the ablation's
    four variants).

    ``features: [W, T, H * D]`` / ``val_features: [V, T, H * D]`` hold the target's hidden states at ``layers``
    side by side (the last D columns: the post-norm last layer); ``windows: [W, T + 1]`` / ``val: [V, T + 1]`` the
    tokens; ``source``: the spec's `DATA_FIELDS` they were made with; ``report``: what every training report says
    about the target, corpus and data."""

    folder: Path  # the target's model folder
    target: PreTrainedModel
    tokenizer: object
    windows: torch.Tensor
    val: torch.Tensor
    features: torch.Tensor
    val_features: torch.Tensor
    layers: tuple[int, ...]
    source: dict
    report: dict

    def columns(self, features: torch.Tensor, layers: tuple[int, ...]) -> torch.Tensor:
        """The blocks of ``features`` (``self.features`` or ``self.val_features``) that hold ``layers``, in order:
        ``[..., len(layers) * D]``."""
        width = self.target.config.hidden_size
        missing = [layer for layer in layers if layer not in self.layers]
        if missing:
            raise ConfigError(f"These features hold the target's layers {list(self.layers)}, not {missing}: compute "
                              "them with every layer the drafters read (feature_data(spec, ..., layers=...)).")
        if tuple(layers) == self.layers:
            return features
        blocks = [features[..., i * width : (i + 1) * width] for i in map(self.layers.index, layers)]
        return blocks[0] if len(blocks) == 1 else torch.cat(blocks, dim=-1)


def feature_data(spec: HeadsSpec, target_folder: Path, layers: tuple[int, ...] | None = None) -> FeatureData:
    """Load the model in ``target_folder``, make ``spec``'s training windows (corpus windows, or text the target
    writes: `training_windows`) and validation windows, and compute the target's features at ``layers`` (default:
    ``spec.eagle_feature_layers``; pass the union of several specs' layers to share one pass). Runs on the
    caller's threads."""
    started = time.perf_counter()
    target_folder = Path(target_folder)
    target, tokenizer = load_model_folder(target_folder, device="cpu")
    target.requires_grad_(False)
    layers = check_feature_layers(spec.eagle_feature_layers if layers is None else layers, target)  # end with -1
    train_tokens, val_tokens, manifest = corpus_tokens(tokenizer, spec)
    shipped_manifest = target_folder.parent / "corpus_manifest.json"
    same_corpus = shipped_manifest.is_file() and json.loads(shipped_manifest.read_text())["sha256"] == manifest["sha256"]
    measurements = target_folder.parent / "measurements.json"  # the family's: the draft model's alpha, for scale
    reference = json.loads(measurements.read_text())["agreement"]["code"]["alpha"] if measurements.is_file() else None

    text_started = time.perf_counter()
    windows = training_windows(target, train_tokens, spec)  # [W, T + 1]
    text_seconds = round(time.perf_counter() - text_started, 1)
    val = spread_windows(val_tokens, spec.val_windows, spec.window + 1)
    features = target_features(target, windows, layers=layers)  # [W, T, H * D]
    val_features = target_features(target, val, layers=layers)
    feature_seconds = round(time.perf_counter() - started, 1)
    print(f"features: {windows.numel():,} training + {val.numel():,} validation tokens in {feature_seconds:.0f}s",
          flush=True)
    report = {
        "target": target_fingerprint(target, name=target_folder.name),
        "corpus": {"sha256": manifest["sha256"], "train_files": manifest["train_files"],
                   "validation_files": manifest["validation_files"], "train_tokens": train_tokens.numel(),
                   "validation_tokens": val_tokens.numel(), "same_corpus_as_target": same_corpus},
        "data": {"train_windows": spec.train_windows, "window": spec.window, "feature_tokens": windows.numel(),
                 "validation_windows": spec.val_windows, "feature_seconds": feature_seconds,
                 "train_text": spec.train_text, "target_text_seconds": text_seconds},
        "reference_draft_alpha": reference,
    }
    return FeatureData(target_folder, target, tokenizer, windows, val, features, val_features, layers,
                       {field: getattr(spec, field) for field in DATA_FIELDS}, report)
