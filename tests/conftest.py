"""Shared fixtures: tiny random-weight models and tokenizers, built in milliseconds, never downloaded.

Tests exercise the library's logic (caches, positions, sampling, loading), which does not depend on the
weights being trained, so tiny random models (vocab 64, 2 layers, hidden 32) stand in for real ones.
"""

import copy
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

@pytest.fixture(autouse=True, scope="session")
def one_thread():
    """Tiny models run fastest on one thread (and far faster than two contended ones on a busy machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


TINY_VOCAB = 64
TINY_CONTEXT = 128

TOKENIZER_CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "for item in items:\n    print(item)\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n",
    "import os\nimport sys\nif __name__ == '__main__':\n    main()\n",
]


def build_tiny_model(
    architecture: str = "llama", *, seed: int = 0, num_layers: int = 2, vocab_size: int = TINY_VOCAB
) -> PreTrainedModel:
    """A random-weight causal LM (hidden 32, 4 heads, 2 KV heads, context 128), float32, eval mode."""
    config_class, model_class = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM)}[
        architecture
    ]
    config = config_class(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=TINY_CONTEXT,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=1,
    )
    torch.manual_seed(seed)
    return model_class(config).eval()


def build_tiny_tokenizer(kind: str = "a") -> PreTrainedTokenizerFast:
    """A BPE tokenizer trained on a few lines of Python: kind "a" (byte-level, like GPT-2) or "b" (metaspace).

    The two kinds split text differently and have different token strings, like tokenizers A and B of the
    embedded family; both have at most `TINY_VOCAB` tokens, ids 0 and 1 being ``<bos>`` and ``<eos>``.
    """
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>" if kind == "b" else None))
    if kind == "a":
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
        tokenizer.decoder = decoders.Metaspace()
    special_tokens = ["<bos>", "<eos>", "<unk>"]
    trainer = trainers.BpeTrainer(vocab_size=TINY_VOCAB, special_tokens=special_tokens, show_progress=False)
    tokenizer.train_from_iterator(TOKENIZER_CORPUS, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>")


def save_tiny_model(folder: Path, architecture: str = "llama", tokenizer_kind: str = "a", *, seed: int = 0) -> Path:
    """Save a tiny model (fp16 safetensors, like the embedded family) and its tokenizer to ``folder``."""
    tokenizer = build_tiny_tokenizer(tokenizer_kind)
    model = build_tiny_model(architecture, seed=seed, vocab_size=len(tokenizer))
    model.half().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_llama() -> LlamaForCausalLM:
    """A 2-layer random Llama (vocab 64, hidden 32, context 128) in eval mode; treat as read-only."""
    return build_tiny_model("llama", seed=0, num_layers=2)


@pytest.fixture(scope="session")
def tiny_draft_llama() -> LlamaForCausalLM:
    """A 1-layer random Llama on the same vocabulary as `tiny_llama`, to stand in for a draft model."""
    return build_tiny_model("llama", seed=1, num_layers=1)


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


def hf_greedy(model: PreTrainedModel, ids: torch.Tensor, max_new_tokens: int, eos_token_id: int | None = None) -> list[int]:
    """transformers' own greedy decoding, the reference every greedy method must equal token for token."""
    with torch.no_grad():
        out = model.generate(
            ids,
            do_sample=False,
            max_new_tokens=max_new_tokens,
            eos_token_id=eos_token_id,
            pad_token_id=model.config.pad_token_id,
            attention_mask=torch.ones_like(ids),
        )
    return out[0, ids.shape[1] :].tolist()


def sharpen(model: PreTrainedModel, factor: float = 30.0) -> PreTrainedModel:
    """Scale the LM head in place: peaked next-token distributions, like a trained model's (random tiny models are
    nearly uniform, so every sampled draft would be accepted and nothing would be rejected or rolled back)."""
    with torch.no_grad():
        model.lm_head.weight.mul_(factor)
    return model


def first_layer_draft(target: PreTrainedModel) -> PreTrainedModel:
    """A draft made of a copy of ``target`` keeping only its first layer: it agrees with the target often."""
    draft = copy.deepcopy(target)
    draft.model.layers = draft.model.layers[:1]
    draft.config.num_hidden_layers = 1
    return draft


def transplant_intersection(source: PreTrainedModel, draft: PreTrainedModel, source_tokenizer, draft_tokenizer) -> None:
    """Copy ``source``'s embedding and head rows to ``draft``'s ids of the same strings (vocabulary intersection),
    so a draft on another tokenizer still agrees with the source model."""
    from specdec_lib.vocab import vocabulary_intersection

    source_ids, draft_ids = vocabulary_intersection(source_tokenizer, draft_tokenizer)
    with torch.no_grad():
        draft.model.embed_tokens.weight[draft_ids] = source.model.embed_tokens.weight[source_ids]
        draft.lm_head.weight[draft_ids] = source.lm_head.weight[source_ids]
