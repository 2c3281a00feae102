"""Notebook 07's exercise checks on hand-written answers: the solutions pass, the usual mistakes get their hint."""

import itertools

import pytest
import torch

from specdec_lib import check
from specdec_lib.core.caches import compact_cache
from specdec_lib.core.block_verify import block_thresholds

# --- exercise 1: another toy -----------------------------------------------------------------------------------


def expected_drafts(p, q, gamma, *, weight="q", emitted=False, inverted=False, independent=False, block=True,
                    uncapped=False, bonus_token_wise=False, block_from_one=False, summed=False):
    """The solution's enumeration, with one thing changed at a time to make the usual mistakes."""
    totals = [0.0, 0.0]
    for drafts in itertools.product(range(len(p)), repeat=gamma):
        chance = {"q": float(torch.prod(q[list(drafts)])), "p": float(torch.prod(p[list(drafts)])),
                  "uniform": 1 / len(p) ** gamma}[weight] if not summed else 1.0
        alive, token_wise = 1.0, 0.0
        for x in drafts:
            ratio = float(q[x] / p[x]) if inverted else float(p[x] / q[x])
            capped = ratio if uncapped else min(1.0, ratio)
            alive = capped if independent else alive * capped
            token_wise += alive
        law = block_thresholds(p.repeat(1, gamma + 1, 1), q.repeat(1, gamma, 1), torch.tensor([drafts]))
        law = law.length_distribution()[0]  # one draft: a batch of one
        block_mean = float((torch.arange(gamma + 1) * law).sum()) if block else token_wise
        if block_from_one:
            block_mean = float((torch.arange(1, gamma + 2) * law).sum())
        totals[0] += chance * (token_wise + emitted + bonus_token_wise)
        totals[1] += chance * (block_mean + emitted)
    return tuple(totals)


def test_the_toy_solution_passes():
    report = check.expected_accepted_drafts(expected_drafts)
    assert report and repr(report) == "✅ expected_accepted_drafts: all 6 hidden cases pass.", repr(report)


@pytest.mark.parametrize("wrong, words", [
    (lambda p, q, g: tuple(reversed(expected_drafts(p, q, g))), "in the other order"),
    (lambda p, q, g: expected_drafts(p, q, g, weight="p"), "under the target p"),
    (lambda p, q, g: expected_drafts(p, q, g, weight="uniform"), "without weighting them"),
    (lambda p, q, g: expected_drafts(p, q, g, emitted=True), "counted the tokens a round emits"),
    (lambda p, q, g: expected_drafts(p, q, g, inverted=True), "min(1, q(x) / p(x))"),
    (lambda p, q, g: expected_drafts(p, q, g, independent=True), "as if the round went on after a rejection"),
    (lambda p, q, g: expected_drafts(p, q, g, block=False), "equals token-wise verification's"),
    (lambda p, q, g: expected_drafts(p, q, g, uncapped=True), "without capping it"),
    (lambda p, q, g: expected_drafts(p, q, g, bonus_token_wise=True), "accepted *drafts* are one fewer"),
    (lambda p, q, g: expected_drafts(p, q, g, block_from_one=True), "Your block number is one too high"),
    (lambda p, q, g: expected_drafts(p, q, g, summed=True), "added up the drafts' numbers without weighting"),
])
def test_each_usual_toy_mistake_gets_its_hint(wrong, words):
    report = check.expected_accepted_drafts(wrong)
    assert not report and words in repr(report), repr(report)


def test_stub_and_a_single_number_are_messages():
    def stub(p, q, gamma):
        raise NotImplementedError  # your code here

    assert "still raises NotImplementedError" in repr(check.expected_accepted_drafts(stub))
    assert "Expected two numbers, (token-wise, block), got float" in repr(
        check.expected_accepted_drafts(lambda p, q, g: 1.0))


# --- exercise 2: same nodes, different shapes ---------------------------------------------------------------------


def tree_tokens(branching, shares, *, widths=True, own_token=True, multiply=True, per_node=False):
    """The solution's walk down the tree, with one thing changed at a time to make the usual mistakes."""
    tokens, alive, nodes = 1.0 if own_token else 0.0, 1.0, 1
    for width in branching:
        nodes *= width
        chance = sum(shares[:width]) if widths else shares[0]
        alive = alive * chance if multiply else chance
        tokens += alive * (nodes if per_node else 1)
    return tokens


def test_the_tree_solution_passes_and_a_chain_is_leviathans_sum():
    report = check.chain_or_tree(tree_tokens)
    assert report and repr(report) == "✅ chain_or_tree: all 6 hidden cases pass.", repr(report)
    assert abs(tree_tokens((1,) * 6, [0.7]) - (1 - 0.7 ** 7) / 0.3) < 1e-12


@pytest.mark.parametrize("wrong, words", [
    # shortcuts that return the conclusion ("depth wins", "the chain's formula") without walking the tree
    (lambda branching, shares: len(branching) + 1, "the most a round can emit"),
    (lambda branching, shares: tree_tokens(branching, shares, widths=False), "only the draft's first choice"),
    # plausible wrong walks
    (lambda branching, shares: tree_tokens(branching, shares, own_token=False), "the target's own token"),
    (lambda branching, shares: tree_tokens(branching, shares, multiply=False), "You added the depths' chances"),
    (lambda branching, shares: tree_tokens(branching, shares, per_node=True), "You counted nodes"),
    (lambda branching, shares: 1 + sum(min(1.0, width * shares[0]) for width in branching), "not b times shares[0]"),
])
def test_shortcuts_and_wrong_walks_are_rejected_with_their_hint(wrong, words):
    report = check.chain_or_tree(wrong)
    assert not report and words in repr(report), repr(report)


def test_the_tree_stub_and_a_non_number_are_messages():
    def stub(branching, shares):
        raise NotImplementedError  # your code here

    assert "still raises NotImplementedError" in repr(check.chain_or_tree(stub))
    assert "Expected a number (tokens per round), got str" in repr(check.chain_or_tree(lambda b, s: "chain"))
    assert "takes your function itself" in repr(check.chain_or_tree("b"))


# --- exercise 3: compaction on a pointer cache ----------------------------------------------------------------------


def compact(cache, keep_from, keep, *, values=True, set_length=True, refresh=True, layers=None, replace=False):
    """The solution's compaction, with one thing changed at a time to make the usual mistakes."""
    for layer in cache.layers[:layers]:
        n = keep.numel()
        if replace:  # DynamicCache style: new tensors, the storage left as it was
            index = torch.cat([torch.arange(keep_from), keep])
            layer.keys, layer.values = layer.keys[:, :, index], layer.values[:, :, index]
            layer.length = keep_from + n
            continue
        layer.key_storage[:, :, keep_from : keep_from + n] = layer.key_storage[:, :, keep].clone()
        if values:
            layer.value_storage[:, :, keep_from : keep_from + n] = layer.value_storage[:, :, keep].clone()
        if set_length:
            layer.length = keep_from + n
        if refresh:
            layer._refresh_views()


def test_the_compaction_solution_and_the_library_pass():
    assert check.compact_pointer_cache(compact)
    assert check.compact_pointer_cache(compact_cache)


@pytest.mark.parametrize("mistake, words", [
    (dict(values=False), "Move the values too"),
    (dict(set_length=False), "set layer.length"),
    (dict(refresh=False), "layer._refresh_views()"),
    (dict(layers=1), "compact every layer"),
    (dict(replace=True), "move the rows inside the storage"),
])
def test_each_usual_compaction_mistake_gets_its_hint(mistake, words):
    report = check.compact_pointer_cache(lambda cache, keep_from, keep: compact(cache, keep_from, keep, **mistake))
    assert not report and words in repr(report), repr(report)


def compact_from(cache, keep_from, keep, *, start, rows, length, move=True):
    """A compaction that writes ``rows`` from position ``start`` and sets the length to ``length``."""
    for layer in cache.layers:
        if move and rows.numel():
            layer.key_storage[:, :, start : start + rows.numel()] = layer.key_storage[:, :, rows].clone()
            layer.value_storage[:, :, start : start + rows.numel()] = layer.value_storage[:, :, rows].clone()
        layer.length = length
        layer._refresh_views()


@pytest.mark.parametrize("wrong, words", [
    (lambda c, f, k: compact_from(c, f, k, start=f + 1, rows=k, length=f + k.numel() + 1), "one position late"),
    (lambda c, f, k: compact_from(c, f, k, start=f + 1, rows=k, length=f + k.numel()), "one position late"),
    (lambda c, f, k: compact_from(c, f, k, start=f - 1, rows=k, length=f + k.numel() - 1), "one position early"),
    (lambda c, f, k: compact_from(c, f, k, start=f, rows=f + k, length=f + k.numel()), "not offsets after it"),
    (lambda c, f, k: compact_from(c, f, k, start=f, rows=torch.arange(int(k[0]), int(k[0]) + k.numel())
                                  if k.numel() else k, length=f + k.numel()), "a contiguous block from keep[0]"),
    (lambda c, f, k: compact_from(c, f, k, start=f, rows=k, length=f + k.numel(), move=False),
     "You only moved the length pointer"),
])
def test_compaction_slips_in_the_rows_get_their_hint(wrong, words):
    report = check.compact_pointer_cache(wrong)
    assert not report and words in repr(report), repr(report)


def test_a_compaction_one_row_off_names_the_rows():
    def off_by_one(cache, keep_from, keep):
        compact(cache, keep_from + 1, keep)

    report = repr(check.compact_pointer_cache(off_by_one))
    assert "hold the rows of old positions" in report or "length" in report, report


def test_the_compaction_stub_says_so():
    def stub(cache, keep_from, keep):
        raise NotImplementedError  # your code here

    assert "still raises NotImplementedError" in repr(check.compact_pointer_cache(stub))
    assert "takes your function itself" in repr(check.compact_pointer_cache(None))
