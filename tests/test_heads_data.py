"""What the heads and the EAGLE layer train on, and what their cards report beside acceptance.

- ``--train-text target``: each training window is a corpus prompt followed by the target's own greedy continuation
  to the window's end (self-distillation), and the card says so; a window too short to continue the prompt is
  refused with the fix;
- one feature pass serves several drafters: `FeatureData.columns` gives each the layers it reads, refuses layers
  the pass did not keep, and `train_heads` refuses features made from other data;
- the cost ratio c is measured as decoding pays it, for the drafter and, beside it, the family's draft model
  (`draft_cost_ratios`), each generation's first proposal (the prompt's prefill) left out, and the card shows it;
- ``eagle_ablation --control`` trains the EAGLE-1 control of a shipped layer's recipe and puts both side by side.
"""

import json
from dataclasses import replace

import pytest
import torch

from specdec_lib.core.errors import ConfigError
from specdec_lib.core.paths import data_dir
from specdec_lib.decoders import autoregressive_generate
from specdec_lib.drafters.eagle import EagleDrafter, EagleModule, eagle_architecture
from specdec_tools.training.cli import main as train_main
from specdec_tools.training.head_cards import render_head_card
from specdec_lib.bench.profiling import TimedDrafter
from specdec_tools.training.head_measure import draft_cost_ratios
from specdec_tools.training.head_data import feature_data
from specdec_tools.training.heads import QUICK, reproduce_command, train_heads
from specdec_lib.decoders import speculative_generate

TARGET = data_dir() / "models" / "target"


@pytest.fixture(scope="module")
def quick_data():
    """The quick spec's features with the target's layers 4 and last, on text the target wrote."""
    spec = replace(QUICK, train_text="target")
    return spec, feature_data(spec, TARGET, layers=(4, -1))


def test_target_text_windows_are_a_corpus_prompt_and_the_targets_greedy_continuation(quick_data):
    spec, data = quick_data
    assert data.windows.shape == (spec.train_windows, spec.window + 1)
    prompt = spec.target_text_prompt
    for window in data.windows[:2]:
        again = autoregressive_generate(data.target, window[None, :prompt], max_new_tokens=spec.window - prompt,
                                        eos_token_id=None)
        assert torch.equal(again.sequence[0], window[:-1])
        assert window[-1] == data.target.config.eos_token_id  # only ever a label
    assert data.report["data"]["train_text"] == "target" and data.report["data"]["target_text_seconds"] >= 0


def test_one_feature_pass_serves_each_drafter_the_layers_it_reads(quick_data):
    spec, data = quick_data
    width = data.target.config.hidden_size
    assert data.features.shape[-1] == 2 * width
    assert torch.equal(data.columns(data.features, (-1,)), data.features[..., width:])
    assert torch.equal(data.columns(data.features, (4,)), data.features[..., :width])
    with pytest.raises(ConfigError, match=r"layers \[4, -1\], not \[12\]"):
        data.columns(data.features, (12, -1))
    with pytest.raises(ConfigError, match="were made with"):
        train_heads(replace(spec, train_windows=spec.train_windows + 1), "unused", TARGET, data=data)


def test_training_on_target_text_from_the_command_line_and_its_card(tmp_path):
    train_main(["heads", "--quick", "--only", "eagle", "--train-text", "target", "--window", "20", "--out",
                str(tmp_path)])
    folder = tmp_path / "eagle"
    report = json.loads((folder / "training_report.json").read_text())
    assert report["data"]["train_text"] == "target" and report["data"]["window"] == 20
    assert report["command"].endswith("--window 20 --train-text target")
    card = (folder / "README.md").read_text()
    assert card == render_head_card(folder)
    assert "the target's greedy continuation to the window's end" in card and "self-distillation)." not in card
    with pytest.raises(ConfigError, match="--window must be more than 8, got 8"):
        train_main(["heads", "--quick", "--train-text", "target", "--window", "8", "--out", str(tmp_path)])


def test_the_cost_clock_leaves_out_each_generations_first_proposal(sharp_tiny_pair):
    target = sharp_tiny_pair[0]
    clock = TimedDrafter(EagleDrafter(EagleModule(eagle_architecture(target), target)))
    prompt = torch.tensor([[3, 4, 5, 6]])
    results = [speculative_generate(target, clock, prompt, gamma=3, max_new_tokens=12) for _ in range(2)]
    proposals = [sum(1 for record in result.trace.rounds if record.drafted > 0) for result in results]
    steps = [(seconds, drafted) for seconds, drafted, first in clock.calls if not first]
    assert len(steps) == sum(proposals) - 2  # each generation's first proposal that drafted read the prompt
    assert all(seconds > 0 and 0 <= drafted <= 3 for seconds, drafted in steps)


def test_c_is_measured_for_each_drafter_side_by_side(sharp_tiny_pair):
    target, draft = sharp_tiny_pair
    from specdec_lib.drafters.draft_model import DraftModelDrafter

    drafters = {"eagle": EagleDrafter(EagleModule(eagle_architecture(target), target)),
                "draft model": DraftModelDrafter(draft)}
    prompts = [torch.tensor([[3, 4, 5, 6, 7]]), torch.tensor([[9, 8, 7]])]
    cost = draft_cost_ratios(target, drafters, prompts, gamma=3, new_tokens=10, turns=1)
    assert cost["gamma"] == 3 and cost["target_forward_ms"] > 0
    assert set(cost["drafters"]) == set(drafters)
    for numbers in cost["drafters"].values():
        assert numbers["c"] == pytest.approx(numbers["draft_ms_per_token"] / cost["target_forward_ms"], rel=0.01)


def test_the_shipped_eagle_cards_show_c_beside_the_draft_models():
    for name in ("eagle", "eagle3"):
        report = json.loads((data_dir() / "models" / name / "training_report.json").read_text())
        if "cost" not in report:
            continue  # trained before c was measured; its card says nothing about it
        assert set(report["cost"]["drafters"]) == {"eagle", "draft model"}
        card = render_head_card(data_dir() / "models" / name)
        assert all(f"| {m['c']:.3f} |" in card for m in report["cost"]["drafters"].values())


def test_the_control_trains_eagle1_on_the_shipped_recipe(tmp_path):
    from specdec_tools.training import eagle_ablation

    out = tmp_path / "ablation.json"
    eagle_ablation.main(["--control", "--quick", "--out", str(out)])
    result = json.loads((tmp_path / eagle_ablation.CONTROL_FILE).read_text())
    assert result["control"]["feature_layers"] == [-1] and result["control"]["test_steps"] == 1
    shipped = json.loads((data_dir() / "models" / "eagle3" / "training_report.json").read_text())
    assert result["shipped"] == eagle_ablation.summarise(shipped)
    assert 0 <= result["control"]["alpha"] <= 1 and result["control_total_seconds"] > 0


def test_the_published_loss_control_keeps_the_shipped_design_and_drops_the_feature_regression(tmp_path):
    from specdec_tools.training import eagle_ablation

    eagle_ablation.main(["--control", "--published-loss", "--quick", "--out", str(tmp_path / "ablation.json")])
    assert not (tmp_path / eagle_ablation.CONTROL_FILE).exists()  # the EAGLE-1 control's file is another run's
    result = json.loads((tmp_path / eagle_ablation.PUBLISHED_CONTROL_FILE).read_text())
    assert result["control"]["feature_layers"] == list(eagle_ablation.FUSED_LAYERS)
    assert result["control"]["test_steps"] == eagle_ablation.TEST_STEPS
    assert result["control_spec"]["eagle_regression_weight"] == 0
    shipped = json.loads((data_dir() / "models" / "eagle3" / "training_report.json").read_text())
    assert result["shipped"] == eagle_ablation.summarise(shipped)


def test_the_published_loss_names_which_control_to_train(capsys):
    from specdec_tools.training import eagle_ablation

    with pytest.raises(SystemExit) as exit_info:
        eagle_ablation.main(["--published-loss", "--quick"])
    assert exit_info.value.code == 2 and "--published-loss goes with --control" in capsys.readouterr().err


def test_a_report_gives_back_the_spec_and_command_it_was_trained_with():
    from specdec_tools.training import eagle_ablation

    report = json.loads((data_dir() / "models" / "eagle3" / "training_report.json").read_text())
    spec = eagle_ablation.spec_of(report)
    assert spec.eagle_feature_layers == tuple(report["spec"]["eagle_feature_layers"])
    assert reproduce_command(spec, "eagle3") == report["command"]


def test_the_stored_control_matches_the_shipped_eagle3():
    """Retraining eagle3 without re-running the control would leave notebook 05 comparing another layer."""
    from dataclasses import asdict

    from specdec_tools.training import eagle_ablation

    stored = json.loads((data_dir() / "models" / eagle_ablation.CONTROL_FILE).read_text())
    shipped = json.loads((data_dir() / "models" / "eagle3" / "training_report.json").read_text())
    assert stored["shipped"] == eagle_ablation.summarise(shipped)
    recipe = replace(eagle_ablation.spec_of(shipped), eagle_feature_layers=(-1,), eagle_test_steps=1)
    assert stored["control_spec"] == json.loads(json.dumps(asdict(recipe)))
    assert stored["control"]["feature_layers"] == [-1] and stored["control"]["test_steps"] == 1


def test_the_stored_published_loss_control_is_the_shipped_recipe_without_feature_regression():
    """Notebook 05 reads it as eagle3 with one change, the loss: retraining eagle3 means re-running it."""
    from dataclasses import asdict

    from specdec_tools.training import eagle_ablation

    stored = json.loads((data_dir() / "models" / eagle_ablation.PUBLISHED_CONTROL_FILE).read_text())
    shipped = json.loads((data_dir() / "models" / "eagle3" / "training_report.json").read_text())
    assert stored["shipped"] == eagle_ablation.summarise(shipped)
    recipe = replace(eagle_ablation.spec_of(shipped), eagle_regression_weight=0.0)
    assert stored["control_spec"] == json.loads(json.dumps(asdict(recipe)))
