"""viz.py: round views (what each round drafted, accepted and added), their HTML, the stepper and the plots.

The HTML and plots are checked on hand-made rounds whose right answer is known; `trace_rounds` is checked on
tiny random models against the library's own `speculative_generate`.
"""

import re

import matplotlib
import pytest
import torch

matplotlib.use("Agg")  # no display in tests
import matplotlib.pyplot as plt  # noqa: E402

from specdec_lib import DraftModelDrafter, speculative_generate  # noqa: E402
from specdec_lib.core.errors import ConfigError  # noqa: E402
from specdec_lib.core.theory import expected_tokens_per_round  # noqa: E402
from specdec_lib.core.result import GenerationResult  # noqa: E402
from specdec_lib.core.trace import RoundRecord, Trace  # noqa: E402
from specdec_lib.teaching.viz import (  # noqa: E402
    STEPPER_NOTE,
    STYLES,
    RoundView,
    plot_acceptance_by_position,
    plot_tokens_per_forward_vs_gamma,
    render_rounds_html,
    plural,
    round_stepper,
    rounds_upto_html,
    stepper_fallback,
    token_text,
    trace_rounds,
    views_from_run,
)


class FakeTokenizer:
    """Just ``decode``, from a fixed table: all the HTML needs."""

    TEXTS = {1: "def", 2: " x", 3: "<b>", 4: "&", 5: "\n", 6: "y", 7: "a", 8: "b", 9: "c", 10: ""}

    def decode(self, ids):
        return "".join(self.TEXTS[i] for i in ids)


TOKENIZER = FakeTokenizer()


def view(draft, accepted, target_token, kind):
    """The view of a hand-made round: ``draft`` proposed, the first ``accepted`` kept, then ``target_token``."""
    emitted = accepted + (target_token is not None)
    return RoundView(RoundRecord(len(draft), accepted, emitted, 0.0, 0.0, len(draft), kind, tuple(draft)),
                     target_token)


VIEWS = [
    view((), 0, 1, "prefill"),  # prefill: "def"
    view((2, 3, 4, 5), 2, 6, "recovered"),  # " x", "<b>" accepted; "&" rejected; "\n" unchecked; "y" recovered
    view((7, 8), 2, 9, "bonus"),  # "a", "b" accepted; "c" bonus
]


def spans(page, kind):
    """Texts of the token spans of one kind (accepted, rejected, unchecked, recovered, bonus), in order."""
    return re.findall(rf'<span class="sd-token sd-{kind}" title="[^"]*" style="[^"]*">(.*?)</span>', page)


def rows(page):
    return page.count('<div class="sd-round"')


def test_round_view_kinds_and_emitted():
    assert VIEWS[0].prefill and VIEWS[0].target_kind == "target" and VIEWS[0].emitted == [1]
    assert not VIEWS[1].prefill and VIEWS[1].target_kind == "recovered" and VIEWS[1].emitted == [2, 3, 6]
    assert VIEWS[2].target_kind == "bonus" and VIEWS[2].emitted == [7, 8, 9]
    assert view((), 0, 4, "target").target_kind == "target"  # a round that drafted nothing
    assert view((7, 1), 2, None, "bonus").emitted == [7, 1]  # generation ended at an accepted EOS
    with pytest.raises(ConfigError, match="accepted"):
        view((7,), 2, 9, "bonus")


@pytest.mark.parametrize(
    "draft, accepted, kind",
    [((7,), 0, "prefill"), ((7,), 1, "target"), ((7, 8), 2, "recovered"), ((7, 8), 1, "bonus"), ((), 0, "bonus"),
     ((7,), 1, "accepted")],
)
def test_round_view_refuses_a_kind_that_contradicts_its_counts(draft, accepted, kind):
    with pytest.raises(ConfigError, match="round|kind"):
        view(draft, accepted, 1, kind)


def test_html_colours_each_kind_and_escapes_token_text():
    page = render_rounds_html(VIEWS, TOKENIZER)
    assert spans(page, "accepted") == [" x", "&lt;b&gt;", "a", "b"]
    assert spans(page, "rejected") == ["&amp;"]
    assert spans(page, "unchecked") == ["↵"]  # a newline is made visible
    assert spans(page, "recovered") == ["y"]
    assert spans(page, "bonus") == ["c"]
    assert spans(page, "target") == ["def"]  # the prefill drafts nothing: an ordinary target token
    assert "<b>" not in page  # raw token text never becomes markup
    assert "green" not in STYLES["rejected"] and "line-through" in STYLES["rejected"]
    assert f'style="white-space:pre;padding:0 2px;margin:0 1px;border-radius:3px;{STYLES["accepted"]}">&lt;b&gt;' in page
    assert "#1b5e20" in STYLES["accepted"] and "#b71c1c" in STYLES["rejected"]
    assert "#9e9e9e" in STYLES["unchecked"] and "bold" in STYLES["recovered"] and "bold" in STYLES["bonus"]
    assert 'class="sd-legend"' in page and "first rejected draft token" in page
    assert "2/4 accepted → 3 tokens" in page and "prefill" in page
    assert "after 3 of 3 rounds: 7 tokens from 3 target forwards" in page


def test_html_counts_read_in_the_singular():
    page = rounds_upto_html(VIEWS[:1], TOKENIZER, 1)
    assert "prefill: the prompt's forward, no draft → 1 token<" in page
    assert "after 1 of 1 round: 1 token from 1 target forward<" in page
    assert "after 0 of 3 rounds: 0 tokens from 0 target forwards" in rounds_upto_html(VIEWS, TOKENIZER, 0)
    assert (plural(1, "thread"), plural(2, "thread"), plural(0, "token")) == ("1 thread", "2 threads", "0 tokens")


def test_the_target_token_takes_the_place_of_the_rejected_one():
    row = rounds_upto_html(VIEWS, TOKENIZER, 2).split('<div class="sd-round"')[2]
    kinds = re.findall(r'class="sd-token sd-(\w+)"', row)
    assert kinds == ["accepted", "accepted", "rejected", "recovered", "unchecked"]


def test_token_text_makes_whitespace_visible():
    assert token_text(TOKENIZER, 5) == "↵"
    assert token_text(TOKENIZER, 10) == "∅"


@pytest.mark.parametrize("n", [0, 1, 2, 3])
def test_rounds_upto_shows_exactly_n_rounds(n):
    page = rounds_upto_html(VIEWS, TOKENIZER, n)
    assert rows(page) == n
    assert f"after {n} of 3 rounds" in page
    assert len(spans(page, "rejected")) == (1 if n >= 2 else 0)


@pytest.mark.parametrize("n", [-1, 4, 1.0, True])
def test_rounds_upto_refuses_a_bad_n(n):
    with pytest.raises(ConfigError, match="must be an integer between 0 and 3, got"):
        rounds_upto_html(VIEWS, TOKENIZER, n)


def test_stepper_builds_and_follows_the_slider():
    widgets = pytest.importorskip("ipywidgets")
    stepper = round_stepper(VIEWS, TOKENIZER)
    controls, view = stepper.children
    play, slider = controls.children
    assert isinstance(play, widgets.Play) and isinstance(slider, widgets.IntSlider)
    assert (slider.min, slider.max, slider.value) == (0, 3, 1)
    assert rows(view.value) == 1
    slider.value = 3
    assert view.value == render_rounds_html(VIEWS, TOKENIZER)
    slider.value = 0
    assert rows(view.value) == 0


def test_stepper_on_no_rounds():
    pytest.importorskip("ipywidgets")
    assert rows(round_stepper([], TOKENIZER).children[1].value) == 0


@pytest.mark.parametrize("n", [0, 1, 3])
def test_stepper_fallback_is_the_rounds_shown_and_a_note(n):
    fallback = stepper_fallback(VIEWS, TOKENIZER, n)
    assert set(fallback) == {"text/html", "text/plain"}
    page = fallback["text/html"]
    assert rounds_upto_html(VIEWS, TOKENIZER, n) in page and rows(page) == n
    assert STEPPER_NOTE == "Run this cell to step through the rounds." and STEPPER_NOTE in page
    assert fallback["text/plain"] == f"round stepper: {n} of 3 rounds shown. {STEPPER_NOTE}"
    assert "VBox" not in fallback["text/plain"] and "\n" not in fallback["text/plain"]


def test_stepper_displays_with_its_fallback_next_to_the_widget_view():
    widgets = pytest.importorskip("ipywidgets")
    stepper = round_stepper(VIEWS, TOKENIZER)
    assert isinstance(stepper, widgets.VBox)
    bundle = stepper._repr_mimebundle_()
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == stepper.model_id  # live: the widget
    assert bundle["text/html"] == stepper_fallback(VIEWS, TOKENIZER, 1)["text/html"]  # stored: round 1 + the note
    assert bundle["text/plain"] == f"round stepper: 1 of 3 rounds shown. {STEPPER_NOTE}"
    stepper.children[0].children[1].value = 2  # the fallback follows the slider
    assert rows(stepper._repr_mimebundle_()["text/html"]) == 2


def test_stepper_is_stored_readably_by_ipython_display():
    pytest.importorskip("ipywidgets")
    from IPython.core.formatters import DisplayFormatter

    data, _ = DisplayFormatter().format(round_stepper(VIEWS, TOKENIZER))
    assert {"text/html", "text/plain", "application/vnd.jupyter.widget-view+json"} <= set(data)
    assert data["text/plain"].startswith("round stepper: 1 of 3 rounds shown.")
    assert rows(data["text/html"]) == 1


def hand_made_result():
    """Prompt [5, 6]; prefill emits 1; a round drafts [2, 3, 4] and accepts 1 (+ recovered 7); a round drafts
    [8, 9] and accepts both (+ bonus 1)."""
    trace = Trace(start_time=0.0)
    for record in (RoundRecord(0, 0, 1, 0, 0, 0, "prefill"), RoundRecord(3, 1, 2, 0, 0, 3, "recovered", (2, 3, 4)),
                   RoundRecord(2, 2, 3, 0, 0, 2, "bonus", (8, 9))):
        trace.add_round(record, 0.0)
    sequence = torch.tensor([[5, 6, 1, 2, 7, 8, 9, 1]])
    return GenerationResult.single(sequence, 2, "speculative[test]", trace)


def test_views_from_run_pairs_drafts_with_the_trace():
    result = hand_made_result()
    views = views_from_run(result)
    assert [view.record for view in views] == result.trace.rounds
    assert [view.target_token for view in views] == [1, 7, 1]
    assert [view.emitted for view in views] == [[1], [2, 7], [8, 9, 1]]


def test_views_take_their_kind_from_the_trace():
    result = hand_made_result()
    result.trace.rounds[1].kind = "bonus"  # a trace that contradicts its own counts is refused, not re-derived
    with pytest.raises(ConfigError, match="'bonus' round cannot have 1 of 3"):
        views_from_run(result)


def test_views_from_run_refuses_a_trace_that_contradicts_itself_or_the_sequence():
    result = hand_made_result()
    result.trace.rounds[1].draft_tokens = (2, 3)
    with pytest.raises(ConfigError, match="drafted 3 tokens"):
        views_from_run(result)
    result.trace.rounds[1].draft_tokens = (4, 3, 4)
    with pytest.raises(ConfigError, match="not the committed tokens"):
        views_from_run(result)


def test_views_from_run_after_an_accepted_eos():
    trace = Trace(start_time=0.0)
    for record in (RoundRecord(0, 0, 1, 0, 0, 0, "prefill"), RoundRecord(3, 3, 2, 0, 0, 3, "bonus", (4, 1, 6))):
        trace.add_round(record, 0.0)  # drafts [4, EOS, 6], all accepted; generation stops after the EOS
    result = GenerationResult.single(torch.tensor([[5, 3, 4, 1]]), 1, "t", trace)
    views = views_from_run(result)
    assert views[1] == RoundView(result.trace.rounds[1], None) and views[1].emitted == [4, 1]  # nothing after EOS


@pytest.mark.parametrize("gamma", [1, 3, 5])
@pytest.mark.parametrize("which", ["self", "other"])
def test_trace_rounds_matches_the_library_run(tiny_llama, tiny_draft_llama, prompt_ids, gamma, which):
    draft_model = tiny_llama if which == "self" else tiny_draft_llama
    result, views = trace_rounds(tiny_llama, DraftModelDrafter(draft_model), prompt_ids, gamma=gamma, max_new_tokens=17)
    plain = speculative_generate(tiny_llama, DraftModelDrafter(draft_model), prompt_ids, gamma=gamma, max_new_tokens=17)
    assert result.new_token_list == plain.new_token_list
    assert result.method == plain.method == "speculative[draft-model]"
    assert [token for view in views for token in view.emitted] == result.new_token_list
    assert [v.record for v in views] == result.trace.rounds
    assert [(r.drafted, r.accepted, r.kind) for r in result.trace.rounds] == [(r.drafted, r.accepted, r.kind)
                                                                            for r in plain.trace.rounds]
    assert views[0].record.draft_tokens and not any(v.prefill for v in views)  # round 1 verifies drafts
    if which == "self":  # the target drafting for itself: every draft accepted, every target token a bonus
        assert all(v.record.accepted == v.record.drafted and v.target_kind in ("bonus", "target") for v in views)
        assert any(v.target_kind == "bonus" for v in views)


def test_plot_acceptance_by_position_puts_the_rates_on_the_axes():
    rates = [0.8, 0.6, 0.5]
    ax = plot_acceptance_by_position(rates, alpha=0.8)
    assert [bar.get_height() for bar in ax.patches] == pytest.approx(rates)
    assert [bar.get_x() + bar.get_width() / 2 for bar in ax.patches] == pytest.approx([1, 2, 3])
    (line,) = ax.get_lines()
    assert list(line.get_xdata()) == [1, 2, 3]
    assert list(line.get_ydata()) == pytest.approx([0.8, 0.64, 0.512])
    plt.close(ax.figure)


def test_plot_acceptance_by_position_on_given_axes_without_theory():
    fig, ax = plt.subplots()
    assert plot_acceptance_by_position([0.5], ax) is ax
    assert len(ax.patches) == 1 and not ax.get_lines()
    plt.close(fig)


def test_plot_tokens_per_forward_vs_gamma_shows_measurement_theory_and_ceiling():
    gammas, measured, alpha = [1, 2, 4], [1.7, 2.2, 2.9], 0.75
    ax = plot_tokens_per_forward_vs_gamma(gammas, measured, alpha)
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["measured"].get_xdata()) == gammas
    assert list(lines["measured"].get_ydata()) == measured
    theory = lines["theory, α = 0.75"]
    assert list(theory.get_xdata()) == [0, 1, 2, 3, 4]
    assert list(theory.get_ydata()) == pytest.approx([expected_tokens_per_round(alpha, g) for g in range(5)])
    assert list(lines["γ + 1 (every draft accepted)"].get_ydata()) == [1, 2, 3, 4, 5]
    plt.close(ax.figure)


def test_plot_tokens_per_forward_refuses_mismatched_lengths():
    with pytest.raises(ConfigError, match="same length"):
        plot_tokens_per_forward_vs_gamma([1, 2], [1.5], 0.5)
