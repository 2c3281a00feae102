"""Block verification's gain (`specdec_lib.bench.block_gain`): rows verified many times by both rules.

On the paper's two-symbol toy (p = (1/3, 2/3), q = (2/3, 1/3), gamma = 2) the expectations are known exactly:
10/9 accepted drafts per round token-wise, 11/9 with block verification. The exact per-row expectations, the
sampled means (with their intervals) and the paired gain must all find them; real rows from the embedded models
must have the shapes and the properties a verifier relies on.
"""

import json

import pytest
import torch

from specdec_lib import load_pair
from specdec_lib.bench.block_gain import (RULES, collect_rows, expected_accepted, main,
                                          summarise, toy_rows, verify_rows)
from specdec_lib.core.stats import T975, Z975, cluster_mean_interval, t_quantile
from specdec_lib.bench.drafters import task_prompt_ids

P, Q = torch.tensor([1 / 3, 2 / 3]), torch.tensor([2 / 3, 1 / 3])


def test_the_exact_expectations_per_draft_are_the_enumerated_ones():
    # draft (0, 1): token-wise keeps 1 on average (x_1 accepted half the time, x_2 always), block always keeps both;
    # draft (0, 0): 0.75 against 0.5 (notebook 07's table)
    tokens = torch.tensor([[0, 1], [0, 0], [1, 0], [1, 1]])
    rows = toy_rows(P, Q, 2, 4)
    rows = type(rows)(rows.p, rows.q, tokens, rows.context)
    expected = expected_accepted(rows)
    assert torch.allclose(expected["token-wise"], torch.tensor([1.0, 0.75, 1.5, 2.0]), atol=1e-6)
    assert torch.allclose(expected["block"], torch.tensor([2.0, 0.5, 1.5, 2.0]), atol=1e-6)


def test_the_sampled_means_find_10_9_and_11_9_and_the_gain_is_seen():
    rows = toy_rows(P, Q, 2, 2000, seed=1)
    summary = summarise(rows, verify_rows(rows, 4, seed=2), expected_accepted(rows))
    for rule, exact in (("token-wise", 10 / 9), ("block", 11 / 9)):
        assert summary[rule]["low"] < exact < summary[rule]["high"], (rule, summary[rule])
        # the exact expectation given the drawn rows, averaged: only the drafts' own noise is left
        assert abs(summary[rule]["expected"] - exact) < 0.05
    assert summary["gain"]["low"] > 0 and summary["expected_gain"]["low"] > 0  # block keeps more, visibly
    assert summary["gain"]["low"] < 1 / 9 < summary["gain"]["high"]
    assert summary["rows"] == 2000 and summary["draws"] == 8000


def test_the_same_seed_gives_the_same_draws_and_both_rules_agree_at_equal_distributions():
    rows = toy_rows(P, Q, 2, 50)
    first, again = verify_rows(rows, 3, seed=5, chunk=16), verify_rows(rows, 3, seed=5, chunk=16)
    assert all(torch.equal(first[rule], again[rule]) for rule in RULES)  # seeded: the same draws
    same = toy_rows(P, P, 3, 40)  # q = p: every draft is accepted by both rules
    accepted = verify_rows(same, 2)
    assert all(bool((accepted[rule] == 3).all()) for rule in RULES)


def test_the_interval_counts_clusters_not_rows():
    values = torch.tensor([1.0, 1.0, 3.0, 3.0])
    by_row = cluster_mean_interval(values, torch.arange(4))
    by_pair = cluster_mean_interval(values, torch.tensor([0, 0, 1, 1]))
    assert by_row["mean"] == by_pair["mean"] == 2.0
    assert by_pair["clusters"] == 2 and by_pair["high"] - by_pair["low"] > by_row["high"] - by_row["low"]
    # few clusters: Student's t, wider than the normal interval; many: the normal one
    assert t_quantile(1) == T975[1] > t_quantile(4) > t_quantile(11) == T975[10] > t_quantile(500) == Z975
    assert by_row["high"] - by_row["mean"] == pytest.approx(T975[3] * float(values.std()) / 2)


@pytest.fixture(scope="module")
def pair():
    return load_pair("embedded", device="cpu")


def test_real_rows_are_rounds_a_verifier_accepts(pair):
    ids = task_prompt_ids(pair, "code", 1, torch.device("cpu"))
    rows = collect_rows(pair, ids, 1.0, length=3, continuation=4, stride=2, draws=2, seed=0)
    assert rows.p.shape[:2] == (4, 4) and rows.q.shape[:2] == (4, 3) and rows.tokens.shape == (4, 3)
    assert rows.context.tolist() == [0, 0, 1, 1]  # two contexts, two chains each
    assert torch.allclose(rows.p.sum(-1), torch.ones(4, 4), atol=1e-4)
    assert bool((rows.q.gather(-1, rows.tokens[..., None]) > 0).all())  # every draft was drawn from its q
    again = collect_rows(pair, ids, 1.0, length=3, continuation=4, stride=2, draws=2, seed=0)
    assert torch.equal(rows.tokens, again.tokens)  # seeded
    cut = rows.at(2)
    assert cut.p.shape[1] == 3 and torch.equal(cut.tokens, rows.tokens[:, :2])
    expected = expected_accepted(cut)
    assert all(bool(((0 <= expected[rule]) & (expected[rule] <= 2 + 1e-6)).all()) for rule in RULES)


def test_the_command_writes_its_json(tmp_path):
    path = tmp_path / "block-gain.json"
    assert main(["--tasks", "code", "--prompts", "1", "--continuation", "2", "--stride", "2", "--draws", "2",
                 "--temperatures", "1.0", "--gammas", "1,2", "--repeats", "2", "--json", str(path)]) == 0
    document = json.loads(path.read_text())
    assert [(row["temperature"], row["gamma"]) for row in document["rows"]] == [(1.0, 1), (1.0, 2)]
    assert {"token-wise", "block", "gain", "expected_gain"} <= set(document["rows"][0])
