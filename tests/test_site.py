"""The documentation as a reader meets it: pages short enough to scan, that
speak of the project only, and a built site that searches opened from disk
or served, and loads nothing from the network.

The page checks read docs/; the site checks read site/, which
`bash scripts/docs.sh` builds (scripts/test.sh builds it before the suites)
and are skipped, saying so, where it has not been built. The browser test
uses tests/browser.py's Chromium, as the demo page's test does.
"""

from __future__ import annotations

import ast
import json
import re
import threading
from functools import partial
from html.parser import HTMLParser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.browser import start_chromium

pytestmark = pytest.mark.backend_neutral

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").rglob("*.md"))
SITE = ROOT / "site"
MAX_WORDS = 1500
# Words about the machines this project is developed on, not about the
# project: a reader has no device tool, no lent machine, no ../shared.
DEVELOPMENT_TERMS = [
    r"\b`?device`? tool\b",
    r"\blent\b[^.]{0,40}\bmachine",
    r"(?<![\w-])(\.\./)?shared/(data|docs)\b",
    r"/work/(main|shared)\b",  # The development checkout and its data.
    r"\bthe shared (2-core )?machine\b",
    r"\bthe machine notes\b",
    r"\bTODO\b",
    r"\bFIXME\b",
]


def _words(text: str) -> int:
    return len(text.split())


def test_every_page_is_short_enough_to_scan():
    long = {
        page.relative_to(ROOT).as_posix(): words
        for page in PAGES
        if (words := _words(page.read_text(encoding="utf-8"))) > MAX_WORDS
    }
    assert not long, (
        f"pages over {MAX_WORDS:,} words (split them, a heading per feature, "
        f"and add them to mkdocs.yml's nav): {long}"
    )


def _docstrings() -> list[tuple[str, str]]:
    """(where, text) of every docstring of the package: the API page."""
    found = []
    for path in sorted((ROOT / "keras_transformer").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(
                node,
                (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef),
            ):
                text = ast.get_docstring(node, clean=False)
                if text:
                    name = getattr(node, "name", "module")
                    found.append((f"{path.relative_to(ROOT)}:{name}", text))
    return found


def _rendered_notebooks() -> list[Path]:
    """The notebooks the site shows (mkdocs.yml's nav), outputs and all."""
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    names = re.findall(r"(notebooks/\w+\.ipynb)\s*$", config, re.M)
    assert names, "the site renders the notebooks"
    return [ROOT / name for name in names]


def test_user_pages_speak_of_the_project_only():
    texts = [
        (page.relative_to(ROOT).as_posix(), page.read_text(encoding="utf-8"))
        for page in [ROOT / "README.md", *PAGES, *_rendered_notebooks()]
    ] + _docstrings()
    found = [
        f"{where}: {match.group(0)!r}"
        for where, text in texts
        for term in DEVELOPMENT_TERMS
        for match in re.finditer(term, text)
    ]
    assert not found, "development-machine words on user pages: " + "; ".join(found)


def test_docstring_examples_render_as_examples():
    """Google style's section is "Examples:"; mkdocstrings renders a bare
    "Example:" as nested quotes."""
    bare = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "keras_transformer").rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.fullmatch(r"\s*Example:\s*", line)
    ]
    assert not bare, f"write 'Examples:' at {bare}"


def test_the_command_line_page_shows_angle_brackets():
    from keras_transformer.cli.reference import markdown

    reference = markdown()
    assert "OUT.backup-&lt;time&gt;" in reference  # Not an HTML <time> tag.
    rows = [line for line in reference.splitlines() if line.startswith("| `")]
    assert not [row for row in rows if re.search(r"<[a-z]", row)]


def test_the_site_description_has_no_straight_double_quote():
    """The theme writes it into <meta content="..."> unescaped."""
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    block = re.search(r"^site_description: >-\n((?:  .*\n)+)", config, re.M)
    assert block and '"' not in block.group(1)


def test_the_home_page_says_what_the_readme_says():
    """The README's opening paragraph (what the project does) is the home
    page's, word for word, so the two cannot drift apart."""

    def opening(path: Path) -> str:
        text = path.read_text(encoding="utf-8")
        start = text.index("The Transformer of")
        return " ".join(text[start : text.index("\n\n", start)].split())

    assert opening(ROOT / "docs" / "index.md") == opening(ROOT / "README.md")


# --- the built site -------------------------------------------------------


def _built_site() -> Path:
    if not (SITE / "index.html").exists():
        pytest.skip("site/ is not built: bash scripts/docs.sh builds it")
    return SITE


CSS_LOADS = re.compile(r"(?:url\(|@import\s+)['\"]?([^'\")\s;]+)")


class _Loads(HTMLParser):
    """The URLs an HTML page loads (not the ones it links to)."""

    LINKS = {"next", "prev", "canonical", "alternate", "author", "license", "help"}

    def __init__(self):
        super().__init__()
        self.urls = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "link":
            rels = set((attrs.get("rel") or "").lower().split())
            if not rels <= self.LINKS:  # stylesheet, icon, preconnect, ...
                self.urls.append(attrs.get("href") or "")
        elif tag in ("script", "img", "iframe", "source", "audio", "video", "embed"):
            self.urls += [attrs.get("src") or "", attrs.get("srcset") or ""]
        elif tag == "object":
            self.urls.append(attrs.get("data") or "")
        self.urls.extend(re.findall(r"url\(([^)]*)\)", attrs.get("style") or ""))

    def handle_data(self, data):  # Inline <style>: its url()s and @imports.
        if self.lasttag == "style":
            self.urls.extend(CSS_LOADS.findall(data))


def _remote(url: str) -> bool:
    return bool(re.match(r"\s*(https?:)?//", url))


def test_the_built_site_loads_nothing_from_the_network():
    site = _built_site()
    remote = []
    for page in sorted(site.rglob("*.html")):
        parser = _Loads()
        parser.feed(page.read_text(encoding="utf-8"))
        where = page.relative_to(site).as_posix()
        remote += [f"{where}: {url}" for url in parser.urls if _remote(url)]
    for sheet in sorted(site.rglob("*.css")):
        text = sheet.read_text(encoding="utf-8")
        urls = CSS_LOADS.findall(text)
        remote += [f"{sheet.relative_to(site)}: {url}" for url in urls if _remote(url)]
    assert not remote, f"the site loads from the network: {remote[:10]}"


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def served_site():
    """site/ served as `python -m http.server -d site` serves it."""
    handler = partial(_QuietHandler, directory=str(_built_site()))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.slow
def test_search_finds_pages_opened_from_disk_and_served(served_site, tmp_path_factory):
    """Typing a query shows results, on file:// (where Chromium refuses the
    search's Web Worker without the site's shim) and over HTTP; every
    request the pages make stays on this machine."""
    browser = start_chromium(tmp_path_factory, log_network=True)
    try:
        for start in ((SITE / "index.html").as_uri(), f"{served_site}/index.html"):
            hrefs = _search(browser, start, "beam")
            assert any("decoding" in href for href in hrefs), hrefs
        requested = [
            message["params"]["request"]["url"]
            for entry in browser.get_log("performance")
            if (message := json.loads(entry["message"])["message"])["method"]
            == "Network.requestWillBeSent"
        ]
    finally:
        browser.quit()
    assert any(url.startswith("file:") for url in requested)
    assert any(url.startswith(served_site) for url in requested)
    outside = [
        url
        for url in requested
        if re.match(r"(https?|wss?):", url) and not url.startswith(served_site)
    ]
    assert not outside, f"requests off this machine: {outside[:10]}"


def _search(browser, start: str, words: str) -> list[str]:
    """Open `start`, type `words` into the search box: the results' links."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(start)
    wait = WebDriverWait(browser, 60)
    query = browser.find_element(By.CSS_SELECTOR, "input.md-search__input")
    results = ".md-search-result__item a"
    try:
        wait.until(lambda _: query.is_displayed() and query.is_enabled())
        query.click()
        query.send_keys(words)
        wait.until(lambda _: browser.find_elements(By.CSS_SELECTOR, results))
    except TimeoutException:
        pytest.fail(f"no search results on {start}: {browser.get_log('browser')[-5:]}")
    links = browser.find_elements(By.CSS_SELECTOR, results)
    return [link.get_attribute("href") for link in links]
