"""models.py: finding data/, loading embedded models and pairs, hub presets (never downloading)."""

import dataclasses
import re
import shutil
import warnings
from pathlib import Path

import huggingface_hub.constants
import pytest
import torch
from transformers import AutoModelForCausalLM

from specdec_lib import (DraftModelDrafter, autoregressive_generate, explain_fork, replay_verification,
                         speculative_generate)
from specdec_lib import loading as models
from specdec_lib.core.errors import ConfigError, HubUnavailableError, ModelNotFoundError
from specdec_lib.core.pair import ModelPair
from specdec_lib.loading import data_dir, list_presets, load_embedded, load_model_folder, load_pair

from helpers import first_layer_draft

GPUS_DOC = Path(__file__).resolve().parent.parent / "docs" / "gpus.md"


@pytest.fixture
def embedded_dir(tmp_path, monkeypatch, make_model_folder):
    """A data/ folder with tiny stand-ins for target, draft (tokenizer A) and draft_b (tokenizer B)."""
    make_model_folder(tmp_path / "models" / "target", "llama", "a", seed=0)
    make_model_folder(tmp_path / "models" / "draft", "llama", "a", seed=1)
    make_model_folder(tmp_path / "models" / "draft_b", "llama", "b", seed=2)
    monkeypatch.setenv("SPECDEC_DATA_DIR", str(tmp_path))
    return tmp_path


def test_data_dir_from_env(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_DATA_DIR", str(tmp_path))
    assert data_dir() == tmp_path


def test_data_dir_env_pointing_nowhere(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_DATA_DIR", str(tmp_path / "missing"))
    with pytest.raises(ModelNotFoundError, match=r"SPECDEC_DATA_DIR points to .*missing, which is not a folder"):
        data_dir()


def test_data_dir_defaults_to_checkout(monkeypatch):
    monkeypatch.delenv("SPECDEC_DATA_DIR", raising=False)
    assert data_dir() == models.Path(models.__file__).resolve().parent.parent / "data"


def test_load_embedded(embedded_dir):
    model, tokenizer = load_embedded("target", device="cpu")
    assert not model.training
    assert model.dtype == torch.float32  # fp16 on disk, float32 in memory
    assert model.device == torch.device("cpu")
    assert tokenizer.decode(tokenizer("def add").input_ids) == "def add"


def test_load_embedded_dtype(embedded_dir):
    model, _ = load_embedded("draft", device="cpu", dtype=torch.float16)
    assert model.dtype == torch.float16


def test_loading_is_silent(embedded_dir, capfd):
    """No warnings or progress bars from the library in normal use (they would clutter every notebook)."""
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_pair("embedded", device="cpu")
    assert [str(w.message) for w in caught] == []
    assert capfd.readouterr().err == ""


def test_unknown_embedded_name():
    with pytest.raises(ConfigError, match=r"Unknown embedded model 'big'\. Known names: target, draft, draft_b"):
        load_embedded("big")


def test_missing_model_folder_is_explained(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_DATA_DIR", str(tmp_path))
    with pytest.raises(ModelNotFoundError, match=r"models.target does not exist.*git lfs pull.*python -m specdec_tools train"):
        load_embedded("target")


def test_incomplete_model_folder_is_explained(embedded_dir):
    (embedded_dir / "models" / "draft" / "tokenizer.json").unlink()
    with pytest.raises(ModelNotFoundError, match=r"draft is incomplete: it lacks tokenizer.json\. Fetch it"):
        load_embedded("draft")


def test_load_model_folder_loads_any_saved_folder(tmp_path, make_model_folder):
    model, tokenizer = load_model_folder(make_model_folder(tmp_path / "anywhere"), device="cpu")
    assert model.dtype == torch.float32 and not model.training
    assert len(tokenizer) == model.config.vocab_size


def test_lfs_pointer_is_explained(embedded_dir):
    (embedded_dir / "models" / "draft" / "model.safetensors").write_text(
        "version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 123\n"
    )
    with pytest.raises(ModelNotFoundError, match=r"model.safetensors is a Git LFS pointer.*git lfs pull"):
        load_embedded("draft")


def test_load_pair_same_tokenizer(embedded_dir):
    pair = load_pair("embedded", device="cpu")
    assert isinstance(pair, ModelPair)
    assert pair.preset == "embedded" and pair.device == torch.device("cpu")
    assert pair.target.config.num_hidden_layers == 2
    assert pair.same_tokenizer


def test_load_pair_cross_tokenizer_compares_token_strings(embedded_dir):
    pair = load_pair("embedded-cross", device="cpu")
    assert len(pair.target_tokenizer) == len(pair.draft_tokenizer)  # same size ...
    assert not pair.same_tokenizer  # ... different tokens


def test_list_presets_and_unknown_preset():
    presets = list_presets()
    assert {"embedded", "embedded-cross", "hub-qwen2.5", "hub-cross"} <= set(presets)
    assert all(isinstance(text, str) and text and "\n" not in text for text in presets.values())  # one line each
    with pytest.raises(ConfigError, match=r"Unknown preset 'tiny'\. Available presets: embedded, embedded-cross, hub-"):
        load_pair("tiny")


@dataclasses.dataclass(frozen=True)
class StandIn:
    """What a hub preset's real models are, so that a tiny random-weight pair can stand in for them: the target's
    and the draft's architecture (``config.model_type``), whether they share a tokenizer, and how many embedding
    rows each has beyond its tokenizer's ids. The Qwen2.5 models pad their tables (the 7B further than the 0.5B),
    and a Qwen2 tokenizer loads with one token more than it was saved with (``<|endoftext|>``), which the padding
    covers."""

    target: str
    draft: str
    same_tokenizer: bool = True
    target_padding: int = 0
    draft_padding: int = 0


HUB_STAND_INS = {
    "hub-qwen2.5": StandIn("qwen2", "qwen2", target_padding=8, draft_padding=8),
    "hub-cross": StandIn("qwen2", "llama", same_tokenizer=False, target_padding=8),  # SmolLM2 is a Llama
    "hub-smollm2": StandIn("llama", "llama"),
    "hub-qwen2.5-7b": StandIn("qwen2", "qwen2", target_padding=16, draft_padding=8),
    "hub-llama3": StandIn("llama", "llama"),
}
SAME_TOKENIZER_HUB = [name for name, stand_in in HUB_STAND_INS.items() if stand_in.same_tokenizer]


def pad_vocabulary(folder: Path, extra: int) -> None:
    """Give the model in ``folder`` ``extra`` more embedding and LM-head rows, zeroed like untrained padding: their
    logit is 0, below the top logit of the real tokens, so the target never chooses a padding id."""
    model = AutoModelForCausalLM.from_pretrained(folder)
    rows = model.config.vocab_size
    model.resize_token_embeddings(rows + extra, mean_resizing=False)
    with torch.no_grad():
        model.get_input_embeddings().weight[rows:] = 0
        model.get_output_embeddings().weight[rows:] = 0
    model.half().save_pretrained(folder)


def save_first_layer_draft(target: Path, folder: Path) -> Path:
    """Save the first layer of the model in ``target`` (and its tokenizer files) as a draft model in ``folder``: it
    agrees with the target often, so its rounds accept drafts as well as reject them."""
    draft = first_layer_draft(AutoModelForCausalLM.from_pretrained(target))
    if getattr(draft.config, "layer_types", None):  # Qwen2 configs list one attention type per layer
        draft.config.layer_types = draft.config.layer_types[:1]
    draft.half().save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(target / name, folder / name)
    return folder


def use_stand_ins(preset: str, folder: Path, monkeypatch, make_model_folder) -> StandIn:
    """Point ``preset``'s repo ids at local tiny random-weight models of the real models' architectures: a 2-layer
    target, and as the draft its first layer (same tokenizer) or a model of its own on tokenizer B (cross)."""
    stand_in = HUB_STAND_INS[preset]
    target = make_model_folder(folder / "target", stand_in.target, "a", seed=0)
    if stand_in.same_tokenizer:
        assert stand_in.draft == stand_in.target  # true of every same-tokenizer hub pair
        draft = save_first_layer_draft(target, folder / "draft")
    else:
        draft = make_model_folder(folder / "draft", stand_in.draft, "b", seed=1)
    for model_folder, padding in ((target, stand_in.target_padding), (draft, stand_in.draft_padding)):
        if padding:
            pad_vocabulary(model_folder, padding)
    local = dataclasses.replace(models.PRESETS[preset], target=str(target), draft=str(draft))
    monkeypatch.setitem(models.PRESETS, preset, local)
    return stand_in


def test_every_hub_preset_has_a_stand_in():
    assert sorted(HUB_STAND_INS) == sorted(name for name, preset in models.PRESETS.items() if preset.source == "hub")


@pytest.mark.parametrize("preset", list(HUB_STAND_INS))
def test_hub_presets_load_through_from_pretrained(tmp_path, monkeypatch, make_model_folder, preset):
    """The hub code path, with the repo ids pointed at local tiny models of the same architectures."""
    monkeypatch.delenv("SPECDEC_DTYPE", raising=False)
    stand_in = use_stand_ins(preset, tmp_path, monkeypatch, make_model_folder)
    pair = load_pair(preset, device="cpu")
    assert pair.target.config.model_type == stand_in.target
    assert pair.draft.config.model_type == stand_in.draft
    assert pair.target.dtype == pair.draft.dtype == torch.float32 and not pair.draft.training
    assert pair.same_tokenizer is stand_in.same_tokenizer  # compared on token strings, not on embedding rows
    for model, tokenizer in ((pair.target, pair.target_tokenizer), (pair.draft, pair.draft_tokenizer)):
        assert model.get_input_embeddings().num_embeddings >= len(tokenizer)  # every id has a row, as in the hub
    if stand_in.same_tokenizer:
        rows = pair.target.get_input_embeddings().num_embeddings - pair.draft.get_input_embeddings().num_embeddings
        assert rows == stand_in.target_padding - stand_in.draft_padding


@pytest.mark.parametrize("preset", SAME_TOKENIZER_HUB)
def test_hub_presets_in_bfloat16_fork_only_at_near_ties(tmp_path, monkeypatch, make_model_folder, preset):
    """What a learner with a GPU runs: ``load_pair(preset, dtype=torch.bfloat16)``, then greedy speculative decoding,
    judged against the target alone by `explain_fork` (identical, or a fork at a near-tie: never a disagreement)."""
    use_stand_ins(preset, tmp_path, monkeypatch, make_model_folder)
    pair = load_pair(preset, device="cpu", dtype=torch.bfloat16)
    assert pair.target.dtype == pair.draft.dtype == torch.bfloat16
    drafter = DraftModelDrafter.for_pair(pair)
    for text in ("def add(a, b):\n", "for item in items:\n    print("):
        ids = pair.target_tokenizer(text, return_tensors="pt").input_ids
        reference = autoregressive_generate(pair.target, ids, max_new_tokens=24, eos_token_id=None)
        candidate = speculative_generate(pair.target, drafter, ids, gamma=4, max_new_tokens=24, eos_token_id=None)
        report = explain_fork(pair.target, reference, candidate)
        assert report.verdict in ("identical", "near-tie"), report
        assert report.dtype == "bfloat16"
        assert replay_verification(pair.target, candidate).ok  # every token the argmax of its verification forward


def test_specdec_dtype_chooses_the_hub_dtype(tmp_path, monkeypatch, make_model_folder):
    """With no ``dtype`` argument, a hub pair loads in ``SPECDEC_DTYPE`` (what every notebook's `load_pair` does)."""
    use_stand_ins("hub-smollm2", tmp_path, monkeypatch, make_model_folder)
    monkeypatch.setenv("SPECDEC_DTYPE", "bfloat16")
    pair = load_pair("hub-smollm2", device="cpu")
    assert pair.target.dtype == pair.draft.dtype == torch.bfloat16


def test_every_hub_preset_is_in_the_gpu_guide():
    """docs/gpus.md's table of real pairs names each hub preset with its target and draft repo ids, and no other."""
    rows = [line for line in GPUS_DOC.read_text(encoding="utf-8").splitlines() if re.match(r"\|\s*`hub-", line)]
    named = {re.match(r"\|\s*`([^`]+)`", row).group(1): row for row in rows}
    hub = {name: preset for name, preset in models.PRESETS.items() if preset.source == "hub"}
    assert sorted(named) == sorted(hub), "docs/gpus.md's table of real pairs and PRESETS differ"
    for name, preset in hub.items():
        assert preset.target in named[name] and preset.draft in named[name], (name, named[name])


def test_hub_preset_offline_is_explained(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # the env var is read at import time
    missing = dataclasses.replace(models.PRESETS["hub-qwen2.5"], target="specdec-tests/does-not-exist")
    monkeypatch.setitem(models.PRESETS, "hub-qwen2.5", missing)
    expected = r"'hub-qwen2.5' needs 'specdec-tests/does-not-exist'.*internet.*'embedded'"
    with pytest.raises(HubUnavailableError, match=expected):
        load_pair("hub-qwen2.5", device="cpu")
