"""Notebook 06's tuning panel: its logic (`run_case`, `describe_case`, `plot_case`) and its wiring."""

import matplotlib

matplotlib.use("Agg")

import base64

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from specdec_lib import load_pair
from specdec_lib.core.errors import ConfigError
from specdec_lib.teaching.panel import (PANEL_DRAFTERS, PanelCase, case_png, check_case, describe_case, plot_case,
                                        run_case, static_bundle, tuning_panel)

#: a case as `run_case` returns it, made by hand (no model runs): every draft accepted at the first positions, the
#: bars as tall as the axis allows, where a legend would most easily cover them
MADE_UP = PanelCase("draft-model", "code", 4, 0.0, 2, 32, alpha=0.95, mean_acceptance_length=4.6,
                    per_position=[1.0, 1.0, 0.97, 0.9], speedup=1.5, identical="identical")


@pytest.fixture(scope="module")
def pair():
    return load_pair("embedded", device="cpu")


@pytest.mark.slow
@pytest.mark.parametrize("drafter", ["draft-model", "prompt-lookup", "early-exit", "eagle"])
def test_a_greedy_case_is_token_identical_and_its_numbers_are_consistent(pair, drafter):
    case = run_case(pair, drafter, "code", 3, prompts=1, max_new_tokens=12)
    assert case.identical == "identical"
    assert len(case.per_position) == 3 and all(0 <= p <= 1 for p in case.per_position)
    assert case.mean_acceptance_length is None or 1 <= case.mean_acceptance_length <= 4
    assert case.speedup > 0
    assert drafter in describe_case(case) and "identical to the target's" in describe_case(case)


@pytest.mark.slow
def test_a_sampled_case_is_reproducible_and_says_it_was_sampled(pair):
    first = run_case(pair, "draft-model", "prose", 2, temperature=0.8, prompts=1, max_new_tokens=10, seed=3)
    again = run_case(pair, "draft-model", "prose", 2, temperature=0.8, prompts=1, max_new_tokens=10, seed=3)
    assert first.identical is None and "sampled" in describe_case(first)
    assert (first.alpha, first.per_position) == (again.alpha, again.per_position)  # same seeds, same draws


@pytest.mark.slow
def test_the_plot_and_the_panel_render(pair):
    case = run_case(pair, "draft-model", "code", 4, prompts=1, max_new_tokens=8)
    left, right = plot_case(case)
    assert len(left.patches) == 4  # one bar per draft position
    assert right.get_title().startswith("speed-up")
    panel = tuning_panel(pair, prompts=1, max_new_tokens=6)
    (drafter, task), (gamma, temperature) = (box.children for box in panel.children[:2])
    assert drafter.options == PANEL_DRAFTERS and gamma.max == 8 and not gamma.continuous_update
    summary = panel.children[2]
    assert "gamma=3" in summary.value and "white-space: normal" in summary.value  # the first case ran, wrapped
    gamma.value = 5  # a change re-runs
    assert "gamma=5" in summary.value
    data, _ = panel._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in data  # a kernel shows the widget ...
    assert "gamma=5" in data["text/plain"] and "VBox" not in data["text/plain"]  # ... and a stored notebook the case
    assert base64.b64decode(data["image/png"]).startswith(b"\x89PNG")


def test_the_legends_leave_the_bars_and_the_curve_visible():
    figure = Figure(figsize=(10, 3.4), layout="constrained")
    left, right = plot_case(MADE_UP, figure.subplots(1, 2))
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    renderer = canvas.get_renderer()
    legend = left.get_legend().get_window_extent(renderer)
    assert not any(legend.overlaps(bar.get_window_extent(renderer)) for bar in left.patches)
    curve = right.get_lines()[0]  # the theory curve: its points must stay outside the legend's box
    points = right.transData.transform(curve.get_xydata())
    assert not any(right.get_legend().get_window_extent(renderer).contains(x, y) for x, y in points)


def test_the_static_fallback_is_a_figure_and_readable_text():
    bundle = static_bundle(MADE_UP)
    assert base64.b64decode(bundle["image/png"]) == case_png(MADE_UP)  # the same figure, deterministic
    assert case_png(MADE_UP).startswith(b"\x89PNG")
    assert describe_case(MADE_UP).split(", speed-up")[0] in bundle["text/plain"].replace("\n", " ")
    assert all(len(line) <= 100 for line in bundle["text/plain"].splitlines())  # wrapped, nothing cut off
    assert "<img" in bundle["text/html"] and "running kernel" in bundle["text/html"]


def test_bad_settings_are_explained():
    with pytest.raises(ConfigError, match="the panel offers"):
        check_case("cross-tokenizer", "code", 3, 0.0)
    with pytest.raises(ConfigError, match="Unknown task"):
        check_case("draft-model", "poetry", 3, 0.0)
    with pytest.raises(ConfigError, match="gamma"):
        check_case("draft-model", "code", 0, 0.0)
    with pytest.raises(ConfigError, match="temperature"):
        check_case("draft-model", "code", 3, -1.0)
    assert check_case("draft-model", "code", 3, 0.0).is_greedy
    assert check_case("draft-model", "code", 3, 0.7).temperature == 0.7
