"""The course's settings and metrics under their names in production runtimes: vLLM, SGLang and TensorRT-LLM.

A learner who has tuned γ, a prompt-lookup window or a batch threshold on the embedded models needs the same knob
in a serving engine, where it has another name. `SETTINGS` and `METRICS` are that dictionary, kept as data:

- our side and transformers' side are `LibraryName` s, checked against the installed packages (`exists`, and
  tests/test_production.py resolves every one), so a rename in either breaks a test instead of the notebook;
- the runtimes' side are `RuntimeName` s, each with the page (documentation or source file) it was checked
  against. None of the three runtimes is installed here (they need a GPU build), so their names cannot be
  imported; a name we could not confirm on such a page says ``verified=False`` instead of being guessed, and a
  runtime with no such setting has None.

`vllm_counters` turns one of our traces into the four speculative-decoding counters a vLLM server exports, and
`parse_prometheus_counters` reads those counters from the text of a server's ``/metrics`` page, so a measurement
against a served model ends in the same acceptance metrics as the notebooks (``specdec_lib.core.trace``).
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..core.trace import Trace

RUNTIMES = ("vLLM", "SGLang", "TensorRT-LLM")

# The pages each runtime name was checked against (read while writing this module; see `sources`).
VLLM_CONFIG = "https://docs.vllm.ai/en/stable/api/vllm/config/speculative/"
VLLM_NGRAM = "https://docs.vllm.ai/en/latest/features/speculative_decoding/n_gram/"
VLLM_EAGLE = "https://docs.vllm.ai/en/latest/features/speculative_decoding/eagle/"
VLLM_METRICS = "https://docs.vllm.ai/en/v0.21.0/api/vllm/v1/spec_decode/metrics/"
SGLANG_SPEC = "https://docs.sglang.io/advanced_features/speculative_decoding.html"
SGLANG_ARGS = "https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/server_args.py"
SGLANG_METRICS = "https://docs.sglang.io/references/production_metrics.html"
TRTLLM_SPEC = "https://nvidia.github.io/TensorRT-LLM/features/speculative-decoding.html"
TRTLLM_NGRAM = "https://nvidia.github.io/TensorRT-LLM/1.4.0rc4/llm-api/reference/NGramDecodingConfig.html"
TRTLLM_ARGS = "https://github.com/NVIDIA/TensorRT-LLM/blob/main/tensorrt_llm/llmapi/llm_args.py"
TRTLLM_EXAMPLE = "https://nvidia.github.io/TensorRT-LLM/1.3.0rc24/examples/llm_speculative_decoding.html"
TRTLLM_STATS = "https://github.com/NVIDIA/TensorRT-LLM/blob/main/cpp/include/tensorrt_llm/executor/types.h"


@dataclass(frozen=True)
class LibraryName:
    """A name in an installed Python package: ``attribute`` (dotted) of ``module``, and optionally one ``parameter``
    of its signature, or (``config_field=True``) an attribute of an instance made with no arguments (a config
    class whose fields its ``__init__`` sets, such as transformers' ``GenerationConfig``)."""

    module: str
    attribute: str
    parameter: str | None = None
    config_field: bool = False

    def __str__(self) -> str:
        if self.parameter is None:
            return self.attribute
        return f"{self.attribute}.{self.parameter}" if self.config_field else f"{self.attribute}({self.parameter}=)"

    def resolve(self) -> object:
        """The named object (raises ImportError / AttributeError when it does not exist)."""
        obj: object = importlib.import_module(self.module)
        for part in self.attribute.split("."):
            obj = getattr(obj, part)
        return obj

    def exists(self) -> bool:
        """Whether the module, the attribute and the parameter (or field) are there in the installed version."""
        try:
            obj = self.resolve()
        except (ImportError, AttributeError):
            return False
        if self.parameter is None:
            return True
        if self.config_field:
            return hasattr(obj(), self.parameter)
        return self.parameter in inspect.signature(obj).parameters


@dataclass(frozen=True)
class RuntimeName:
    """A runtime's name for a setting or a metric, as written in its configuration, and where it was checked.

    ``verified=False``: the name was seen but its meaning (or its current spelling) could not be confirmed on a
    documentation page or in the runtime's source; ``note`` says what to check."""

    text: str
    source: str
    verified: bool = True
    note: str = ""

    def cell(self) -> str:
        """The name for a Markdown table cell."""
        text = self.text + (" (unverified)" if not self.verified else "")
        return text + (f" — {self.note}" if self.note else "")


@dataclass(frozen=True)
class Setting:
    """One knob of the course next to its names elsewhere (``runtimes``: runtime -> name, None where none exists)."""

    concept: str
    ours: tuple[LibraryName, ...]
    transformers: tuple[LibraryName, ...] = ()
    runtimes: dict[str, RuntimeName | None] = field(default_factory=dict)


def _ours(attribute: str, parameter: str | None = None, module: str = "specdec_lib") -> LibraryName:
    return LibraryName(module, attribute, parameter)


def _generation(field_name: str) -> LibraryName:
    return LibraryName("transformers", "GenerationConfig", field_name, config_field=True)


_SPEC = "speculative_config"

SETTINGS: tuple[Setting, ...] = (
    Setting("draft length γ (drafts per round)", (_ours("speculative_generate", "gamma"),),
            (_generation("num_assistant_tokens"),), {
                "vLLM": RuntimeName(f'{_SPEC}: "num_speculative_tokens"', VLLM_CONFIG),
                "SGLang": RuntimeName("--speculative-num-steps (chain: --speculative-eagle-topk 1, "
                                      "--speculative-num-draft-tokens γ + 1)", SGLANG_SPEC),
                "TensorRT-LLM": RuntimeName(f"{_SPEC}: max_draft_len", TRTLLM_SPEC)}),
    Setting("a separate draft model", (_ours("DraftModelDrafter", "model"),),
            (LibraryName("transformers", "GenerationMixin.generate", "assistant_model"),), {
                "vLLM": RuntimeName(f'{_SPEC}: "model" (method "draft_model")', VLLM_CONFIG),
                "SGLang": RuntimeName("--speculative-algorithm STANDALONE --speculative-draft-model-path", SGLANG_SPEC),
                "TensorRT-LLM": RuntimeName(f"{_SPEC}: decoding_type DraftTarget, speculative_model", TRTLLM_SPEC)}),
    Setting("prompt lookup: longest n-gram matched", (_ours("PromptLookupDrafter", "max_ngram"),),
            (_generation("prompt_lookup_num_tokens"), _generation("max_matching_ngram_size")), {
                "vLLM": RuntimeName(f'{_SPEC}: "method": "ngram", "prompt_lookup_max"', VLLM_NGRAM),
                "SGLang": RuntimeName("--speculative-algorithm NGRAM --speculative-ngram-max-match-window-size",
                                      SGLANG_ARGS, note="older releases; newer ones replace the window sizes with "
                                      "--speculative-ngram-max-trie-depth"),
                "TensorRT-LLM": RuntimeName(f"{_SPEC}: decoding_type NGram, max_matching_ngram_size", TRTLLM_NGRAM)}),
    Setting("prompt lookup: shortest n-gram matched", (_ours("PromptLookupDrafter", "min_ngram"),), (), {
        "vLLM": RuntimeName(f'{_SPEC}: "prompt_lookup_min"', VLLM_CONFIG),
        "SGLang": RuntimeName("--speculative-ngram-min-match-window-size", SGLANG_ARGS, note="older releases"),
        "TensorRT-LLM": None}),
    Setting("suffix decoding (tree depth, min probability, spec factor)",
            (_ours("SuffixDrafter", "max_depth"), _ours("SuffixDrafter", "min_probability"),
             _ours("SuffixDrafter", "max_spec_factor")), (), {
                "vLLM": RuntimeName(f'{_SPEC}: "method": "suffix", "suffix_decoding_max_tree_depth", '
                                    '"suffix_decoding_min_token_prob", "suffix_decoding_max_spec_factor"', VLLM_CONFIG),
                "SGLang": None, "TensorRT-LLM": None}),
    Setting("EAGLE-style drafter on the target's hidden states", (_ours("EagleDrafter"), _ours("load_eagle")), (), {
        "vLLM": RuntimeName(f'{_SPEC}: "method": "eagle" or "eagle3", "model"', VLLM_EAGLE),
        "SGLang": RuntimeName("--speculative-algorithm EAGLE or EAGLE3 --speculative-draft-model-path", SGLANG_SPEC),
        "TensorRT-LLM": RuntimeName(f"{_SPEC}: decoding_type Eagle3, speculative_model", TRTLLM_SPEC)}),
    Setting("extra heads on the target (Medusa; MTP layers)", (_ours("HeadsDrafter"), _ours("load_heads")), (), {
        "vLLM": RuntimeName(f'{_SPEC}: "method": "medusa" or "mtp"', VLLM_CONFIG),
        "SGLang": RuntimeName("MTP through --speculative-algorithm EAGLE on an MTP checkpoint", SGLANG_SPEC,
                              verified=False, note="the docs' Multi Token Prediction section"),
        "TensorRT-LLM": RuntimeName(f"{_SPEC}: decoding_type MTP", TRTLLM_SPEC)}),
    Setting("self-speculative early exit", (_ours("EarlyExitDrafter", "exit_layer"),),
            (_generation("assistant_early_exit"),), {"vLLM": None, "SGLang": None, "TensorRT-LLM": None}),
    Setting("adaptive draft length", (_ours("HeuristicSchedule", module="specdec_lib.drafters"),),
            (_generation("num_assistant_tokens_schedule"),), {
                "vLLM": None, "SGLang": None,
                "TensorRT-LLM": RuntimeName(f"{_SPEC}: draft_len_schedule", TRTLLM_ARGS,
                                            note="by batch size, not by acceptance")}),
    Setting("stop drafting below a confidence", (_ours("ConfidenceStop", module="specdec_lib.drafters"),),
            (_generation("assistant_confidence_threshold"),), {"vLLM": None, "SGLang": None, "TensorRT-LLM": None}),
    Setting("disable speculation above a batch size",
            (_ours("batched_speculative_generate", "disable_by_batch_size", "specdec_lib.decoders"),), (), {
                "vLLM": RuntimeName(f'{_SPEC}: "disable_by_batch_size"', VLLM_CONFIG,
                                    note="counts enqueued requests; measure that your version honours it"),
                "SGLang": None,
                "TensorRT-LLM": RuntimeName(f"{_SPEC}: max_concurrency", TRTLLM_ARGS, note="PyTorch backend")}),
    Setting("relaxed (lossy) acceptance", (_ours("speculative_generate", "lenience"),), (), {
        "vLLM": None,
        "SGLang": RuntimeName("--speculative-accept-threshold-single, --speculative-accept-threshold-acc (1.0 by "
                              "default)", SGLANG_ARGS, verified=False, note="names seen, their rule not checked"),
        "TensorRT-LLM": RuntimeName(f"{_SPEC}: use_relaxed_acceptance_for_thinking, relaxed_topk, relaxed_delta "
                                    "(MTP)", TRTLLM_EXAMPLE)}),
)


@dataclass(frozen=True)
class Metric:
    """One of the course's metrics (``ours``: its function in ``specdec_lib.core.trace``) and how each runtime exports it."""

    concept: str
    ours: LibraryName
    runtimes: dict[str, RuntimeName | None]


def _trace(name: str) -> LibraryName:
    return LibraryName("specdec_lib.core.trace", name)


_VLLM = "vllm:spec_decode_"
METRICS: tuple[Metric, ...] = (
    Metric("acceptance rate (accepted / drafted)", _trace("acceptance_rate"), {
        "vLLM": RuntimeName(f"{_VLLM}num_accepted_tokens / {_VLLM}num_draft_tokens", VLLM_METRICS),
        "SGLang": RuntimeName("sglang:spec_accept_rate", SGLANG_METRICS, verified=False,
                              note="a gauge; its exact definition not checked"),
        "TensorRT-LLM": RuntimeName("specDecodingStats: numAcceptedTokens / numDraftTokens", TRTLLM_STATS)}),
    Metric("mean acceptance length (tokens per verification round)", _trace("mean_acceptance_length"), {
        "vLLM": RuntimeName(f"1 + {_VLLM}num_accepted_tokens / {_VLLM}num_drafts", VLLM_METRICS),
        "SGLang": RuntimeName("sglang:spec_accept_length", SGLANG_METRICS),
        "TensorRT-LLM": RuntimeName("specDecodingStats: acceptanceLength", TRTLLM_STATS)}),
    Metric("per-position acceptance", _trace("per_position_acceptance"), {
        "vLLM": RuntimeName(f'{_VLLM}num_accepted_tokens_per_pos{{position="i"}} / {_VLLM}num_drafts', VLLM_METRICS),
        "SGLang": None, "TensorRT-LLM": None}),
    Metric("alpha (accepted / examined drafts)", _trace("per_token_acceptance"), {
        "vLLM": RuntimeName("not exported; computable from the per-position counters (exercise 1)", VLLM_METRICS),
        "SGLang": None, "TensorRT-LLM": None}),
)

VLLM_COUNTERS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_accepted_tokens_per_pos")


def library_names() -> list[LibraryName]:
    """Every `LibraryName` the tables cite (ours, transformers' and the metric functions), in table order."""
    names = [name for setting in SETTINGS for name in (*setting.ours, *setting.transformers)]
    return names + [metric.ours for metric in METRICS]


def missing_library_names(names: Iterable[LibraryName] | None = None) -> list[LibraryName]:
    """The cited library names that do not exist in the installed versions (empty when all resolve)."""
    return [name for name in (library_names() if names is None else names) if not name.exists()]


def sources() -> list[str]:
    """Every page a runtime name was checked against, sorted."""
    entries = [*SETTINGS, *METRICS]
    return sorted({name.source for entry in entries for name in entry.runtimes.values() if name is not None})


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def _runtime_cells(runtimes: dict[str, RuntimeName | None]) -> list[str]:
    return [runtimes[name].cell() if runtimes.get(name) is not None else "—" for name in RUNTIMES]


def settings_table() -> str:
    """`SETTINGS` as a Markdown table (— : no such setting found)."""
    header = ["setting", "specdec_lib", "transformers", *RUNTIMES]
    lines = [_row(header), _row(["---"] * len(header))]
    for setting in SETTINGS:
        ours = ", ".join(f"`{name}`" for name in setting.ours)
        theirs = ", ".join(f"`{name}`" for name in setting.transformers) or "—"
        lines.append(_row([setting.concept, ours, theirs, *_runtime_cells(setting.runtimes)]))
    return "\n".join(lines)


def metrics_table() -> str:
    """`METRICS` as a Markdown table (— : not exported)."""
    header = ["metric", "specdec_lib.core.trace", *RUNTIMES]
    lines = [_row(header), _row(["---"] * len(header))]
    for metric in METRICS:
        lines.append(_row([metric.concept, f"`{metric.ours}`", *_runtime_cells(metric.runtimes)]))
    return "\n".join(lines)


def vllm_counters(trace: Trace, num_speculative_tokens: int | None = None) -> dict[str, object]:
    """The speculative-decoding counters a vLLM server would export for the rounds of ``trace``.

    vLLM counts, per round that drafted (``num_drafts``), the drafted and accepted tokens, and for each draft
    position i = 0 .. k-1 the rounds whose first i + 1 drafts were all accepted (``num_accepted_tokens_per_pos``,
    length ``num_speculative_tokens``, default the longest draft in the trace). Rounds that drafted nothing do not
    count, as in `specdec_lib.core.trace.mean_acceptance_length`.
    """
    rounds = [record for record in trace.rounds if record.drafted > 0]
    k = num_speculative_tokens if num_speculative_tokens is not None else max((r.drafted for r in rounds), default=0)
    return {
        "num_drafts": len(rounds),
        "num_draft_tokens": sum(r.drafted for r in rounds),
        "num_accepted_tokens": sum(r.accepted for r in rounds),
        "num_accepted_tokens_per_pos": [sum(r.accepted > i for r in rounds) for i in range(k)],
    }


_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")


def parse_prometheus_counters(text: str, prefix: str = "vllm:spec_decode_") -> dict[str, object]:
    """The `VLLM_COUNTERS` from the text of a Prometheus ``/metrics`` page (summed over engines and models).

    Counters appear as ``<prefix><name>_total{labels} value``; the per-position one carries a ``position`` label.
    Read the page before and after a load test and subtract, so that earlier traffic does not count. A counter that
    is absent (speculation off) reads 0; positions come back in order.
    """
    totals = {name: 0.0 for name in VLLM_COUNTERS[:3]}
    by_position: dict[int, float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line.strip())
        if match is None or not match["name"].startswith(prefix) or not match["name"].endswith("_total"):
            continue
        name = match["name"][len(prefix):-len("_total")]
        value = float(match["value"])
        if name == "num_accepted_tokens_per_pos":
            position = re.search(r'position="(\d+)"', match["labels"] or "")
            if position is not None:
                index = int(position.group(1))
                by_position[index] = by_position.get(index, 0.0) + value
        elif name in totals:
            totals[name] += value
    counters: dict[str, object] = {name: int(value) for name, value in totals.items()}
    counters["num_accepted_tokens_per_pos"] = [int(by_position[i]) for i in sorted(by_position)]
    return counters


def counter_delta(before: dict[str, object], after: dict[str, object]) -> dict[str, object]:
    """``after - before`` for two readings of the `VLLM_COUNTERS` (`parse_prometheus_counters` around a load test):
    the counts of that test's requests alone. A position missing from ``before`` (no draft reached it yet) counts 0."""
    delta: dict[str, object] = {name: int(after[name]) - int(before[name])  # type: ignore[call-overload]
                                for name in VLLM_COUNTERS[:3]}
    earlier = list(before["num_accepted_tokens_per_pos"])  # type: ignore[arg-type]
    later = list(after["num_accepted_tokens_per_pos"])  # type: ignore[arg-type]
    earlier += [0] * (len(later) - len(earlier))
    delta["num_accepted_tokens_per_pos"] = [b - a for a, b in zip(earlier, later)]
    return delta
