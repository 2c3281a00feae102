"""`scripts/mutants.py` stays in step with the library: every deliberate bug still applies to exactly one place.

Running the mutants takes minutes (the fast suite against each bug); this only checks that each edit would land,
so a refactor that moves the code a mutant edits updates the mutant in the same change.
"""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def mutants():
    spec = importlib.util.spec_from_file_location("mutants", ROOT / "scripts" / "mutants.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the script is being executed
    spec.loader.exec_module(module)
    return module


def test_every_mutant_applies_exactly_once(mutants):
    assert len(mutants.MUTANTS) >= 15
    assert len({m.name for m in mutants.MUTANTS}) == len(mutants.MUTANTS)
    for mutant in mutants.MUTANTS:
        mutated = mutants.applied(mutant, ROOT)  # raises when the text is not found exactly once
        assert mutated != (ROOT / mutant.path).read_text(encoding="utf-8"), mutant.name
        assert all((ROOT / path).is_file() for path in mutant.first), mutant.name


def test_an_edit_that_no_longer_matches_is_reported(mutants):
    stale = mutants.Mutant("stale", "specdec_lib/core/verify.py", "text that is not in the library", "x", "nothing", ())
    with pytest.raises(ValueError, match="occurs 0 times"):
        mutants.applied(stale, ROOT)
