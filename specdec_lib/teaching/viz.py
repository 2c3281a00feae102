"""Pictures of speculative decoding: what happened to every drafted token, and the two standard plots.

- **Round views.** `trace_rounds` runs the library's own `speculative_generate` and returns, next to its
  result, one `RoundView` per target forward (`views_from_run`): the trace's `RoundRecord` of the round (the tokens
  the drafter proposed, how many the target accepted, the round's kind: prefill, target, recovered or bonus) and
  the token the target added, read from the output.
  `render_rounds_html` colours them:

      accepted draft tokens        green
      the first rejected draft     red, struck through (the target disagreed here)
      the rest of the draft        grey (never checked: they followed a rejected token)
      the target's own token       blue, bold (recovered where the draft went wrong, bonus after a full accept)

  `round_stepper` wraps `rounds_upto_html` (the first n rounds) in an ipywidgets slider with a play button; a
  notebook stores it with a static fallback (`stepper_fallback`: the rounds it shows, as HTML and as one line of
  text), so a stored copy read without a running kernel shows the rounds instead of the widget's ``repr``.
- **Plots** (matplotlib, each returns its Axes): `plot_acceptance_by_position` and
  `plot_tokens_per_forward_vs_gamma` (the mean acceptance length, tokens per verification round, next to the theory
  curve of `theory.expected_tokens_per_round`).

Everything that decides *what* is shown is a plain function, so pytest checks it without a browser.
matplotlib and ipywidgets (the ``course`` extra) are imported only by the functions that need them.
"""

from __future__ import annotations

import functools
import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from ..core.drafting import Drafter
from ..core.errors import ConfigError
from ..core.validation import check_count
from ..decoders import speculative_generate
from ..core.stopping import AUTO
from ..core.theory import expected_tokens_per_round
from ..core.result import GenerationResult
from ..core.trace import RoundRecord

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from transformers import PreTrainedModel


@dataclass(frozen=True)
class RoundView:
    """One round (one target forward) as a learner should see it: the trace's `RoundRecord` of it (the tokens the
    drafter proposed, ``draft_tokens``; how many the target accepted, always a prefix; the round's ``kind``) and
    ``target_token``, the token the target added itself at position ``accepted``: recovered (it replaces the first
    rejected draft), bonus (every draft was accepted) or its own step (the prefill, or a round that drafted
    nothing); None only when an accepted end-of-sequence token ended generation inside the round. A view checks
    its record when made: counts, drafts and kind must agree (`ConfigError` otherwise)."""

    record: RoundRecord
    target_token: int | None

    def __post_init__(self) -> None:
        record = self.record
        if len(record.draft_tokens) != record.drafted:
            raise ConfigError(f"The round drafted {record.drafted} tokens according to its record, but it keeps "
                              f"{len(record.draft_tokens)} draft tokens: the trace contradicts itself.")
        if not 0 <= record.accepted <= record.drafted:
            raise ConfigError(f"A round's accepted drafts must lie between 0 and drafted = {record.drafted}, got "
                              f"{record.accepted}.")
        if record.kind not in _KIND_FITS:
            raise ConfigError(f"A round's kind must be one of {tuple(_KIND_FITS)}, got {record.kind!r}.")
        if not _KIND_FITS[record.kind](record.drafted, record.accepted):
            raise ConfigError(
                f"A {record.kind!r} round cannot have {record.accepted} of {record.drafted} drafts accepted: "
                f"{_KIND_RULES[record.kind]}."
            )

    @property
    def prefill(self) -> bool:
        """Whether this is a prefill that verified nothing (the prompt's forward, round 1, when the drafter drafted
        nothing yet; a drafter that drafts from the prompt makes round 1 a verification round)."""
        return self.record.kind == "prefill"

    @property
    def target_kind(self) -> str:
        """How the target's token is coloured: ``"recovered"``, ``"bonus"`` or ``"target"`` (its own step: the
        prefill or a round that drafted nothing)."""
        return "target" if self.prefill else self.record.kind

    @property
    def emitted(self) -> list[int]:
        """The tokens this round appended: the accepted drafts and the target's token (the record's ``emitted`` of
        them: an end-of-sequence token among the accepted drafts ends the round there)."""
        tail = [] if self.target_token is None else [self.target_token]
        return (list(self.record.draft_tokens[: self.record.accepted]) + tail)[: self.record.emitted]


# what each RoundRecord.kind says about (drafted, accepted), checked when a view is made
_KIND_FITS = {
    "prefill": lambda drafted, accepted: drafted == 0,
    "target": lambda drafted, accepted: drafted == 0,
    "recovered": lambda drafted, accepted: accepted < drafted,
    "bonus": lambda drafted, accepted: drafted > 0 and accepted == drafted,
}
_KIND_RULES = {
    "prefill": "a prefill round verifies no drafts",
    "target": "a target round drafts nothing",
    "recovered": "a recovered token replaces a rejected draft, so fewer than all drafts are accepted",
    "bonus": "a bonus token follows a full accept of a non-empty draft",
}


def views_from_run(result: GenerationResult) -> list[RoundView]:
    """One `RoundView` per round of a one-row run: each `RoundRecord` of its trace with the target's token, read
    from the output sequence. Checks that they agree (the accepted drafts must be the committed tokens) and raises
    `ConfigError` otherwise."""
    tokens = result.sequence[0].tolist()
    length = result.prompt_length
    views = []
    for index, record in enumerate(result.trace.rounds):
        committed = tokens[length : length + record.emitted]
        kept_drafts = min(record.accepted, record.emitted)
        if committed[:kept_drafts] != list(record.draft_tokens[:kept_drafts]):
            raise ConfigError(
                f"Round {index + 1}: the accepted drafts {list(record.draft_tokens[:kept_drafts])} are not the "
                f"committed tokens {committed[:kept_drafts]}: the trace does not belong to this sequence."
            )
        views.append(RoundView(record, committed[record.accepted] if record.emitted > record.accepted else None))
        length += record.emitted
    return views


def trace_rounds(
    target: PreTrainedModel,
    drafter: Drafter,
    input_ids: torch.Tensor,
    *,
    gamma: int,
    max_new_tokens: int,
    eos_token_id: int | Sequence[int] | str | None = AUTO,
) -> tuple[GenerationResult, list[RoundView]]:
    """Run greedy `speculative_generate` and also return what each round drafted, accepted and added (the run's own
    trace, read by `views_from_run`; ``eos_token_id="auto"`` stops at the target's EOS, None never stops early)."""
    result = speculative_generate(
        target, drafter, input_ids, gamma=gamma, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id
    )
    return result, views_from_run(result)


# --- HTML --------------------------------------------------------------------------------------------------

STYLES: dict[str, str] = {
    "accepted": "background:#d4f0d4;color:#1b5e20",
    "rejected": "background:#fbd5d5;color:#b71c1c;text-decoration:line-through",
    "unchecked": "background:#eeeeee;color:#9e9e9e",
    "recovered": "background:#d6e4fb;color:#0d47a1;font-weight:bold",
    "bonus": "background:#d6e4fb;color:#0d47a1;font-weight:bold",
    "target": "background:#d6e4fb;color:#0d47a1;font-weight:bold",
}
LEGEND: dict[str, str] = {
    "accepted": "accepted draft token",
    "rejected": "first rejected draft token",
    "unchecked": "rest of the draft (discarded)",
    "recovered": "target's token: recovered (replaces the rejected one) or bonus (after a full accept)",
}
_TOKEN_BOX = "white-space:pre;padding:0 2px;margin:0 1px;border-radius:3px"


def plural(count: int, word: str) -> str:
    """``count`` and ``word``, with an ``s`` unless count is 1: ``plural(1, "token") == "1 token"``."""
    return f"{count} {word}{'' if count == 1 else 's'}"


def token_text(tokenizer: Any, token_id: int) -> str:
    """The text of one token with its whitespace made visible: newline ``↵``, tab ``⇥``, empty ``∅``."""
    text = tokenizer.decode([int(token_id)])
    text = text.replace("\n", "↵").replace("\t", "⇥")
    return text if text else "∅"


def _token_span(tokenizer: Any, token_id: int, kind: str) -> str:
    return (
        f'<span class="sd-token sd-{kind}" title="{kind}: id {int(token_id)}" '
        f'style="{_TOKEN_BOX};{STYLES[kind]}">{html.escape(token_text(tokenizer, token_id))}</span>'
    )


def _round_row(view: RoundView, number: int, tokenizer: Any) -> str:
    # accepted drafts, the first rejected one, the target's token in its place, then the discarded rest
    draft, accepted = view.record.draft_tokens, view.record.accepted
    spans = [_token_span(tokenizer, token_id, "accepted") for token_id in draft[:accepted]]
    spans += [_token_span(tokenizer, token_id, "rejected") for token_id in draft[accepted : accepted + 1]]
    if view.target_token is not None:
        spans.append(_token_span(tokenizer, view.target_token, view.target_kind))
    spans += [_token_span(tokenizer, token_id, "unchecked") for token_id in draft[accepted + 1 :]]
    if view.prefill:
        summary = "prefill: the prompt's forward, no draft"
    elif not draft:
        summary = "no draft"
    else:
        summary = f"{accepted}/{len(draft)} accepted"
    summary += f" → {plural(len(view.emitted), 'token')}"
    return (
        f'<div class="sd-round" style="margin:2px 0">'
        f'<span class="sd-round-label" style="display:inline-block;width:5.5em;color:#555">round {number}</span>'
        f'{"".join(spans)}'
        f'<span class="sd-round-summary" style="margin-left:1em;color:#777">{summary}</span></div>'
    )


def _legend() -> str:
    items = "".join(
        f'<span class="sd-token sd-{kind}" style="{_TOKEN_BOX};{STYLES[kind]}">{html.escape(text)}</span> '
        for kind, text in LEGEND.items()
    )
    return f'<div class="sd-legend" style="margin-bottom:6px">{items}</div>'


def rounds_upto_html(views: Sequence[RoundView], tokenizer: Any, n: int) -> str:
    """HTML of the first ``n`` rounds (one row each, ``0 <= n <= len(views)``), a legend and a running total.

    ``tokenizer`` needs only ``decode(list[int]) -> str``; token texts are HTML-escaped.
    """
    check_count("n (the rounds to show)", n, minimum=0, maximum=len(views),
                hint=f"0 shows none; {len(views)}, the number of rounds, shows them all.")
    rows = "".join(_round_row(view, number, tokenizer) for number, view in enumerate(views[:n], start=1))
    emitted = sum(len(view.emitted) for view in views[:n])
    total = (
        f'<div class="sd-total" style="margin-top:6px;color:#555">after {n} of {plural(len(views), "round")}: '
        f"{plural(emitted, 'token')} from {plural(n, 'target forward')}</div>"
    )
    return f'<div class="sd-rounds" style="font-family:monospace;line-height:1.8">{_legend()}{rows}{total}</div>'


def render_rounds_html(views: Sequence[RoundView], tokenizer: Any) -> str:
    """HTML of every round: accepted (green), first rejected (red, struck), unchecked (grey), target (blue)."""
    return rounds_upto_html(views, tokenizer, len(views))


STEPPER_NOTE = "Run this cell to step through the rounds."


def stepper_fallback(views: Sequence[RoundView], tokenizer: Any, n: int) -> dict[str, str]:
    """The static stand-in stored with the round stepper: ``{"text/html": ..., "text/plain": ...}``.

    ``text/html`` is what the stepper shows at slider position ``n`` (`rounds_upto_html`) followed by
    `STEPPER_NOTE`; ``text/plain`` says the same in one line. A front end with a running kernel shows the widget;
    a stored copy read without one (GitHub, nbviewer, an editor without the widget state) shows these instead of
    the widget's ``VBox(children=(HBox(...`` repr.
    """
    note = f'<p class="sd-stepper-note" style="color:#777;font-style:italic">{html.escape(STEPPER_NOTE)}</p>'
    return {
        "text/html": f'<div class="sd-stepper-fallback">{rounds_upto_html(views, tokenizer, n)}{note}</div>',
        "text/plain": f"round stepper: {n} of {plural(len(views), 'round')} shown. {STEPPER_NOTE}",
    }


@functools.cache
def _stepper_class() -> type:
    """`RoundStepper`, made on first use so that ipywidgets is imported only by `round_stepper`."""
    import ipywidgets as widgets

    class RoundStepper(widgets.VBox):
        """The stepper's box: an ipywidgets VBox whose display also carries a static fallback (`stepper_fallback`)."""

        def __init__(self, children: list, fallback: Callable[[], dict[str, str]]) -> None:
            super().__init__(children)
            self._fallback = fallback

        def _repr_mimebundle_(self, **kwargs) -> dict:
            bundle = dict(super()._repr_mimebundle_(**kwargs) or {})  # text/plain + the widget view
            bundle.update(self._fallback())  # text/html and a readable text/plain, for stored copies
            return bundle

    return RoundStepper


def round_stepper(views: Sequence[RoundView], tokenizer: Any, *, interval_ms: int = 800) -> Any:
    """An ipywidgets viewer: a play button and a slider that show rounds 1..n (`rounds_upto_html`).

    Returns a VBox ``[HBox([play, slider]), HTML]``; when displayed it also offers `stepper_fallback` for the
    slider's current position, so a notebook stored with it stays readable without a running kernel.
    """
    import ipywidgets as widgets

    count = len(views)
    start = min(1, count)
    play = widgets.Play(value=start, min=0, max=count, step=1, interval=interval_ms, description="play")
    slider = widgets.IntSlider(value=start, min=0, max=count, step=1, description="rounds")
    widgets.jslink((play, "value"), (slider, "value"))
    view = widgets.HTML(value=rounds_upto_html(views, tokenizer, start))

    def show(change: dict) -> None:
        view.value = rounds_upto_html(views, tokenizer, change["new"])

    slider.observe(show, names="value")
    stepper_box = _stepper_class()
    return stepper_box([widgets.HBox([play, slider]), view], lambda: stepper_fallback(views, tokenizer, slider.value))


# --- plots -------------------------------------------------------------------------------------------------


def _axes(ax: Axes | None, figsize: tuple[float, float]) -> Axes:
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt

    _, ax = plt.subplots(figsize=figsize)
    return ax


def plot_acceptance_by_position(
    rates: Sequence[float], ax: Axes | None = None, *, alpha: float | None = None, label: str = "measured"
) -> Axes:
    """Bars of ``rates[i]`` (e.g. `trace.per_position_acceptance`) at draft positions 1, 2, ...

    With ``alpha`` given, also the line ``alpha ** i``: what independent acceptance with probability alpha per
    token predicts (draft i survives only if drafts 1..i are all accepted). Returns the Axes.
    """
    ax = _axes(ax, (6, 3))
    positions = list(range(1, len(rates) + 1))
    ax.bar(positions, list(rates), color="#66bb6a", label=label)
    if alpha is not None:
        ax.plot(positions, [alpha**i for i in positions], "o--", color="#0d47a1", label=f"α^i with α = {alpha:.2f}")
    ax.set_xticks(positions)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("draft position i")
    ax.set_ylabel("P(draft token i accepted)")
    ax.legend()
    return ax


def plot_tokens_per_forward_vs_gamma(
    gammas: Sequence[int], measured: Sequence[float], alpha: float, ax: Axes | None = None
) -> Axes:
    """Measured tokens per verification round against γ, with the theory ``(1 - α^(γ+1)) / (1 - α)``
    (`theory.expected_tokens_per_round`) and the ceiling ``γ + 1`` (every draft accepted) for γ = 0 .. max(gammas).

    ``measured`` should be what the theory predicts, the mean acceptance length (`trace.mean_acceptance_length`,
    the prefill excluded); `trace.tokens_per_target_forward` includes the prefill and sits below the curve.
    Returns the Axes.
    """
    if len(gammas) != len(measured):
        raise ConfigError(f"gammas and measured must have the same length, got {len(gammas)} and {len(measured)}.")
    ax = _axes(ax, (6, 3.5))
    grid = list(range(0, max(gammas, default=0) + 1))
    ax.plot(grid, [g + 1 for g in grid], ":", color="grey", label="γ + 1 (every draft accepted)")
    ax.plot(grid, [expected_tokens_per_round(alpha, g) for g in grid], "-", color="#0d47a1",
            label=f"theory, α = {alpha:.2f}")
    ax.plot(list(gammas), list(measured), "o", color="#e65100", markersize=7, label="measured")
    ax.set_xlabel("γ (draft tokens per round)")
    ax.set_ylabel("mean acceptance length\n(tokens per round)")
    ax.legend()
    return ax
