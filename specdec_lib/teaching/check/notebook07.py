"""Self-checks of notebook 07 (beyond the chain): ``check.<exercise>(your_answer)``.

- `expected_accepted_drafts` (exercise 1): the exact expected accepted drafts per round of token-wise and of block
  verification, by enumeration, on hidden context-free toys (p, q, gamma) against `specdec_lib.core.block_verify.block_thresholds`;
- `chain_or_tree` (exercise 2): the expected tokens of one greedy round of a tree shape, from the shares of the
  draft's first, second, ... choices that are the target's token, on hidden shapes (a chain among them);
- `compact_pointer_cache` (exercise 3): your compaction of a `PreallocatedCache`, run on small caches the check
  builds (no model) and compared with `specdec_lib.core.caches.compact_cache`, also after the next token is appended.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import torch

from ...core.caches import PreallocatedCache, compact_cache
from ...core.block_verify import block_thresholds
from .core import Case, CheckReport, close, find_mistake, is_number, mismatch, run_cases

# --- exercise 1: another toy -----------------------------------------------------------------------------------


def _drafts(q: torch.Tensor, gamma: int):
    """Every draft of ``gamma`` symbols the draft q can propose, with its probability prod q(x_i)."""
    for drafts in itertools.product(range(q.numel()), repeat=gamma):
        chance = float(torch.prod(q[list(drafts)]))
        if chance > 0:
            yield drafts, chance


def _token_wise(p: torch.Tensor, q: torch.Tensor, drafts: tuple[int, ...], ratio=lambda p, q: p / q) -> float:
    """E[accepted] of token-wise verification on one draft: sum_i P(drafts 1 .. i all accepted)."""
    mean, alive = 0.0, 1.0
    for x in drafts:
        alive *= min(1.0, float(ratio(p[x], q[x])))
        mean += alive
    return mean


def _block(p: torch.Tensor, q: torch.Tensor, drafts: tuple[int, ...]) -> float:
    """E[tau] of block verification on one draft, from the library's length distribution."""
    gamma = len(drafts)
    block = block_thresholds(p.repeat(1, gamma + 1, 1), q.repeat(1, gamma, 1), torch.tensor([drafts]))  # a batch of one
    law = block.length_distribution()[0]
    return float((torch.arange(gamma + 1, dtype=law.dtype) * law).sum())


def _expected(p: torch.Tensor, q: torch.Tensor, gamma: int, weight: str = "q", per_draft=(_token_wise, _block)):
    """(token-wise, block): each rule's accepted drafts per round averaged over every draft, each weighted by its
    probability under the draft (``weight="q"``, the right answer) or, as mistakes, under p or uniformly."""
    totals = [0.0, 0.0]
    for drafts, chance in _drafts(q, gamma):
        if weight != "q":
            chance = float(torch.prod(p[list(drafts)])) if weight == "p" else 1.0 / q.numel() ** gamma
        for index, rule in enumerate(per_draft):
            totals[index] += chance * rule(p, q, drafts)
    return tuple(totals)


def _independent(p: torch.Tensor, q: torch.Tensor, drafts: tuple[int, ...]) -> float:
    return sum(min(1.0, float(p[x] / q[x])) for x in drafts)


TOY_MISTAKES = [
    (lambda p, q, g: tuple(reversed(_expected(p, q, g))),
     "Your two numbers are in the other order: return (token-wise, block)."),
    (lambda p, q, g: _expected(p, q, g, weight="p"),
     "You weighted each draft by its probability under the target p. The drafts are drawn from the draft: "
     "weight draft (x_1 .. x_gamma) by q(x_1) * ... * q(x_gamma)."),
    (lambda p, q, g: _expected(p, q, g, weight="uniform"),
     "You averaged over the drafts without weighting them: weight each by its probability under the draft, "
     "prod q(x_i)."),
    (lambda p, q, g: tuple(x + 1 for x in _expected(p, q, g)),
     "You counted the tokens a round emits (accepted drafts + the recovered or bonus token). The question asks "
     "for accepted *drafts* per round (the notebook's 10/9 and 11/9)."),
    (lambda p, q, g: _expected(p, q, g, per_draft=(lambda p, q, d: _token_wise(p, q, d, lambda a, b: b / a), _block)),
     "Your token-wise number accepts a draft x with min(1, q(x) / p(x)); exact verification accepts it with "
     "min(1, p(x) / q(x))."),
    (lambda p, q, g: _expected(p, q, g, per_draft=(_independent, _block)),
     "Your token-wise number counts every accepted draft, as if the round went on after a rejection. It stops at "
     "the first one: draft i counts only if drafts 1 .. i were all accepted, E[N] = sum_i prod_{j<=i} min(1, p/q)."),
    (lambda p, q, g: _expected(p, q, g, per_draft=(_token_wise, _token_wise)),
     "Your block number equals token-wise verification's: use block verification's length law, from "
     "my_block_thresholds and length_law (or block_thresholds(...).length_distribution())."),
    (lambda p, q, g: _expected(p, q, g, per_draft=(lambda p, q, d: _uncapped(p, q, d), _block)),
     "Your token-wise number uses p(x) / q(x) as a probability without capping it: a draft is accepted with "
     "min(1, p(x) / q(x)), a ratio above 1 is a certainty."),
    (lambda p, q, g: (_expected(p, q, g)[0] + 1, _expected(p, q, g)[1]),
     "Your token-wise number counts the token a round emits after the drafts (the recovered or bonus token), as "
     "(1 - alpha^(gamma+1)) / (1 - alpha) does; accepted *drafts* are one fewer."),
    (lambda p, q, g: (_expected(p, q, g)[0], _expected(p, q, g)[1] + 1),
     "Your block number is one too high: the length law's entry k is the probability of k accepted drafts, "
     "k = 0 .. gamma, so weight it by torch.arange(gamma + 1), starting at 0."),
    (lambda p, q, g: tuple(x * q.numel() ** g for x in _expected(p, q, g, weight="uniform")),
     "You added up the drafts' numbers without weighting them: an expectation weights each draft by its "
     "probability under the draft, prod q(x_i) (the weights sum to 1)."),
]


def _uncapped(p: torch.Tensor, q: torch.Tensor, drafts: tuple[int, ...]) -> float:
    mean, alive = 0.0, 1.0
    for x in drafts:
        alive *= float(p[x] / q[x])
        mean += alive
    return mean


def _toy(p: list[float], q: list[float], gamma: int) -> tuple:
    return torch.tensor(p), torch.tensor(q), gamma


TOY_CASES = [
    Case("the notebook's two-symbol toy, gamma = 2", _toy([1 / 3, 2 / 3], [2 / 3, 1 / 3], 2)),
    Case("three symbols, gamma = 2", _toy([0.6, 0.3, 0.1], [0.3, 0.3, 0.4], 2)),
    Case("four symbols, gamma = 2", _toy([0.1, 0.4, 0.2, 0.3], [0.25, 0.25, 0.25, 0.25], 2)),
    Case("two symbols, gamma = 4", _toy([0.7, 0.3], [0.4, 0.6], 4)),
    Case("gamma = 1: block and token-wise verification agree", _toy([0.2, 0.5, 0.3], [0.5, 0.2, 0.3], 1)),
    Case("p = q: every draft is accepted", _toy([0.5, 0.3, 0.2], [0.5, 0.3, 0.2], 2)),
]
TOY_CASES = [Case(case.name, case.args, _expected(*case.args)) for case in TOY_CASES]


def _pair(got: Any) -> tuple[float, float] | None:
    try:
        first, second = got
        return float(first), float(second)
    except (TypeError, ValueError):
        return None


def _same_pair(a: Any, b: Any) -> bool:
    a, b = _pair(a), _pair(b)
    return a is not None and b is not None and all(close(x, y, rel_tol=1e-5, abs_tol=1e-6) for x, y in zip(a, b))


def expected_accepted_drafts(learner: Callable) -> CheckReport:
    """Exercise 1: ``learner(p, q, gamma)`` (``p, q: FloatTensor[V]``, the same at every position) must return
    ``(token_wise, block)``, the exact expected accepted drafts per round of each rule, on hidden toys."""

    def judge(case: Case, got: Any) -> str | None:
        if _pair(got) is None:
            return f"Expected two numbers, (token-wise, block), got {type(got).__name__}."
        if _same_pair(got, case.expected):
            return None
        hint = find_mistake(got, case.args, case.expected, TOY_MISTAKES, _same_pair, learner, TOY_CASES)
        return mismatch(case.expected, _pair(got), hint)

    return run_cases("expected_accepted_drafts", learner, TOY_CASES, judge)


# --- exercise 2: same nodes, different shapes ---------------------------------------------------------------------


def _tree_tokens(branching: tuple[int, ...], shares: list[float]) -> float:
    """Expected tokens of one greedy round of ``TreeShape(branching)``: the walk passes depth j when the target's
    token is among the draft's top ``branching[j - 1]`` choices there (probability ``sum(shares[:b])``), depths
    independent; the round emits the path's drafts plus the target's own token."""
    tokens, alive = 1.0, 1.0
    for width in branching:
        alive *= sum(shares[:width])
        tokens += alive
    return tokens


TREE_MISTAKES = [
    (lambda branching, shares: _tree_tokens((1,) * len(branching), shares),
     "You used only the draft's first choice at every depth, as a chain does. A node with b children gives the walk "
     "b chances: the target's token is among them with probability shares[0] + ... + shares[b - 1]."),
    (lambda branching, shares: _tree_tokens(branching, shares) - 1,
     "You counted only the accepted drafts. Every round also emits the target's own token (the recovered or bonus "
     "one): a round that accepts nothing still writes 1 token."),
    (lambda branching, shares: len(branching) + 1.0,
     "That is the most a round can emit, every depth right. The expectation weighs each depth by the chance that "
     "the walk gets there."),
    (lambda branching, shares: 1 + sum(min(1.0, width * shares[0]) for width in branching),
     "The children of a node are the draft's *different* choices, each right with its own share: b children catch "
     "the target's token with probability shares[0] + ... + shares[b - 1], not b times shares[0]."),
    (lambda branching, shares: 1 + sum(sum(shares[:width]) for width in branching),
     "You added the depths' chances. The walk reaches depth d only if it passed every depth before it: multiply "
     "the chances of depths 1 .. d, then add those products over d."),
    (lambda branching, shares: _tree_tokens_per_node(branching, shares),
     "You counted nodes. A greedy round follows one path down the tree: at most one node per depth is accepted, "
     "however many siblings it has."),
]


def _tree_tokens_per_node(branching: tuple[int, ...], shares: list[float]) -> float:
    """The mistake of counting every node of a depth the walk reaches as accepted."""
    tokens, alive, nodes = 1.0, 1.0, 1
    for width in branching:
        nodes *= width
        alive *= sum(shares[:width])
        tokens += alive * nodes
    return tokens


TREE_CASES = [
    Case("a chain of 4 drafts: only the first choice counts", ((1, 1, 1, 1), [0.7])),
    Case("the tree (3, 1): three first tokens, then one each", ((3, 1), [0.7, 0.1, 0.05])),
    Case("the tree (2, 2, 1, 1)", ((2, 2, 1, 1), [0.6, 0.2])),
    Case("the tree (4, 2, 2, 1)", ((4, 2, 2, 1), [0.5, 0.2, 0.1, 0.05])),
    Case("one draft that is always right", ((1,), [1.0])),
    Case("a draft that is never right, at any rank", ((2, 1), [0.0, 0.0])),
]
TREE_CASES = [Case(case.name, case.args, _tree_tokens(*case.args)) for case in TREE_CASES]


def chain_or_tree(learner: Callable) -> CheckReport:
    """Exercise 2: ``learner(branching, shares)`` must return the expected tokens one greedy round of
    ``TreeShape(branching)`` emits when the target's token is the draft's r-th choice with probability
    ``shares[r - 1]``, independently at every depth: ``1 + sum_d prod_{j <= d} sum(shares[:branching[j - 1]])``.
    Checked on hidden shapes and shares; a chain, ``(1,) * gamma`` with ``[alpha]``, gives Leviathan's
    ``(1 - alpha^(gamma + 1)) / (1 - alpha)``."""

    def judge(case: Case, got: Any) -> str | None:
        if not is_number(got):
            return f"Expected a number (tokens per round), got {type(got).__name__}."
        if close(got, case.expected, rel_tol=1e-9):
            return None
        hint = find_mistake(got, case.args, case.expected, TREE_MISTAKES, lambda a, b: close(a, b, rel_tol=1e-9),
                            learner, TREE_CASES)
        return mismatch(case.expected, float(got), hint)

    return run_cases("chain_or_tree", learner, TREE_CASES, judge)


# --- exercise 3: compaction on a pointer cache ----------------------------------------------------------------------

_LAYERS, _KV_HEADS, _HEAD_DIM, _MAX_LEN, _LAYER_TAG, _NEXT = 3, 2, 4, 32, 1000, 99


def _labelled_cache(length: int) -> PreallocatedCache:
    """A pre-allocated cache of ``length`` tokens whose every stored row says where it came from: in layer l,
    the keys of position i are ``i + 1000 l`` and its values ``-(i + 1000 l)`` (every head, every channel)."""
    cache = PreallocatedCache(_LAYERS, _MAX_LEN)
    for index, layer in enumerate(cache.layers):
        layer.allocate(1, _KV_HEADS, _HEAD_DIM, torch.float32, torch.device("cpu"))
        rows = (torch.arange(length, dtype=torch.float32) + _LAYER_TAG * index).view(1, 1, length, 1)
        keys = rows.expand(1, _KV_HEADS, length, _HEAD_DIM).contiguous()
        layer.update(keys, -keys)
    return cache


def _rows_of(tensor: torch.Tensor, index: int) -> list[int]:
    """The positions the rows of a labelled layer's ``[1, H, T, D]`` keys (or minus its values) came from."""
    return [int(round(float(x))) - _LAYER_TAG * index for x in tensor[0, 0, :, 0]]


def _state(cache: PreallocatedCache) -> list[dict]:
    """What a compaction must leave: per layer its length, the rows its keys and values show now, and the rows
    they show after the next token (position 99) is appended the way the next forward appends it."""
    state = [{"length": layer.length, "keys": _rows_of(layer.keys, i), "values": _rows_of(-layer.values, i)}
             for i, layer in enumerate(cache.layers)]
    for index, (layer, entry) in enumerate(zip(cache.layers, state)):
        new = torch.full((1, _KV_HEADS, 1, _HEAD_DIM), float(_NEXT + _LAYER_TAG * index))
        keys, values = layer.update(new, -new)
        entry["keys after the next token"] = _rows_of(keys, index)
        entry["values after the next token"] = _rows_of(-values, index)
    return state


def _compacted(compact: Callable, length: int, keep_from: int, keep: list[int]) -> list[dict]:
    cache = _labelled_cache(length)
    compact(cache, keep_from, torch.tensor(keep, dtype=torch.long))
    return _state(cache)


def _compaction_problem(got: list[dict], expected: list[dict]) -> str | None:
    """What is wrong with the state ``got`` of a compacted labelled cache (`_state`), layer by layer; None: nothing."""
    for index, (mine, right) in enumerate(zip(got, expected)):
        where = f"layer {index}"
        if mine == right:
            continue
        if index > 0 and got[0] == expected[0]:
            return f"Layer 0 is right but {where} is not: compact every layer (for layer in cache.layers)."
        if mine["length"] != right["length"]:
            return (f"{where}'s length is {mine['length']}, expected {right['length']} = keep_from + len(keep): set "
                    "layer.length after the rows you kept.")
        if len(mine["keys"]) != mine["length"]:
            return (f"{where}'s keys show {len(mine['keys'])} rows while its length is {mine['length']}: refresh the "
                    "in-use views after moving the pointer (layer._refresh_views()).")
        for name in ("keys", "values"):
            if mine[name] != right[name]:
                hint = ("Entry keep_from + j must be the old entry keep[j]; the prefix before keep_from stays."
                        if name == "keys" or mine["keys"] != right["keys"] else
                        "Move the values too: value_storage, the same rows as key_storage.")
                return (f"{where}'s {name} hold the rows of old positions {mine[name]}, expected {right[name]}.\n"
                        f"Hint: {hint}")
        for name in ("keys after the next token", "values after the next token"):
            if mine[name] != right[name]:
                return (f"Right after your compaction {where} looks right, but once the next token is appended its "
                        f"{name.split()[0]} hold the rows of old positions {mine[name]}, expected {right[name]}.\n"
                        "Hint: you replaced layer.keys / layer.values with new tensors and left the storage as it "
                        "was. A pointer cache appends into key_storage / value_storage at the pointer and re-reads "
                        "its views from them: move the rows inside the storage.")
    return None


def _moved(rows: Callable, start: Callable, length: Callable, move: bool = True) -> Callable:
    """A compaction with one mistake: the rows ``rows(keep_from, keep)`` written from ``start(keep_from)``, the
    length ``length(keep_from, n)``, the views refreshed; ``move=False`` only moves the pointer."""
    def compact(cache: PreallocatedCache, keep_from: int, keep: torch.Tensor) -> None:
        source = rows(keep_from, keep)
        first = start(keep_from)
        for layer in cache.layers:
            if move and source.numel():
                layer.key_storage[:, :, first:first + source.numel()] = layer.key_storage[:, :, source].clone()
                layer.value_storage[:, :, first:first + source.numel()] = layer.value_storage[:, :, source].clone()
            layer.length = length(keep_from, keep.numel())
            layer._refresh_views()
    return compact


_ONE_LATE = ("The kept rows start one position late: the first goes to position keep_from, right after the "
             "prefix (positions 0 .. keep_from - 1).")
_ONE_EARLY = ("The kept rows start one position early and overwrite the prefix's last row: the first goes to "
              "position keep_from (positions 0 .. keep_from - 1 stay).")
COMPACTION_MISTAKES = [
    (_moved(lambda f, k: k, lambda f: f + 1, lambda f, n: f + n + 1), _ONE_LATE),
    (_moved(lambda f, k: k, lambda f: f + 1, lambda f, n: f + n), _ONE_LATE),
    (_moved(lambda f, k: k, lambda f: f - 1, lambda f, n: f + n - 1), _ONE_EARLY),
    (_moved(lambda f, k: k, lambda f: f - 1, lambda f, n: f + n), _ONE_EARLY),
    (_moved(lambda f, k: k + f, lambda f: f, lambda f, n: f + n),
     "You read the rows at keep_from + keep: keep holds the kept nodes' positions in the cache already (past "
     "keep_from), not offsets after it. Read key_storage[:, :, keep]."),
    (_moved(lambda f, k: torch.arange(int(k[0]), int(k[0]) + k.numel()) if k.numel() else k, lambda f: f,
            lambda f, n: f + n),
     "You moved a contiguous block from keep[0]; the kept nodes of a tree path are not adjacent in the cache. "
     "Index the storage with keep itself, key_storage[:, :, keep]."),
    (_moved(lambda f, k: k, lambda f: f, lambda f, n: f + n, move=False),
     "You only moved the length pointer, as a crop would: the kept nodes sit further on in the storage, so copy "
     "their rows to keep_from .. keep_from + len(keep) - 1 first."),
]

COMPACTION_CASES = [
    Case("prefix + root of 5, six nodes, the path root -> node 1 -> node 4", (11, 5, [6, 9])),
    Case("no node accepted: only the prefix and the root stay", (11, 5, [])),
    Case("the first node only (already in place)", (11, 5, [5])),
    Case("a path of three nodes of a deeper tree", (14, 4, [5, 8, 12])),
    Case("the last node of the tree", (10, 6, [9])),
]
COMPACTION_CASES = [Case(case.name, case.args, _compacted(compact_cache, *case.args)) for case in COMPACTION_CASES]


def compact_pointer_cache(learner: Callable) -> CheckReport:
    """Exercise 3: ``learner(cache, keep_from, keep)`` must compact a `PreallocatedCache` in place as
    ``compact_cache`` does: keep the first ``keep_from`` rows, then the rows at ``keep`` (``LongTensor[n]``), in
    order, inside each layer's storage, with the length pointer after them and the views refreshed. Checked on
    labelled caches the check builds, right after your compaction and once the next token is appended."""
    if not callable(learner):
        return run_cases("compact_pointer_cache", learner, COMPACTION_CASES, lambda case, got: None)

    mistakes = [(lambda *args, wrong=wrong: _compacted(wrong, *args), hint) for wrong, hint in COMPACTION_MISTAKES]
    compacted = lambda *args: _compacted(learner, *args)  # noqa: E731 - as run_cases drives it

    def judge(case: Case, got: Any) -> str | None:
        problem = _compaction_problem(got, case.expected)
        if problem is None:
            return None
        hint = find_mistake(got, case.args, case.expected, mistakes, lambda a, b: a == b, compacted,
                            COMPACTION_CASES)
        if not hint:
            return problem
        return (f"Layer 0 holds the rows of old positions {got[0]['keys']} (length {got[0]['length']}), expected "
                f"{case.expected[0]['keys']} (length {case.expected[0]['length']}).\nHint: {hint}")

    return run_cases("compact_pointer_cache", compacted, COMPACTION_CASES, judge)
