"""Unlikelihood fine-tuning of the target (specdec_tools.training.unlikelihood): which tokens it penalises, the loss
it computes, and the command that applies it to a shipped target."""
import json
import shutil

import pytest
import torch

from specdec_tools.training.cli import QUICK
from specdec_tools.training.cli import main as train_main
from specdec_tools.training.model_training import ModelSpec, build_model
from specdec_lib.bench.model_measures import repeated_ngram_mask
from specdec_tools.training.unlikelihood import (UnlikelihoodSpec, apply_to_shipped_target, learning_rate_at,
                                                 unlikelihood_loss)


def test_only_later_occurrences_of_a_repeated_ngram_are_marked_every_token_of_them():
    tokens = torch.tensor([[1, 2, 3, 4, 1, 2, 3, 4, 9],    # "1 2 3 4" again at 4..7
                           [5, 6, 7, 8, 9, 10, 11, 12, 13]])  # nothing repeats
    mask = repeated_ngram_mask(tokens, 4)
    assert mask.tolist()[0] == [False] * 4 + [True] * 4 + [False]
    assert not mask[1].any()
    # overlapping repeats: "7 7 7 7 7" holds "7 7 7 7" twice; the second occurrence is tokens 1..4
    assert repeated_ngram_mask(torch.tensor([[7, 7, 7, 7, 7]]), 4).tolist() == [[False, True, True, True, True]]


def test_the_learning_rate_warms_up_linearly_then_stays_at_its_peak():
    spec = UnlikelihoodSpec(steps=60, learning_rate=1e-4, warmup_steps=10, weight=0.5, prompts=8, prompt_tokens=64,
                            new_tokens=64)
    rates = [learning_rate_at(step, spec) for step in range(spec.steps)]
    assert rates[:10] == pytest.approx([1e-5 * (step + 1) for step in range(10)])
    assert rates[10:] == pytest.approx([1e-4] * 50)  # no decay: a cosine spent half of 60 steps below half the peak


@pytest.fixture(scope="module")
def tiny_model():
    spec = ModelSpec(layers=1, hidden=16, intermediate=32, heads=2, context=32, steps=0, batch_size=1,
                     learning_rate=1e-3)
    return build_model(spec, vocab_size=20, eos_token_id=0, seed=0)


def test_the_loss_is_minus_log_one_minus_p_of_the_repeated_tokens_and_zero_without_repeats(tiny_model):
    sequences = torch.tensor([[3, 4, 5, 6, 7, 8]])  # prompt of 2, continuation of 4
    repeats = torch.tensor([[False, True, False, True]])
    with torch.no_grad():
        probs = tiny_model(input_ids=sequences[:, :-1]).logits[0, 1:].softmax(-1)  # [4, V]: the continuation's
        p = probs[torch.arange(4), sequences[0, 2:]]
        expected = -(torch.log(1 - p[1]) + torch.log(1 - p[3])) / 2
        assert torch.allclose(unlikelihood_loss(tiny_model, sequences, 2, repeats), expected, atol=1e-6)
        assert unlikelihood_loss(tiny_model, sequences, 2, torch.zeros_like(repeats)).item() == 0.0


def test_a_step_on_the_loss_makes_the_repeated_token_less_likely(tiny_model):
    model = build_model(ModelSpec(layers=1, hidden=16, intermediate=32, heads=2, context=32, steps=0, batch_size=1,
                                  learning_rate=1e-3), vocab_size=20, eos_token_id=0, seed=1)
    sequences, repeats = torch.tensor([[3, 4, 5, 5, 5]]), torch.tensor([[False, False, True]])

    def p_repeat():
        with torch.no_grad():
            return model(input_ids=sequences[:, :-1]).logits[0, -1].softmax(-1)[5].item()
    before = p_repeat()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)  # a small step: the gradient's direction
    unlikelihood_loss(model, sequences, 2, repeats).backward()
    optimizer.step()
    assert p_repeat() < before


@pytest.fixture(scope="module")
def family_without_the_stage(quick_family, tmp_path_factory):
    """A quick family whose report says its target never went through the stage (as the shipped one before it)."""
    out = tmp_path_factory.mktemp("models") / "family"
    shutil.copytree(quick_family[0], out)
    report = json.loads((out / "training_report.json").read_text())
    del report["training"]["target_unlikelihood"]
    (out / "training_report.json").write_text(json.dumps(report))
    return out


def test_the_command_applies_the_stage_once_and_records_it(family_without_the_stage, tmp_path):
    family = tmp_path / "family"
    shutil.copytree(family_without_the_stage, family)
    weights_before = (family / "target" / "model.safetensors").read_bytes()
    report = apply_to_shipped_target(QUICK, family, tmp_path / "work")
    assert (family / "target" / "model.safetensors").read_bytes() != weights_before
    assert (tmp_path / "work" / "target_before_unlikelihood" / "model.safetensors").read_bytes() == weights_before
    assert report["training"]["target_unlikelihood"]["unlikelihood_steps"] == QUICK.target_unlikelihood.steps
    val = report["validation_loss_nats_per_token"]
    assert {"target", "target_before_unlikelihood", "target_early_exit"} <= set(val)
    assert report["target_unlikelihood_applied_afterwards"] is True
    assert json.loads((family / "training_report.json").read_text()) == report
    log = [json.loads(line) for line in (family / "training_log.jsonl").read_text().splitlines()]
    assert any(row["phase"] == "unlikelihood" for row in log)
    with pytest.raises(ValueError, match="already went through the unlikelihood stage"):
        apply_to_shipped_target(QUICK, family, tmp_path / "work")


def test_the_unlikelihood_command_refuses_a_folder_without_a_family(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        train_main(["unlikelihood", "--models", str(tmp_path)])
    assert stop.value.code == 2
    assert "no target/config.json there" in capsys.readouterr().err
