#!/usr/bin/env python
"""Mutation testing: deliberate bugs the fast test suite must catch, one at a time.

A faster suite is only as good as the bugs it still catches. Each mutant below is one line-level edit of the
library that breaks speculative decoding in a way real implementations have been broken (a wrong acceptance test,
a wrong residual, a cache rolled back one position off, a q that is not the one sampled from ...). For each mutant
the script copies the checkout into a temporary folder (the data folder linked, not copied), applies the edit
there, and runs the fast suite with ``-x`` (stop at the first failure): first the test files that concern the
mutant, then, if those pass, the whole fast suite to confirm a miss. It prints, per mutant, caught / MISSED and the
seconds until the first failure, and exits 1 when any mutant is missed, hangs the suite or no longer applies.

    python scripts/mutants.py                 every mutant
    python scripts/mutants.py --list          the mutants and what each breaks
    python scripts/mutants.py NAME [NAME ...] only these
    python scripts/mutants.py --check         only check that every mutant's edit still applies (exactly once)

The working tree is never modified. An edit that no longer matches the library (after a refactor) is reported as
"does not apply": update its ``old`` text here in the same change (`tests/test_mutants.py` checks this).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FAST_SUITE = ["-m", "not slow", "tests"]
TIMEOUT = 900  # seconds one pytest run may take: a mutant that makes a loop spin forever is reported, not waited on
COPIED = ["specdec_lib", "specdec_tools", "tests", "course", "scripts", "pyproject.toml", "README.md", "environment.yml"]


@dataclass(frozen=True)
class Mutant:
    """``old`` (found exactly once in ``path``) replaced by ``new``: the bug ``breaks`` describes."""

    name: str
    path: str
    old: str
    new: str
    breaks: str
    first: tuple[str, ...]  # test files that concern it, run first


MUTANTS = [
    Mutant("accept-min-q-over-p", "specdec_lib/core/verify.py",
           "(u * drafted.q_draft < lenience * drafted.p_draft)", "(u * drafted.p_draft < lenience * drafted.q_draft)",
           "exact verification accepts with min(1, q/p) instead of min(1, p/q)",
           ("tests/test_verify_exact.py",)),
    Mutant("recovered-from-p", "specdec_lib/core/verify.py",
           "residual_distribution(p_n, rows_at(drafted.q, accepted))", "p_n",
           "the recovered token is drawn from p instead of the residual norm(max(p - q, 0))",
           ("tests/test_verify_exact.py",)),
    Mutant("sampled-bonus-wrong-row", "specdec_lib/core/verify.py",
           "distribution = torch.where(bonus[:, None], p_n,",
           "distribution = torch.where(bonus[:, None], rows_at(p, (accepted - 1).clamp_min(0)),",
           "after a full accept the bonus token is drawn from the last draft's row p_{k-1} instead of p_k",
           ("tests/test_verify_exact.py",)),
    Mutant("greedy-bonus-wrong-row", "specdec_lib/core/verify.py",
           "choice.gather(1, accepted[:, None])[:, 0], accepted == count,",
           "choice.gather(1, (accepted - (accepted == count).long()).clamp_min(0)[:, None])[:, 0], accepted == count,",
           "greedy: after a full accept the bonus token is read from the last draft's row",
           ("tests/test_verify.py", "tests/test_speculative.py")),
    Mutant("greedy-compares-next-row", "specdec_lib/core/verify.py",
           "matches = draft_tokens.to(choice.device) == choice[:, :width]",
           "matches = draft_tokens.to(choice.device) == choice[:, 1:]",
           "greedy verification compares draft i with the target's choice one position later",
           ("tests/test_verify.py",)),
    Mutant("no-bonus-after-full-accept", "specdec_lib/core/run.py",
           'new = (kept[index] + [next_tokens[index]])[:left]',
           'new = (kept[index] + [next_tokens[index]][: int(not bonus[index] or not drafts[index])])[:left]',
           "a round that accepts every draft emits no bonus token (still token-identical, one forward wasted)",
           ("tests/test_speculative.py",)),
    Mutant("target-cache-cropped-too-far", "specdec_lib/core/run.py",
           'return [self.lengths[row] - 1 for row in self.active]',
           'return [self.lengths[row] - 2 for row in self.active]',
           "the target's cache is rolled back one position too far (loses the last committed token but one)",
           ("tests/test_speculative.py",)),
    Mutant("target-cache-cropped-too-short", "specdec_lib/core/run.py",
           'return [self.lengths[row] - 1 for row in self.active]',
           'return [self.lengths[row] for row in self.active]',
           "the target's cache keeps one entry too many (the first rejected draft's keys survive)",
           ("tests/test_speculative.py",)),
    Mutant("draft-cache-not-rolled-back", "specdec_lib/drafters/draft_model.py",
           'self.state.crop(keep)\n        self.state.trust(keep)',
           'self.state.trust(self.state.held)',
           "the draft model keeps the rejected drafts in its cache and trusts them (greedy output stays identical)",
           ("tests/test_kv_rollback.py",)),
    Mutant("draft-q-untempered", "specdec_lib/drafters/draft_model.py",
           'rows.append(self._over_target_ids(q))',
           'rows.append(self._over_target_ids(torch.softmax(logits, -1)))',
           "the draft model samples at temperature T but reports its temperature-1 softmax as q",
           ("tests/test_sampling_distribution.py",)),
    Mutant("draft-q-shifted", "specdec_lib/drafters/draft_model.py",
           'probs = torch.stack(rows, dim=1) if rows else None',
           'probs = torch.stack(rows[1:] + rows[:1], dim=1) if rows else None',
           "the draft model reports q rows shifted by one position",
           ("tests/test_sampling_distribution.py",)),
    Mutant("block-residual-without-prefix-weight", "specdec_lib/core/block_verify.py",
           "residual, mass = rows_at(block.residuals, tau), rows_at(block.residual_mass[..., None], tau)",
           "residual = (rows_at(p, tau) - rows_at(drafted.q, tau)).clamp_min(0); mass = residual.sum(-1, keepdim=True)",
           "block verification draws the token after tau kept drafts from max(p - q, 0), without the prefix weight w",
           ("tests/test_verify_block.py",)),
    Mutant("tree-mask-sees-sibling", "specdec_lib/core/trees.py",
           "node = parents[node]", "node = node - 1",
           "a tree node attends to every node listed before it (siblings and their subtrees too, as in a chain) "
           "instead of its ancestors alone",
           ("tests/test_trees.py",)),
    Mutant("dynamic-tree-prunes-a-keepable-node", "specdec_lib/core/trees.py",
           "bar = sorted(scores, reverse=True)[shape.budget - 1]",
           "bar = sorted(scores, reverse=True)[shape.budget // 2]",
           "a dynamic tree stops expanding a node that scores above the budget's last candidate, so a node it "
           "should keep is never grown",
           ("tests/test_dynamic_trees.py",)),
    Mutant("tree-compaction-wrong-path", "specdec_lib/core/run.py",
           'self.path_slots = (start, [start + node for node in paths[0]])',
           'self.path_slots = (start, [start + i for i in range(len(paths[0]))])',
           "after a tree round the target's cache keeps the first nodes in breadth-first order, not the accepted path",
           ("tests/test_trees.py",)),
    Mutant("batched-rollback-wrong-row", "specdec_lib/core/rows.py",
           'self.mask = self.mask & (rank <= keep[:, None])',
           'self.mask = self.mask & (rank <= keep.flip(0)[:, None])',
           "the batched cache rolls each row back to another row's committed length",
           ("tests/test_batched.py",)),
    Mutant("lookup-returns-the-ngram", "specdec_lib/drafters/prompt_lookup.py",
           "return list(tokens[best_end + 1 : best_end + 1 + k])",
           "return list(tokens[best_end + 1 - best_n : best_end + 1 - best_n + k])",
           "prompt lookup drafts the matched n-gram itself instead of what followed it",
           ("tests/test_prompt_lookup.py",)),
    Mutant("eos-inside-draft-ignored", "specdec_lib/core/run.py",
           'stop = next((i for i, token in enumerate(new) if token in self.stop_ids), None)',
           'stop = len(new) - 1 if new and new[-1] in self.stop_ids else None',
           "an end-of-sequence token accepted inside a draft does not stop generation (only the round's last does)",
           ("tests/test_speculative.py",)),
    Mutant("cross-tokenizer-no-boundary-alignment", "specdec_lib/drafters/cross_tokenizer.py",
           "first = next((i for i, (start, _) in enumerate(spans) if start >= boundary), len(ids))",
           "first = min(len(encode(tokenizer, context)[0]), len(ids))",
           "the cross-tokenizer proposal drops as many tokens as the context encodes to, ignoring where it ends",
           ("tests/test_cross_tokenizer.py",)),
    Mutant("top-k-drops-the-kth", "specdec_lib/core/sampling.py",
           "z = z.masked_fill(z < kth_largest, -math.inf)", "z = z.masked_fill(z <= kth_largest, -math.inf)",
           "top-k keeps k - 1 tokens (the k-th largest logit is filtered out)",
           ("tests/test_sampling.py",)),
]


def applied(mutant: Mutant, root: Path) -> str:
    """The mutated text of ``mutant.path`` under ``root``; ValueError when ``old`` is not found exactly once."""
    text = (root / mutant.path).read_text(encoding="utf-8")
    count = text.count(mutant.old)
    if count != 1:
        raise ValueError(f"{mutant.name}: its text occurs {count} times in {mutant.path} (expected once)")
    return text.replace(mutant.old, mutant.new)


def make_copy(destination: Path) -> None:
    """The checkout's code, tests and course under ``destination``, with ``data`` linked (nothing is written there)."""
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, destination / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        elif source.exists():
            shutil.copy2(source, destination / name)
    (destination / "data").symlink_to(ROOT / "data")


def run_pytest(copy: Path, arguments: list[str]) -> tuple[int, float, str]:
    """Exit status, wall seconds and the first failing test's id of ``pytest -x`` in ``copy`` (its library first
    on the path)."""
    environment = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
    start = time.perf_counter()
    try:
        process = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-rfE", "-p", "no:cacheprovider",
                                  *arguments], cwd=copy, env=environment, capture_output=True, text=True,
                                 timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return -1, time.perf_counter() - start, f"(no test finished within {TIMEOUT} s: the mutant hangs the suite)"
    seconds = time.perf_counter() - start
    failed = next((line.split(" ", 1)[1].split(" - ")[0] for line in process.stdout.splitlines()
                   if line.startswith(("FAILED ", "ERROR "))), "")
    return process.returncode, seconds, failed


def check_copy_imports_itself(copy: Path) -> None:
    """Refuse to run if the copy's tests would import the checkout's library instead of the mutated one."""
    environment = {**os.environ, "PYTHONPATH": str(copy)}
    found = subprocess.run([sys.executable, "-c", "import specdec_lib; print(specdec_lib.__file__)"], cwd=copy,
                           env=environment, capture_output=True, text=True).stdout.strip()
    if not found.startswith(str(copy)):
        sys.exit(f"mutants.py: the copy imports specdec_lib from {found}, not from {copy}; nothing was tested.")


def test_mutant(mutant: Mutant, copy: Path) -> tuple[str, float, str]:
    """("caught" | "MISSED" | "HANGS", seconds until the first failure (or of the whole fast suite when missed),
    the test that failed)."""
    target = copy / mutant.path
    original = target.read_text(encoding="utf-8")
    target.write_text(applied(mutant, copy), encoding="utf-8")
    try:
        status, seconds, failed = run_pytest(copy, ["-m", "not slow", *mutant.first])
        if status < 0:
            return "HANGS", seconds, failed
        if status != 0:
            return "caught", seconds, failed
        status, more, failed = run_pytest(copy, FAST_SUITE)
        return ("HANGS" if status < 0 else "caught" if status != 0 else "MISSED"), seconds + more, failed
    finally:
        target.write_text(original, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="mutants to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--check", action="store_true", help="only check that every edit still applies")
    args = parser.parse_args(argv)
    known = {m.name: m for m in MUTANTS}
    unknown = [name for name in args.names if name not in known]
    if unknown:
        parser.error(f"unknown mutant(s) {', '.join(unknown)}; --list shows them")
    chosen = [known[name] for name in args.names] or MUTANTS
    if args.list:
        for mutant in chosen:
            print(f"{mutant.name:40s} {mutant.path}: {mutant.breaks}")
        return 0
    broken = []
    for mutant in chosen:
        try:
            applied(mutant, ROOT)
        except ValueError as error:
            broken.append(str(error))
    if broken or args.check:
        print("\n".join(broken) or f"all {len(chosen)} mutants apply")
        return 1 if broken else 0
    failures = 0
    with tempfile.TemporaryDirectory(prefix="specdec-mutants-") as folder:
        copy = Path(folder)
        make_copy(copy)
        check_copy_imports_itself(copy)
        print(f"{'mutant':40s} {'result':8s} {'seconds':>7s}  first failing test")
        for mutant in chosen:
            result, seconds, failed = test_mutant(mutant, copy)
            failures += result != "caught"
            print(f"{mutant.name:40s} {result:8s} {seconds:7.1f}  {failed}", flush=True)
    print(f"{len(chosen) - failures} of {len(chosen)} mutants caught by the fast suite")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
