"""The training pipeline, end to end at toy scale: every model kind trains, saves and reloads."""
import json
import shutil

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from specdec_lib.loading import load_model_folder
from specdec_lib.core.paths import EMBEDDED_MODEL_NAMES, REPO_DATA_DIR
from specdec_lib import autoregressive_generate
from specdec_tools.training.cli import QUICK
from specdec_tools.training.cli import main as train_main
from specdec_tools.training.drafts import ship_drafts, shipped_corpus
from specdec_tools.training.target_text import retokenize_stream, target_text_stream
from specdec_tools.training.cards import render_card
from specdec_tools.training.corpus import SourceFile, split_files
from specdec_tools.training.depth_growth import grow_depth, grown_layer_index
from specdec_lib.core.forward import lm_head_logits
from specdec_tools.training.model_training import ModelSpec, build_model
from specdec_lib.bench.model_measures import forward_cost, greedy_agreement, greedy_continuations
from specdec_tools.training.measure import heldout_distinct_4gram_shares
from specdec_tools.training.tokenizer_training import train_tokenizer_a, train_tokenizer_b

TRICKY_TEXT = "x = 'héllo ✓ 日本'\n    def   f(a,\tb):\n\t\treturn a  +  b  \n\n\n# ▁done\r\n"


def test_every_model_is_saved_in_transformers_format_and_reloads(quick_family):
    out, _ = quick_family
    for name in ("target", "draft", "draft_b"):
        model = AutoModelForCausalLM.from_pretrained(out / name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(out / name)
        assert json.loads((out / name / "config.json").read_text())["dtype"] == "float16"  # compact on disk
        assert model.dtype == torch.float32
        assert json.loads((out / name / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
        ids = tokenizer("def f(x):\n    return x", return_tensors="pt").input_ids
        assert model(input_ids=ids).logits.shape == (1, ids.shape[1], len(tokenizer))
    assert AutoModelForCausalLM.from_pretrained(out / "target").config.early_exit_layer == QUICK.target.early_exit_layer


def test_training_lowers_the_loss_and_reports_it(quick_family):
    out, report = quick_family
    assert set(report["validation_loss_nats_per_token"]) == {"target_base", "target", "target_early_exit", "draft",
                                                             "draft_b", "target_before_unlikelihood"}
    log = [json.loads(line) for line in (out / "training_log.jsonl").read_text().splitlines()]
    assert any(row["model"] == "target" and row["phase"] == "unlikelihood" for row in log)  # the target's last stage
    assert report["training"]["target_unlikelihood"]["unlikelihood_steps"] == QUICK.target_unlikelihood.steps
    assert {row["model"] for row in log} == {"target_base", "target", "draft", "draft_target_text", "draft_fresh_text",
                                             "draft_b", "draft_b_target_text"}
    assert any(row["phase"] == "distill" and row["model"] == "draft" for row in log)  # distilled from the target
    text = QUICK.draft_target_text  # ... and then both drafts trained on the target's own text
    assert report["training"]["target_text"]["stream_tokens"] == text.sequences * (text.prompt_tokens + text.new_tokens + 1)
    assert report["training"]["draft_target_text"]["distill_steps"] == text.steps
    assert report["training"]["draft_b_target_text"]["lm_steps"] == text.steps
    fresh = QUICK.draft_fresh_text  # ... and the draft last on fresh text, against the target's cached top-k
    assert report["training"]["draft_fresh_text"]["distill_steps"] == fresh.text.steps
    assert report["training"]["draft_fresh_text"]["text_tokens"] == fresh.text.sequences * (
        fresh.text.prompt_tokens + fresh.text.new_tokens + 1)
    manifest = json.loads((out / "corpus_manifest.json").read_text())
    assert manifest["train_files"] > 0 and manifest["validation_files"] > 0 and len(manifest["sha256"]) == 64


def test_both_tokenizers_round_trip_text_exactly_and_split_it_differently():
    texts = ["def add(a, b):\n    return a + b\n" * 20, "class Point:\n    x: int = 0\n" * 20]
    tok_a, tok_b = train_tokenizer_a(texts, 300), train_tokenizer_b(texts, 300)
    tricky = TRICKY_TEXT.replace("\r\n", "\n").replace("▁", "_")  # B's decoder maps its marker back to a space
    for tok in (tok_a, tok_b):
        assert tok.decode(tok.encode(tricky).ids, skip_special_tokens=False) == tricky
    assert tok_a.encode(tricky).tokens != tok_b.encode(tricky).tokens
    assert any(t.startswith("<0x") for t in tok_b.encode("日本").tokens)  # unseen characters fall back to bytes


def test_validation_split_is_by_path_and_never_empty():
    files = [SourceFile(f"pkg/m{i}.py", "x = 1\n") for i in range(5)]
    train, val = split_files(files)
    assert val and len(train) + len(val) == 5
    assert split_files(files) == (train, val)


def test_measurements_run_on_saved_models(quick_family):
    out, _ = quick_family
    target, _ = load_model_folder(out / "target", device="cpu")
    draft, _ = load_model_folder(out / "draft", device="cpu")
    ids = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]])
    assert forward_cost(target, ids, block=2, repeats=3) > 0
    continuations = greedy_continuations(target, [ids], new_tokens=8)
    result = greedy_agreement(target, continuations)  # a model always agrees with itself
    assert result["alpha"] == 1.0 and result["positions"] == 8
    assert 0.0 <= greedy_agreement(draft, continuations)["alpha"] <= 1.0
    # α split by whether the target was repeating itself: the two parts add up to the whole
    split = greedy_agreement(draft, continuations)
    repeats = split["repeat_positions"]
    parts = [(share, n) for share, n in ((split["alpha_in_repeats"], repeats), (split["alpha_fresh"], 8 - repeats))
             if share is not None]
    assert sum(share * n for share, n in parts) / 8 == pytest.approx(split["alpha"], abs=1e-3)


def test_forward_costs_are_timed_in_turns_so_a_busy_moment_hits_every_job(monkeypatch):
    import specdec_lib.bench.model_measures as measure
    calls = []
    seconds = iter([3.0, 1.0, 5.0, 2.0, 4.0, 9.0])  # job a, job b, a, b, a, b

    def fake_cost(model, context_ids, block=1, repeats=60):
        calls.append((model, block, repeats))
        return next(seconds)
    monkeypatch.setattr(measure, "forward_cost", fake_cost)
    context = torch.zeros(1, 4, dtype=torch.long)
    costs = measure.interleaved_forward_costs({"a": ("A", context, 1), "b": ("B", context, 3)}, turns=3, repeats=7)
    assert calls == [("A", 1, 7), ("B", 3, 7)] * 3  # round-robin, not all of a then all of b
    assert costs == {"a": 4.0, "b": 2.0}  # the median of each job's turns


def test_heldout_looping_is_measured_against_the_texts_own_repeats(quick_family):
    out, _ = quick_family
    target, _ = load_model_folder(out / "target", device="cpu")
    stream = torch.tensor([5, 6, 7, 8] * 40)  # text that does nothing but repeat one 4-gram
    shares = heldout_distinct_4gram_shares({"target": target}, stream, windows=3, prompt_tokens=8, new_tokens=12)
    assert set(shares) == {"target", "held-out text"}
    assert shares["held-out text"] == pytest.approx(4 / 9, abs=1e-4)  # 4 distinct of 9 4-grams in 12 tokens
    assert 0.0 < shares["target"] <= 1.0


def _tiny_spec(layers: int, hidden: int = 32, **changes) -> ModelSpec:
    return ModelSpec(layers=layers, hidden=hidden, intermediate=64, heads=2, context=64, steps=0, batch_size=1,
                     learning_rate=1e-3, **changes)


def test_depth_growth_starts_as_the_same_function_and_maps_the_exit_layer():
    torch.manual_seed(0)
    base = build_model(_tiny_spec(2), vocab_size=50, eos_token_id=0, seed=3).eval()
    for block in base.model.layers:  # random, non-zero output projections: the check is not trivial
        torch.nn.init.normal_(block.self_attn.o_proj.weight, std=0.2)
        torch.nn.init.normal_(block.mlp.down_proj.weight, std=0.2)
    grown = grow_depth(base, _tiny_spec(6), seed=4).eval()
    ids = torch.randint(0, 50, (2, 17))
    with torch.no_grad():
        before = base(input_ids=ids, output_hidden_states=True)
        after = grown(input_ids=ids, output_hidden_states=True)
        assert torch.allclose(after.logits, before.logits, atol=1e-5)
        for old_layer in range(2):  # the last hidden state is after the final norm (checked by the logits)
            new_layer = grown_layer_index(old_layer, factor=3)
            assert torch.allclose(after.hidden_states[new_layer], before.hidden_states[old_layer], atol=1e-5)
        assert torch.allclose(lm_head_logits(grown, after.hidden_states[grown_layer_index(1, 3)]),
                              lm_head_logits(base, before.hidden_states[1]), atol=1e-5)
    assert grown.config.num_hidden_layers == 6
    assert grown.model.layers[1].mlp.up_proj.weight.abs().sum() > 0  # a copy of the trained block, not blank


@pytest.mark.parametrize("spec, message", [(_tiny_spec(5), "whole number"), (_tiny_spec(4, hidden=48), "hidden 48")])
def test_depth_growth_refuses_a_shape_it_cannot_reproduce(spec, message):
    base = build_model(_tiny_spec(2), vocab_size=50, eos_token_id=0, seed=3)
    with pytest.raises(ValueError, match=message):
        grow_depth(base, spec, seed=4)


def test_the_shipped_cards_are_rendered_from_the_shipped_measurements():
    """Every number in a card comes from training_report.json and measurements.json: never typed by hand."""
    models = REPO_DATA_DIR / "models"
    report, measurements, manifest = (json.loads((models / f).read_text()) for f in
                                      ("training_report.json", "measurements.json", "corpus_manifest.json"))
    for name in EMBEDDED_MODEL_NAMES:
        config = json.loads((models / name / "config.json").read_text())
        assert (models / name / "README.md").read_text() == render_card(name, report, measurements, manifest, config), name


def test_target_text_is_corpus_windows_followed_by_the_targets_own_greedy_continuation():
    torch.manual_seed(0)
    target = build_model(_tiny_spec(2), vocab_size=50, eos_token_id=0, seed=0).eval()
    tokens = torch.randint(1, 50, (400,), dtype=torch.int32)
    stream = target_text_stream(target, tokens, sequences=5, prompt_tokens=6, new_tokens=7, batch_size=2, seed=3)
    rows = stream.view(5, 6 + 7 + 1)
    assert (rows[:, -1] == 0).all()  # EOS after every text, as between the corpus's files
    for row in rows:
        alone = autoregressive_generate(target, row[None, :6], max_new_tokens=7, eos_token_id=None)
        assert row[6:13].tolist() == alone.new_token_list  # batched generation = the target alone, row by row
    again = target_text_stream(target, tokens, sequences=5, prompt_tokens=6, new_tokens=7, batch_size=5, seed=3)
    assert torch.equal(stream, again)  # seeded, and independent of the batch size
    with pytest.raises(ValueError, match="must be >= 1"):
        target_text_stream(target, tokens, sequences=0, prompt_tokens=6, new_tokens=7, batch_size=2, seed=3)


def test_retraining_one_model_refuses_a_corpus_other_than_the_familys(tmp_path):
    (tmp_path / "corpus_manifest.json").write_text(json.dumps({"sha256": "0" * 64, "python_version": "3.0.0"}))
    with pytest.raises(ValueError, match="not the corpus the shipped family was trained on"):
        shipped_corpus(QUICK, tmp_path)


def test_retrained_drafts_replace_the_old_ones_in_the_report_and_the_log(quick_family, tmp_path):
    out, report = quick_family
    family = tmp_path / "family"
    shutil.copytree(out, family)
    draft, tokenizer = load_model_folder(family / "draft", device="cpu")
    summaries = {"draft": {**report["training"]["draft"], "seconds": 12345.0}}
    log = [{"model": "draft", "phase": "distill", "step": 0, "kl": 1.0, "seconds": 0.0}]
    ship_drafts({"draft": draft}, {"a": tokenizer}, summaries, log, ["def f(x):\n    return x\n" * 40], QUICK, family)
    shipped = json.loads((family / "training_report.json").read_text())
    assert shipped["training"]["draft"]["seconds"] == 12345.0
    assert shipped["drafts_retrained"] == ["draft"]  # a whole retraining, which the target's card cites
    assert shipped["training"]["target"] == report["training"]["target"]  # the other models' records are kept
    lines = [json.loads(line) for line in (family / "training_log.jsonl").read_text().splitlines()]
    assert [row for row in lines if row["model"] in ("draft", "draft_target_text")] == log
    assert {row["model"] for row in lines} >= {"target_base", "target", "draft_b", "draft_b_target_text"}


def test_target_text_is_the_same_text_in_the_other_tokenizer(quick_family):
    out, _ = quick_family
    tok_a = AutoTokenizer.from_pretrained(out / "target")
    tok_b = AutoTokenizer.from_pretrained(out / "draft_b")
    texts = ["def f(x):\n    return x\n", "class A:\n    pass\n"]
    stream_a = torch.tensor([*tok_a(texts[0]).input_ids, tok_a.eos_token_id, *tok_a(texts[1]).input_ids,
                             tok_a.eos_token_id])
    stream_b = retokenize_stream(stream_a, tok_a, tok_b)
    pieces = tok_b.decode(stream_b.tolist()).split(tok_b.eos_token)
    assert pieces == [*texts, ""]  # each text once, EOS after each, in B's ids
    assert stream_b.tolist() != stream_a.tolist()


def test_the_drafts_command_refuses_a_folder_without_a_family(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        train_main(["drafts", "--models", str(tmp_path)])
    assert stop.value.code == 2
    assert "no target/config.json there" in capsys.readouterr().err
