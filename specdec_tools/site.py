"""`python -m specdec_tools site [--out build/site]`: the executed course as a static web site, offline.

    python -m specdec_tools site                      # -> build/site/index.html
    python -m specdec_tools site --out /tmp/course    # anywhere else

The site shows what the stored notebooks show: nothing is re-executed (myst-nb with ``nb_execution_mode = "off"``),
so it builds in well under a minute on two CPU cores and needs neither the models nor a kernel. Its pages are
``course/*.ipynb`` (the numbered notebooks), ``course/*.md`` (glossary, teacher guide, ...),
``course/solutions/*.ipynb`` (found by glob, `course_pages`) and the guide's pages ``docs/*.md`` (`docs_pages`, under
``docs/`` in the site), under an index generated here (`index_markdown`).

Offline both when it builds and when it is read: Sphinx, myst-nb and sphinx-book-theme come from pip and bring
their assets; MathJax is the copy that sphinx-mathjax-offline ships (Sphinx's default is a CDN); ipywidgets'
JavaScript (another CDN) is left out, so a widget shows the HTML or text it stored beside itself. The whole Sphinx
configuration is `sphinx_config`; there is no conf.py.

A markdown link to an HTML anchor, ``[draft](glossary.md#draft)`` to ``<a id="draft"></a>``, resolves like a link
to a heading (`register_html_anchors`), so a link to an id that does not exist is a warning of the build. So is a
link out of the course folder (``../README.md``): it works in Jupyter, but the site holds only the course and the
guide; the guide's pages link to each other and name the repository's other files as code.

Without Sphinx and myst-nb (the ``site`` extra) the command says what to install (`missing_site_extra`).

Exit codes: 0 built; 1 the build failed, the site extra is missing, or --out is a folder that is not a site to
replace; 2 bad arguments.
"""

from __future__ import annotations

import argparse
import importlib
import io
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from specdec_lib.core.errors import ConfigError
from specdec_lib.core.paths import REPO_COURSE_DIR, REPO_ROOT

COURSE_DIR = REPO_COURSE_DIR
DOCS_DIR = REPO_ROOT / "docs"
DEFAULT_OUT = REPO_ROOT / "build" / "site"
TITLE = "Speculative decoding: the course"
AUTHOR = "the specdec authors"
#: the guide's pages in the site's sources (``docs/`` beside the course's pages)
DOCS_FOLDER = "docs"
#: the modules the site needs, from the ``site`` extra
SITE_MODULES = ("sphinx", "myst_nb", "sphinx_book_theme")
INSTALL_SITE_EXTRA = 'pip install -e ".[site]"'

# the pages of the site, relative to the course folder (Sphinx glob syntax: * stays inside one folder)
PAGE_PATTERNS = ("*.ipynb", "*.md", "solutions/*.ipynb")
# what is never copied into the site's sources
IGNORED = shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__", "*.pyc")
# an id="..." (or id='...') attribute in raw HTML
_HTML_ID = re.compile(r"""\bid\s*=\s*["']([^"']+)["']""")
_ANSI_COLOUR = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class SiteBuild:
    """What `build_site` made: the index page, every page's source, and the warnings Sphinx printed."""

    index: Path
    pages: list[Path]
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0


def course_pages(course_dir: Path = COURSE_DIR) -> list[Path]:
    """The course's pages in site order: numbered notebooks, other notebooks, markdown pages, solutions."""
    found = {path for pattern in PAGE_PATTERNS for path in course_dir.glob(pattern) if path.is_file()}
    return sorted(found, key=lambda p: (p.parent != course_dir, p.suffix != ".ipynb", p.name))


def docs_pages(docs_dir: Path | None = DOCS_DIR) -> list[Path]:
    """The guide's pages (``docs/*.md``) in name order; none when there is no docs folder."""
    if docs_dir is None or not docs_dir.is_dir():
        return []
    return sorted(path for path in docs_dir.glob("*.md") if path.is_file())


def site_name(page: Path, course_dir: Path = COURSE_DIR, docs_dir: Path | None = DOCS_DIR) -> str:
    """A page's document name in the site, without suffix: ``01_greedy_matching``, ``solutions/...``,
    ``docs/benchmarks``."""
    if docs_dir is not None and page.parent == docs_dir:
        return f"{DOCS_FOLDER}/{page.stem}"
    return page.relative_to(course_dir).with_suffix("").as_posix()


def index_markdown(pages: Sequence[Path], course_dir: Path = COURSE_DIR, docs_dir: Path | None = DOCS_DIR) -> str:
    """The site's front page: one toctree per part (notebooks, reference pages, guide, solutions), captions as
    headings."""
    parts: dict[str, list[str]] = {"Notebooks": [], "Reference": [], "Guide": [], "Solutions": []}
    for page in pages:
        if docs_dir is not None and page.parent == docs_dir:
            part = "Guide"
        else:
            part = "Solutions" if page.parent != course_dir else "Notebooks" if page.suffix == ".ipynb" else "Reference"
        parts[part].append(site_name(page, course_dir, docs_dir))
    lines = [
        f"# {TITLE}",
        "",
        "The notebooks of the course with the outputs they stored when they last ran top to bottom (nothing here "
        "re-runs them), and the guide: the models, the benchmarks, the library, GPUs and teaching. To run the "
        "notebooks yourself, make your own copy and open it with `python -m specdec_lib course`.",
        "",
    ]
    for caption, entries in parts.items():
        if entries:
            lines += ["```{toctree}", ":maxdepth: 1", f":caption: {caption}", "", *entries, "```", ""]
    return "\n".join(lines)


def sphinx_config() -> dict:
    """The site's whole Sphinx configuration (what a conf.py would hold), passed to Sphinx as overrides."""
    return {
        "project": TITLE,
        "author": AUTHOR,
        "copyright": AUTHOR,
        "extensions": ["myst_nb", "sphinx-mathjax-offline"],
        "root_doc": "index",
        "include_patterns": ["index.md", *PAGE_PATTERNS, f"{DOCS_FOLDER}/*.md"],
        "exclude_patterns": ["**/.ipynb_checkpoints"],
        # the stored outputs, as they are: no kernel, no execution, stderr shown (the course stores none)
        "nb_execution_mode": "off",
        "nb_output_stderr": "show",
        # no ipywidgets JavaScript (it comes from a CDN): a widget falls back to its stored HTML or text
        "nb_ipywidgets_js": {},
        "nb_mime_priority_overrides": [("html", "application/vnd.jupyter.widget-view+json", None)],
        # notebook markdown: $...$ and $$...$$ math, links to headings (#some-heading), <details> and <a id> as HTML
        "myst_enable_extensions": ["dollarmath", "amsmath"],
        "myst_heading_anchors": 3,
        "html_theme": "sphinx_book_theme",
        "html_title": TITLE,
        "html_theme_options": {"show_toc_level": 2, "use_download_button": False},
        "html_context": {"default_mode": "light"},  # else the theme logs an error on a reader's first visit
        "html_show_sourcelink": False,
        "html_copy_source": False,
    }


def register_html_anchors(app, doctree) -> None:
    """Record every ``id`` of a document's raw HTML as a target of that document (Sphinx ``doctree-read`` hook).

    myst-parser resolves ``[text](glossary.md#draft)`` by looking up ``draft`` among glossary's heading slugs and
    labels; an ``<a id="draft"></a>`` is neither, so the link would work but warn. As an anonymous label of the
    document the id resolves, and an id that no raw HTML of the document holds still warns.
    """
    from docutils import nodes

    docname = app.env.docname
    anonlabels = app.env.domains["std"].anonlabels
    for raw in doctree.findall(nodes.raw):
        if "html" in raw.get("format", "").split():
            for anchor in _HTML_ID.findall(raw.astext()):
                anonlabels[f"html-anchor:{docname}#{anchor}"] = (docname, anchor)


def replace_site(built: Path, out: Path) -> None:
    """Move a built site to ``out``, replacing an earlier site there but nothing else."""
    if out.exists():
        if not out.is_dir() or (not (out / ".buildinfo").is_file() and any(out.iterdir())):
            raise ConfigError(f"{out} exists and is not a built site (no .buildinfo): choose another --out.")
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(built), str(out))


def missing_site_extra() -> str | None:
    """None when the site's modules import; else a message that names the missing one and the extra to install."""
    for name in SITE_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            return (f"{name} is not installed; the site needs the site extra: {INSTALL_SITE_EXTRA} "
                    "(from the repository root), then run this command again.")
    return None


def build_site(out: Path = DEFAULT_OUT, course_dir: Path = COURSE_DIR, docs_dir: Path | None = DOCS_DIR) -> SiteBuild:
    """Build the course site into ``out`` (``out/index.html`` is the front page); raises ConfigError on failure.

    The sources (a copy of the course folder, the guide's pages under ``docs/`` and the generated index.md),
    doctrees, myst-nb's output images and the HTML are made in a temporary folder, and only the finished HTML
    moves to ``out``. ``docs_dir=None`` builds the course alone.
    """
    from sphinx.application import Sphinx
    from sphinx.errors import SphinxError

    start = time.perf_counter()
    pages = course_pages(course_dir)
    if not pages:
        raise ConfigError(f"{course_dir} holds no notebooks or markdown pages to build a site from.")
    guide = docs_pages(docs_dir)
    pages += guide
    warnings = io.StringIO()
    with tempfile.TemporaryDirectory(prefix="specdec-site-") as work:
        work = Path(work)
        source = work / "src"
        shutil.copytree(course_dir, source, ignore=IGNORED)
        if guide:
            if (source / DOCS_FOLDER).exists():
                raise ConfigError(f"{course_dir} has a {DOCS_FOLDER}/ folder, where the site puts the guide's pages.")
            (source / DOCS_FOLDER).mkdir()
            for page in guide:
                shutil.copy2(page, source / DOCS_FOLDER / page.name)
        (source / "index.md").write_text(index_markdown(pages, course_dir, docs_dir), encoding="utf-8")
        html = work / "html"  # myst-nb writes output images beside it, into work/jupyter_execute
        try:
            app = Sphinx(
                str(source), None, str(html), str(work / "doctrees"), "html",
                confoverrides=sphinx_config(), status=io.StringIO(), warning=warnings, freshenv=True,
            )
            app.connect("doctree-read", register_html_anchors)
            app.build()
        except SphinxError as error:
            raise ConfigError(f"the site did not build: {error}\n{warnings.getvalue()}") from error
        replace_site(html, out)
    # Sphinx colours its warnings and names the copies it read: plain text that names the course's own files
    text = _ANSI_COLOUR.sub("", warnings.getvalue())
    if guide:
        text = text.replace(str(source / DOCS_FOLDER), str(docs_dir))
    text = text.replace(str(source), str(course_dir))
    lines = [line for line in text.splitlines() if line.strip()]
    return SiteBuild(out / "index.html", pages, lines, time.perf_counter() - start)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m specdec_tools site",
        description="Build the executed course (stored outputs, no re-execution) into a static web site.",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the site's folder (default: build/site)")
    parser.add_argument("--course", type=Path, default=COURSE_DIR, help="the course folder (default: course/)")
    parser.add_argument("--docs", type=Path, default=DOCS_DIR, help="the guide's folder (default: docs/)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    missing = missing_site_extra()
    if missing:
        print(f"site: {missing}", file=sys.stderr)
        return 1
    try:
        built = build_site(args.out.resolve(), args.course.resolve(), args.docs.resolve())
    except ConfigError as error:
        print(f"site: {error}", file=sys.stderr)
        return 1
    for line in built.warnings:
        print(line, file=sys.stderr)
    print(f"site: {len(built.pages)} pages, {len(built.warnings)} warnings, {built.seconds:.1f} s")
    print(f"site: open {built.index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
