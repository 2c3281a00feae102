"""Medusa heads and the EAGLE layer: greedy identity, exact sampling, the shipped files and cards, refusals, training.

Both drafters read the target's hidden states through ``observe_target`` (`speculative_generate` feeds them), so
the tests run them through `speculative_generate` only:

- greedy: token-identical to `autoregressive_generate` for gamma in {1, 2, 4, 8} and several lengths, on a tiny
  sharpened target with random and with briefly trained drafters (seconds), and on the shipped target with the
  shipped heads and EAGLE layer on two prompts of each prompt set;
- sampling: the chi-square battery of `test_sampling_distribution` (exact 3-token probabilities, and the target's
  own samples) passes for both, and catches a variant of each that reports the untempered q;
- the shipped folders load, stay small, and their cards are exactly what `render_head_card` renders from their JSON;
- a model they were not trained for (a tiny model; the shipped draft model, whose shapes match) is refused;
- ``python -m specdec_lib.train heads --quick`` runs end to end into a temporary folder.
"""

import json

import pytest
import torch

from helpers import build_tiny_model, sharpen
from test_sampling_distribution import (SETTINGS, SIGNIFICANCE, categories_for, exact_joint, speculative_samples,
                                        target_samples)
from specdec_lib import (EagleDrafter, HeadsDrafter, autoregressive_generate, load_eagle, load_embedded, load_heads,
                         load_prompts, speculative_generate)
from specdec_lib.drafters import EagleModule, MedusaHeads
from specdec_lib.drafters.eagle import default_eagle_folder, eagle_architecture
from specdec_lib.drafters.frozen_target import target_fingerprint
from specdec_lib.drafters.heads import default_heads_folder
from specdec_lib.errors import ConfigError, ModelNotFoundError
from specdec_lib.prompts import TASKS
from specdec_lib.sampling import GREEDY, SamplingConfig
from specdec_lib.stats import bucket_counts, chi_square_gof, chi_square_homogeneity
from specdec_lib.train import main as train_main
from specdec_lib.training.head_cards import render_head_card
from specdec_lib.training.heads import eagle_loss, medusa_loss, target_features

GAMMAS = (1, 2, 4, 8)
KINDS = ("heads", "eagle")
PROMPT = torch.tensor([[0, 5, 17]])


def make_drafter(kind: str, module: torch.nn.Module, target) -> HeadsDrafter | EagleDrafter:
    return HeadsDrafter(module, target) if kind == "heads" else EagleDrafter(module)


def new_module(kind: str, target) -> torch.nn.Module:
    return MedusaHeads(3, target.config.hidden_size) if kind == "heads" else EagleModule(eagle_architecture(target), target)


# ---------------------------------------------------------------- tiny models


@pytest.fixture(scope="module")
def tiny_target():
    """A sharpened tiny Llama (peaked, code-like next-token distributions), frozen."""
    return sharpen(build_tiny_model("llama", seed=0)).requires_grad_(False)


@pytest.fixture(scope="module")
def tiny_modules(tiny_target):
    """kind -> {"random": module, "trained": module}: random weights, and 150 AdamW steps with the training
    losses on the tiny target's own samples (so that drafts are often accepted and rollbacks happen too)."""
    torch.manual_seed(0)
    prompts = torch.randint(2, 64, (64, 3))
    with torch.no_grad():
        samples = tiny_target.generate(prompts, do_sample=True, max_new_tokens=45, min_new_tokens=45, pad_token_id=1,
                                       attention_mask=torch.ones_like(prompts))  # [64, 48]
    features = target_features(tiny_target, samples)  # [64, 47, 32]
    lm_head = tiny_target.get_output_embeddings()
    losses = {"heads": lambda m, i: medusa_loss(m, lm_head, features[i], samples[i], 0.8),
              "eagle": lambda m, i: eagle_loss(m, features[i], samples[i], 0.1)}
    modules = {}
    for kind in KINDS:
        torch.manual_seed(1)
        random = new_module(kind, tiny_target)
        for parameter in random.parameters():
            torch.nn.init.normal_(parameter, std=0.3)
        trained = new_module(kind, tiny_target)
        optimizer = torch.optim.AdamW(trained.parameters(), lr=1e-2 if kind == "heads" else 3e-3)
        generator = torch.Generator().manual_seed(0)
        for _ in range(150):
            loss, _ = losses[kind](trained, torch.randint(0, len(samples), (16,), generator=generator))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        modules[kind] = {"random": random.eval(), "trained": trained.eval()}
    return modules


@pytest.mark.parametrize("gamma", GAMMAS)
@pytest.mark.parametrize("weights", ["random", "trained"])
@pytest.mark.parametrize("kind", KINDS)
def test_tiny_greedy_is_token_identical(tiny_target, tiny_modules, kind, weights, gamma):
    drafter = make_drafter(kind, tiny_modules[kind][weights], tiny_target)
    prompts = [PROMPT, torch.tensor([[0, 9, 33, 12, 40, 2, 7, 51]])]
    for prompt in prompts:
        for new_tokens, eos in ((1, None), (5, None), (17, "auto"), (40, None)):
            expected = autoregressive_generate(tiny_target, prompt, max_new_tokens=new_tokens, eos_token_id=eos)
            result = speculative_generate(tiny_target, drafter, prompt, gamma=gamma, max_new_tokens=new_tokens,
                                          eos_token_id=eos)
            assert result.new_token_list == expected.new_token_list, (kind, weights, gamma, new_tokens)
            assert all(r.drafted <= min(gamma, 3 if kind == "heads" else gamma) for r in result.trace.rounds)
    if kind == "eagle":  # the pre-allocated cache gives the same tokens
        preallocated = EagleDrafter(tiny_modules[kind][weights], cache_kind="preallocated")
        result = speculative_generate(tiny_target, preallocated, prompts[1], gamma=gamma, max_new_tokens=40,
                                      eos_token_id=None)
        assert result.new_token_list == autoregressive_generate(tiny_target, prompts[1], max_new_tokens=40,
                                                                eos_token_id=None).new_token_list


def test_trained_tiny_drafters_are_accepted_and_rejected(tiny_target, tiny_modules):
    """The trained tiny drafters exercise both paths of every round (else the identity tests would prove little)."""
    for kind in KINDS:
        drafter = make_drafter(kind, tiny_modules[kind]["trained"], tiny_target)
        rounds = speculative_generate(tiny_target, drafter, PROMPT, gamma=3, max_new_tokens=60,
                                      eos_token_id=None).trace.rounds[1:]
        assert any(r.accepted > 0 for r in rounds) and any(r.accepted < r.drafted for r in rounds), kind


def test_drafting_without_the_target_hidden_states_is_refused(tiny_target, tiny_modules):
    for kind in KINDS:
        drafter = make_drafter(kind, tiny_modules[kind]["random"], tiny_target)
        drafter.begin(PROMPT)
        with pytest.raises(ConfigError, match="observe_target"):
            drafter.propose(PROMPT, 2, GREEDY, None)


class UntemperedHeads(HeadsDrafter):
    """The bug class: draws at the requested temperature but reports the temperature-1 softmax as q."""

    def propose(self, sequence, k, sampling, generator):
        draft = super().propose(sequence, k, sampling, generator)
        draft.probs = torch.softmax(sampling.temperature * draft.probs.log(), dim=-1)  # = softmax(logits)
        return draft


class UntemperedEagle(EagleDrafter):
    def propose(self, sequence, k, sampling, generator):
        draft = super().propose(sequence, k, sampling, generator)
        draft.probs = torch.softmax(sampling.temperature * draft.probs.log(), dim=-1)
        return draft


_target_runs: dict = {}


@pytest.mark.parametrize("setting", ["T=1.0", "T=0.7, top_p=0.9"])
@pytest.mark.parametrize("kind", KINDS)
def test_tiny_sampling_matches_the_target(tiny_target, tiny_modules, kind, setting):
    sampling, draws = SETTINGS[setting], 400
    drafter = make_drafter(kind, tiny_modules[kind]["trained"], tiny_target)
    categories, probs = categories_for(exact_joint(tiny_target, PROMPT, sampling, (8, 6, 4)), draws)
    samples, acceptance = speculative_samples(tiny_target, drafter, PROMPT, sampling, draws)
    counts = bucket_counts(samples, categories)
    exact = chi_square_gof(counts, probs)
    assert exact.passes(SIGNIFICANCE) and exact.cells >= 8, (kind, setting, exact)
    assert 0.05 < acceptance < 0.95, acceptance  # drafts are accepted and rejected
    if setting not in _target_runs:
        _target_runs[setting] = bucket_counts(target_samples(tiny_target, PROMPT, sampling, 300), categories)
    assert chi_square_homogeneity(counts, _target_runs[setting]).passes(SIGNIFICANCE), (kind, setting)


@pytest.fixture(scope="module")
def oracles():
    """A (very) sharpened tiny target whose token embeddings are all equal, so every position has the same next-token
    distribution p, and a drafter of each kind that reproduces p exactly: zero-initialised heads (head j is the LM
    head itself) and an EAGLE layer whose output is the target's constant feature. Every honest draft is then
    accepted, so a wrongly reported q changes many outcomes: the setting in which the test must fail loudly."""
    target = sharpen(build_tiny_model("llama", seed=0), 90.0)  # peaked enough for 22 cells at T = 1.5
    embedding = target.get_input_embeddings().weight
    assert embedding.data_ptr() != target.get_output_embeddings().weight.data_ptr()  # untied: the head stays random
    with torch.no_grad():
        embedding.copy_(embedding[:1].expand_as(embedding))
        feature = target_features(target, torch.zeros(1, 2, dtype=torch.long))[0, 0]  # [D]: the same everywhere
    eagle = EagleModule(eagle_architecture(target), target)
    with torch.no_grad():
        for weight in (eagle.fc.weight, eagle.layers[0].self_attn.o_proj.weight, eagle.layers[0].mlp.down_proj.weight):
            weight.zero_()
        eagle.fc.bias.copy_(feature)  # the layer adds nothing; RMSNorm (weight 1, like the target's) maps it to itself
        eagle.norm.weight.copy_(target.get_decoder().norm.weight)
    return target, {"heads": MedusaHeads(3, target.config.hidden_size).eval(), "eagle": eagle.eval()}


@pytest.mark.parametrize("kind", KINDS)
def test_the_same_test_catches_an_untempered_q(oracles, kind):
    target, modules = oracles
    sampling, draws = SamplingConfig(temperature=1.5), 600  # p flatter than the reported q: top drafts get rejected
    categories, probs = categories_for(exact_joint(target, PROMPT, sampling, (8, 6, 4)), draws)
    honest = make_drafter(kind, modules[kind], target)
    broken = UntemperedHeads(modules[kind], target) if kind == "heads" else UntemperedEagle(modules[kind])
    samples, acceptance = speculative_samples(target, honest, PROMPT, sampling, draws)
    assert acceptance > 0.99  # q = p: the oracle's drafts are all accepted
    assert chi_square_gof(bucket_counts(samples, categories), probs).passes(SIGNIFICANCE)
    samples, _ = speculative_samples(target, broken, PROMPT, sampling, draws)
    test = chi_square_gof(bucket_counts(samples, categories), probs)
    assert test.p_value < 1e-6, (kind, test)


# ---------------------------------------------------------------- the shipped target, heads and EAGLE layer


@pytest.fixture(scope="module")
def shipped():
    target, tokenizer = load_embedded("target", device="cpu")
    return target, tokenizer, {"heads": load_heads(target), "eagle": load_eagle(target)}


def test_shipped_greedy_is_token_identical(shipped):
    """Two prompts of each set, 24 tokens; each drafter runs one gamma per prompt, all four over the six prompts."""
    target, tokenizer, drafters = shipped
    prompts = [prompt for task in TASKS for prompt in load_prompts(task, limit=2)]
    for i, prompt in enumerate(prompts):
        ids = tokenizer(prompt.prompt, return_tensors="pt").input_ids
        expected = autoregressive_generate(target, ids, max_new_tokens=24).new_token_list
        for shift, (kind, drafter) in enumerate(drafters.items()):
            gamma = GAMMAS[(i + shift) % len(GAMMAS)]
            result = speculative_generate(target, drafter, ids, gamma=gamma, max_new_tokens=24)
            assert result.new_token_list == expected, (prompt.id, kind, gamma)


@pytest.mark.parametrize("folder", [default_heads_folder(), default_eagle_folder()], ids=["heads", "eagle"])
def test_shipped_files_are_small_and_their_cards_are_rendered(shipped, folder):
    target = shipped[0]
    config = json.loads((folder / "config.json").read_text())
    report = json.loads((folder / "training_report.json").read_text())
    assert config["target"] == target_fingerprint(target)
    assert (folder / "model.safetensors").stat().st_size == report["weights_bytes"] < 2_000_000
    assert (folder / "README.md").read_text() == render_head_card(folder)
    assert report["threads"] in (1, 2) and report["training"]["seconds"] + report["data"]["feature_seconds"] < 15 * 60
    assert all(0 < v <= 1 for v in report["validation"]["top1"])
    for numbers in report["acceptance"].values():
        assert numbers["prompts"] == len(load_prompts("code")) and 1 <= numbers["mean_acceptance_length"]
        assert 0.2 < numbers["alpha"] < 1  # they learned something


def test_another_model_is_refused(shipped, tiny_target):
    draft, _ = load_embedded("draft", device="cpu")  # 192 wide with the target's 4096 ids: only the fingerprint differs
    for model in (tiny_target, draft):
        for loader in (load_heads, load_eagle):
            with pytest.raises(ConfigError, match=r"trained for the target 'target'.*python -m specdec_lib\.train heads"):
                loader(model)
    target = shipped[0]
    with pytest.raises(ConfigError, match="holds a 'eagle' drafter"):
        HeadsDrafter.load(default_eagle_folder(), target)
    with pytest.raises(ModelNotFoundError, match="python -m specdec_lib.train heads"):
        EagleDrafter.load(default_heads_folder().parent / "no-such-folder", target)


def test_quick_training_runs_end_to_end(shipped, tmp_path):
    target, tokenizer, _ = shipped
    train_main(["heads", "--quick", "--out", str(tmp_path)])
    ids = tokenizer(load_prompts("code", limit=1)[0].prompt, return_tensors="pt").input_ids
    expected = autoregressive_generate(target, ids, max_new_tokens=8).new_token_list
    for loader, name in ((load_heads, "heads"), (load_eagle, "eagle")):
        folder = tmp_path / name
        assert (folder / "README.md").read_text() == render_head_card(folder)
        drafter = loader(target, folder)
        assert speculative_generate(target, drafter, ids, gamma=3, max_new_tokens=8).new_token_list == expected
    assert torch.get_num_threads() == 1  # the run restored the session's thread count
