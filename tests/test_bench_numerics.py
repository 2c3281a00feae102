"""The numerics bench (`specdec_lib.bench.numerics`): its stored results keep the course's promises, docs/benchmarks.md
holds exactly the tables printed from them, and the command runs end to end on a small grid."""

import json
import re
from pathlib import Path

import pytest

from specdec_lib.bench.numerics import by_gamma, main, numerics_tables, summary_rows

ROOT = Path(__file__).resolve().parents[1]
STORED = ROOT / "data" / "bench" / "numerics.json"


@pytest.fixture(scope="module")
def stored() -> dict:
    return json.loads(STORED.read_text())


def test_float32_never_forks_and_every_other_fork_is_a_near_tie(stored):
    rows = summary_rows(stored)
    assert {row["dtype"] for row in rows} == {"float32", "bfloat16", "float16"}
    assert all(row["forks"] == 0 for row in rows if row["dtype"] == "float32")
    assert all(row["disagreement"] == 0 for row in rows)
    assert all(row["runs"] > 0 for row in rows)


def test_the_planted_bug_and_a_replaced_token_are_judged_disagreements(stored):
    for dtype, measured in stored["dtypes"].items():
        control, replaced = measured["control"], measured["replaced"]
        assert control["changed"] > 0, dtype
        assert control.get("disagreement", 0) >= 0.95 * control["changed"], (dtype, control)
        assert replaced == {"disagreement": sum(replaced.values())}, (dtype, replaced)


def test_the_tolerance_covers_twice_the_measured_drift_of_the_deciding_logits(stored):
    for dtype, measured in stored["dtypes"].items():  # a margin moves by the drift of both of its logits
        assert 2 * measured["drift_steps"] <= measured["tolerance_at_8"] / measured["spacing_at_8"], dtype


def test_the_docs_hold_the_tables_of_the_stored_run():
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    blocks = re.findall(r"<!-- numerics-table: (.+?) -->\n(.*?)<!-- /numerics-table -->", page, flags=re.S)
    assert len(blocks) == 1
    (files, block), = blocks
    expected = numerics_tables(json.loads((ROOT / files.strip()).read_text()))
    assert block.strip() == expected.strip(), (
        f"docs/benchmarks.md's numerics table is stale: replace it by `python -m specdec_lib bench numerics --tables "
        f"{files.strip()}`")


def test_the_command_runs_a_small_grid_and_writes_what_it_prints(tmp_path, capsys):
    out = tmp_path / "numerics.json"
    assert main(["--dtypes", "bfloat16", "--tasks", "code", "--prompts", "1", "--gammas", "2",
                 "--max-new-tokens", "8", "--no-batch", "--no-progress", "--device", "cpu", "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    assert numerics_tables(document) in capsys.readouterr().out
    assert set(by_gamma(document)["bfloat16"]) == {2}
    assert main(["--tables", str(out)]) == 0 and numerics_tables(document) in capsys.readouterr().out


def test_bad_arguments_are_refused(capsys):
    with pytest.raises(SystemExit):
        main(["--dtypes", "float8"])
    assert "unknown dtype or prompt set: float8" in capsys.readouterr().err
