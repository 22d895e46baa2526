"""The documentation site, built as CI builds it and read as a reader reads it.

The site is built once (``mkdocs build --strict`` into a temporary folder), then its main
pages are opened in real headless Chromium: the DOM Chromium has after running the pages'
scripts must hold the navigation, a generated options table, the API reference and the
report pages' screenshots, and a screenshot of a page must show something. Chromium is
Debian's ``chromium`` package; where it is not installed those tests skip, naming it.
"""

import html.parser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deadlines import within
from repo_scripts import ROOT

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="needs Chromium: apt-get install chromium (Debian's package)"
)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built strictly from this checkout."""
    pytest.importorskip("mkdocs", reason='needs the docs extra: pip install -e ".[docs]"')
    out = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(out)],
        cwd=ROOT,
        check=True,
        timeout=within(600),
        capture_output=True,
    )
    return out


class _Dom(html.parser.HTMLParser):
    """What a test reads of a page: links, images, element ids and table rows' text."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.images: list[str] = []
        self.ids: set[str] = set()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if attributes.get("id"):
            self.ids.add(attributes["id"])
        if tag == "a" and attributes.get("href"):
            self.links.append(attributes["href"])
        elif tag == "img" and attributes.get("src"):
            self.images.append(attributes["src"])
        elif tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self.rows:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def _chromium(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", *args],
        check=True,
        timeout=within(180),
        capture_output=True,
        text=True,
    )


def _open(site: Path, page: str) -> _Dom:
    """``page`` of the site as Chromium has it after loading (``--dump-dom``)."""
    dom = _Dom()
    dom.feed(_chromium("--dump-dom", (site / page / "index.html").as_uri()).stdout)
    return dom


def test_every_page_of_the_nav_is_built(site):
    import yaml

    def pages(entries):
        for entry in entries:
            value = next(iter(entry.values())) if isinstance(entry, dict) else entry
            yield from pages(value) if isinstance(value, list) else [value]

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    for page in pages(config["nav"]):
        built = site / ("" if page == "index.md" else page.removesuffix(".md")) / "index.html"
        assert built.is_file(), page


@needs_chromium
def test_the_navigation_and_the_generated_options_table_render(site):
    dom = _open(site, "reference/cli")
    for page in ("poprun/", "poptorch/", "trainer/", "hardware-model/", "benchmarks/"):
        assert any(link.endswith(page) for link in dom.links), page  # the navigation
    options = {row[0] for row in dom.rows if row}
    assert {"--num-replicas", "--offline-mode", "--real-hosts"} <= options  # poprun-emu's
    assert "--instances-per-replica" in options and "--compare" in options  # the sweep's


@needs_chromium
def test_the_api_reference_renders_the_packages_public_names(site):
    import gcl
    import popdist_emu

    for package in (popdist_emu, gcl):
        dom = _open(site, f"reference/{package.__name__}")
        missing = {f"{package.__name__}.{n}" for n in package.__all__} - dom.ids
        assert not missing, missing


@needs_chromium
def test_the_report_pages_screenshots_render(site, tmp_path):
    dom = _open(site, "scaling")
    shots = [src for src in dom.images if src.startswith("../figures/")]
    assert len(shots) >= 3, dom.images
    for src in shots:
        assert (site / "scaling" / src).resolve().is_file(), src
    png = tmp_path / "page.png"
    page = (site / "scaling" / "index.html").as_uri()
    _chromium("--hide-scrollbars", "--window-size=1200,2000", f"--screenshot={png}", page)
    from matplotlib import image

    pixels = image.imread(png)[:, :, :3]
    assert pixels.std() > 0.05, "the page's screenshot is blank"
    assert (pixels < 0.5).mean() > 0.01, "the page shows almost nothing dark: no text"
