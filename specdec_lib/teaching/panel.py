"""Notebook 06's tuning panel: pick a drafter, a task, gamma and a temperature; it re-runs and re-plots.

The logic is plain functions, tested without a browser: `run_case` measures one setting (the target alone and
speculative decoding on the same prompts, side by side, with the same seeds), `plot_case` draws it, and
`tuning_panel` only wires ipywidgets controls to them. The drafters are the bench's (`bench.drafters.DRAFTERS`,
the cross-tokenizer one left out: it needs a second pair).

One case costs a few seconds on a CPU (two prompts of 32 tokens, both methods): the controls re-run on release
(``continuous_update=False``), not while a slider is dragged.

A widget needs a running kernel. Where there is none (a stored notebook opened without one, the static site) a
frontend shows the next representation it can: `static_bundle` gives the panel a PNG of its last case and a
one-paragraph text, so a reader sees that case's figure and numbers rather than ``VBox(children=...)``.
"""

from __future__ import annotations

import base64
import html
import io
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..bench.drafters import DRAFTERS, task_prompt_ids
from ..bench.methods import Autoregressive, GenerationSpec, Speculative, resolve_eos
from ..bench.protocol import timed_run
from ..bench.report import pooled_trace
from ..core.errors import ConfigError
from ..core.forks import explain_fork
from ..core.pair import ModelPair
from ..prompts import TASKS
from ..core.sampling import GREEDY, SamplingConfig
from ..core.validation import check_gamma, check_number
from ..core.theory import expected_tokens_per_round
from ..core.trace import mean_acceptance_length, per_position_acceptance, per_token_acceptance

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes

#: The drafters the panel offers (the bench's, without the cross-tokenizer one).
PANEL_DRAFTERS = tuple(name for name in DRAFTERS if name != "cross-tokenizer")
MAX_PANEL_GAMMA = 8


@dataclass(frozen=True)
class PanelCase:
    """One measured setting. ``per_position``: P(draft i accepted), i = 1..gamma; ``speedup``: the target
    alone's seconds over speculative decoding's, summed over the prompts (one run each: a demonstration, not a
    benchmark); ``identical``: greedy, `explain_fork`'s worst verdict over the prompts, ``"identical"``,
    ``"near-tie"`` (forks only where the target's top two logits tie up to the dtype's rounding) or
    ``"disagreement"`` (None when sampling: equality is in distribution)."""

    drafter: str
    task: str
    gamma: int
    temperature: float
    prompts: int
    new_tokens: int
    alpha: float | None
    mean_acceptance_length: float | None
    per_position: list[float]
    speedup: float
    identical: str | None


def check_case(drafter: object, task: object, gamma: object, temperature: object) -> SamplingConfig:
    """Refuse an unknown drafter or task, a bad gamma or temperature; the sampling config of ``temperature``."""
    if drafter not in PANEL_DRAFTERS:
        raise ConfigError(f"Unknown drafter {drafter!r}; the panel offers {', '.join(PANEL_DRAFTERS)}.")
    if task not in TASKS:
        raise ConfigError(f"Unknown task {task!r}; choose from {', '.join(TASKS)}.")
    check_gamma(gamma)
    temperature = check_number("temperature", temperature, minimum=0, hint="0: greedy.")
    return GREEDY if temperature == 0 else SamplingConfig(temperature=temperature)


def run_case(pair: ModelPair, drafter: str, task: str, gamma: int, temperature: float = 0.0, *, prompts: int = 2,
             max_new_tokens: int = 32, seed: int = 0) -> PanelCase:
    """The target alone and speculative decoding with ``drafter`` at ``gamma`` on the first ``prompts`` prompts of
    ``task``, greedy (``temperature`` 0) or sampling (seeds ``seed + i``), one run each, side by side."""
    sampling = check_case(drafter, task, gamma, temperature)
    spec = GenerationSpec(max_new_tokens, resolve_eos(pair), sampling=sampling)
    baseline = Autoregressive(pair.target, spec)
    ours = Speculative(pair.target, DRAFTERS[drafter].build(pair, None), gamma, spec)
    device = pair.target.device
    prompt_ids = task_prompt_ids(pair, task, prompts, device)
    base_runs, our_runs = [], []
    for index, ids in enumerate(prompt_ids):  # interleaved: both see the same machine state
        base_runs.append(timed_run(baseline, ids, device, seed + index))
        our_runs.append(timed_run(ours, ids, device, seed + index))
    pooled = pooled_trace(our_runs)
    verdicts = {explain_fork(pair.target, b.tokens, o.tokens, prompt=ids).verdict
                for b, o, ids in zip(base_runs, our_runs, prompt_ids)} if sampling.is_greedy else set()
    identical = next((v for v in ("disagreement", "near-tie", "identical") if v in verdicts), None)
    return PanelCase(drafter, task, gamma, float(temperature), prompts, max_new_tokens,
                     per_token_acceptance(pooled), mean_acceptance_length(pooled), per_position_acceptance(pooled),
                     sum(r.seconds for r in base_runs) / sum(r.seconds for r in our_runs), identical)


def describe_case(case: PanelCase) -> str:
    """One line: the setting and its numbers."""
    decoding = "greedy" if case.temperature == 0 else f"T={case.temperature:g}"
    alpha = "-" if case.alpha is None else f"{case.alpha:.2f}"
    length = "-" if case.mean_acceptance_length is None else f"{case.mean_acceptance_length:.2f}"
    same = {"identical": "identical to the target's", "near-tie": "the target's up to forks at near-ties",
            "disagreement": "DIFFERENT from the target's", None: "sampled"}[case.identical]
    return (f"{case.drafter}, {case.task}, gamma={case.gamma}, {decoding}: alpha {alpha}, mean acceptance length "
            f"{length}, speed-up {case.speedup:.2f}x (one run of {case.prompts} prompts), tokens {same}")


def plot_case(case: PanelCase, axes: Sequence[Axes] | None = None) -> Sequence[Axes]:
    """Left: P(draft i accepted) with alpha^i; right: the mean acceptance length against Leviathan's curve for
    this alpha, gamma 0..8, the measured point circled. The legends sit where the data are not: above the bars
    (the y axis leaves them a band over 1) and at the curve's empty lower right."""
    if axes is None:
        import matplotlib.pyplot as plt

        _, axes = plt.subplots(1, 2, figsize=(10, 3.4), layout="constrained")
    left, right = axes
    positions = list(range(1, len(case.per_position) + 1))
    left.bar(positions, case.per_position, color="#66bb6a", label="measured")
    if case.alpha is not None:
        left.plot(positions, [case.alpha**i for i in positions], "o--", color="#0d47a1", label="alpha^i")
        grid = list(range(MAX_PANEL_GAMMA + 1))
        right.plot(grid, [expected_tokens_per_round(case.alpha, g) for g in grid], "-", color="#0d47a1",
                   label=f"theory, alpha = {case.alpha:.2f}")
    if case.mean_acceptance_length is not None:
        right.plot([case.gamma], [case.mean_acceptance_length], "o", color="#e65100", markersize=9, label="measured")
    left.set(xlabel="draft position i", ylabel="P(draft i accepted)", ylim=(0, 1.32), yticks=[0, 0.25, 0.5, 0.75, 1],
             xticks=positions, title=f"{case.drafter} on {case.task}")
    right.set(xlabel="gamma", ylabel="mean acceptance length", title=f"speed-up {case.speedup:.2f}x (one run)")
    left.legend(fontsize=8, loc="upper center", ncols=2, frameon=False)
    right.legend(fontsize=8, loc="lower right")
    return axes


def case_png(case: PanelCase, dpi: int = 80) -> bytes:
    """`plot_case` of ``case`` as PNG bytes, drawn on a figure of its own (nothing is shown in the notebook)."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10, 3.4), layout="constrained")
    plot_case(case, figure.subplots(1, 2))
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def static_bundle(case: PanelCase) -> dict[str, str]:
    """What a frontend without the widget shows instead: ``text/plain`` (the case in words, wrapped),
    ``image/png`` (its figure, base64) and ``text/html`` (both)."""
    text = ("Tuning panel (its controls need a running kernel); the case it last ran:\n"
            + textwrap.fill(describe_case(case), width=100))
    png = base64.b64encode(case_png(case)).decode("ascii")
    page = (f"<p>{html.escape(text).replace(chr(10), '<br>')}</p>"
            f'<img src="data:image/png;base64,{png}" alt="{html.escape(describe_case(case))}">')
    return {"text/plain": text, "image/png": png, "text/html": page}


def tuning_panel(pair: ModelPair, *, prompts: int = 2, max_new_tokens: int = 32) -> Any:
    """Dropdowns (drafter, task), sliders (gamma 1..8, temperature 0..1.5), the `describe_case` line (wrapped
    HTML, never cut off) and an output area with `plot_case` of `run_case`, re-run whenever a control is released.
    Its representation carries `static_bundle` of the last case beside the widget view, for frontends that
    cannot show the widget (module docstring)."""
    import ipywidgets as widgets
    import matplotlib.pyplot as plt

    class TuningPanel(widgets.VBox):
        case: PanelCase | None = None

        def _repr_mimebundle_(self, **kwargs: Any) -> Any:
            bundle = super()._repr_mimebundle_(**kwargs)
            if self.case is None:
                return bundle
            data, metadata = bundle if isinstance(bundle, tuple) else (bundle, {})
            return {**data, **static_bundle(self.case)}, metadata  # the widget view, then the fallbacks

    drafter = widgets.Dropdown(options=PANEL_DRAFTERS, value="draft-model", description="drafter")
    task = widgets.Dropdown(options=TASKS, value=TASKS[0], description="task")
    gamma = widgets.IntSlider(value=3, min=1, max=MAX_PANEL_GAMMA, description="gamma", continuous_update=False)
    temperature = widgets.FloatSlider(value=0.0, min=0.0, max=1.5, step=0.1, description="temperature",
                                      continuous_update=False)
    summary = widgets.HTML()  # describe_case of the last run, in a div that wraps
    output = widgets.Output()  # its figure
    panel = TuningPanel([widgets.HBox([drafter, task]), widgets.HBox([gamma, temperature]), summary, output])

    def rerun(_change: object = None) -> None:
        summary.value = "running..."
        case = run_case(pair, drafter.value, task.value, gamma.value, temperature.value, prompts=prompts,
                        max_new_tokens=max_new_tokens)
        panel.case = case
        summary.value = f'<div style="white-space: normal; line-height: 1.4">{html.escape(describe_case(case))}</div>'
        with output:
            output.clear_output(wait=True)
            plot_case(case)
            plt.show()

    for control in (drafter, task, gamma, temperature):
        control.observe(rerun, names="value")
    rerun()
    return panel
