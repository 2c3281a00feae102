"""The tuning, batch and plot suites of the bench: they run end to end on the embedded pair (tiny settings),
their numbers are consistent with each other, and the policy and latency helpers do what they say."""

import json

import pytest

from specdec_lib.bench import batches, cli, latency, plots, tuning
from specdec_lib.core.theory import expected_speedup
from specdec_lib.core.trace import RoundRecord, Trace


@pytest.fixture(scope="module")
def tuning_document(tmp_path_factory):
    path = tmp_path_factory.mktemp("tuning") / "tuning.json"
    assert cli.main(["tuning", "--drafters", "draft-model,prompt-lookup", "--gammas", "2,4", "--tasks", "code",
                     "--prompts", "2", "--max-new-tokens", "12", "--repeats", "1", "--no-progress",
                     "--json", str(path)]) == 0
    return json.loads(path.read_text())


@pytest.mark.slow
def test_the_tuning_sweep_predicts_from_its_own_measurements(tuning_document):
    rows = tuning_document["tasks"]["code"]["rows"]
    assert [r["method"] for r in rows][:5] == ["autoregressive", "draft-model", "draft-model", "prompt-lookup",
                                              "prompt-lookup"]
    assert {r["method"] for r in rows if "+" in r["method"]} == set(tuning.adaptive_registry(
        tuning_document["costs"]))
    assert all(r["identical"] is True for r in rows)  # greedy: every schedule emits the baseline's tokens
    assert all(r["predicted_speedup"] is None for r in rows if "+" in r["method"])  # gamma is only their cap
    for row in (r for r in rows if r["method"] == "draft-model"):
        assert row["predicted_speedup"] == pytest.approx(expected_speedup(row["alpha"], row["gamma"], row["c"]))
        if row["verify_cost"] is not None:
            assert row["predicted_with_verify"] == pytest.approx(
                expected_speedup(row["alpha"], row["gamma"], row["c"], row["verify_cost"]))
        assert row["latency"]["requests"] == 2 and row["latency"]["itl_p95_s"] >= row["latency"]["itl_p50_s"]
    best = tuning_document["tasks"]["code"]["best"]["draft-model"]
    assert best["found"] in (2, 4) and best["found_speedup"] > 0
    assert set(tuning_document["costs"]["verify_costs"]) == {"2", "4"}


@pytest.mark.slow
def test_the_batch_suite_compares_methods_on_the_same_rows(tmp_path):
    path = tmp_path / "batches.json"
    assert cli.main(["batches", "--batch-sizes", "1,3", "--max-new-tokens", "8", "--repeats", "1", "--no-progress",
                     "--json", str(path)]) == 0
    document = json.loads(path.read_text())
    assert {(r["method"].split("[")[0], r["batch"]) for r in document["rows"]} == {
        (m, b) for m in ("batched-autoregressive", "batched-draft-model", "batched-prompt-lookup") for b in (1, 3)}
    assert all(r["identical"] for r in document["rows"])
    for row in document["rows"]:
        assert row["latency"]["requests"] == row["batch"]
        assert row["memory_bytes"]["total"] == row["memory_bytes"]["weights"] + row["memory_bytes"]["kv"]
    draft_rows = [r for r in document["rows"] if "draft-model" in r["method"]]
    base_rows = [r for r in document["rows"] if r["method"] == batches.BASELINE]
    assert all(d["memory_bytes"]["weights"] > b["memory_bytes"]["weights"] for d, b in zip(draft_rows, base_rows))

    out = tmp_path / "figures"
    assert plots.main(["--batches", str(path), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["batches-itl-p95.png", "batches-speedup.png"]


@pytest.mark.slow
def test_the_tuning_figures_render(tuning_document, tmp_path):
    source = tmp_path / "tuning.json"
    source.write_text(json.dumps(tuning_document))
    assert plots.main(["--tuning", str(source), "--out", str(tmp_path / "figures")]) == 0
    assert sorted(p.name for p in (tmp_path / "figures").iterdir()) == ["adaptive.png", "gamma-sweep-code.png"]
    bars = plots.adaptive_bars(tuning_document, "code")
    assert plots.FIXED_LABEL in bars and "draft-model+heuristic" in bars


def test_the_disable_threshold_is_the_last_size_where_speculation_still_paid():
    rows = [{"method": "m", "batch": b, "speedup": s} for b, s in [(1, 1.4), (2, 1.2), (4, 1.05), (8, 0.9), (16, 1.1)]]
    assert batches.choose_threshold(rows, "m") == 4  # 16 paying again by noise does not re-enable it
    assert batches.choose_threshold([{"method": "m", "batch": 1, "speedup": 0.95}], "m") is None
    # in words: a threshold at the sweep's edge only says it never stopped paying there, None that it never paid
    assert batches.describe_threshold(4, 16) == "4"
    assert batches.describe_threshold(16, 16).startswith("at least 16")
    assert batches.describe_threshold(None, 16).startswith("none")


def test_latency_summaries_keep_the_tail_and_the_worst_request():
    summary = latency.latency_summary([0.1, 0.2, 0.9], [[0.01] * 19 + [0.5], [0.02], []], [1.0, 0.5, 3.0])
    assert summary["worst_request"] == 2 and summary["worst_request_s"] == 3.0
    assert summary["itl_p50_s"] == pytest.approx(0.01) and summary["itl_p95_s"] == pytest.approx(0.02)
    assert summary["ttft_p50_s"] == pytest.approx(0.2)
    trace = Trace(start_time=0.0, token_times=[0.1, 0.3, 0.3, 0.6],
                  rounds=[RoundRecord(0, 0, 1, 0, 0.1, 0, "prefill"), RoundRecord(2, 1, 2, 0, 0.2, 2, "recovered"),
                          RoundRecord(2, 0, 1, 0, 0.3, 2, "recovered")])
    described = latency.trace_latency([trace])
    assert described["acceptance_length_spread"] == [1.5, 1.5, 1.5]
    assert described["itl_p50_s"] == pytest.approx(0.25)  # gaps 0.2 and 0.3: tokens of one round arrive together


def test_unknown_suite_options_are_refused_like_any_argparse_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["tuning", "--drafters", "nonsense"])
    assert exit_info.value.code == 2
    assert "choose from" in capsys.readouterr().err


@pytest.mark.parametrize("marker, render", [("tuning-table", "tuning"), ("batches-table", "batches")])
def test_the_benchmark_pages_tuning_and_batch_tables_are_generated_from_the_json_they_name(marker, render):
    """Between <!-- MARKER: FILES --> and <!-- /MARKER --> docs/benchmarks.md holds exactly what `python -m specdec_lib
    bench SUITE --table FILES` prints: no number typed by hand."""
    import re
    from pathlib import Path

    from specdec_lib.bench.results_table import json_blocks

    module = {"tuning": tuning, "batches": batches}[render]
    markdown = {"tuning": tuning.tuning_markdown, "batches": batches.batches_markdown}[render]
    root = Path(__file__).resolve().parent.parent
    page = (root / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    blocks = re.findall(rf"<!-- {marker}: (.+?) -->\n(.*?)\n<!-- /{marker} -->", page, flags=re.S)
    assert blocks, f"docs/benchmarks.md has no generated {marker}"
    for names, body in blocks:
        paths = [Path(name) for name in names.split()]
        assert all((root / path).is_file() for path in paths), names
        expected = json_blocks(paths, module.describe_document, markdown, root=root)
        assert body.strip() == expected.strip(), f"regenerate the {marker} for {names}"
