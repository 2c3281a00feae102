"""course/glossary.md: the anchors the notebooks link to exist, and the library names it cites are real.

The glossary is read as text (no kernel). Three promises are checked:

- every id the course relies on has an anchor ``<a id="..."></a>``, and every heading of an entry starts with one;
- every ``glossary.md#id`` link in a notebook or markdown file of ``course/`` (and every ``#id`` link inside the
  glossary) points to an anchor that exists, and every notebook the glossary names exists;
- every name in backticks on a **Library** line imports: a dotted ``specdec_lib...`` path (module, attribute, or a
  dataclass field; a ``specdec_tools...`` path for the maintainer's tools), a bare name of ``specdec_lib``'s public
  namespace, or a ``"quoted"`` metric key of ``summarize(result)`` or of the benchmarks' latency summary; anywhere
  else, a backticked ``specdec_lib.`` or ``specdec_tools.`` path too.
"""

import importlib
import json
import re
from pathlib import Path

import pytest
import torch

import specdec_lib
from specdec_lib.bench.latency import trace_latency
from specdec_lib.core.result import GenerationResult, summarize
from specdec_lib.core.trace import RoundRecord, Trace

COURSE = Path(__file__).resolve().parents[1] / "course"
GLOSSARY = COURSE / "glossary.md"

REQUIRED_IDS = [
    "speculative-decoding", "speculative-sampling", "assisted-generation", "draft", "target", "verification",
    "greedy-matching", "rejection-sampling", "accepted-token", "recovered-token", "bonus-token", "alpha",
    "acceptance-rate", "mean-acceptance-length", "per-position-acceptance", "draft-length", "draft-cost",
    "verify-cost", "distribution-preservation", "kv-cache", "kv-cache-rollback", "relaxed-acceptance",
    "cross-tokenizer", "vocabulary-intersection", "prompt-lookup", "suffix-decoding", "self-speculative",
    "early-exit", "medusa", "eagle", "block-verification", "token-tree", "ttft", "itl", "tail-latency",
    "batch-threshold",
]

ANCHOR = re.compile(r'<a id="([^"]+)"></a>')
LINK = re.compile(r"glossary\.md#([A-Za-z0-9_-]+)")
INTERNAL_LINK = re.compile(r"\]\(#([A-Za-z0-9_-]+)\)")
NOTEBOOK_LINK = re.compile(r"\]\(([^)#]+\.ipynb)\)")
BACKTICKED = re.compile(r"`([^`]+)`")


def glossary_text() -> str:
    return GLOSSARY.read_text(encoding="utf-8")


def anchors(text: str) -> list[str]:
    return ANCHOR.findall(text)


def course_texts() -> dict[str, str]:
    """Every notebook (all cells' sources and text outputs) and markdown file under course/, by relative path."""
    texts = {}
    for path in sorted(COURSE.rglob("*.ipynb")):
        notebook = json.loads(path.read_text(encoding="utf-8"))
        parts = []
        for cell in notebook["cells"]:
            parts.append("".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"])
        texts[str(path.relative_to(COURSE))] = "\n".join(parts)
    for path in sorted(COURSE.rglob("*.md")):
        texts[str(path.relative_to(COURSE))] = path.read_text(encoding="utf-8")
    return texts


def resolve(name: str) -> bool:
    """Whether ``name`` (``specdec_lib.a.b.C.field``, a ``specdec_tools`` path, or a bare public name of specdec_lib)
    exists."""
    parts = name.split(".")
    if parts[0] not in ("specdec_lib", "specdec_tools"):
        return hasattr(specdec_lib, name) and not name.startswith("_")
    for split in range(len(parts), 0, -1):  # import the longest module prefix, then walk attributes
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[split:]:
            fields = getattr(obj, "__dataclass_fields__", {})
            if hasattr(obj, attribute):
                obj = getattr(obj, attribute)
            elif attribute in fields:  # a dataclass field without a class-level default
                obj = fields[attribute]
            else:
                return False
        return True
    return False


def metric_keys() -> set[str]:
    """The keys of `summarize(result)` and of the benchmarks' per-request latency summary, from a hand-made trace."""
    trace = Trace(start_time=0.0, token_times=[0.1, 0.2, 0.2],
                  rounds=[RoundRecord(0, 0, 1, 0.0, 0.1, 0, "prefill"), RoundRecord(2, 1, 2, 0.01, 0.09, 2, "recovered")])
    result = GenerationResult.single(torch.tensor([[5, 6, 7, 8]]), 1, "hand-made", trace)
    return set(summarize(result)) | set(trace_latency([trace]))


def library_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "**Library:**" in line]


def library_names(line: str) -> list[str]:
    """The backticked names on a **Library** line, up to the next bold field (``**Elsewhere:**`` is not ours)."""
    part = line.split("**Library:**", 1)[1].split("**", 1)[0]
    return BACKTICKED.findall(part)


# --- the anchors ---------------------------------------------------------------------------------------------


def test_every_required_anchor_exists():
    found = set(anchors(glossary_text()))
    missing = [anchor for anchor in REQUIRED_IDS if anchor not in found]
    assert not missing, f"course/glossary.md lacks the anchors {missing} (other notebooks link to them)"


def test_anchors_are_unique():
    found = anchors(glossary_text())
    duplicates = sorted({anchor for anchor in found if found.count(anchor) > 1})
    assert not duplicates, f"anchors defined twice: {duplicates}"


def test_every_entry_starts_with_an_anchor():
    lines = glossary_text().splitlines()
    for index, line in enumerate(lines):
        if line.startswith("### ") or (line.startswith("## ") and index > 0):
            previous = next(lines[i] for i in range(index - 1, -1, -1) if lines[i].strip())
            assert ANCHOR.fullmatch(previous.strip()), f"the heading {line!r} is not preceded by an anchor"


def test_every_glossary_link_in_the_course_points_to_an_anchor():
    found = set(anchors(glossary_text()))
    broken = {name: sorted(set(LINK.findall(text)) - found) for name, text in course_texts().items()}
    broken = {name: ids for name, ids in broken.items() if ids}
    assert not broken, f"links to glossary anchors that do not exist: {broken}"


def test_the_course_links_to_the_glossary():
    assert any(LINK.search(text) for name, text in course_texts().items() if name.endswith(".ipynb"))


def test_links_inside_the_glossary_point_to_anchors_and_notebooks_that_exist():
    text = glossary_text()
    found = set(anchors(text))
    assert not sorted(set(INTERNAL_LINK.findall(text)) - found)
    notebooks = set(NOTEBOOK_LINK.findall(text))
    assert notebooks, "the glossary names no notebook that teaches its terms"
    missing = sorted(name for name in notebooks if not (COURSE / name).exists())
    assert not missing, f"the glossary links to notebooks that do not exist: {missing}"


def test_every_entry_names_the_notebook_that_teaches_it():
    entries = re.split(r"\n### ", glossary_text())[1:]
    lacking = [entry.splitlines()[0] for entry in entries if "**Taught in:**" not in entry]
    assert not lacking, f"entries without a **Taught in:** notebook: {lacking}"


# --- the library names ---------------------------------------------------------------------------------------


def test_every_library_name_it_cites_exists():
    keys = metric_keys()
    missing = []
    for line in library_lines(glossary_text()):
        for name in library_names(line):
            if name.startswith('"') and name.endswith('"'):
                if name.strip('"') not in keys:
                    missing.append(name)
            elif not resolve(name):
                missing.append(name)
    assert not missing, f"names on Library lines that do not import (or are no metric key): {missing}"


def test_every_dotted_library_path_anywhere_exists():
    names = {name for name in BACKTICKED.findall(glossary_text())
             if name.startswith(("specdec_lib.", "specdec_tools."))}
    assert names
    missing = sorted(name for name in names if not resolve(name.split("(")[0]))
    assert not missing, f"specdec_lib and specdec_tools paths in the glossary that do not import: {missing}"


def test_the_library_lines_cite_something():
    lines = library_lines(glossary_text())
    assert len(lines) >= len(REQUIRED_IDS) - 5  # entries may share a line; a few cite nothing (beam search)
    assert sum(bool(library_names(line)) for line in lines) >= len(lines) - 3


# --- claims about measurements, checked on the stored data ------------------------------------------------------


BENCH = COURSE.parent / "data" / "bench"


def test_the_cross_tokenizer_entry_says_what_the_stored_benchmarks_show():
    """The entry says: our cross-tokenizer drafter gains less than the same-tokenizer draft at every draft length and
    is never slower than the target alone; transformers' universal assisted decoding of the same pair is slower than
    the target alone at the longest draft length measured. When the stored files say otherwise, change the entry."""
    entry = glossary_text().split("### cross-tokenizer drafting", 1)[1].split("<a id=", 1)[0]
    entry = " ".join(entry.split())
    assert "gains less than the same-tokenizer draft at every draft length" in entry
    assert "never slower than the target alone" in entry
    assert "slower than the target alone at the longest draft length measured" in entry
    files = sorted(BENCH.glob("code-*.json"))
    assert files
    for path in files:
        document = json.loads(path.read_text(encoding="utf-8"))
        speedup = {(r["method"], r["gamma"]): r["speedup"] for r in document["rows"]}
        gammas = document["settings"]["gammas"]
        assert all(speedup[("speculative-cross", g)] < speedup[("speculative", g)] for g in gammas), path.name
        assert all(speedup[("speculative-cross", g)] >= 1 for g in gammas), path.name
        assert speedup[("hf-assisted-cross", max(gammas))] < 1, path.name


def test_papers_are_cited_by_year_and_arxiv_id_not_by_month():
    text = glossary_text()
    assert "arXiv 2211.17192" in text and "arXiv 2302.01318" in text
    assert not re.search(r"\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]* 20\d\d", text)


# --- the checker itself ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["specdec_lib.verify_exact", "specdec_lib.core.trace.RoundRecord.drafted",
                                  "specdec_lib.core.caches.crop_cache", "verify_greedy", "specdec_lib.drafters.jacobi"])
def test_resolve_accepts_real_names(name):
    assert resolve(name)


@pytest.mark.parametrize("name", ["specdec_lib.verify_exactly", "specdec_lib.core.trace.RoundRecord.drafts",
                                  "specdec_lib.nothing.here", "num_beams", "_private"])
def test_resolve_refuses_names_that_do_not_exist(name):
    assert not resolve(name)


def test_library_names_stop_at_the_next_field():
    line = "**Library:** `specdec_lib.verify_exact`, `\"alpha\"` · **Elsewhere:** `generate(assistant_model=...)`"
    assert library_names(line) == ["specdec_lib.verify_exact", '"alpha"']
