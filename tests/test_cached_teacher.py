"""The draft's fresh-text phase (specdec_tools.training.cached_teacher): the cached teacher is the teacher, the top-k KL
is the KL where it keeps every token, training on it pulls the draft towards the target, and the command that
applies the phase to a shipped draft runs once and records it."""
import json
import shutil

import pytest
import torch
import torch.nn.functional as F

from specdec_tools.training.cli import QUICK
from specdec_tools.training.cli import main as train_main
from specdec_tools.training.cached_teacher import (CachedTeacherSpec, distill_on_cached_teacher,
                                                   sequences_of, teacher_top_k, top_k_kl)
from specdec_tools.training.drafts import apply_fresh_text_to_shipped_draft
from specdec_tools.training.model_training import ModelSpec, build_model
from specdec_tools.training.target_text import TargetTextSpec, target_text_stream

VOCAB = 30


def _model(seed: int, layers: int = 1):
    spec = ModelSpec(layers=layers, hidden=16, intermediate=32, heads=2, context=32, steps=0, batch_size=1,
                     learning_rate=1e-3, warmup_steps=2)
    return build_model(spec, vocab_size=VOCAB, eos_token_id=0, seed=seed).eval(), spec


def test_the_cache_holds_the_teachers_most_likely_tokens_of_each_sequence_read_alone():
    teacher, _ = _model(0, layers=2)
    sequences = torch.randint(1, VOCAB, (5, 9))
    cached = teacher_top_k(teacher, sequences, k=4, batch_size=2)  # batches of 2: batching must not matter
    assert cached.ids.shape == cached.log_probs.shape == (5, 8, 4)
    for n in range(5):
        with torch.no_grad():
            log_p = F.log_softmax(teacher(input_ids=sequences[n:n + 1, :-1]).logits[0], -1)  # [8, V]
        values, ids = log_p.topk(4, -1)
        assert torch.equal(cached.ids[n], ids)
        assert torch.allclose(cached.log_probs[n], values, atol=1e-5)
    with pytest.raises(ValueError, match="top_k must be between 1 and the vocabulary size 30"):
        teacher_top_k(teacher, sequences, k=31)


def test_the_top_k_kl_is_the_full_kl_when_every_token_is_kept_and_below_it_otherwise():
    teacher, _ = _model(0, layers=2)
    student, _ = _model(1)
    sequences = torch.randint(1, VOCAB, (3, 7))
    with torch.no_grad():
        log_p = F.log_softmax(teacher(input_ids=sequences[:, :-1]).logits, -1)  # [3, 6, V]
        log_q = F.log_softmax(student(input_ids=sequences[:, :-1]).logits, -1)
        full_kl = (log_p.exp() * (log_p - log_q)).sum(-1).mean()
        everything, parts = top_k_kl(student, sequences, teacher_top_k(teacher, sequences, k=VOCAB))
        assert everything.item() == pytest.approx(full_kl.item(), rel=1e-4)
        assert parts["teacher_mass"] == pytest.approx(1.0, abs=1e-5)
        for k in (1, 3, 10):  # coarsened to k tokens + "the rest": never negative, never above the full KL
            some, parts = top_k_kl(student, sequences, teacher_top_k(teacher, sequences, k=k))
            assert 0.0 < some.item() < full_kl.item()
            assert 0.0 < parts["teacher_mass"] < 1.0
        assert top_k_kl(teacher, sequences, teacher_top_k(teacher, sequences, k=3))[0].item() == pytest.approx(0, abs=1e-5)


def test_training_on_the_cache_brings_the_draft_closer_to_the_teacher():
    teacher, _ = _model(0, layers=2)
    draft, draft_spec = _model(1)
    sequences = torch.randint(1, VOCAB, (12, 10))
    cached = teacher_top_k(teacher, sequences, k=8)
    phase = CachedTeacherSpec(text=TargetTextSpec(sequences=12, prompt_tokens=4, new_tokens=5, batch_size=4, steps=40),
                              top_k=8, sequences_per_step=4, learning_rate=1e-2, warmup_steps=2)
    with torch.no_grad():
        before = top_k_kl(draft, sequences, cached)[0].item()
    log: list = []
    summary = distill_on_cached_teacher(draft, draft_spec, phase, sequences, cached, seed=3, name="draft_fresh_text",
                                        log=log)
    with torch.no_grad():
        after = top_k_kl(draft, sequences, cached)[0].item()
    assert after < 0.7 * before
    assert summary["distill_steps"] == 40 and summary["distill_tokens"] == 40 * 4 * 9
    assert {row["phase"] for row in log} == {"distill_top_k"} and log[-1]["step"] == 39


def test_the_target_text_stream_splits_back_into_its_sequences():
    target, _ = _model(0)
    text = TargetTextSpec(sequences=3, prompt_tokens=4, new_tokens=5, batch_size=2, steps=1)
    stream = target_text_stream(target, torch.randint(1, VOCAB, (200,)), sequences=3, prompt_tokens=4, new_tokens=5,
                                batch_size=2, seed=0)
    sequences = sequences_of(stream, text)
    assert sequences.shape == (3, 10) and (sequences[:, -1] == 0).all()  # each ends with its EOS
    assert torch.equal(sequences.flatten(), stream.long())


@pytest.fixture(scope="module")
def family_without_the_phase(quick_family, tmp_path_factory):
    """A quick family whose report says its draft never went through the phase (as the shipped one before it)."""
    out = tmp_path_factory.mktemp("models") / "family"
    shutil.copytree(quick_family[0], out)
    report = json.loads((out / "training_report.json").read_text())
    del report["training"]["draft_fresh_text"]
    (out / "training_report.json").write_text(json.dumps(report))
    log = [line for line in (out / "training_log.jsonl").read_text().splitlines()
           if json.loads(line)["model"] != "draft_fresh_text"]
    (out / "training_log.jsonl").write_text("".join(line + "\n" for line in log))
    return out


def test_the_command_applies_the_phase_once_and_records_it(family_without_the_phase, tmp_path):
    family = tmp_path / "family"
    shutil.copytree(family_without_the_phase, family)
    weights_before = (family / "draft" / "model.safetensors").read_bytes()
    log_before = (family / "training_log.jsonl").read_text().splitlines()
    report = apply_fresh_text_to_shipped_draft(QUICK, family, tmp_path / "work")
    assert (family / "draft" / "model.safetensors").read_bytes() != weights_before
    assert (tmp_path / "work" / "draft_target_distilled" / "model.safetensors").read_bytes() == weights_before
    fresh = report["training"]["draft_fresh_text"]
    assert fresh["distill_steps"] == QUICK.draft_fresh_text.text.steps
    assert fresh["text_tokens"] == 6 * (8 + 12 + 1)
    assert report["draft_fresh_text_applied_afterwards"] is True
    assert "drafts_retrained" not in report  # one phase, not `train drafts`: the target's card must not say so
    assert json.loads((family / "training_report.json").read_text()) == report
    log = (family / "training_log.jsonl").read_text().splitlines()
    assert log[:len(log_before)] == log_before  # the earlier phases' lines are kept ...
    assert {json.loads(line)["model"] for line in log[len(log_before):]} == {"draft_fresh_text"}  # ... and its added
    with pytest.raises(ValueError, match="already went through the fresh-text phase"):
        apply_fresh_text_to_shipped_draft(QUICK, family, tmp_path / "work")


def test_the_fresh_text_command_refuses_a_folder_without_a_family(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        train_main(["fresh-text", "--models", str(tmp_path)])
    assert stop.value.code == 2
    assert "no target/config.json there" in capsys.readouterr().err
