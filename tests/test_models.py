"""models.py: finding data/, loading embedded models and pairs, hub presets (never downloading)."""

import dataclasses
import warnings

import huggingface_hub.constants
import pytest
import torch

from specdec_lib import loading as models
from specdec_lib.core.errors import ConfigError, HubUnavailableError, ModelNotFoundError
from specdec_lib.core.pair import ModelPair
from specdec_lib.loading import data_dir, list_presets, load_embedded, load_model_folder, load_pair


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
    with pytest.raises(ModelNotFoundError, match=r"models.target does not exist.*git lfs pull.*python -m specdec_lib train"):
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
    assert all(isinstance(text, str) and text for text in presets.values())
    with pytest.raises(ConfigError, match=r"Unknown preset 'tiny'\. Available presets: embedded, embedded-cross, hub-"):
        load_pair("tiny")


@pytest.mark.parametrize(
    ("preset", "draft_architecture", "same"), [("hub-qwen2.5", "qwen2", True), ("hub-cross", "llama", False)]
)
def test_hub_presets_load_through_from_pretrained(
    tmp_path, monkeypatch, make_model_folder, preset, draft_architecture, same
):
    """The hub code path, with the repo ids pointed at local tiny models of the same architectures."""
    target = make_model_folder(tmp_path / "target", "qwen2", "a", seed=0)
    draft = make_model_folder(tmp_path / "draft", draft_architecture, "a" if same else "b", seed=1)
    local = dataclasses.replace(models.PRESETS[preset], target=str(target), draft=str(draft))
    monkeypatch.setitem(models.PRESETS, preset, local)
    pair = load_pair(preset, device="cpu")
    assert type(pair.target).__name__ == "Qwen2ForCausalLM"
    assert pair.draft.config.model_type == draft_architecture
    assert pair.target.dtype == torch.float32 and not pair.draft.training
    assert pair.same_tokenizer is same


def test_hub_preset_offline_is_explained(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # the env var is read at import time
    missing = dataclasses.replace(models.PRESETS["hub-qwen2.5"], target="specdec-tests/does-not-exist")
    monkeypatch.setitem(models.PRESETS, "hub-qwen2.5", missing)
    expected = r"'hub-qwen2.5' needs 'specdec-tests/does-not-exist'.*internet.*'embedded'"
    with pytest.raises(HubUnavailableError, match=expected):
        load_pair("hub-qwen2.5", device="cpu")
