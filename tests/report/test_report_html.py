"""``report.html`` on real sweeps: parsed with the standard library, looked at with headless
Chromium (skipped, with the reason, where Debian's ``chromium`` is not installed).

Set ``AORTA_SCREENSHOTS=DIR`` to keep the screenshots for a person to look at.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

import aorta
import aorta.report
from aorta.errors import ExitCode, UsageError
from aorta.recipe import load_recipe_text
from aorta.report.page.kit import svg_markup
from aorta.run.sweep import sweep

# A probe whose xnack cell is 1.5× slower and fails every odd trial with a log line on stderr;
# SLOW_FACTOR scales every step (a second, slower run).
STEPS = (
    "import os, sys\n"
    "t = int(os.environ['AORTA_TRIAL'])\n"
    "if os.environ.get('HSA_XNACK') and t % 2:\n"
    "    print('RuntimeError: HIP error: an illegal memory access was encountered', file=sys.stderr)\n"
    "    sys.exit(3)\n"
    "f = float(os.environ.get('SLOW_FACTOR', '1')) * (1.5 if os.environ.get('HSA_XNACK') else 1)\n"
    "for s in range(6): print(f'step {f * (10 + t * 0.01 + s * 0.001):.4f} ms')"
)
CELLS = ["none-none", "xnack-none", "tf32_off-none"]
FIGURES = ["ratio_forest", "failure_rates", "step_distributions", "step_series"]


def probe(slow: str = "1", trials: int = 4) -> str:
    return f"""
mode: probe
ticket: HTML-TEST
trials: {trials}
mitigation_axis: [none, xnack, tf32_off]
step_time_regex: 'step ([0-9.]+) ms'
extra_env: {{SLOW_FACTOR: '{slow}'}}
"""


def run(root: Path, name: str, text: str) -> Path:
    recipe = load_recipe_text(text, command=["python3", "-c", STEPS])
    return sweep(recipe, output=root / name, progress="none").run_dir


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("html")
    return {"a": run(tmp, "a", probe()), "b": run(tmp, "b", probe("1.3", trials=3))}


@pytest.fixture
def run_copy(runs, tmp_path):
    target = tmp_path / "run"
    shutil.copytree(runs["a"], target)
    return target


# --- reading a page --------------------------------------------------------------------------


class Page(HTMLParser):
    """What a test needs of a page: sections, tables (rows of cell texts), figures, every
    attribute, and whether a script is present."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.raw = text
        self.sections: list[str] = []
        self.figures: list[str] = []
        self.attrs: list[tuple[str, str, str]] = []
        self.tables: dict[str, list[list[str]]] = {}
        self.svgs = 0
        self.imgs = 0
        self._section = ""
        self._rows: list[list[str]] | None = None
        self._cell: list[str] | None = None
        self._table_n = 0
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            self.attrs.append((tag, name, value or ""))
        a = dict(attrs)
        if tag == "section":
            self._section = a.get("id", "")
            self.sections.append(self._section)
            self._table_n = 0
        elif tag == "figure":
            self.figures.append(a.get("id", "").removeprefix("fig-"))
        elif tag == "svg" and a.get("class") != "bar":  # bars: the matrix's ratio column
            self.svgs += 1
        elif tag == "img":
            self.imgs += 1
        elif tag == "table":
            self._table_n += 1
            self._rows = self.tables.setdefault(f"{self._section}#{self._table_n}", [])
        elif tag == "tr" and self._rows is not None:
            self._rows.append([])
        elif tag in ("td", "th") and self._rows is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self._rows:
            self._rows[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "table":
            self._rows = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)

    def column(self, table: str, i: int = 0) -> list[str]:
        return [row[i] for row in self.tables[table][1:]]


def read_page(path: Path) -> Page:
    return Page(path.read_text())


_SCHEME = re.compile(r"^\s*[a-z][a-z0-9+.-]*:", re.I)
_URL_ATTRS = {"href", "src", "srcset", "action", "poster", "data", "xlink:href", "background"}


def external_urls(page: Page) -> list[str]:
    """Everything in the page that could make a browser reach outside the file.

    The rule: no ``scheme://`` anywhere in the text (matplotlib's SVG namespace declarations
    included: the page strips them, an inline ``<svg>`` needs none); every URL attribute is a
    relative path, a ``#fragment`` or PNG data; CSS ``url()`` only points at ``#ids``; no
    ``@import``.
    """
    bad = re.findall(r"[a-z][a-z0-9+.-]*://\S*", page.raw, re.I)
    bad += re.findall(r"@import[^;]*", page.raw)
    bad += [u for u in re.findall(r"url\(([^)]*)\)", page.raw) if not u.startswith("#")]
    for tag, name, value in page.attrs:
        if name.startswith("xmlns"):
            bad.append(f"<{tag} {name}={value}>")
        png = value.startswith("data:image/png;base64,")
        if name in _URL_ATTRS and (value.startswith("//") or (_SCHEME.match(value) and not png)):
            bad.append(f"<{tag} {name}={value[:60]}>")
    return bad


def local_links(page: Page, page_path: Path) -> list[Path]:
    """The files the page's relative links name (the page's own #anchors left out)."""
    out = []
    for tag, name, value in page.attrs:
        if tag == "a" and name == "href" and not value.startswith("#"):
            assert not _SCHEME.match(value) and not value.startswith("/"), value
            out.append((page_path.parent / value.replace("%2B", "+")).resolve())
    return out


# --- screenshots -----------------------------------------------------------------------------


def screenshot(page_path: Path, out: Path, *, javascript: bool = True, height: int = 2000) -> Path:
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it when root)")
    cmd = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        f"--screenshot={out}",
        f"--window-size=1400,{height}",
    ]
    if not javascript:  # the page as a browser with JavaScript off reads it: no script at all
        text = re.sub(r"<script>.*?</script>", "", page_path.read_text(), flags=re.S)
        page_path = page_path.with_name(f"{page_path.stem}-nojs.html")
        page_path.write_text(text)
    subprocess.run([*cmd, page_path.as_uri()], capture_output=True, timeout=120, check=True)
    keep = os.environ.get("AORTA_SCREENSHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(out, Path(keep) / out.name)
    return out


def assert_not_blank(png: Path) -> None:
    from matplotlib.image import imread

    img = imread(png)[..., :3]
    assert img.shape[:2] == (img.shape[0], 1400)
    ink = (img < 0.9).any(axis=2).mean()
    # distinct colours: each pixel as one 24-bit number, counted by bincount (np.unique of the
    # rows sorted them: seconds of CPU per tall screenshot, for the same count)
    rgb = (img * 255).astype(np.uint32)
    packed = (rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2]
    colours = int(np.count_nonzero(np.bincount(packed.ravel(), minlength=1 << 24)))
    assert ink > 0.04, f"{png}: only {ink:.1%} of the pixels are not white"
    assert colours > 100, f"{png}: {colours} distinct colours"


# --- a run's page ----------------------------------------------------------------------------


@pytest.mark.slow
def test_page_for_a_real_cpu_sweep(runs, run_copy, run_cli):
    code, out, err = run_cli("report", run_copy, "--html", "--resamples", "1000")
    assert code == ExitCode.OK, err
    path = run_copy / "report" / "report.html"
    assert out.splitlines()[-1] == str(path)
    assert (run_copy / "report" / "report.md").is_file()  # --html adds to the report
    page = read_page(path)
    assert page.sections == ["findings", "matrix", "failures", "figures", "run", "trials"]
    assert page.figures == FIGURES and page.svgs == len(FIGURES) and page.imgs == 0
    assert page.column("matrix#1") == CELLS
    matrix = {row[0]: row for row in page.tables["matrix#1"][1:]}
    head = page.tables["matrix#1"][0]
    assert matrix["xnack-none"][head.index("failed")] == "2"
    assert matrix["xnack-none"][head.index("trials")] == "2 ok · 2 failed"
    assert matrix["xnack-none"][head.index("top failure")] == "illegal_memory_access 2/2"
    assert "no difference detected" in matrix["xnack-none"][head.index("verdict")]
    assert matrix["none-none"][head.index("verdict")] == "baseline"
    # every trial has its row and its record, logs linked relative to the page
    trials = page.tables["trials#1"][1:]
    assert sorted((r[0], int(r[1])) for r in trials) == sorted(
        (c, t) for c in CELLS for t in range(4)
    )
    links = local_links(page, path)
    assert len(set(links)) == 12 * 3 and all(p.is_file() for p in links)
    # the failure, with the line its signature matched
    assert "illegal memory access was encountered</mark>" in page.raw
    assert 'id="fail-xnack-none"><h3>xnack-none <span class=muted>— 2 failed of 4' in page.raw
    assert external_urls(page) == []
    ids = [v for _, name, v in page.attrs if name == "id"]
    assert len(ids) == len(set(ids)), "two elements share an id"


@pytest.mark.slow
def test_links_survive_moving_the_run_directory(run_copy, tmp_path):
    aorta.report.html(run_copy, resamples=500)
    moved = tmp_path / "elsewhere" / "bundle"
    shutil.move(run_copy, moved)
    path = moved / "report" / "report.html"
    links = local_links(read_page(path), path)
    assert links and all(p.is_file() and moved in p.parents for p in links)


@pytest.mark.slow
def test_screenshots_are_not_blank_with_and_without_javascript(run_copy, tmp_path):
    path = aorta.report.html(run_copy, resamples=500)
    for js in (True, False):
        assert_not_blank(screenshot(path, tmp_path / f"report-js-{js}.png", javascript=js))


@pytest.mark.slow
def test_the_script_runs_in_a_browser(run_copy):
    path = aorta.report.html(run_copy, resamples=500)
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("Debian's chromium is not installed")
    dom = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--dump-dom", path.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    # the script adds the filter boxes (trials, environment variables) and makes the headings
    # sortable; with a syntax error it would do neither
    assert dom.count('class="filter"') == 2 and 'title="sort by this column"' in dom


@pytest.mark.slow
def test_cross_node_differences_and_extra_hosts(run_copy):
    host = json.loads((run_copy / "host_env.json").read_text())
    other = {**host, "host": "node1", "torch": {**host["torch"], "version": "2.4.0"}}
    (run_copy / "host_env").mkdir()
    (run_copy / "host_env" / "node1.json").write_text(json.dumps(other))
    skew = {"torch.version": {"node0": host["torch"]["version"], "node1": "2.4.0"}}
    (run_copy / "launch.json").write_text(json.dumps({"skew": skew}))
    page = read_page(aorta.report.html(run_copy, resamples=500))
    assert "Differences between nodes" in page.raw
    tables = [t for k, t in page.tables.items() if k.startswith("run#")]
    assert ["setting", "node0", "node1"] in [t[0] for t in tables]
    hosts = next(t for t in tables if t[0][1:] == [host["host"], "node1"])
    assert ["torch", host["torch"]["version"], "2.4.0"] in hosts
    assert 'class="diff">2.4.0' in page.raw


@pytest.mark.slow
def test_waterfalls_and_custom_sections(run_copy):
    from matplotlib.figure import Figure

    from aorta.report.page.kit import Section
    from aorta.report.page.write import RUN_SECTIONS

    fig = Figure()
    fig.add_subplot().bar(["base", "gemm", "comm"], [10, 2, 3])
    extra = (*RUN_SECTIONS, lambda page: Section("mine", "Mine", "<p>hello</p>"))
    path = aorta.report.html(
        run_copy, resamples=500, waterfalls={"xnack-none": fig}, sections=extra
    )
    page = read_page(path)
    assert page.sections[-4:] == ["time-went", "run", "trials", "mine"]
    assert "waterfall-xnack-none" in page.figures


@pytest.mark.slow
def test_dataset_without_run_directory(runs, tmp_path):
    ds = aorta.load_run(runs["a"])
    with pytest.raises(UsageError, match="output="):
        aorta.report.html(ds)
    path = aorta.report.html(ds, output=tmp_path / "p.html", resamples=500, figure_format="png")
    page = read_page(path)
    assert page.imgs == len(FIGURES) and page.svgs == 0
    assert "run" not in page.sections or "Host" not in page.raw
    assert local_links(page, path) == [] and external_urls(page) == []


# --- two runs --------------------------------------------------------------------------------


@pytest.mark.slow
def test_page_comparing_two_runs(runs, tmp_path, run_cli):
    a, b = (shutil.copytree(runs[k], tmp_path / k) for k in ("a", "b"))
    code, out, err = run_cli("report", a, b, "--html", "--resamples", "1000")
    assert code == ExitCode.OK, err
    path = Path(out.strip())
    assert path == b / "report" / f"compare_{a.name}.html"
    page = read_page(path)
    assert page.sections == ["runs", "cells", "figures"] and page.figures == ["ratio_forest"]
    assert page.column("cells#1") == CELLS
    rows = {r[0]: r for r in page.tables["cells#1"][1:]}
    assert rows["none-none"][1:3] == ["0/4", "0/3"] and rows["xnack-none"][1] == "2/4"
    assert rows["none-none"][5].startswith("1.3")
    assert external_urls(page) == []
    assert all(p.is_file() for p in local_links(page, path))
    assert_not_blank(screenshot(path, tmp_path / "compare.png", height=1600))


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, message",
    [
        ([], "add --html"),
        (["--html", "--baseline", "none-none"], "--baseline applies to one run"),
    ],
)
def test_two_runs_usage_errors(runs, run_cli, args, message):
    code, _, err = run_cli("report", runs["a"], runs["b"], *args)
    assert code == ExitCode.USAGE and message in err


def test_svg_markup_names_no_url_and_keeps_references():
    from matplotlib.figure import Figure

    from aorta.report.page.kit import figure_markup

    fig = Figure()
    ax = fig.add_subplot()
    ax.plot([1, 2, 3], [3, 1, 2], "o-")
    ax.set_title("x")
    one, two = (figure_markup(fig, key=k) for k in ("one", "two"))
    for svg in (one, two):
        assert "://" not in svg and "xmlns" not in svg and "<?xml" not in svg
        refs = set(re.findall(r'href="#([^"]+)"|url\(#([^)]+)\)', svg))
        ids = set(re.findall(r'\bid="([^"]+)"', svg))
        assert {r for pair in refs for r in pair if r} <= ids
    assert not set(re.findall(r'\bid="([^"]+)"', one)) & set(re.findall(r'\bid="([^"]+)"', two))
    assert figure_markup(fig, key="one") == one  # reproducible
    assert svg_markup('<svg width="1pt"></svg>', prefix="p") == '<svg width="1pt"></svg>'


# --- a profiled sweep ------------------------------------------------------------------------


@pytest.mark.slow
def test_page_for_a_profiled_two_rank_sweep(tmp_path, tmp_path_factory, run_cli):
    from tests.trace_helpers import copy_without_caches, shared_profiled_sweep

    run_dir = copy_without_caches(shared_profiled_sweep(tmp_path_factory), tmp_path / "run")
    code, _, err = run_cli("report", run_dir, "--traces", "--html", "--resamples", "1000")
    assert code == ExitCode.OK, err
    path = run_dir / "report" / "report.html"
    page = read_page(path)
    assert page.sections == ["findings", "matrix", "figures", "traces", "hardware", "run", "trials"]
    assert page.figures == [*FIGURES, "time_breakdown", "exposed_comm_vs_step"]
    assert page.column("matrix#1") == ["fsdp", "ddp"]
    traces = page.tables["traces#1"]
    assert [r[0] for r in traces[1:]] == ["fsdp", "ddp"]
    assert all(r[1] == "2" and r[2] == "host" for r in traces[1:])  # 2 traced trials each
    assert external_urls(page) == []
    links = local_links(page, path)
    assert any(p.name == "rank1.pt.trace.json.gz" for p in links) or all(p.is_file() for p in links)
    assert all(p.is_file() for p in links)
    assert_not_blank(screenshot(path, tmp_path / "report-traces.png", height=2600))
