"""What a reader sees holds no typed measurement and no lab log.

A measured number (a speed-up, a time, a percentage, a size) that a learner reads must be printed by code from the
live run or the stored JSON (notebook outputs, the generated tables between ``<!-- NAME: ... -->`` markers), never
typed into prose, where it goes stale the next time the models or the machine change. And prose says what and why:
machine names, dates and the story of what was run belong in git and in the bench JSON.

The scans read every notebook's markdown (course and solutions), the README, ``docs/``, the glossary and the teacher
guide, and the library's docstrings, comments and strings (which hold the check feedback). Code (fenced blocks,
inline code), math (``$...$``) and generated tables are skipped: code computes its numbers and math states theory.
The scan needs no allow-list: a theory constant goes in math, a toy example's value in code, and a set-up fact
("2 cores", "a minute") carries no measured unit.
"""

from __future__ import annotations

import ast
import io
import json
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

UNIT = r"(?:×|(?<=\d)x\b|ms\b|µs\b|us\b|s\b|sec\b|seconds?\b|%|tokens?/s\b|tok/s\b|[KMGT]i?B\b|kB\b)"
MEASURED = re.compile(r"(?<![\w.{^_/<-])\d+(?:\.\d+)?(?:\s*[–-]\s*\d+(?:\.\d+)?)?\s?" + UNIT)

MONTH = r"(?:January|February|March|April|May|June|July|August|September|October|November|December)"
LAB_LOG = re.compile(
    r"EPYC|Xeon|Ryzen|Graviton|\bCore i[3579]\b|\b20\d\d-\d\d-\d\d\b|" + MONTH + r" 20\d\d|"
    r"\bthis session\b|\bthe issue (?:that|asked)|\bissue #?\d+|\b(?:was|were) not re-run|\bre-measured\b|"
    r"\bearlier (?:stored )?runs?\b|\bthe machine that (?:stored|measured|ran)\b|\bstored this notebook\b",
    re.IGNORECASE,
)

def _strip_markdown(text: str) -> str:
    """The prose of a markdown text: no generated tables, comments, code, math or link targets."""
    text = re.sub(r"<!-- ([\w-]+): .*?-->.*?<!-- /\1 -->", "", text, flags=re.S)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    text = re.sub(r"\$\$.*?\$\$", "", text, flags=re.S)
    text = re.sub(r"\$[^$\n]*\$", "", text)
    return re.sub(r"\]\([^)]*\)", "]", text)


def _strip_code_quotes(text: str) -> str:
    return re.sub(r"``[^`]*``|`[^`\n]*`", "", text)


def markdown_texts() -> list[tuple[str, str]]:
    """(where, prose) for every notebook markdown cell, the README, docs/, the glossary and the teacher guide."""
    texts = []
    for notebook in sorted((ROOT / "course").rglob("*.ipynb")):
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        for index, cell in enumerate(cells):
            if cell["cell_type"] == "markdown":
                texts.append((f"{notebook.relative_to(ROOT)} cell {index}", _strip_markdown("".join(cell["source"]))))
    pages = [ROOT / "README.md", ROOT / "course" / "glossary.md", ROOT / "course" / "teacher_guide.md",
             *sorted((ROOT / "docs").glob("**/*.md"))]
    texts += [(str(page.relative_to(ROOT)), _strip_markdown(page.read_text(encoding="utf-8"))) for page in pages]
    return texts


def library_texts() -> list[tuple[str, str]]:
    """(where, text) for every comment and string constant of the library: docstrings and check feedback."""
    texts = []
    for module in sorted((ROOT / "specdec_lib").rglob("*.py")):
        source = module.read_text(encoding="utf-8")
        name = str(module.relative_to(ROOT))
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                texts.append((f"{name}:{token.start[0]}", token.string))
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                texts.append((f"{name}:{node.lineno}", _strip_code_quotes(node.value)))
            elif isinstance(node, ast.JoinedStr):  # the literal parts of an f-string; the values are computed
                literal = "".join(part.value for part in node.values if isinstance(part, ast.Constant))
                texts.append((f"{name}:{node.lineno}", _strip_code_quotes(literal)))
    return texts


def findings(pattern: re.Pattern, texts: list[tuple[str, str]]) -> list[str]:
    found = []
    for where, text in texts:
        for match in pattern.finditer(text):
            context = text[max(0, match.start() - 50) : match.end() + 20].replace("\n", " ")
            found.append(f"{where}: ...{context}...")
    return found


def test_the_scans_catch_what_they_look_for():
    """Negative controls: a typed speed-up, time and percentage, a CPU name, a date and narration are found;
    code, math, a generated table and set-up facts like "2 cores" are not."""
    typed = [("x.md", "the draft runs 1.7× faster"), ("x.md", "a forward takes 14 ms"), ("x.md", "up 10–20 %"),
             ("x.md", "it weighs 4.7 MiB"), ("x.md", "about 3x faster")]
    assert len(findings(MEASURED, typed)) == len(typed)
    clean = _strip_markdown("`speedup = 1.7×` and $1.5\\times$ on 2 cores\n```\nprint('14 ms')\n```\n"
                            "<!-- bench-table: a.json -->\n| 1.9× |\n<!-- /bench-table -->")
    assert findings(MEASURED, [("x.md", clean)]) == []
    logs = ["measured on a 2-core AMD EPYC", "on 2 December 2026", "on 2026-12-02", "the serve suite was not re-run",
            "in this session", "the issue that asked for it"]
    assert len(findings(LAB_LOG, [("x.md", line) for line in logs])) == len(logs)


def test_no_typed_measurement_in_what_a_reader_sees():
    found = findings(MEASURED, markdown_texts() + library_texts())
    assert not found, ("measured numbers typed into prose; print them from the run or the stored JSON "
                       "(display(Markdown(...))):\n" + "\n".join(found))


def test_no_lab_log_in_what_a_reader_sees():
    found = findings(LAB_LOG, markdown_texts() + library_texts())
    assert not found, "machine names, dates or narration of what was run:\n" + "\n".join(found)
