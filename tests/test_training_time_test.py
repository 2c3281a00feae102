"""EAGLE-3 in training: the layer reads a fusion of several target layers, and training unrolls its later draft
steps exactly as it drafts them (training-time test).

- the attention of step j (`draft_step_attention`) is causal at step 1 and, at step j, the true pairs up to where the
  chain began plus the chain's own earlier drafts;
- `unrolled_predictions` at step j and position i equals what the layer predicts when it drafts for real: read the
  true pairs up to i - j + 1 into its cache, then autoregress j - 1 steps on its own features;
  (with the last layer's features, and with a fusion of two layers);
- the feature layers must be increasing indices ending with the last layer (-1), within the target;
- the one-step loss is EAGLE-1's, and later steps add their own terms;
- ``train heads --only eagle --eagle-test-steps K`` trains only the EAGLE layer, with K steps, and its card says so;
  the loss weights, the training length and the folder are options too, and the report records the command that
  reproduces it;
- ``python -m specdec_tools.training.eagle_ablation --quick`` trains the four variants (last layer or fused, one step
  or several) alike, and the shipped ablation's JSON holds those four, differing in nothing else;
- ``--scaling`` trains every design of the scaling curve on nested prefixes of one data set, with the same windows
  and steps per point, and the stored curve was made that way from the shipped EAGLE-3 layer's recipe.
"""

import json
import sys
from dataclasses import asdict, replace

import pytest
import torch

from specdec_lib.core.caches import new_cache
from specdec_lib.core.errors import ConfigError
from specdec_lib.drafters import EagleModule
from specdec_lib.drafters.eagle import eagle_architecture
from specdec_tools.training.cli import main as train_main
from specdec_tools.training.head_cards import render_head_card
from specdec_tools.training.head_data import target_features
from specdec_tools.training.heads import (HeadsSpec, draft_step_attention, eagle_loss, reproduce_command,
                                          unrolled_predictions)

STEPS = 3


@pytest.fixture(scope="module", params=[(-1,), (1, -1)], ids=["last-layer", "fused"])
def layer_and_data(sharp_tiny_pair, request):
    """A randomly initialised EAGLE layer on the sharp tiny target reading ``request.param``'s hidden states, and
    the target's states on two windows."""
    target = sharp_tiny_pair[0]
    torch.manual_seed(3)
    module = EagleModule(eagle_architecture(target, feature_layers=request.param), target)
    for parameter in module.parameters():
        torch.nn.init.normal_(parameter, std=0.3)
    windows = torch.randint(2, 64, (2, 13))  # [B, T + 1]
    return module.eval(), windows, target_features(target, windows, layers=request.param)  # [B, T, H * D]


def test_step_one_is_causal_and_step_j_sees_where_its_chain_began_and_its_own_drafts():
    assert torch.equal(draft_step_attention(5, 1), torch.ones(5, 5, dtype=torch.bool).tril())
    allowed = draft_step_attention(5, 3)  # [5, 15]: step 1's slots, step 2's, then step 3's own
    assert allowed.shape == (5, 15)
    # query 3 is the third draft of the chain that began at the true pair 1
    assert allowed[3, :5].tolist() == [True, True, False, False, False]
    assert allowed[3, 5:10].tolist() == [False, False, True, False, False]  # its second draft, at position 2
    assert allowed[3, 10:].tolist() == [False, False, False, True, False]  # itself
    assert not allowed[0, :5].any() and allowed[0, 10]  # no chain began before position 0: only itself


@torch.no_grad()
def test_unrolled_steps_predict_what_the_layer_drafts(layer_and_data):
    module, windows, features = layer_and_data
    next_ids = windows[:, 1:]  # x_1 .. x_T
    predictions = unrolled_predictions(module, features, next_ids, STEPS)
    assert [p.shape for p in predictions] == [features.shape[:2] + (module.config.hidden_size,)] * STEPS
    length = features.shape[1]
    for step in range(1, STEPS + 1):
        for position in range(step - 1, length):
            began = position - step + 1  # the chain's last true pair
            cache = new_cache(module)
            true = module.fuse_features(features[:, : began + 1])  # the true pairs' features
            drafted = module(true, next_ids[:, : began + 1], cache)[:, -1:]  # h^ of began + 1
            for later in range(2, step + 1):
                at = began + later - 1
                drafted = module(drafted, next_ids[:, at : at + 1], cache)  # on its own feature, as it drafts
            torch.testing.assert_close(predictions[step - 1][:, position], drafted[:, 0], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("layers", [(4, -1), (1,), (1, 1, -1), (-1, 1), (2, -1)])
def test_feature_layers_are_checked_against_the_target(sharp_tiny_pair, layers):
    target = sharp_tiny_pair[0]  # two layers: hidden states 0 (the embeddings) and 1, and -1 (the last, normed)
    with pytest.raises(ConfigError, match="feature_layers must be increasing"):
        EagleModule(eagle_architecture(target, feature_layers=layers), target)


@torch.no_grad()
def test_the_one_step_loss_is_eagle1s_and_later_steps_add_their_own(layer_and_data):
    module, windows, features = layer_and_data
    one, one_parts = eagle_loss(module, features, windows, cls_weight=0.1)
    assert float(one) == pytest.approx(one_parts["regression"] + 0.1 * one_parts["cls"], rel=1e-5)
    more, more_parts = eagle_loss(module, features, windows, cls_weight=0.1, steps=STEPS)
    assert {k: more_parts[k] for k in one_parts} == pytest.approx(one_parts, rel=1e-5)
    assert set(more_parts) - set(one_parts) == {"top1_step2", "top1_step3"}
    assert float(more) > float(one)
    cross_entropy_only, parts = eagle_loss(module, features, windows, cls_weight=1.0, regression_weight=0.0)
    assert float(cross_entropy_only) == pytest.approx(parts["cls"], rel=1e-5)  # EAGLE-3 drops the regression


def test_training_the_eagle_layer_alone_with_test_steps(tmp_path):
    train_main(["heads", "--quick", "--only", "eagle", "--eagle-test-steps", "2", "--out", str(tmp_path)])
    assert not (tmp_path / "heads").exists()
    folder = tmp_path / "eagle"
    report = json.loads((folder / "training_report.json").read_text())
    assert report["spec"]["eagle_test_steps"] == 2
    assert "top1_step2" in report["training"]["final"]
    card = (folder / "README.md").read_text()
    assert card == render_head_card(folder)
    assert "training-time test (EAGLE-3): steps 2 .. 2" in card and "and its training-time test" not in card
    with pytest.raises(ConfigError, match="--eagle-test-steps"):
        train_main(["heads", "--quick", "--eagle-test-steps", "0", "--out", str(tmp_path)])


def test_loss_weights_training_length_learning_rate_and_folder_are_options(tmp_path):
    train_main(["heads", "--quick", "--only", "eagle", "--eagle-regression-weight", "0", "--eagle-cls-weight", "1",
                "--eagle-steps", "2", "--train-windows", "4", "--learning-rate", "0.006", "--eagle-name", "eagle3",
                "--out", str(tmp_path)])
    folder = tmp_path / "eagle3"
    report = json.loads((folder / "training_report.json").read_text())
    spec = report["spec"]
    assert (spec["eagle_regression_weight"], spec["eagle_cls_weight"]) == (0.0, 1.0)
    assert report["training"]["steps"] == 2 and report["data"]["train_windows"] == 4
    assert spec["learning_rate"] == 0.006
    assert report["command"] == reproduce_command(HeadsSpec(**{**spec, "kinds": tuple(spec["kinds"]),
                                                               "eagle_gammas": tuple(spec["eagle_gammas"]),
                                                               "eagle_feature_layers": (-1,)}), "eagle3", quick=True)
    assert report["command"] == ("python -m specdec_tools train heads --quick --only eagle --eagle-regression-weight 0.0 "
                                 "--eagle-cls-weight 1.0 --eagle-steps 2 --train-windows 4 --learning-rate 0.006 "
                                 "--eagle-name eagle3")
    card = (folder / "README.md").read_text()
    assert card == render_head_card(folder)
    assert "no feature regression, as in EAGLE-3" in card and report["command"] in card
    assert card.startswith("# EAGLE layer") and "(EAGLE-1 style)" in card  # neither fused nor unrolled
    for option, value in (("--eagle-regression-weight", "-1"), ("--eagle-cls-weight", "nan"), ("--eagle-steps", "0"),
                          ("--train-windows", "0"), ("--learning-rate", "0"), ("--learning-rate", "2")):
        with pytest.raises(ConfigError, match=option):
            train_main(["heads", "--quick", option, value, "--out", str(tmp_path)])


def test_the_ablation_trains_four_variants_alike(tmp_path):
    from specdec_tools.training import eagle_ablation

    out = tmp_path / "ablation.json"
    eagle_ablation.main(["--quick", "--out", str(out)])
    result = json.loads(out.read_text())
    assert_ablation_shape(result, eagle_ablation)
    variants = eagle_ablation.variants(eagle_ablation.ABLATION_SPEC, eagle_ablation.FUSED_LAYERS, 3)
    assert len({replace(spec, eagle_feature_layers=(-1,), eagle_test_steps=1) for spec in variants.values()}) == 1


def assert_ablation_shape(result: dict, eagle_ablation) -> None:
    """Four runs: {last layer, fused} x {1, K} steps, each measured at the ablation's gamma."""
    runs = result["runs"]
    assert len(runs) == 4
    assert {(tuple(run["feature_layers"]), run["test_steps"]) for run in runs.values()} == {
        (layers, steps) for layers in ((-1,), eagle_ablation.FUSED_LAYERS) for steps in (1, eagle_ablation.TEST_STEPS)}
    for run in runs.values():
        assert 0 <= run["alpha"] <= 1 and len(run["per_position_acceptance"]) == eagle_ablation.ABLATION_GAMMA
        assert all(0 <= share <= 1 for share in run["per_position_acceptance"]) and run["train_seconds"] >= 0


def test_the_shipped_ablation_differs_only_in_the_two_changes():
    from specdec_lib.core.paths import data_dir
    from specdec_tools.training import eagle_ablation

    result = json.loads((data_dir() / "models" / eagle_ablation.ABLATION_FILE).read_text())
    assert_ablation_shape(result, eagle_ablation)
    assert all(run["train_seconds"] > 0 for run in result["runs"].values())
    shared = {key: value for key, value in result["spec"].items()
              if key not in ("eagle_feature_layers", "eagle_test_steps", "kinds")}
    assert shared == {key: value for key, value in json.loads(json.dumps(asdict(eagle_ablation.ABLATION_SPEC))).items()
                      if key in shared}


def assert_scaling_shape(result: dict, eagle_ablation) -> None:
    """Every design at every point, measured at the curve's gamma; steps and tokens grow with the windows."""
    designs = eagle_ablation.SCALING_DESIGNS
    windows = [point["train_windows"] for point in result["points"]]
    assert windows == sorted(set(windows)) and len(windows) >= 2
    for point in result["points"]:
        assert point["steps"] == max(1, point["train_windows"] * result["epochs"] // result["recipe"]["batch_windows"])
        assert point["train_tokens"] == point["train_windows"] * result["recipe"]["window"]
        assert list(point["runs"]) == list(designs)
        for name, run in point["runs"].items():
            layers, steps, regression = designs[name]
            assert (tuple(run["feature_layers"]), run["test_steps"], run["regression_weight"]) == (layers, steps, regression)
            assert 0 <= run["alpha"] <= 1 and len(run["per_position_acceptance"]) == result["gamma"]


def test_the_scaling_curve_trains_every_design_on_nested_data(tmp_path):
    from specdec_tools.training import eagle_ablation

    eagle_ablation.main(["--scaling", "--quick", "--out", str(tmp_path / "ablation.json")])
    result = json.loads((tmp_path / eagle_ablation.SCALING_FILE).read_text())
    assert_scaling_shape(result, eagle_ablation)
    assert len(result["points"]) == 2 and result["total_seconds"] > 0


def test_a_prefix_of_the_data_is_recorded_as_made_for_its_size():
    from specdec_tools.training.eagle_ablation import prefix_data
    from specdec_tools.training.head_data import FeatureData

    data = FeatureData(folder=None, target=None, tokenizer=None, windows=torch.arange(12).view(4, 3),
                       val=torch.zeros(1, 3), features=torch.ones(4, 2, 5), val_features=torch.ones(1, 2, 5),
                       layers=(-1,), source={"train_windows": 4, "seed": 1}, report={})
    part = prefix_data(data, 2)
    assert torch.equal(part.windows, data.windows[:2]) and part.features.shape == (2, 2, 5)
    assert part.source == {"train_windows": 2, "seed": 1} and part.val is data.val
    for bad in (0, 5):
        with pytest.raises(ConfigError, match="training windows"):
            prefix_data(data, bad)


def test_the_stored_scaling_curve_follows_the_shipped_recipe():
    """The stored curve: every design at every point, with the shipped EAGLE-3 layer's data, window and loss."""
    from specdec_lib.core.paths import data_dir
    from specdec_tools.training import eagle_ablation

    result = json.loads((data_dir() / "models" / eagle_ablation.SCALING_FILE).read_text())
    assert_scaling_shape(result, eagle_ablation)
    assert [point["train_windows"] for point in result["points"]] == list(eagle_ablation.SCALING_WINDOWS)
    shipped = json.loads((data_dir() / "models" / result["shipped_folder"] / "training_report.json").read_text())
    for field in ("window", "train_text", "batch_windows", "learning_rate", "seed", "eagle_intermediate"):
        assert result["recipe"][field] == shipped["spec"][field], field


def test_a_refused_option_is_one_line_at_the_shell(monkeypatch, capsys):
    from specdec_tools.__main__ import run_command_line

    monkeypatch.setattr(sys, "argv", ["specdec_tools", "train", "heads", "--quick", "--eagle-test-steps", "0"])
    assert run_command_line() == 2
    error = capsys.readouterr().err
    assert error.startswith("error: --eagle-test-steps must be an integer >= 1") and error.count("\n") == 1
