"""Every dotted name the library's and the tools' docstrings and the docs cite as `specdec_lib.x.y` (or
`specdec_tools.x.y`) exists: a reader who follows a reference lands somewhere (renamed or moved code leaves no stale
pointer behind)."""

import dataclasses
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CITED = re.compile(r"`(specdec_(?:lib|tools)(?:\.[A-Za-z_][A-Za-z0-9_]*)+)`")
SOURCES = sorted([*ROOT.glob("specdec_lib/**/*.py"), *ROOT.glob("specdec_tools/**/*.py"), *ROOT.glob("docs/**/*.md"),
                  *ROOT.glob("scripts/*.py"), ROOT / "README.md", ROOT / "course" / "glossary.md",
                  ROOT / "course" / "teacher_guide.md"])


def resolves(name: str) -> bool:
    """Whether ``name`` is a module, or an attribute (a dataclass field counts) reached from the longest module."""
    parts = name.split(".")
    for split in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attribute in parts[split:]:
            fields = {f.name for f in dataclasses.fields(target)} if dataclasses.is_dataclass(target) else set()
            if attribute in fields:
                return attribute == parts[-1]  # a field's value type is not followed further
            if not hasattr(target, attribute):
                return False
            target = getattr(target, attribute)
        return True
    return False


def cited_names() -> dict[str, list[str]]:
    names: dict[str, list[str]] = {}
    for path in SOURCES:
        for name in CITED.findall(path.read_text(encoding="utf-8")):
            names.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return names


def test_every_cited_dotted_name_imports():
    names = cited_names()
    assert len(names) > 50  # the pattern finds the citations
    stale = {name: sorted(set(where)) for name, where in names.items() if not resolves(name)}
    assert stale == {}, stale


@pytest.mark.parametrize("name, exists", [("specdec_lib.core.engine.generate", True),
                                          ("specdec_lib.core.trace.RoundRecord.drafted", True),
                                          ("specdec_lib.core.decoders", False),
                                          ("specdec_lib.core.forward.crop_cache", False),
                                          ("specdec_tools.serve_client.load_test", True),
                                          ("specdec_tools.serve.format_table", False)])
def test_the_resolver_tells_a_stale_name(name, exists):
    assert resolves(name) is exists
