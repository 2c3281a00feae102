"""The course site (`specdec_tools.site`), built once and read in a real browser: headless Chromium via Selenium.

Debian's ``chromium`` and ``chromium-driver`` drive it (`.ci/run` installs them); Selenium is handed the driver's
path, so Selenium Manager downloads nothing. The site is served from 127.0.0.1 as a reader's web server would
serve it, and every page must load everything from there: a script, a style sheet, a font or MathJax from the
internet would fail offline, and the test says which.

Screenshots of the index and of a notebook page are left in build/site-screenshots/ (build output, not committed).
Without Chromium the tests skip with the install command, except under CI (``CI`` set), where they fail.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import threading
from pathlib import Path
from urllib.parse import urljoin, urlparse

import pytest

from specdec_lib.core.errors import ConfigError
from specdec_tools import site as site_module
from specdec_tools.site import (AUTHOR, COURSE_DIR, DOCS_DIR, build_site, course_pages, docs_pages, replace_site,
                                site_name)

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOTS = ROOT / "build" / "site-screenshots"
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
INSTALL = 'apt-get install -y chromium chromium-driver && pip install -e ".[site]"'
PAGES = course_pages(COURSE_DIR) + docs_pages(DOCS_DIR)
NOTEBOOKS = [page for page in PAGES if page.suffix == ".ipynb"]
GLOSSARY = COURSE_DIR / "glossary.md"
# the theme and myst-parser on Sphinx 9: their deprecations are not ours to fix
pytestmark = pytest.mark.filterwarnings("ignore:.*is deprecated. Check CHANGES for Sphinx API")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# what a page must not show: stored errors and stderr (myst-nb's classes), docutils' unresolved or broken markup
BAD_OUTPUT = "div.output.traceback, div.output.stderr, .problematic, .system-message"


def require(what: str, ok: bool) -> None:
    """Skip without ``what`` (with the install command); under CI, fail instead: CI never skips the site."""
    if ok:
        return
    message = f"the site test needs {what}; install with: {INSTALL}"
    if os.environ.get("CI"):
        pytest.fail(f"CI is set and {message}", pytrace=False)
    pytest.skip(message)


def module_available(name: str) -> bool:
    try:
        __import__(name)
    except ImportError:
        return False
    return True


def page_url(base: str, page: Path, course_dir: Path = COURSE_DIR) -> str:
    return urljoin(base, site_name(page, course_dir) + ".html")


def stored_pngs(notebook: Path) -> int:
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return sum("image/png" in out.get("data", {}) for cell in cells for out in cell.get("outputs", []))


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass


@pytest.fixture(scope="module")
def serve():
    """serve(folder) -> its base URL on 127.0.0.1; every server stops at the end of the module."""
    servers = []

    def start(folder: Path) -> str:
        handler = functools.partial(QuietHandler, directory=str(folder))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The real course's site, built once: (SiteBuild, folder)."""
    require("Sphinx and myst-nb (the site extra)", module_available("myst_nb"))
    out = tmp_path_factory.mktemp("site") / "site"
    built = build_site(out, COURSE_DIR)
    print(f"site built in {built.seconds:.1f} s")
    return built, out


@pytest.fixture(scope="module")
def site_url(site, serve) -> str:
    return serve(site[1])


@pytest.fixture(scope="module")
def browser():
    require(f"Chromium and its driver ({CHROMIUM}, {CHROMEDRIVER})", CHROMIUM.is_file() and CHROMEDRIVER.is_file())
    require("selenium (the site extra)", module_available("selenium"))
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1000"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def open_page(driver, url: str) -> None:
    """Load ``url`` and wait until its images are decoded and MathJax (where the page has math) has typeset."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(url)
    WebDriverWait(driver, 30).until(lambda d: d.execute_script(
        "return document.readyState === 'complete' && [...document.images].every(i => i.complete)"
        " && (!document.querySelector('.math') || !!document.querySelector('mjx-container'))"
    ))


def foreign_resources(driver, base: str) -> list[str]:
    """Whatever the loaded page fetched, or points a script, style sheet or image at, outside the site's server."""
    urls = driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name).concat("
        "[...document.querySelectorAll('script[src], img[src], link[href]')]"
        ".filter(e => e.tagName !== 'LINK' || !/^(canonical|next|prev|index|search|author|help)$/.test(e.rel))"
        ".map(e => e.src || e.href))"
    )
    origin = urlparse(base).netloc
    return sorted({url for url in urls if urlparse(url).scheme not in ("data", "blob") and urlparse(url).netloc != origin})


def console_errors(driver) -> list[str]:
    """The errors in the browser's console since the last call (a browser asks every server for /favicon.ico)."""
    entries = driver.get_log("browser")
    return [e["message"] for e in entries if e["level"] == "SEVERE" and "/favicon.ico " not in e["message"]]


def screenshot(driver, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / name
    assert driver.save_screenshot(str(path)), f"Chromium saved no screenshot to {path}"
    data = path.read_bytes()
    assert len(data) > 1000 and data.startswith(PNG_SIGNATURE), f"{path} is not a PNG of a page"
    return path


def glossary_links(site_dir: Path) -> dict[str, list[str]]:
    """Every link of the built site to an anchor of the glossary page: {page's path in the site: [hrefs]}."""
    links = {}
    for html in sorted(site_dir.rglob("*.html")):
        found = re.findall(r'href="((?:\.\./)*glossary\.html#[^"]+)"', html.read_text(encoding="utf-8"))
        if found:
            links[html.relative_to(site_dir).as_posix()] = found
    return links


def follow_link(driver, href: str) -> dict:
    """Click the page's link ``href`` (as written in the HTML); where the browser lands and what is there."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    link = driver.find_element(By.CSS_SELECTOR, f'a[href="{href}"]')
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", link)
    link.click()
    fragment = href.split("#", 1)[1]
    WebDriverWait(driver, 30).until(lambda d: d.execute_script(
        "return location.hash === arguments[0] && document.readyState === 'complete'", "#" + fragment
    ))
    return driver.execute_script(
        "const e = document.getElementById(arguments[0]);"
        "return {url: location.href, found: !!e, top: e ? e.getBoundingClientRect().top : null,"
        " height: innerHeight}", fragment
    )


# --------------------------------------------------------------------------- the real course


def test_the_site_builds_without_warnings(site):
    built, out = site
    assert built.index == out / "index.html" and built.index.is_file()
    assert built.pages == PAGES
    assert built.warnings == [], "Sphinx warned while building the site:\n" + "\n".join(built.warnings)


def test_the_site_has_the_guide_and_names_its_authors(site):
    """The guide's pages (docs/) are in the site under docs/, listed by the index; no page says the author is unset."""
    built, out = site
    guide = docs_pages(DOCS_DIR)
    assert guide, "docs/ holds no pages for the site's guide"
    index = (out / "index.html").read_text(encoding="utf-8")
    for page in guide:
        assert (out / "docs" / f"{page.stem}.html").is_file(), f"the site has no page for docs/{page.name}"
        assert f'href="docs/{page.stem}.html"' in index, f"the index does not link docs/{page.name}"
    unset = [html.relative_to(out).as_posix() for html in sorted(out.rglob("*.html"))
             if "Author name not set" in html.read_text(encoding="utf-8")]
    assert not unset, f"pages that say 'Author name not set': {unset}"
    assert AUTHOR in index


def test_without_the_site_extra_the_command_says_what_to_install(monkeypatch, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "sphinx", None)  # import sphinx now raises ModuleNotFoundError
    assert site_module.main(["--out", "unused"]) == 1
    err = capsys.readouterr().err
    assert 'pip install -e ".[site]"' in err and "sphinx" in err and "Traceback" not in err


def test_the_index_lists_every_page(site, site_url, browser):
    from selenium.webdriver.common.by import By

    open_page(browser, site_url)
    main = browser.find_element(By.CSS_SELECTOR, "main")
    listed = {link.get_attribute("href").split("#")[0] for link in main.find_elements(By.CSS_SELECTOR, "a[href]")}
    missing = [page.name for page in PAGES if page_url(site_url, page) not in listed]
    assert not missing, f"the index does not list {missing}"
    assert foreign_resources(browser, site_url) == []
    assert console_errors(browser) == []
    screenshot(browser, "index.png")


@pytest.mark.parametrize("page", PAGES, ids=[site_name(page) for page in PAGES])
def test_every_page_shows_its_figures_and_no_errors(site, site_url, browser, page):
    from selenium.webdriver.common.by import By

    open_page(browser, page_url(site_url, page))
    images = browser.execute_script("return [...document.images].map(i => [i.getAttribute('src'), i.naturalWidth])")
    broken = [src for src, width in images if not width]
    assert not broken, f"{page.name}: images that did not load: {broken}"
    if page.suffix == ".ipynb":
        assert len(images) >= stored_pngs(page), (
            f"{page.name} stores {stored_pngs(page)} PNG figures, its page shows {len(images)} images"
        )
        assert browser.find_elements(By.CSS_SELECTOR, "div.cell"), f"{page.name}: the page shows no notebook cells"
    bad = [element.text[:200] for element in browser.find_elements(By.CSS_SELECTOR, BAD_OUTPUT)]
    assert not bad, f"{page.name}: the page shows errors, stderr or broken markup: {bad}"
    assert foreign_resources(browser, site_url) == []
    assert console_errors(browser) == []


def test_a_notebook_page_screenshot(site, site_url, browser):
    from selenium.webdriver.common.by import By

    with_figures = max(NOTEBOOKS, key=stored_pngs)
    open_page(browser, page_url(site_url, with_figures))
    figure = browser.find_elements(By.CSS_SELECTOR, "main div.cell_output img")
    if figure:
        browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", figure[0])
    screenshot(browser, f"{with_figures.stem}.png")


def test_glossary_links_land_on_their_anchors(site, site_url, browser):
    if not GLOSSARY.is_file():
        pytest.skip("course/glossary.md does not exist yet")
    links = glossary_links(site[1])
    assert links, "course/glossary.md exists but no page of the site links to one of its terms"
    page, hrefs = next(iter(links.items()))
    open_page(browser, urljoin(site_url, page))
    landed = follow_link(browser, hrefs[0])
    assert landed["found"], f"{page}: {hrefs[0]} led to {landed['url']}, where no element has that id"
    assert 0 <= landed["top"] < landed["height"], f"{page}: {hrefs[0]} did not scroll to its term: {landed}"
    open_page(browser, page_url(site_url, GLOSSARY))
    ids = set(browser.execute_script("return [...document.querySelectorAll('[id]')].map(e => e.id)"))
    dangling = sorted({(p, h) for p, hs in links.items() for h in hs if h.split("#", 1)[1] not in ids})
    assert not dangling, f"links to glossary terms that the glossary page lacks: {dangling}"


# --------------------------------------------------------------------------- a course made here


def write_tiny_course(folder: Path) -> None:
    """A notebook that links to a glossary term (and to one that does not exist), and the glossary."""
    import nbformat

    folder.mkdir()
    (folder / "glossary.md").write_text(
        "# Glossary\n\n" + "Filler text.\n\n" * 80 + '**Draft** <a id="draft"></a>: the small model that proposes.\n'
        + "\nMore filler.\n" * 80,
        encoding="utf-8",
    )
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_markdown_cell("# A tiny notebook\n\n[draft](glossary.md#draft) and [lost](glossary.md#lost)"),
        nbformat.v4.new_code_cell("1 + 1", execution_count=1, outputs=[
            nbformat.v4.new_output("execute_result", {"text/plain": "2"}, execution_count=1)
        ]),
    ]
    nbformat.write(notebook, folder / "00_tiny.ipynb")


def test_a_link_to_an_html_anchor_resolves_and_a_dangling_one_warns(tmp_path, serve, browser):
    require("Sphinx and myst-nb (the site extra)", module_available("myst_nb"))
    write_tiny_course(tmp_path / "course")
    built = build_site(tmp_path / "site", tmp_path / "course", docs_dir=None)
    lost = [w for w in built.warnings if "'lost'" in w]
    assert lost and lost[0].startswith(str(tmp_path / "course" / "00_tiny.ipynb")), built.warnings
    assert not [w for w in built.warnings if "'draft'" in w], built.warnings
    base = serve(tmp_path / "site")
    open_page(browser, urljoin(base, "00_tiny.html"))
    landed = follow_link(browser, "glossary.html#draft")
    assert landed["found"] and 0 <= landed["top"] < landed["height"], landed


def test_an_out_folder_that_is_not_a_site_is_not_replaced(tmp_path):
    (tmp_path / "built").mkdir()
    (tmp_path / "built" / ".buildinfo").write_text("x")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(ConfigError, match="is not a built site"):
        replace_site(tmp_path / "built", tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
    replace_site(tmp_path / "built", tmp_path / "new" / "site")
    assert (tmp_path / "new" / "site" / ".buildinfo").is_file()
