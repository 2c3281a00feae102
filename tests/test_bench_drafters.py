"""The drafters benchmark (``python -m specdec_lib.bench.drafters``): its rows, buckets, twins and arguments.

Timing is never asserted (benchmarks measure speed, tests check what the table says is computed correctly):
every row must be token-identical to the baseline, our rows must carry trace acceptance, transformers' twins
their ratio to ours, and each length bucket the prompts it claims.
"""

import argparse
import json

import pytest
import torch

from specdec_lib import load_prompts
from specdec_lib.prompts import encode_prompts
from specdec_lib.bench.cli import load_cross_pair
from specdec_lib.bench.drafters import (
    DEFAULT_GAMMAS,
    DRAFTERS,
    build_task_methods,
    format_rows,
    headline,
    headline_markdown,
    length_buckets,
    main,
    parse_drafters,
    task_rows,
)
from specdec_lib.bench.hf import HFAssisted
from specdec_lib.bench.methods import GenerationSpec
from specdec_lib.core.errors import ConfigError


@pytest.fixture(scope="module")
def pairs(embedded_pair):
    return embedded_pair, load_cross_pair("embedded", embedded_pair)


def test_every_drafter_row_is_identical_and_twins_carry_their_ratio(pairs):
    pair, cross = pairs
    prompts = load_prompts("code", limit=2)
    prompt_ids = encode_prompts(pair.target_tokenizer, [p.prompt for p in prompts], torch.device("cpu"))
    gammas = {name: (2,) for name in DRAFTERS}
    rows = task_rows(pair, cross, prompt_ids, gammas, max_new_tokens=5, repeats=1, progress=False)
    names = [row["method"] for row in rows]
    assert names[0] == "autoregressive"
    assert set(DRAFTERS) <= set(names) and {"hf-assisted", "hf-prompt-lookup", "hf-early-exit"} <= set(names)
    assert {"hf-assisted-heuristic", "hf-assisted-default"} <= set(names)  # transformers' own schedules
    assert next(r for r in rows if r["method"] == "hf-assisted-default")["gamma"] == 20  # its default maximum
    for row in rows:
        assert row["identical"] is True, row["method"]
        assert set(row["buckets"]) == {"short", "long"}
    for name in DRAFTERS:
        row = next(r for r in rows if r["method"] == name)
        assert row["alpha"] is not None and row["mean_acceptance_length"] >= 1.0
    for name in ("draft-model", "prompt-lookup", "early-exit"):  # the rows with a transformers twin
        assert next(r for r in rows if r["method"] == name)["over_transformers"] > 0
    assert next(r for r in rows if r["method"] == "suffix")["over_transformers"] is None
    table = format_rows("code", rows)
    assert "early-exit" in table and "NO" not in table


def test_twins_run_at_every_gamma_and_schedules_once(pairs):
    pair, cross = pairs
    spec = GenerationSpec(4, None)
    methods = build_task_methods(pair, cross, {"draft-model": (2, 5), "suffix": (8,)}, spec)
    assert [method.key for method in methods] == [
        "autoregressive", "draft-model[gamma=2]", "draft-model[gamma=5]", "hf-assisted[gamma=2]",
        "hf-assisted[gamma=5]", "hf-assisted-heuristic[gamma=5]", "hf-assisted-default[gamma=20]", "suffix[gamma=8]"]
    assert len(build_task_methods(pair, cross, {"draft-model": (2, 5)}, spec, transformers=False)) == 3
    with pytest.raises(ConfigError, match="schedule must be one of constant, heuristic, default"):
        HFAssisted(pair.target, pair.draft, 3, spec, schedule="dynamic")


def test_the_headline_sets_our_fastest_against_transformers_fastest():
    def row(method, gamma, speedup, identical=True):
        return {"method": method, "gamma": gamma, "speedup": speedup, "identical": identical}

    rows = [row("autoregressive", None, 1.0), row("draft-model", 3, 1.7), row("eagle3", 5, 1.9),
            row("hf-assisted", 3, 1.5), row("hf-prompt-lookup", 4, 1.6), row("hf-assisted-default", 20, 1.2),
            row("suffix", 8, 2.5, identical=False), row("hf-early-exit", 3, 2.0, identical=False)]  # not lossless
    best = headline(rows)
    assert (best["ours"]["method"], best["transformers"]["method"]) == ("eagle3", "hf-prompt-lookup")
    assert best["ratio"] == pytest.approx(1.9 / 1.6)
    alone = headline(rows[:3])  # --no-transformers
    assert alone["transformers"] is None and alone["ratio"] is None
    table = headline_markdown({"tasks": {"code": rows}})
    assert "| code | eagle3 (γ 5) 1.90x | hf-prompt-lookup (γ 4) 1.60x | 1.19x |" in table


def test_length_buckets_split_at_the_median():
    prompts = [torch.zeros(1, n, dtype=torch.long) for n in (5, 9, 7, 30)]
    assert length_buckets(prompts) == {"short": [0, 2], "long": [1, 3]}
    assert length_buckets(prompts[:1]) == {"short": [0], "long": []}


def test_drafter_arguments_are_parsed_and_checked():
    assert parse_drafters("draft-model:3,4 suffix") == {"draft-model": (3, 4), "suffix": DEFAULT_GAMMAS["suffix"]}
    with pytest.raises(argparse.ArgumentTypeError, match="unknown drafter"):
        parse_drafters("medusa")
    with pytest.raises(argparse.ArgumentTypeError, match="at least one"):
        parse_drafters("  ")


def test_the_command_writes_its_json(tmp_path, capsys):
    out = tmp_path / "drafters.json"
    assert main(["--drafters", "prompt-lookup:2", "--tasks", "code", "--prompts", "1", "--max-new-tokens", "6",
                 "--repeats", "1", "--no-progress", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert list(result["tasks"]) == ["code"] and result["settings"]["drafters"] == {"prompt-lookup": [2]}
    assert "task: code" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--tasks", "poetry"])


def test_the_benchmark_pages_drafters_tables_are_generated_from_the_json_they_name():
    """Between <!-- drafters-table: FILES --> and <!-- /drafters-table --> docs/benchmarks.md holds exactly what
    `python -m specdec_lib.bench.drafters --table FILES` prints: no number typed by hand."""
    import re
    from pathlib import Path

    from specdec_lib.bench.drafters import tables_markdown

    root = Path(__file__).resolve().parent.parent
    page = (root / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    blocks = re.findall(r"<!-- drafters-table: (.+?) -->\n(.*?)\n<!-- /drafters-table -->", page, flags=re.S)
    assert blocks, "docs/benchmarks.md has no generated drafters table"
    for names, body in blocks:
        paths = [Path(name) for name in names.split()]
        assert all((root / path).is_file() for path in paths), names
        assert body.strip() == tables_markdown(paths, root=root).strip(), f"regenerate the table for {names}"
