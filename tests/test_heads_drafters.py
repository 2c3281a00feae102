"""Medusa heads and the EAGLE layer (EAGLE-1 style, and EAGLE-3 style: fused target layers, trained with
training-time test): greedy identity, exact sampling, the shipped files and cards, refusals, training.

Both drafters read the target's hidden states through ``observe_target`` (`speculative_generate` feeds them), so
the tests run them through `speculative_generate` only:

- greedy: token-identical to `autoregressive_generate` for gamma in {1, 2, 4, 8} and several lengths, on a tiny
  sharpened target with random and with briefly trained drafters (seconds), and on the shipped target with the
  shipped heads and EAGLE layer (one prompt; two prompts of each prompt set behind ``slow``);
- sampling: the exact 3-token probabilities of the target (the chi-square test of `test_sampling_distribution`)
  are reproduced by both, and a variant of each that reports the untempered q is caught, with stated power;
- the shipped folders load, stay small, and their cards are exactly what `render_head_card` renders from their JSON;
- a model they were not trained for (a tiny model; the shipped draft model, whose shapes match) is refused;
- ``python -m specdec_tools train heads --quick`` runs end to end into a temporary folder, and ``--measure-cost``
  measures its EAGLE layer's c again, rewriting its report's cost (nothing else) and its card.
"""

import copy
import json

import pytest
import torch

from helpers import (
    PROMPT,
    SETTINGS,
    SIGNIFICANCE,
    TINY_CONTEXT,
    UntemperedQ,
    build_tiny_model,
    categories_for,
    detectable_tv,
    exact_joint,
    greedy_tokens,
    rejection_power,
    sharpen,
    speculative_samples,
)
from specdec_lib.core.drafting import TargetOutput, Context
from specdec_lib import (DynamicTree, EagleDrafter, HeadsDrafter, TreeShape, autoregressive_generate, load_eagle,
                         load_heads, load_prompts, speculative_generate, tree_speculative_generate)
from specdec_lib.drafters import EagleModule, MedusaHeads
from specdec_lib.drafters.eagle import default_eagle_folder, eagle3_folder, eagle_architecture
from specdec_lib.drafters.eagle_runner import EagleRunner
from specdec_lib.drafters.frozen_target import target_fingerprint
from specdec_lib.drafters.heads import default_heads_folder
from specdec_lib.core.caches import cache_length, crop_cache, new_cache
from specdec_lib.core.errors import ConfigError, ContextOverflowError, ModelNotFoundError
from specdec_lib.prompts import TASKS
from specdec_lib.core.sampling import GREEDY, SamplingConfig, logits_to_probs
from specdec_lib.core.stats import bucket_counts, chi_square_gof, total_variation
from specdec_tools.training.cli import main as train_main
from specdec_tools.training.head_cards import render_head_card
from specdec_tools.training.head_data import target_features
from specdec_tools.training.heads import eagle_loss, medusa_loss
from specdec_lib.core.verify import residual_distribution

GAMMAS = (1, 2, 4, 8)
KINDS = ("heads", "eagle", "eagle3")
FUSED_LAYERS = (1, -1)  # the tiny targets have two layers: the first one's hidden state and the last, normed
OTHER_PROMPT = torch.tensor([[0, 9, 33, 12, 40, 2, 7, 51]])


def make_drafter(kind: str, module: torch.nn.Module, target) -> HeadsDrafter | EagleDrafter:
    return HeadsDrafter(module, target) if kind == "heads" else EagleDrafter(module)


def new_module(kind: str, target) -> torch.nn.Module:
    if kind == "heads":
        return MedusaHeads(3, target.config.hidden_size)
    layers = FUSED_LAYERS if kind == "eagle3" else (-1,)
    return EagleModule(eagle_architecture(target, feature_layers=layers), target)


# ---------------------------------------------------------------- tiny models


@pytest.fixture(scope="module")
def tiny_target(sharp_tiny_pair):
    """The sharp tiny target of `sharp_tiny_pair` (peaked, code-like next-token distributions), copied and frozen:
    the training below must not reach the session's model through the EAGLE layer's shared embedding and head."""
    return copy.deepcopy(sharp_tiny_pair[0]).requires_grad_(False)


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
    fused = target_features(tiny_target, samples, layers=FUSED_LAYERS)  # [64, 47, 64]
    lm_head = tiny_target.get_output_embeddings()
    losses = {"heads": lambda m, i: medusa_loss(m, lm_head, features[i], samples[i], 0.8),
              "eagle": lambda m, i: eagle_loss(m, features[i], samples[i], 0.1),
              "eagle3": lambda m, i: eagle_loss(m, fused[i], samples[i], 0.1, steps=2)}
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


LENGTHS = ((1, None), (5, None), (17, "auto"), (40, None))  # (max_new_tokens, eos_token_id)


@pytest.fixture(scope="module")
def expected_greedy(tiny_target):
    """(prompt index, max_new_tokens, eos) -> the target alone's greedy tokens, for `PROMPT` and `OTHER_PROMPT`:
    computed once for every drafter and gamma."""
    return {(i, new_tokens, eos): autoregressive_generate(tiny_target, prompt, max_new_tokens=new_tokens,
                                                          eos_token_id=eos).new_token_list
            for i, prompt in enumerate((PROMPT, OTHER_PROMPT)) for new_tokens, eos in LENGTHS}


# Random modules reject almost every first draft, so gamma changes little for them: gamma 1 and 8 (more than the 3
# heads, and more than 5 tokens leave) are kept; trained modules keep drafts, and run every gamma.
GREEDY_CASES = [(kind, weights, gamma) for kind in KINDS
                for weights, gammas in (("random", (1, 8)), ("trained", GAMMAS)) for gamma in gammas]


@pytest.mark.parametrize("kind, weights, gamma", GREEDY_CASES)
def test_tiny_greedy_is_token_identical(tiny_target, tiny_modules, expected_greedy, kind, weights, gamma):
    drafter = make_drafter(kind, tiny_modules[kind][weights], tiny_target)
    for i, prompt in enumerate((PROMPT, OTHER_PROMPT)):
        for new_tokens, eos in LENGTHS:
            result = speculative_generate(tiny_target, drafter, prompt, gamma=gamma, max_new_tokens=new_tokens,
                                          eos_token_id=eos)
            assert result.new_token_list == expected_greedy[i, new_tokens, eos], (kind, weights, gamma, new_tokens)
            assert all(r.drafted <= min(gamma, 3 if kind == "heads" else gamma) for r in result.trace.rounds)


@pytest.mark.parametrize("kind, kv_heads", [("eagle", None), ("eagle3", None), ("eagle", 1)])
def test_the_draft_time_runner_computes_the_module_forward(tiny_target, kind, kv_heads):
    """`EagleRunner` (what drafting runs) against `EagleModule.forward` on a transformers cache (what training
    runs), through a block of true pairs, single drafted steps, a rollback and another block. The tiny target has two
    query heads per key/value head; ``kv_heads=1``: four."""
    torch.manual_seed(2)
    architecture = eagle_architecture(tiny_target, feature_layers=FUSED_LAYERS if kind == "eagle3" else (-1,))
    if kv_heads is not None:
        architecture["num_key_value_heads"] = kv_heads
    module = EagleModule(architecture, tiny_target).eval()
    for parameter in module.parameters():
        torch.nn.init.normal_(parameter, std=0.3)
    runner, cache = EagleRunner(module, 40), new_cache(module)
    width = tiny_target.config.hidden_size
    features, next_ids = torch.randn(20, width), torch.randint(0, 64, (20,))
    with torch.inference_mode():
        for start, stop, keep in ((0, 7, 7), (7, 8, 8), (8, 9, 9), (9, 10, 8), (8, 13, 13), (13, 14, 14)):
            expected = module(features[None, start:stop], next_ids[None, start:stop], cache)[0]
            torch.testing.assert_close(runner.forward(features[start:stop], next_ids[start:stop]), expected)
            runner.crop(keep)
            crop_cache(cache, keep)
            assert runner.length == cache_length(cache) == keep


def test_the_draft_time_runner_refuses_positions_past_its_storage(tiny_target, tiny_modules):
    runner = EagleRunner(tiny_modules["eagle"]["random"], 6)
    width = tiny_target.config.hidden_size
    runner.forward(torch.zeros(4, width), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ContextOverflowError, match="holds 6"):
        runner.forward(torch.zeros(3, width), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ContextOverflowError, match="positions"):
        EagleRunner(tiny_modules["eagle"]["random"], TINY_CONTEXT + 1)


TREE_SHAPES = [TreeShape((2, 2, 1)), TreeShape((1, 1, 1)), DynamicTree(3, 2, 5), DynamicTree(6, 4, 20)]


@pytest.mark.parametrize("kind", ["eagle", "eagle3"])
@pytest.mark.parametrize("shape", TREE_SHAPES, ids=str)
def test_tiny_eagle_trees_are_token_identical(tiny_target, tiny_modules, expected_greedy, kind, shape):
    """EAGLE layers draft static and dynamic trees: each depth's expanded nodes fed in one tree forward of the
    layer, then every drafted pair dropped; the output stays the target's at every length."""
    for weights in ("random", "trained"):
        drafter = make_drafter(kind, tiny_modules[kind][weights], tiny_target)
        for i, prompt in enumerate((PROMPT, OTHER_PROMPT)):
            for new_tokens, eos in LENGTHS:
                result = tree_speculative_generate(tiny_target, drafter, prompt, shape=shape,
                                                   max_new_tokens=new_tokens, eos_token_id=eos)
                assert result.new_token_list == expected_greedy[i, new_tokens, eos], (weights, new_tokens)
        if weights == "trained":  # the trees were verified past their first depth
            assert any(r.accepted > 1 for r in result.trace.rounds), shape


def test_trained_tiny_drafters_are_accepted_and_rejected(tiny_target, tiny_modules):
    """The trained tiny drafters exercise both paths of every round (else the identity tests would prove little)."""
    for kind in KINDS:
        drafter = make_drafter(kind, tiny_modules[kind]["trained"], tiny_target)
        rounds = speculative_generate(tiny_target, drafter, PROMPT, gamma=3, max_new_tokens=60,
                                      eos_token_id=None).trace.rounds[1:]
        assert any(r.accepted > 0 for r in rounds) and any(r.accepted < r.drafted for r in rounds), kind


def test_drafting_waits_for_the_target_and_a_wrong_count_of_hidden_states_is_refused(tiny_target, tiny_modules):
    """Before the target's first forward there is nothing to draft from (the first round drafts nothing); after it,
    the observed hidden states must cover every committed position but the last."""
    for kind in KINDS:
        drafter = make_drafter(kind, tiny_modules[kind]["random"], tiny_target)
        drafter.begin(Context.of(PROMPT))
        assert len(drafter.propose(Context.of(PROMPT, 2), GREEDY, None)) == 0
        width = tiny_target.config.hidden_size * len(drafter.hidden_layers)
        drafter.observe(TargetOutput(torch.zeros(1, 64), torch.zeros(1, width), 0))  # 1 position, not 2
        with pytest.raises(ConfigError, match="calls observe after every target forward"):
            drafter.propose(Context.of(PROMPT, 2), GREEDY, None)


@pytest.mark.parametrize("kind", KINDS)
def test_tiny_sampling_matches_the_target(tiny_target, tiny_modules, kind):
    """The trained drafters at T = 0.7, top_p = 0.9 (a temperature and a filter: the q they report is processed like
    the tokens they draw). 200 draws catch any TV >= 0.21 over the tested cells (asserted). These drafters are
    rarely accepted (5 to 15%), so an untempered q barely moves this law (2000 runs of each reporting it stayed within
    TV 0.03 of it, the sampling noise): the oracles below are where a misreported q must show, and does."""
    sampling, draws = SETTINGS["T=0.7, top_p=0.9"], 200
    drafter = make_drafter(kind, tiny_modules[kind]["trained"], tiny_target)
    categories, probs = categories_for(exact_joint(tiny_target, PROMPT, sampling, (8, 6, 4)), draws)
    samples, acceptance = speculative_samples(tiny_target, drafter, PROMPT, sampling, draws)
    test = chi_square_gof(bucket_counts(samples, categories), probs)
    assert test.passes(SIGNIFICANCE) and detectable_tv(draws, test.cells) <= 0.21, (kind, test)
    assert 0.05 < acceptance < 0.95, acceptance  # drafts are accepted and rejected


@pytest.fixture(scope="module")
def oracles():
    """A (very) sharpened tiny target whose token embeddings are all equal, so every position has the same next-token
    distribution p, and a drafter of each kind that reproduces p exactly: zero-initialised heads (head j is the LM
    head itself) and an EAGLE layer whose output is the target's constant feature. Every honest draft is then
    accepted, so a wrongly reported q changes many outcomes: the setting in which the test must fail loudly."""
    target = sharpen(build_tiny_model("llama", seed=0), 90.0)  # peaked enough for 11 tokens of 300 draws at T = 3
    embedding = target.get_input_embeddings().weight
    assert embedding.data_ptr() != target.get_output_embeddings().weight.data_ptr()  # untied: the head stays random
    with torch.no_grad():
        embedding.copy_(embedding[:1].expand_as(embedding))
        feature = target_features(target, torch.zeros(1, 2, dtype=torch.long))[0, 0]  # [D]: the same everywhere
    layers = {}
    for kind in ("eagle", "eagle3"):
        eagle = new_module(kind, target)
        with torch.no_grad():
            for weight in (eagle.fc.weight, eagle.layers[0].self_attn.o_proj.weight,
                           eagle.layers[0].mlp.down_proj.weight):
                weight.zero_()
            eagle.fc.bias.copy_(feature)  # the layer adds nothing; RMSNorm (weight 1, like the target's) keeps it
            eagle.norm.weight.copy_(target.get_decoder().norm.weight)
        layers[kind] = eagle.eval()
    return target, {"heads": MedusaHeads(3, target.config.hidden_size).eval(), **layers}


def untempered_step_law(target, sampling: SamplingConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """``(p, M)``, ``[V]`` each: the oracle's next-token distribution (the same at every position) and the law of a
    token it emits when it reports the untempered q. Its drafts are drawn from q = p = logits_to_probs(l) but
    verified against r = softmax(l):
    ``M(y) = p(y) min(1, p(y) / r(y)) + (1 - sum_x p(x) min(1, p(x) / r(x))) norm(max(p - r, 0))(y)``."""
    with torch.inference_mode():
        logits = target(input_ids=PROMPT).logits[0, -1].float()
    p, reported = logits_to_probs(logits, sampling), torch.softmax(logits, -1)
    kept = p * (p / reported).clamp(max=1.0)
    return p, kept + (1 - kept.sum()) * residual_distribution(p, reported)


@pytest.mark.parametrize("kind", KINDS)
def test_the_same_test_catches_an_untempered_q(oracles, kind):
    """At T = 3 p is much flatter than the reported softmax(l): the likeliest drafts get rejected. Every position
    of the oracle has the same p, so the honest tokens are independent draws from p, and so are x2 and x3 from M
    under the bug (each is the verdict on one draft, in round one or, after a rejection, round two): the test counts
    the two verified tokens of each run, 2 draws per run, against p (x1, the prefill's, is p's either way).
    Exact effect (asserted): TV(M, p) = 0.20 over those cells; 150 runs (300 tokens, 12 cells, lambda = 55) catch
    it with power 0.995 at SIGNIFICANCE, and any TV >= 0.18 (asserted). (The 3-token test of the other tests would
    need about 700 runs here: at T = 1.5 it sees TV 0.14, lambda = 52 at 600 runs.) The honest drafter passes the
    same test and accepts every draft (q = p)."""
    target, modules = oracles
    sampling, runs = SamplingConfig(temperature=3.0), 150
    p, broken = untempered_step_law(target, sampling)
    categories = [token for token in range(len(p)) if p[token] * 2 * runs >= 5]
    probs = [float(p[token]) for token in categories] + [1 - sum(float(p[token]) for token in categories)]
    law = [float(broken[token]) for token in categories] + [1 - sum(float(broken[token]) for token in categories)]
    power = rejection_power(probs, law, 2 * runs)
    assert total_variation(law, probs) > 0.18 and power > 0.99, (total_variation(law, probs), power)

    def verified_tokens(drafter):  # x2 and x3 of each run: 2 * runs tokens, bucketed by categories
        samples, acceptance = speculative_samples(target, drafter, PROMPT, sampling, runs)
        return bucket_counts((token for sample in samples for token in sample[1:]), categories), acceptance

    honest, acceptance = verified_tokens(make_drafter(kind, modules[kind], target))
    assert acceptance > 0.99  # q = p: the oracle's drafts are all accepted
    test = chi_square_gof(honest, probs)
    assert test.passes(SIGNIFICANCE) and detectable_tv(2 * runs, test.cells) <= 0.18, (kind, test)
    test = chi_square_gof(verified_tokens(UntemperedQ(make_drafter(kind, modules[kind], target)))[0], probs)
    assert not test.passes(SIGNIFICANCE), (kind, test)


# ---------------------------------------------------------------- the shipped target, heads and EAGLE layer


def test_a_drafter_fills_the_context_of_the_target(tiny_target, tiny_modules):
    """Every kind, trained, at gamma 1, 3 and 6, asked for the tokens that fill the target's context to its last
    position: near the end a round drafts fewer tokens, and the EAGLE layer's own positions end there too."""
    new_tokens = 20
    prompt = torch.arange(2, 2 + TINY_CONTEXT - new_tokens).remainder(60).add(2).view(1, -1)
    expected = greedy_tokens(tiny_target, prompt, new_tokens)
    for kind in KINDS:
        for gamma in (1, 3, 6):
            drafter = make_drafter(kind, tiny_modules[kind]["trained"], tiny_target)
            result = speculative_generate(tiny_target, drafter, prompt, gamma=gamma, max_new_tokens=new_tokens,
                                          eos_token_id=None)
            assert result.new_token_list == expected, (kind, gamma)
            assert result.sequence.shape[1] == TINY_CONTEXT


@pytest.fixture(scope="module")
def shipped(embedded_pair):
    """The session's embedded target and tokenizer, and the shipped heads, EAGLE layer and EAGLE-3-style layer
    loaded for it."""
    target = embedded_pair.target
    return target, embedded_pair.target_tokenizer, {"heads": load_heads(target), "eagle": load_eagle(target),
                                                    "eagle3": load_eagle(target, eagle3_folder())}


def test_shipped_drafters_load_and_are_token_identical(shipped, encoded_prompts):
    """What the tiny tests cannot show: the shipped weights load for the shipped target and draft tokens it keeps.
    One code prompt, 12 tokens, heads at gamma 3 (all their heads), EAGLE at 4 and the EAGLE-3-style layer at 6;
    the slow tests below run two prompts of each set, every gamma and 24 tokens, and gamma 1, 3 and 6 to the
    context end."""
    target, _, drafters = shipped
    ids = encoded_prompts["code"][0][1]
    expected = autoregressive_generate(target, ids, max_new_tokens=12).new_token_list
    for kind, gamma in (("heads", 3), ("eagle", 4), ("eagle3", 6)):
        result = speculative_generate(target, drafters[kind], ids, gamma=gamma, max_new_tokens=12)
        assert result.new_token_list == expected, kind
        assert sum(r.accepted for r in result.trace.rounds) > 0, kind  # the trained drafter really predicts


@pytest.mark.slow
def test_shipped_greedy_is_token_identical(shipped, encoded_prompts):
    """About 10 s on 2 cores: two prompts of each set, 24 tokens; each drafter runs one gamma per prompt, all four
    over the six prompts."""
    target, _, drafters = shipped
    prompts = [prompt for task in TASKS for prompt in encoded_prompts[task][:2]]
    for i, (prompt_id, ids) in enumerate(prompts):
        expected = autoregressive_generate(target, ids, max_new_tokens=24).new_token_list
        for shift, (kind, drafter) in enumerate(drafters.items()):
            gamma = GAMMAS[(i + shift) % len(GAMMAS)]
            result = speculative_generate(target, drafter, ids, gamma=gamma, max_new_tokens=24)
            assert result.new_token_list == expected, (prompt_id, kind, gamma)


@pytest.mark.slow
def test_shipped_eagle_layers_fill_the_context(shipped, encoded_prompts):
    """About 30 s on 2 cores: a code, a prose and a grounded prompt, each cut so that 24 new tokens reach the
    target's last position, the two EAGLE layers at gamma 1, 3 and 6."""
    target, _, drafters = shipped
    context, new_tokens = target.config.max_position_embeddings, 24
    for task in TASKS:
        _, ids = encoded_prompts[task][0]
        ids = torch.cat([ids] * (context // ids.shape[1] + 1), dim=1)[:, : context - new_tokens]
        expected = autoregressive_generate(target, ids, max_new_tokens=new_tokens, eos_token_id=None).new_token_list
        for kind in ("eagle", "eagle3"):
            for gamma in (1, 3, 6):
                result = speculative_generate(target, drafters[kind], ids, gamma=gamma, max_new_tokens=new_tokens,
                                              eos_token_id=None)
                assert result.new_token_list == expected and result.sequence.shape[1] == context, (task, kind, gamma)


@pytest.mark.parametrize("folder", [default_heads_folder(), default_eagle_folder(), eagle3_folder()],
                         ids=["heads", "eagle", "eagle3"])
def test_shipped_files_are_small_and_their_cards_are_rendered(shipped, folder):
    target = shipped[0]
    config = json.loads((folder / "config.json").read_text())
    report = json.loads((folder / "training_report.json").read_text())
    assert config["target"] == target_fingerprint(target)
    assert (folder / "model.safetensors").stat().st_size == report["weights_bytes"] < 2_000_000
    assert (folder / "README.md").read_text() == render_head_card(folder)
    assert report["threads"] in (1, 2) and report["training"]["seconds"] + report["data"]["feature_seconds"] < 20 * 60
    assert all(0 < v <= 1 for v in report["validation"]["top1"])
    for numbers in report["acceptance"].values():
        assert numbers["prompts"] == len(load_prompts("code")) and 1 <= numbers["mean_acceptance_length"]
        assert 0.2 < numbers["alpha"] < 1  # they learned something


def test_another_model_is_refused(shipped, embedded_pair, tiny_target):
    draft = embedded_pair.draft  # 192 wide with the target's 4096 ids: only the fingerprint differs
    for model in (tiny_target, draft):
        for loader in (load_heads, load_eagle):
            with pytest.raises(ConfigError, match=r"trained for the target 'target'.*python -m specdec_tools train heads"):
                loader(model)
    target = shipped[0]
    with pytest.raises(ConfigError, match="holds a 'eagle' drafter"):
        HeadsDrafter.load(default_eagle_folder(), target)
    with pytest.raises(ModelNotFoundError, match="python -m specdec_tools train heads"):
        EagleDrafter.load(default_heads_folder().parent / "no-such-folder", target)


def test_quick_training_runs_end_to_end(shipped, encoded_prompts, tmp_path):
    target, _, _ = shipped
    threads = torch.get_num_threads()
    train_main(["heads", "--quick", "--out", str(tmp_path)])
    assert torch.get_num_threads() == threads  # the command trains at its own thread count and restores the caller's
    ids = encoded_prompts["code"][0][1]
    expected = autoregressive_generate(target, ids, max_new_tokens=8).new_token_list
    for loader, name in ((load_heads, "heads"), (load_eagle, "eagle")):
        folder = tmp_path / name
        assert (folder / "README.md").read_text() == render_head_card(folder)
        drafter = loader(target, folder)
        assert speculative_generate(target, drafter, ids, gamma=3, max_new_tokens=8).new_token_list == expected
    folder = tmp_path / "eagle"
    trained = json.loads((folder / "training_report.json").read_text())
    train_main(["heads", "--measure-cost", str(folder)])
    report = json.loads((folder / "training_report.json").read_text())
    assert report["cost"]["remeasured"] and report["cost"]["gamma"] == trained["cost"]["gamma"]
    assert set(report["cost"]["drafters"]) == set(trained["cost"]["drafters"]) == {"eagle", "draft model"}
    assert report | {"cost": trained["cost"]} == trained  # nothing else rewritten
    card = (folder / "README.md").read_text()
    assert card == render_head_card(folder) and "measured again after training" in card
    with pytest.raises(ConfigError, match="has none"):
        train_main(["heads", "--measure-cost", str(tmp_path)])
