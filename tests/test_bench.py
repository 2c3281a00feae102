"""`python -m specdec_lib bench` and the measuring behind it (the `specdec_lib.bench` package), on tiny random models.

No timing is asserted here: speed is what the benchmark measures, never what a unit test checks. The tests check
that every method and gamma gets a row, that the derived columns follow from the runs (on hand-made traces, and
the acceptance numbers from the trace functions), that `identical` catches a method whose tokens differ, that the
lean reference loop emits the baseline's tokens (greedy only) and gives ours / lean, that the JSON holds the
table's numbers, and the command line (--no-eos included).
With sampling: every method still gets a row, `identical` is "n/a (sampling)", seeds make our methods reproducible,
and transformers' methods are asked for the same processed distribution as ours (top-k off really off).
With a cross pair (a tiny draft on tokenizer "b" next to the same tiny target): speculative-cross and
hf-assisted-cross rows for each gamma, identical = yes when greedy, the drafter overhead measured and >= 0, the
cross-vocabulary drafter with sampling, and the --cross flag.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import build_tiny_model, build_tiny_tokenizer, first_layer_draft, sharpen, transplant_intersection
from specdec_lib.bench import (
    ALPHA_FROM_THEORY,
    ALPHA_FROM_TRACE,
    BASELINE,
    HF_ASSISTED,
    HF_ASSISTED_CROSS,
    HF_GREEDY,
    HF_SAMPLE,
    LEAN,
    NOT_APPLICABLE,
    SPECULATIVE,
    SPECULATIVE_BLOCK,
    SPECULATIVE_CROSS,
    Autoregressive,
    GenerationSpec,
    Lean,
    Measurements,
    Method,
    Run,
    Speculative,
    HFAssisted,
    HFAssistedCross,
    TimedDrafter,
    assistant_config,
    build_methods,
    build_report,
    count_forwards,
    drafter_overhead,
    hf_sampling_kwargs,
    cli,
    lean_generate,
    measure,
    pooled_trace,
    run_benchmark,
    run_seed,
)
from specdec_lib.drafters import CrossTokenizerDrafter, CrossVocabularySamplingDrafter
from specdec_lib.core.errors import ConfigError, ModelNotFoundError
from specdec_lib.core.pair import ModelPair
from specdec_lib.prompts import Prompt
from specdec_lib.core.sampling import SamplingConfig, logits_to_probs
from specdec_lib.core.theory import expected_speedup
from specdec_lib.core.result import GenerationResult
from specdec_lib.core.trace import (
    RoundRecord,
    Trace,
    acceptance_rate,
    mean_acceptance_length,
    per_position_acceptance,
    per_token_acceptance,
    tokens_per_target_forward,
)

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = [torch.tensor([[0, 5, 17, 42, 3, 8, 61]]), torch.tensor([[0, 9, 9, 30, 2]])]


def tiny_pair(draft: torch.nn.Module | None = None) -> ModelPair:
    tokenizer = build_tiny_tokenizer("a")
    target = build_tiny_model(vocab_size=len(tokenizer))
    if draft is None:
        draft = build_tiny_model(seed=1, num_layers=1, vocab_size=len(tokenizer))
    return ModelPair(target, draft, tokenizer, build_tiny_tokenizer("a"), "embedded", torch.device("cpu"))


@pytest.fixture(scope="module")
def pair() -> ModelPair:
    return tiny_pair()


@pytest.fixture(scope="module")
def report(pair):
    return run_benchmark(pair, PROMPTS, gammas=(1, 3), max_new_tokens=8, repeats=2, progress=False)


# --------------------------------------------------------------------------- the runner


def test_every_method_and_gamma_gets_a_row(report):
    assert [(row["method"], row["gamma"]) for row in report.rows] == [
        (BASELINE, None),
        (HF_GREEDY, None),
        (SPECULATIVE, 1),
        (SPECULATIVE, 3),
        (LEAN, 1),
        (LEAN, 3),
        (HF_ASSISTED, 1),
        (HF_ASSISTED, 3),
    ]
    for row in report.rows:
        assert set(cli.COLUMNS) <= set(row)
        assert row["tokens_per_s"] > 0 and row["speedup"] > 0


def test_every_method_emits_the_baselines_tokens(report):
    for row in report.rows:
        assert row["identical"] is True, row["key"]
        assert row["identical_per_prompt"] == [True, True]


def test_baseline_and_derived_columns(report):
    base = report.row(BASELINE)
    assert base["speedup"] == 1.0 and base["tokens_per_target_forward"] == 1.0
    assert base["mean_acceptance_length"] is None  # nothing drafted: no verification round
    assert base["acceptance_rate"] is None and base["c"] is None and base["alpha"] is None
    assert report.row(HF_GREEDY)["tokens_per_target_forward"] == 1.0
    for gamma in (1, 3):
        ours = report.row(SPECULATIVE, gamma)
        assert 1.0 <= ours["tokens_per_target_forward"] <= ours["mean_acceptance_length"] <= gamma + 1
        assert 0.0 <= ours["acceptance_rate"] <= ours["alpha"] <= 1.0 and ours["alpha_from"] == ALPHA_FROM_TRACE
        assert ours["c"] > 0
        assert ours["predicted_speedup"] == pytest.approx(expected_speedup(ours["alpha"], gamma, ours["c"]))
        theirs = report.row(HF_ASSISTED, gamma)
        assert theirs["c"] is None and theirs["predicted_speedup"] is None
        assert 1.0 <= theirs["tokens_per_target_forward"] <= gamma + 1
        # counts: every target forward verifies, so mean acceptance length = tokens per target forward
        assert theirs["mean_acceptance_length"] == theirs["tokens_per_target_forward"]
        assert theirs["alpha_from"] == ALPHA_FROM_THEORY and theirs["per_position_acceptance"] is None


def test_raw_times_cover_every_repeat_and_prompt(report):
    assert set(report.raw) == {row["key"] for row in report.rows}
    for raw in report.raw.values():
        assert len(raw["seconds"]) == 2 and all(len(repeat) == len(PROMPTS) for repeat in raw["seconds"])
        assert len(raw["warmup_seconds"]) == len(PROMPTS)


def test_profile_splits_our_time_at_the_best_gamma(report, pair):
    profile = report.profile
    best = max((row for row in report.rows if row["method"] == SPECULATIVE), key=lambda row: row["speedup"])
    assert profile["gamma"] == best["gamma"]
    assert profile["draft_pct"] + profile["verify_pct"] + profile["other_pct"] == pytest.approx(100)
    assert profile["draft_pct"] > 0 and profile["verify_pct"] > 0 and profile["other_pct"] > 0
    assert profile["draft_s"] + profile["verify_s"] + profile["other_s"] == pytest.approx(profile["total_s"])
    for model in (pair.target, pair.draft):  # no hook left behind to slow later runs
        assert not model._forward_hooks and not model._forward_pre_hooks


class WrongOnLastPrompt(Method):
    """Emits the baseline's tokens, except a changed last token on the last prompt."""

    name = "wrong"

    def __init__(self, baseline: Method) -> None:
        self.baseline = baseline

    def generate(self, input_ids, seed=None):
        tokens, _ = self.baseline.generate(input_ids, seed)
        if torch.equal(input_ids, PROMPTS[-1]):
            tokens = tokens[:-1] + [(tokens[-1] + 1) % 64]
        return tokens, None


def test_identical_is_false_for_a_method_with_other_tokens(pair):
    methods = build_methods(pair, (2,), GenerationSpec(6, None), transformers=False)
    methods.append(WrongOnLastPrompt(methods[0]))
    report = build_report(measure(methods, PROMPTS, repeats=1, progress=False))
    assert report.row(SPECULATIVE, 2)["identical"] is True
    wrong = report.row("wrong")
    assert wrong["identical"] is False and wrong["identical_per_prompt"] == [True, False]


def test_a_draft_equal_to_the_target_is_always_accepted_by_both_implementations():
    pair = tiny_pair()
    pair.draft = copy.deepcopy(pair.target)
    methods = build_methods(pair, (3,), GenerationSpec(9, None, 1))  # no EOS: no round is cut short
    report = build_report(
        measure(methods, PROMPTS, repeats=1, count_models={"target": pair.target, "draft": pair.draft}, progress=False)
    )
    ours, theirs = report.row(SPECULATIVE, 3), report.row(HF_ASSISTED, 3)
    assert ours["acceptance_rate"] == 1.0 and ours["alpha"] == 1.0
    assert theirs["acceptance_rate"] == 1.0  # from forward counts
    # 9 tokens: ours = prefill (1) + rounds of 4, 4 -> 3 forwards; theirs = rounds of 4, 4, then 1 (no room left
    # to draft) -> 3 forwards. Their last round drafts nothing, which pulls their alpha below 1 (ours leaves the
    # prefill out of alpha): the shortened-final-round bias of alpha_from_tokens_per_round
    assert ours["target_forwards"] == theirs["target_forwards"] == 2 * 3
    assert theirs["tokens_per_target_forward"] == 3.0 and theirs["alpha"] < 1.0
    assert ours["identical"] and theirs["identical"]


def test_assisted_generation_drafts_gamma_tokens_and_restores_the_drafts_config(pair):
    config = assistant_config(pair.draft, 5, GenerationSpec(4, 1))
    assert config.num_assistant_tokens == 5
    assert config.num_assistant_tokens_schedule == "constant"
    assert config.assistant_confidence_threshold == 0.0  # no early stop on low draft confidence
    original, before = pair.draft.generation_config, pair.draft.generation_config.to_dict()
    HFAssisted(pair.target, pair.draft, 5, GenerationSpec(4, 1)).generate(PROMPTS[0])
    assert pair.draft.generation_config is original and original.to_dict() == before


def test_count_forwards_counts_calls_and_removes_its_hooks(pair):
    with torch.inference_mode(), count_forwards({"target": pair.target, "draft": pair.draft}) as counts:
        pair.target(PROMPTS[0])
        pair.target(PROMPTS[1])
        pair.draft(PROMPTS[0])
    assert counts == {"target": 2, "draft": 1}
    assert not pair.target._forward_pre_hooks and not pair.draft._forward_pre_hooks


def test_build_methods_refuses_bad_gammas(pair):
    spec = GenerationSpec(4)
    with pytest.raises(ConfigError, match="empty"):
        build_methods(pair, (), spec)
    with pytest.raises(ConfigError, match="gamma"):
        build_methods(pair, (2, 0), spec)


# --------------------------------------------------------------------------- the lean reference loop


def test_lean_rows_emit_the_baselines_tokens_and_give_ours_over_lean(report):
    for gamma in (1, 3):
        lean = report.row(LEAN, gamma)
        assert lean["identical"] is True and lean["identical_per_prompt"] == [True, True]
        assert lean["over_lean"] is None and lean["alpha"] is None and lean["mean_acceptance_length"] is None
        assert 1.0 <= lean["tokens_per_target_forward"] <= gamma + 1  # from forward counts
        ours = report.row(SPECULATIVE, gamma)
        # ours and lean run the same rounds: the same target forwards
        assert lean["tokens_per_target_forward"] == pytest.approx(ours["tokens_per_target_forward"])
        assert ours["over_lean"] > 0 and len(ours["over_lean_per_repeat"]) == 2
        assert all(ratio > 0 for ratio in ours["over_lean_per_repeat"])
    assert all(row["over_lean"] is None for row in report.rows if row["method"] != SPECULATIVE)


@pytest.mark.parametrize("eos", [None, 1, 5])
def test_lean_generate_equals_the_baseline_at_every_length_and_eos(pair, eos):
    """Greedy: the same tokens as the baseline, including the last rounds (k = 0 when one token is left) and an
    EOS in the middle of a round."""
    for gamma in (1, 2, 4):
        for max_new in (1, 2, 5, 12):
            spec = GenerationSpec(max_new, eos)
            for ids in PROMPTS:
                expected = Autoregressive(pair.target, spec).generate(ids)[0]
                assert lean_generate(pair.target, pair.draft, ids, gamma=gamma, max_new_tokens=max_new,
                                     eos_token_id=eos) == expected, (gamma, max_new, eos)


def test_ours_over_transformers_is_the_ratio_of_the_two_rows_times_per_repeat(report):
    for gamma in (1, 3):
        ours, theirs = report.raw[f"{SPECULATIVE}[gamma={gamma}]"], report.raw[f"{HF_ASSISTED}[gamma={gamma}]"]
        expected = [sum(t) / sum(o) for t, o in zip(theirs["seconds"], ours["seconds"])]
        assert report.row(SPECULATIVE, gamma)["over_transformers_per_repeat"] == pytest.approx(expected)
    assert all(row["over_transformers"] is None for row in report.rows if row["method"] != SPECULATIVE)


def test_lean_is_greedy_only(sampling_report, pair):
    assert all(row["method"] != LEAN for row in sampling_report.rows)
    assert all(row["over_lean"] is None for row in sampling_report.rows)
    with pytest.raises(ConfigError, match="greedily only"):
        Lean(pair.target, pair.draft, 2, GenerationSpec(4, sampling=SamplingConfig(temperature=1.0)))


def test_our_acceptance_numbers_are_the_trace_functions_on_the_pooled_rounds(pair):
    methods = build_methods(pair, (2, 4), GenerationSpec(10, None), transformers=False)
    measurements = measure(methods, PROMPTS, repeats=1, progress=False)
    report = build_report(measurements)
    for method in methods:
        if not isinstance(method, Speculative):
            continue
        runs = measurements.timed[method.key][0]
        rounds = [record for run in runs for record in run.result.trace.rounds]
        trace = Trace(start_time=0.0, rounds=rounds)
        assert pooled_trace(runs).rounds == rounds
        row = next(row for row in report.rows if row["key"] == method.key)
        assert row["alpha"] == per_token_acceptance(trace) and row["alpha_from"] == ALPHA_FROM_TRACE
        assert row["acceptance_rate"] == acceptance_rate(trace)
        assert row["mean_acceptance_length"] == mean_acceptance_length(trace)
        assert row["per_position_acceptance"] == per_position_acceptance(trace)
        assert row["tokens_per_target_forward"] == tokens_per_target_forward(trace)
        assert len(row["per_position_acceptance"]) == method.gamma


def test_the_bench_is_a_package_with_one_module_per_job():  # (their length: tests/test_layout.py)
    names = {path.name for path in (ROOT / "specdec_lib" / "bench").glob("*.py")}
    assert {"__init__.py", "methods.py", "hf.py", "protocol.py", "report.py", "profiling.py", "cli.py"} <= names


# --------------------------------------------------------------------------- derived numbers, by hand


def _result(tokens: list[int], rounds: list[RoundRecord]) -> GenerationResult:
    trace = Trace(start_time=0.0, rounds=rounds)
    sequence = torch.tensor([[0] + tokens])
    return GenerationResult.single(sequence, 1, "hand-made", trace)


def test_report_numbers_follow_from_hand_made_runs():
    """Two repeats, one prompt of 4 tokens. Baseline: 2 s then 4 s, target forward 0.5 s. Ours (gamma 2): 1 s
    twice, prefill + one round accepting both drafts (3 tokens), 0.1 s per drafted token."""
    spec = GenerationSpec(4)
    base, ours = Autoregressive(None, spec), Speculative(None, None, 2, spec)
    tokens = [7, 8, 9, 10]
    base_rounds = [RoundRecord(0, 0, 1, 0.0, 0.5, 0) for _ in range(4)]
    our_rounds = [RoundRecord(0, 0, 1, 0.0, 0.3, 0), RoundRecord(2, 2, 3, 0.2, 0.4, 2)]
    measurements = Measurements(
        methods=[base, ours],
        reference=[tokens],
        warmup={base.key: [Run(tokens, 9.0)], ours.key: [Run(tokens, 9.0)]},
        timed={
            base.key: [[Run(tokens, 2.0, _result(tokens, base_rounds))], [Run(tokens, 4.0, _result(tokens, base_rounds))]],
            ours.key: [[Run(tokens, 1.0, _result(tokens, our_rounds))], [Run(tokens, 1.0, _result(tokens, our_rounds))]],
        },
        forward_counts={base.key: {}, ours.key: {}},
    )
    report = build_report(measurements)
    row = report.row(SPECULATIVE, 2)
    assert report.row(BASELINE)["tokens_per_s"] == pytest.approx(1.5)  # median of 2 and 1 tokens/s
    assert row["tokens_per_s"] == pytest.approx(4.0)
    assert row["speedup"] == pytest.approx(3.0)  # median of per-repeat ratios 4/2 and 4/1 (not 4 / 1.5)
    assert row["tokens_per_target_forward"] == pytest.approx(2.0)  # 4 tokens / 2 target forwards
    assert row["mean_acceptance_length"] == pytest.approx(3.0)  # the one verification round: 2 accepted + 1
    assert row["per_position_acceptance"] == [1.0, 1.0]
    assert row["acceptance_rate"] == 1.0 and row["alpha_from"] == ALPHA_FROM_TRACE
    assert row["c"] == pytest.approx(0.1 / 0.5)
    assert row["alpha"] == 1.0  # 2 accepted of 2 examined drafts
    assert row["predicted_speedup"] == pytest.approx(3 / (2 * 0.2 + 1))
    assert row["measured_over_predicted"] == pytest.approx(3.0 / (3 / 1.4))
    assert row["identical"] is True
    assert report.profile is None  # profile_method's job (test_profile_splits_our_time_at_the_best_gamma)


# --------------------------------------------------------------------------- printing


def test_format_table_aligns_columns_and_leaves_unknowns_blank():
    rows = [
        {"method": "autoregressive", "gamma": None, "tokens_per_s": 100.0, "speedup": 1.0, "identical": True},
        {"method": "speculative", "gamma": 4, "tokens_per_s": 250.04, "speedup": 2.5, "alpha": 0.8, "identical": False},
    ]
    lines = cli.format_table(rows).splitlines()
    # ovh/rnd (optional) is left out: no row has a value in it
    headers = [header for key, (header, _) in cli.COLUMNS.items() if key not in cli.OPTIONAL_COLUMNS]
    assert lines[0].split() == " ".join(headers).split() and "mean acc len" in lines[0]
    assert lines[1].split() == ["autoregressive", "100.0", "1.00x", "yes"]
    assert lines[2].split() == ["speculative", "4", "250.0", "2.50x", "0.800", "NO"]
    assert lines[1].index("100.0") == lines[2].index("250.0")  # numbers right-aligned in their column


def test_format_table_prints_not_applicable_as_is():
    rows = [{"method": "speculative", "gamma": 2, "tokens_per_s": 10.0, "identical": NOT_APPLICABLE}]
    assert cli.format_table(rows).splitlines()[1].endswith("n/a (sampling)")


@pytest.mark.parametrize("text, expected", [("4", (4,)), ("8,2, 2,1", (1, 2, 8)), ("1,2,3,4,6,8", (1, 2, 3, 4, 6, 8))])
def test_parse_gammas(text, expected):
    assert cli.parse_gammas(text) == expected


# --------------------------------------------------------------------------- command line


@pytest.fixture
def fake_loading(monkeypatch):
    """`load_pair` returns a tiny pair and `load_prompts` two short prompts, so the CLI runs in a second."""
    import specdec_lib.loading
    import specdec_lib.prompts

    texts = ["def add(a, b):\n", "for item in items:\n", "import os\n"]
    prompts = [Prompt(f"code-{i:03d}", "code", text, "") for i, text in enumerate(texts, 1)]
    monkeypatch.setattr(specdec_lib.loading, "load_pair", lambda preset, device=None: tiny_pair())
    monkeypatch.setattr(specdec_lib.prompts, "load_prompts", lambda task: prompts)


def run_cli(argv: list[str], path: Path, capsys) -> tuple[str, dict]:
    """Run the command with ``--no-progress --json path`` (exit code 0); its stdout and the JSON document."""
    assert cli.main([*argv, "--no-progress", "--json", str(path)]) == 0
    return capsys.readouterr().out, json.loads(path.read_text())


def test_cli_prints_the_table_and_writes_the_same_numbers_as_json(fake_loading, tmp_path, capsys):
    argv = ["--prompts", "2", "--max-new-tokens", "6", "--gammas", "2,1", "--repeats", "1"]
    out, document = run_cli(argv, tmp_path / "out" / "bench.json", capsys)  # the folder is created
    rows = document["rows"]
    assert [(row["method"], row["gamma"]) for row in rows] == [
        (BASELINE, None), (HF_GREEDY, None), (SPECULATIVE, 1), (SPECULATIVE, 2), (LEAN, 1), (LEAN, 2),
        (HF_ASSISTED, 1), (HF_ASSISTED, 2)
    ]
    assert cli.format_table(rows) in out  # the printed table is exactly the JSON's numbers
    assert cli.format_profile(document["profile"]) in out
    assert document["settings"]["gammas"] == [1, 2] and document["settings"]["prompts"] == 2
    assert document["settings"]["eos_token_id"] == 1 and document["settings"]["no_eos"] is False
    assert [p["id"] for p in document["prompts"]] == ["code-001", "code-002"]
    assert len(document["raw"]["speculative[gamma=2]"]["seconds"][0]) == 2
    assert "machine:" in out and "transformers" in out and "thread" in out
    assert all(row["identical"] for row in rows)


def test_cli_without_transformers(fake_loading, capsys):
    assert cli.main(["--prompts", "1", "--max-new-tokens", "4", "--gammas", "2", "--repeats", "1",
                       "--no-transformers", "--no-progress"]) == 0
    table = capsys.readouterr().out.split("\n\n")[0].splitlines()
    assert [line.split()[0] for line in table[1:]] == [BASELINE, SPECULATIVE, LEAN, "ours"]
    assert table[-1].startswith("ours / lean at gamma=2: ") and table[-1].endswith("x time")


def test_cli_no_eos_generates_exactly_max_new_tokens_and_is_recorded(fake_loading, tmp_path, capsys):
    argv = ["--prompts", "2", "--max-new-tokens", "7", "--gammas", "2", "--repeats", "1", "--no-eos"]
    out, document = run_cli(argv, tmp_path / "no-eos.json", capsys)
    assert document["settings"]["no_eos"] is True and document["settings"]["eos_token_id"] is None
    assert "no EOS stop (--no-eos: exactly 7 new tokens per prompt)" in out
    for row in document["rows"]:  # every method, transformers' included
        assert row["new_tokens"] == 2 * 7, row["key"]
        assert row["identical"] is True, row["key"]
    assert cli.build_parser().parse_args([]).no_eos is False


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--gammas", "0"], "gamma must be >= 1"),
        (["--gammas", "2,x"], "'x' is not a whole number"),
        (["--gammas", "1,,2"], "comma-separated"),
        (["--gammas", ""], "comma-separated"),
        (["--task", "poetry"], "invalid choice: 'poetry'"),
        (["--preset", "nope"], "invalid choice: 'nope'"),
        (["--repeats", "0"], "whole number >= 1"),
        (["--max-new-tokens", "many"], "whole number >= 1"),
    ],
)
def test_cli_refuses_bad_arguments_with_exit_code_2(argv, message, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "usage:" in err and "Traceback" not in err


def test_cli_refuses_more_prompts_than_the_set_has(fake_loading, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--prompts", "4"])
    assert info.value.code == 2
    assert "has only 3 prompts" in capsys.readouterr().err


def test_cli_refuses_a_generation_longer_than_the_context(fake_loading, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--prompts", "1", "--max-new-tokens", "500"])
    assert info.value.code == 2
    assert "exceeds the model's context" in capsys.readouterr().err


def test_cli_reports_missing_models_with_exit_code_1(monkeypatch, capsys):
    import specdec_lib.loading

    def missing(preset, device=None):
        raise ModelNotFoundError("Model folder data/models/target does not exist.")

    monkeypatch.setattr(specdec_lib.loading, "load_pair", missing)
    assert cli.main(["--prompts", "1"]) == 1
    assert "error: Model folder data/models/target does not exist." in capsys.readouterr().err


def test_bench_is_registered_and_its_help_runs():
    from specdec_lib.__main__ import COMMANDS

    assert COMMANDS["bench"][0] == "specdec_lib.bench.cli"
    done = subprocess.run(
        [sys.executable, "-m", "specdec_lib", "bench", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "--gammas" in done.stdout and "--json" in done.stdout and "--task" in done.stdout


def test_the_table_prints_the_reports_columns_in_order():
    from specdec_lib.bench import ROW_COLUMNS

    assert tuple(cli.COLUMNS) == ROW_COLUMNS


# --------------------------------------------------------------------------- sampling

SAMPLING = SamplingConfig(temperature=0.9, top_k=20)


@pytest.fixture(scope="module")
def sampling_report(pair):
    return run_benchmark(
        pair, PROMPTS, gammas=(1, 3), max_new_tokens=8, repeats=1, progress=False, sampling=SAMPLING, seed=11
    )


def test_a_sampling_run_gets_a_row_for_every_method_with_identical_not_applicable(sampling_report):
    report = sampling_report
    assert [(row["method"], row["gamma"]) for row in report.rows] == [
        (BASELINE, None),
        (HF_SAMPLE, None),
        (SPECULATIVE, 1),
        (SPECULATIVE, 3),
        (HF_ASSISTED, 1),
        (HF_ASSISTED, 3),
    ]
    for row in report.rows:
        assert row["identical"] == NOT_APPLICABLE and row["identical_per_prompt"] is None
        assert row["tokens_per_s"] > 0 and row["speedup"] > 0
    for gamma in (1, 3):
        for method in (SPECULATIVE, HF_ASSISTED):
            row = report.row(method, gamma)
            assert 0.0 <= row["acceptance_rate"] <= 1.0, row["key"]
            assert 1.0 <= row["tokens_per_target_forward"] <= gamma + 1, row["key"]
            assert 0.0 <= row["alpha"] <= 1.0
        ours = report.row(SPECULATIVE, gamma)
        assert ours["c"] > 0 and ours["predicted_speedup"] == pytest.approx(
            expected_speedup(ours["alpha"], gamma, ours["c"])
        )
    # seeds: one per (pass, prompt) -- warm-up and 1 repeat -- all different
    assert len(report.seeds) == 2 and all(len(seeds) == len(PROMPTS) for seeds in report.seeds)
    assert len({seed for seeds in report.seeds for seed in seeds}) == 2 * len(PROMPTS)
    assert report.profile is not None and report.profile["gamma"] in (1, 3)


def _our_tokens(pair, seed):
    methods = build_methods(pair, (2,), GenerationSpec(8, None, sampling=SAMPLING), transformers=False)
    m = measure(methods, PROMPTS, repeats=2, progress=False, sampling=SAMPLING, seed=seed)
    return {key: [[run.tokens for run in m.warmup[key]]] + [[run.tokens for run in rep] for rep in m.timed[key]]
            for key in m.warmup}


def test_same_seed_same_tokens_for_our_methods(pair):
    first, second = _our_tokens(pair, 5), _our_tokens(pair, 5)
    assert set(first) == {BASELINE, "speculative[gamma=2]"}
    assert first == second  # every pass and prompt, both methods
    assert _our_tokens(pair, 6) != first  # the seed is really used


def test_run_seed_is_deterministic_and_separates_base_pass_and_prompt():
    assert run_seed(0, 1, 2) == run_seed(0, 1, 2)
    seeds = {run_seed(base, pass_index, prompt) for base in (0, 1) for pass_index in range(3) for prompt in range(3)}
    assert len(seeds) == 18 and all(0 <= seed < 2**63 for seed in seeds)


@pytest.mark.parametrize(
    "config",
    [
        SamplingConfig(temperature=1.0),  # every filter off: transformers' default top_k=50 would cut 14 of 64
        SamplingConfig(temperature=0.7, top_k=5),
        SamplingConfig(temperature=1.3, top_p=0.8),
    ],
)
def test_transformers_samples_from_our_processed_distribution(pair, config):
    """transformers' processed scores (what it samples from) equal `logits_to_probs` with the same config."""
    ids = PROMPTS[0]
    with torch.inference_mode():
        out = pair.target.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=1, output_scores=True,
            return_dict_in_generate=True, pad_token_id=1, **hf_sampling_kwargs(config),
        )
        ours = logits_to_probs(pair.target(ids).logits[0, -1], config)
    theirs = torch.softmax(out.scores[0][0].float(), dim=-1)
    assert int((ours > 0).sum()) == int((theirs > 0).sum())
    torch.testing.assert_close(theirs, ours, atol=1e-5, rtol=1e-4)


def test_hf_sampling_kwargs_switch_every_filter_off_explicitly():
    kwargs = hf_sampling_kwargs(SamplingConfig(temperature=0.5))
    assert kwargs["do_sample"] is True and kwargs["temperature"] == 0.5
    assert kwargs["top_k"] == 0 and kwargs["top_p"] == 1.0  # not left unset: generate's default top_k is 50
    assert hf_sampling_kwargs(SamplingConfig.greedy()) == {"do_sample": False}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--temperature", "-1"], "temperature must be a finite number >= 0"),
        (["--temperature", "nan"], "temperature must be a finite number >= 0"),
        (["--temperature", "1", "--top-p", "0"], "top_p must be a number in (0, 1]"),
        (["--temperature", "1", "--top-p", "1.5"], "top_p must be a number in (0, 1]"),
        (["--temperature", "1", "--top-k", "-3"], "top_k must be an integer >= 0"),
        (["--top-k", "5"], "with --temperature 0 (greedy) they would be ignored"),
        (["--temperature", "warm"], "invalid float value: 'warm'"),
        (["--seed", "1.5"], "invalid int value: '1.5'"),
    ],
)
def test_cli_refuses_bad_sampling_arguments_with_exit_code_2(argv, message, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "usage:" in err and "Traceback" not in err


def test_cli_sampling_run_states_settings_and_what_identical_means(fake_loading, tmp_path, capsys):
    argv = ["--prompts", "2", "--max-new-tokens", "6", "--gammas", "2", "--repeats", "1",
            "--temperature", "0.8", "--top-p", "0.9", "--seed", "3"]
    out, document = run_cli(argv, tmp_path / "sampling.json", capsys)
    settings = document["settings"]
    assert settings["sampling"] == {"temperature": 0.8, "top_k": 0, "top_p": 0.9}
    assert settings["seed"] == 3 and settings["greedy"] is False and settings["verification"] == "exact"
    rows = document["rows"]
    assert [row["method"] for row in rows] == [BASELINE, HF_SAMPLE, SPECULATIVE, HF_ASSISTED]
    assert all(row["identical"] == NOT_APPLICABLE for row in rows)
    assert cli.format_table(rows) in out and "n/a (sampling)" in out
    assert cli.DISTRIBUTION_NOTE in out and "tests/test_sampling_distribution.py" in out
    decoding = "sampling (temperature 0.8, top-k off, top-p 0.9; ours: exact rejection-sampling verification), seed 3"
    assert decoding in out
    assert len(document["seeds"]) == 2 and len(document["seeds"][0]) == 2


def test_cli_block_adds_block_verification_rows_next_to_the_token_wise_ones(fake_loading, tmp_path, capsys):
    argv = ["--prompts", "2", "--max-new-tokens", "6", "--gammas", "2", "--repeats", "1", "--no-transformers",
            "--temperature", "1.0", "--block"]
    out, document = run_cli(argv, tmp_path / "block.json", capsys)
    rows = document["rows"]
    assert [(row["method"], row["gamma"]) for row in rows] == [(BASELINE, None), (SPECULATIVE, 2),
                                                               (SPECULATIVE_BLOCK, 2)]
    assert document["settings"]["verification"] == "exact and block"
    block = rows[-1]
    assert block["alpha_from"] == "trace" and 1 <= block["mean_acceptance_length"] <= 3


def test_cli_block_is_refused_when_greedy(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--block", "--no-progress"])
    assert exit_info.value.code == 2 and "at temperature 0 they coincide" in capsys.readouterr().err


def test_cli_greedy_settings_say_greedy(fake_loading, tmp_path, capsys):
    argv = ["--prompts", "1", "--max-new-tokens", "4", "--gammas", "2", "--repeats", "1", "--no-transformers"]
    out, document = run_cli(argv, tmp_path / "greedy.json", capsys)
    assert document["settings"]["greedy"] is True and document["settings"]["seed"] is None
    assert document["seeds"] is None
    assert ", greedy, EOS id" in out and cli.DISTRIBUTION_NOTE not in out
    assert all(row["identical"] is True for row in document["rows"])


# --------------------------------------------------------------------------- cross-tokenizer rows


def tiny_cross_pair(pair: ModelPair) -> ModelPair:
    """``pair``'s target object with a draft on tiny tokenizer "b" (metaspace; the target is on "a", byte-level).

    The draft is the target's first layer with its embedding and head rows moved to the "b" ids of the same
    strings (as in tests/test_cross_tokenizer.py), so that drafts get accepted; its embeddings are padded to 72 rows:
    transformers picks universal assisted decoding by a vocabulary size differing from the target's."""
    tok_a, tok_b = pair.target_tokenizer, build_tiny_tokenizer("b")
    draft = first_layer_draft(pair.target)
    draft.resize_token_embeddings(72, mean_resizing=False)
    transplant_intersection(pair.target, draft, tok_a, tok_b)
    return ModelPair(pair.target, draft, tok_a, tok_b, "embedded-cross", pair.device)


def sharp_pair() -> ModelPair:
    """`tiny_pair` with a sharpened target head (confident, like a trained model: the cross draft then agrees)."""
    pair = tiny_pair()
    sharpen(pair.target)
    return pair


TEXT_PROMPTS = ["def add(a, b):\n", "for item in items:\n"]


@pytest.fixture(scope="module")
def cross_setup():
    pair = sharp_pair()
    prompts = [pair.target_tokenizer(text, return_tensors="pt").input_ids for text in TEXT_PROMPTS]
    return pair, tiny_cross_pair(pair), prompts


@pytest.fixture(scope="module")
def cross_report(cross_setup):
    pair, cross, prompts = cross_setup
    return run_benchmark(pair, prompts, gammas=(1, 3), max_new_tokens=10, repeats=1, progress=False, cross=cross)


def test_cross_rows_sit_next_to_the_same_tokenizer_rows(cross_report):
    assert [(row["method"], row["gamma"]) for row in cross_report.rows] == [
        (BASELINE, None),
        (HF_GREEDY, None),
        (SPECULATIVE, 1),
        (SPECULATIVE, 3),
        (LEAN, 1),
        (LEAN, 3),
        (SPECULATIVE_CROSS, 1),
        (SPECULATIVE_CROSS, 3),
        (HF_ASSISTED, 1),
        (HF_ASSISTED, 3),
        (HF_ASSISTED_CROSS, 1),
        (HF_ASSISTED_CROSS, 3),
    ]
    for row in cross_report.rows:
        assert set(cli.COLUMNS) <= set(row)
        assert row["tokens_per_s"] > 0 and row["speedup"] > 0
    assert all(cross_report.row(SPECULATIVE_CROSS, gamma)["over_transformers"] > 0 for gamma in (1, 3))


def test_greedy_cross_rows_emit_the_baselines_tokens(cross_report):
    for row in cross_report.rows:
        assert row["identical"] is True, row["key"]
        assert row["identical_per_prompt"] == [True, True], row["key"]


def test_cross_rows_numbers(cross_report):
    for gamma in (1, 3):
        ours = cross_report.row(SPECULATIVE_CROSS, gamma)
        assert 1.0 <= ours["tokens_per_target_forward"] <= gamma + 1
        assert 0.0 <= ours["acceptance_rate"] <= 1.0 and 0.0 <= ours["alpha"] <= 1.0 and ours["c"] > 0
        theirs = cross_report.row(HF_ASSISTED_CROSS, gamma)
        assert theirs["tokens_per_target_forward"] >= 1.0 and theirs["draft_forwards"] > 0  # the cross draft's
        assert theirs["acceptance_rate"] is None and theirs["alpha"] is None  # draft vs target tokens: no ratio
    # the sharpened draft agrees with the target often: some drafts are accepted (not a timing claim)
    assert max(cross_report.row(SPECULATIVE_CROSS, g)["acceptance_rate"] for g in (1, 3)) > 0
    # the profile stays on the same-tokenizer rows (it times pair.draft's forwards)
    assert cross_report.profile["method"] == SPECULATIVE


def test_drafter_overhead_is_measured_for_our_rows_and_never_negative(cross_report):
    for row in cross_report.rows:
        if row["method"] in (SPECULATIVE, SPECULATIVE_CROSS):
            overhead = row["drafter_overhead"]
            assert overhead["rounds"] > 0 and overhead["draft_forward_s"] > 0
            assert overhead["overhead_s"] >= 0 and row["drafter_overhead_ms"] >= 0
            assert overhead["drafter_s"] == pytest.approx(overhead["propose_s"] + overhead["accept_s"])
            assert overhead["overhead_s"] == pytest.approx(overhead["drafter_s"] - overhead["draft_forward_s"])
            assert row["drafter_overhead_ms"] == pytest.approx(1000 * overhead["overhead_s"] / overhead["rounds"])
        else:
            assert row["drafter_overhead_ms"] is None and row["drafter_overhead"] is None
    assert "ovh/rnd" in cli.format_table(cross_report.rows).splitlines()[0]


def test_without_cross_the_overhead_is_not_measured(report):
    assert all(row["drafter_overhead_ms"] is None for row in report.rows)
    assert "ovh/rnd" not in cli.format_table(report.rows)


def test_timed_drafter_counts_rounds_and_passes_everything_through(cross_setup):
    pair, cross, prompts = cross_setup
    inner = CrossTokenizerDrafter.for_pair(cross)
    timed = TimedDrafter(inner)
    assert timed.name == inner.name and timed.device == inner.device and timed.model is cross.draft
    spec = GenerationSpec(8, None)
    plain = Speculative(pair.target, inner, 2, spec).generate(prompts[0])[0]
    wrapped = Speculative(pair.target, timed, 2, spec).generate(prompts[0])
    assert wrapped[0] == plain
    rounds = wrapped[1].trace.rounds  # one propose per round that may draft, the first round's included
    assert sum(r.drafted > 0 for r in rounds) <= timed.proposals <= len(rounds) and rounds[0].drafted > 0
    assert timed.propose_seconds > 0 and timed.accept_seconds > 0
    numbers = drafter_overhead(Speculative(pair.target, inner, 2, spec), prompts)
    assert numbers["rounds"] > 0 and numbers["overhead_s"] >= 0
    for model in (cross.draft, pair.target):  # no hook left behind
        assert not model._forward_hooks and not model._forward_pre_hooks


def test_cross_sampling_uses_the_vocabulary_intersection_drafter(cross_setup):
    pair, cross, prompts = cross_setup
    sampling = SamplingConfig(temperature=0.8)
    methods = build_methods(pair, (2,), GenerationSpec(8, 1, sampling=sampling), cross=cross)
    names = [(method.name, method.gamma) for method in methods]
    assert names == [(BASELINE, None), (HF_SAMPLE, None), (SPECULATIVE, 2), (SPECULATIVE_CROSS, 2), (HF_ASSISTED, 2)]
    assert isinstance(methods[3].drafter, CrossVocabularySamplingDrafter)  # exact verification; no hf-assisted-cross
    report = run_benchmark(pair, prompts, gammas=(2,), max_new_tokens=8, repeats=1, progress=False, sampling=sampling,
                           seed=4, cross=cross)
    row = report.row(SPECULATIVE_CROSS, 2)
    assert row["identical"] == NOT_APPLICABLE and 0.0 <= row["acceptance_rate"] <= 1.0
    assert row["drafter_overhead_ms"] >= 0
    greedy = build_methods(pair, (2,), GenerationSpec(8, 1), cross=cross, transformers=False)
    assert type(greedy[-1].drafter) is CrossTokenizerDrafter


def test_a_cross_pair_must_share_the_target_and_translate(cross_setup):
    pair, cross, _ = cross_setup
    spec = GenerationSpec(4)
    other_target = ModelPair(copy.deepcopy(pair.target), cross.draft, cross.target_tokenizer, cross.draft_tokenizer,
                             "embedded-cross", pair.device)
    with pytest.raises(ConfigError, match="share the benchmark pair's target object"):
        build_methods(pair, (2,), spec, cross=other_target)
    same = ModelPair(pair.target, pair.draft, pair.target_tokenizer, pair.draft_tokenizer, "embedded", pair.device)
    with pytest.raises(ConfigError, match="nothing to translate"):
        build_methods(pair, (2,), spec, cross=same)
    with pytest.raises(ConfigError, match="greedily only"):
        HFAssistedCross(cross, 2, GenerationSpec(4, sampling=SamplingConfig(temperature=1.0)))
    equal_sizes = tiny_cross_pair(pair)
    equal_sizes.draft.resize_token_embeddings(pair.target.config.vocab_size, mean_resizing=False)
    with pytest.raises(ConfigError, match="vocabulary \\*size\\*"):
        HFAssistedCross(equal_sizes, 2, spec)


@pytest.fixture
def fake_cross_loading(fake_loading, monkeypatch):
    """`fake_loading`, and --cross gets the tiny cross draft next to the (sharpened) tiny target."""
    import specdec_lib.loading

    monkeypatch.setattr(specdec_lib.loading, "load_pair", lambda preset, device=None: sharp_pair())
    monkeypatch.setattr(cli, "load_cross_pair", lambda preset, pair: tiny_cross_pair(pair))


def test_cli_cross_adds_the_rows_and_the_overhead_to_table_and_json(fake_cross_loading, tmp_path, capsys):
    argv = ["--prompts", "2", "--max-new-tokens", "6", "--gammas", "2", "--repeats", "1", "--cross"]
    out, document = run_cli(argv, tmp_path / "cross.json", capsys)
    rows = document["rows"]
    assert [row["method"] for row in rows] == [
        BASELINE, HF_GREEDY, SPECULATIVE, LEAN, SPECULATIVE_CROSS, HF_ASSISTED, HF_ASSISTED_CROSS
    ]
    assert all(row["identical"] is True for row in rows)
    assert cli.format_table(rows) in out and "ovh/rnd" in out and cli.CROSS_LEGEND in out
    for row in (rows[2], rows[4]):  # speculative, speculative-cross
        assert row["drafter_overhead_ms"] >= 0 and row["drafter_overhead"]["rounds"] > 0
    cross = document["settings"]["cross"]
    assert cross["preset"] == "embedded-cross" and cross["drafter"].startswith("CrossTokenizerDrafter")
    assert cross["hf_assisted_cross"] is True and "propose + accept" in cross["overhead"]


def test_cli_cross_with_sampling(fake_cross_loading, tmp_path, capsys):
    argv = ["--prompts", "1", "--max-new-tokens", "6", "--gammas", "2", "--repeats", "1", "--cross", "--temperature", "0.7"]
    _, document = run_cli(argv, tmp_path / "cross-sampling.json", capsys)
    assert [row["method"] for row in document["rows"]] == [BASELINE, HF_SAMPLE, SPECULATIVE, SPECULATIVE_CROSS,
                                                           HF_ASSISTED]
    assert document["settings"]["cross"]["drafter"].startswith("CrossVocabularySamplingDrafter")
    assert document["settings"]["cross"]["hf_assisted_cross"] is False


def test_cli_cross_flag_parses_and_refuses_presets_without_a_cross_twin(capsys):
    assert cli.build_parser().parse_args(["--cross"]).cross is True
    assert cli.build_parser().parse_args([]).cross is False
    with pytest.raises(SystemExit) as info:
        cli.main(["--cross", "--preset", "embedded-cross"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--preset embedded --cross" in err and "usage:" in err and "Traceback" not in err


def test_load_cross_pair_shares_the_target_object(monkeypatch):
    import specdec_lib.loading

    pair = tiny_pair()
    tok_b = build_tiny_tokenizer("b")
    loaded = []

    def fake_embedded(name, device=None, dtype=None):
        loaded.append((name, dtype))
        return build_tiny_model(seed=2, num_layers=1, vocab_size=72), tok_b

    monkeypatch.setattr(specdec_lib.loading, "load_embedded", fake_embedded)
    cross = cli.load_cross_pair("embedded", pair)
    assert loaded == [("draft_b", torch.float32)]  # only the draft: no second target
    assert cross.target is pair.target and cross.target_tokenizer is pair.target_tokenizer
    assert cross.draft_tokenizer is tok_b and cross.preset == "embedded-cross"
    with pytest.raises(ConfigError, match="has none"):
        cli.load_cross_pair("hub-cross", pair)


# --------------------------------------------------------------------------- the generated tables of docs/benchmarks.md


def test_results_table_prints_a_bench_document_as_markdown(fake_loading, tmp_path, capsys):
    from specdec_lib.bench.results_table import main as results_main

    out, document = run_cli(["--prompts", "1", "--max-new-tokens", "4", "--gammas", "2", "--repeats", "1",
                             "--no-transformers"], tmp_path / "run.json", capsys)
    assert results_main([str(tmp_path / "run.json")]) == 0
    table = capsys.readouterr().out
    assert table.count("\n| ") == len(document["rows"]) + 2  # header, rule, one line per row
    assert "| speculative | 2 |" in table and "ours / lean" in table and "greedy" in table
    for bad, says in (([], "the following arguments are required"), ([str(tmp_path / "none.json")], "no such file")):
        with pytest.raises(SystemExit) as stop:
            results_main(bad)
        assert stop.value.code == 2 and says in capsys.readouterr().err


def test_the_benchmark_pages_tables_are_generated_from_the_bench_json_they_name():
    """Between <!-- bench-table: FILES --> and <!-- /bench-table --> docs/benchmarks.md holds exactly what
    `python -m specdec_lib.bench.results_table FILES` prints: no number typed by hand."""
    import re

    from specdec_lib.bench.results_table import results_markdown

    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    blocks = re.findall(r"<!-- bench-table: (.+?) -->\n(.*?)\n<!-- /bench-table -->", page, flags=re.S)
    assert blocks, "docs/benchmarks.md has no generated benchmark table"
    for names, body in blocks:
        paths = [Path(name) for name in names.split()]
        assert all((ROOT / path).is_file() for path in paths), names
        assert body.strip() == results_markdown(paths, root=ROOT).strip(), f"regenerate the table for {names}"


# --------------------------------------------------------------------------- token trees against the chain


def test_the_tree_bench_puts_every_shape_next_to_its_chain_and_the_baseline(pair):
    from specdec_lib.bench.trees import budget_choices, format_rows, headline, parse_shapes, tree_rows

    shapes = parse_shapes("1,1 2,1 2,2,1 dynamic:3,2,4 dynamic:3,2,6")
    rows = tree_rows(pair, PROMPTS, shapes, gammas=(2, 3), drafter="draft-model", max_new_tokens=8, repeats=1,
                     transformers=(3,), progress=False)
    assert [row["method"] for row in rows] == ["autoregressive", "speculative[gamma=2]", "speculative[gamma=3]",
                                               "tree[1,1]", "tree[2,1]", "tree[2,2,1]",
                                               "dynamic[depth=3,top_k=2,budget=4]", "dynamic[depth=3,top_k=2,budget=6]",
                                               "hf-assisted[gamma=3]"]
    assert [row["nodes"] for row in rows] == [0, 2, 3, 2, 4, 10, 4, 6, 3]
    assert all(row["identical"] for row in rows)  # greedy: every row emits the baseline's tokens
    assert rows[0]["speedup"] == 1.0 and rows[0]["tokens_per_target_forward"] == 1.0
    assert rows[0]["draft_cost"] is None and all(row["draft_cost"] > 0 for row in rows[1:-1])
    assert rows[-1]["draft_cost"] is None  # transformers' run leaves no trace to time its drafting from
    # transformers' assisted generation with the same draft model at gamma 3 runs the chain's rounds (its forward
    # counts, against our trace)
    assert rows[-1]["tokens_per_target_forward"] == pytest.approx(rows[2]["tokens_per_target_forward"])
    top = headline(rows)
    ours = max(rows[1:-1], key=lambda row: row["speedup"])
    assert top["fastest"] == ours["method"] and top["transformers_fastest"] == "hf-assisted[gamma=3]"
    assert top["over_transformers"] == pytest.approx(ours["speedup"] / rows[-1]["speedup"])
    assert headline(rows[:-1])["over_transformers"] is None  # no transformers rows: no ratio
    assert all(row["tokens_per_target_forward"] >= 1.0 and row["verify_cost"] > 0 for row in rows)
    # the chain-shaped tree and the chain of the same depth run the same rounds
    assert rows[3]["tokens_per_target_forward"] == pytest.approx(rows[1]["tokens_per_target_forward"])
    assert "tree[2,2,1]" in format_rows(rows)
    [choice] = budget_choices(shapes, rows)
    assert choice["depth"] == 3 and choice["top_k"] == 2 and {choice["chosen_budget"], choice["fastest_budget"]} <= {4, 6}


@pytest.mark.parametrize("text", ["", "1,0", "a,b", "2,,1", "dynamic:2,2", "dynamic:2,2,9", "dynamic:2,2,4,0",
                                  "dynamic:2,2,4,1,1"])
def test_the_tree_bench_explains_a_bad_shape(text):
    import argparse

    from specdec_lib.bench.trees import parse_shapes

    with pytest.raises(argparse.ArgumentTypeError, match="--shapes"):
        parse_shapes(text)


def test_the_temperature_fit_counts_each_temperature_on_its_own_prompts(pair, tmp_path):
    """The fit's counts are those of the trees it names, and the bench times only the prompts the fit never saw."""
    from specdec_lib import DraftModelDrafter, DynamicTree, tree_speculative_generate
    from specdec_lib.bench.trees import calibrate_temperature, main

    drafter = DraftModelDrafter.for_pair(pair)
    shape = DynamicTree(3, 2, 4)
    counts = calibrate_temperature(pair.target, drafter, PROMPTS[:1], shape, [1.0, 0.2], max_new_tokens=8)
    cold = tree_speculative_generate(pair.target, drafter, PROMPTS[0], shape=DynamicTree(3, 2, 4, 0.2),
                                     max_new_tokens=8)
    assert set(counts) == {1.0, 0.2} and counts[0.2] == pytest.approx(tokens_per_target_forward(cold.trace))
    out = tmp_path / "trees.json"
    assert main(["--drafter", "draft-model", "--shapes", "dynamic:3,2,4", "--gammas", "2", "--prompts", "1",
                 "--max-new-tokens", "6", "--repeats", "1", "--calibrate", "dynamic:3,2,4", "--temperatures", "1,0.5",
                 "--no-progress", "--json", str(out)]) == 0
    stored = json.loads(out.read_text())
    assert stored["settings"]["prompts"] == 1 and stored["calibration"]["prompts"] == 1
    assert stored["calibration"]["best_temperature"] in (1.0, 0.5)


@pytest.mark.parametrize("text", ["", "0", "-1", "a", "1,,2", "inf"])
def test_the_temperature_fit_explains_a_bad_temperature(text):
    import argparse

    from specdec_lib.bench.trees import parse_temperatures

    with pytest.raises(argparse.ArgumentTypeError, match="positive temperatures"):
        parse_temperatures(text)


def test_the_temperature_fit_refuses_a_static_tree():
    from specdec_lib.bench.trees import main
    from specdec_lib.core.errors import SpecdecError

    with pytest.raises(SpecdecError, match="one dynamic tree"):
        main(["--calibrate", "2,2", "--prompts", "1", "--repeats", "1", "--no-progress"])
