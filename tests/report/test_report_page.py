"""``report.html`` as the page an on-call engineer reads first, on a real sweep, in a real
browser.

The sweep is issue #20's probe scenario made small: the baseline fails 4/8 trials with an
NCCL error line on stderr (among other lines, a collected application log beside it),
``pytorch_alloc_expandable_segments`` fails 0/8, and every trial of
``hsa_no_scratch_reclaim`` hangs (silent and idle past ``hang_after``). The page is checked as
HTML and in headless Chromium at 1280×800 and 1920×1080, reading element geometry over the
DevTools protocol (:mod:`tests.chromium`).

Set ``AORTA_SCREENSHOTS=DIR`` to keep the screenshots for a person to look at.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

import aorta.report
from aorta.recipe import load_recipe_text
from aorta.report.page.sections import cell_anchor
from aorta.report.page.write import read_run_files
from aorta.run.sweep import sweep
from aorta.store.rundir import RunDir

from ..chromium import look

BASE = "none-none"
FIX = "pytorch_alloc_expandable_segments-none"
HANG = "hsa_no_scratch_reclaim-none"
NCCL_LINE = (
    "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error "
    "(run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5"
)
# Odd baseline trials fail with an NCCL error among other stderr lines and a long error;
# every trial writes an application log that the recipe collects; the hsa cell goes silent.
JOB = f"""
import os, sys, time
t = int(os.environ['AORTA_TRIAL'])
cell = os.environ['AORTA_CELL']
with open(os.path.join(os.environ['APP_DIR'], f'app-{{cell}}-{{t}}.log'), 'w') as f:
    f.write(''.join(f'app: heartbeat {{i}}\\n' for i in range(40)))
if os.environ.get('HSA_NO_SCRATCH_RECLAIM'):
    print('step 10.0 ms', flush=True)
    time.sleep(600)
if t % 2 and not os.environ.get('PYTORCH_CUDA_ALLOC_CONF'):
    for i in range(10):
        print(f'[rank0] NCCL INFO init step {{i}}', file=sys.stderr)
    print('[rank0] NCCL INFO Channel 00/02 : 0 1', file=sys.stderr)
    print({NCCL_LINE!r} + ' detail' * 120, file=sys.stderr)
    for i in range(5):
        print(f'[rank0] teardown {{i}}', file=sys.stderr)
    sys.exit(1)
for s in range(6):
    print(f'step {{10 + t * 0.01 + s * 0.001:.4f}} ms')
"""
RECIPE = """
mode: probe
ticket: ONCALL-1
trials: 8
mitigation_axis: [none, pytorch_alloc_expandable_segments, hsa_no_scratch_reclaim]
step_time_regex: 'step ([0-9.]+) ms'
hang_after: 1
timeout_per_trial: 120
extra_env: {{APP_DIR: '{app}'}}
collect_paths: ['${{APP_DIR}}/app-${{AORTA_CELL}}-${{AORTA_TRIAL}}.log']
"""
SIZES = [(1280, 800), (1920, 1080)]


@pytest.fixture(scope="module")
def oncall_run(tmp_path_factory) -> Path:
    """The scenario's run directory, with its report.html (built once for the module)."""
    tmp = tmp_path_factory.mktemp("oncall")
    app = tmp / "app"
    app.mkdir()
    recipe = load_recipe_text(RECIPE.format(app=app), command=["python3", "-c", JOB])
    run_dir = sweep(recipe, output=tmp / "runs", progress="none").run_dir
    aorta.report.html(run_dir, resamples=1000)
    return run_dir


def page_path(run_dir: Path) -> Path:
    return run_dir / "report" / "report.html"


def keep(name: str, png: bytes, tmp_path: Path) -> Path:
    out = tmp_path / name
    out.write_bytes(png)
    shots = os.environ.get("AORTA_SCREENSHOTS")
    if shots:
        Path(shots).mkdir(parents=True, exist_ok=True)
        shutil.copy(out, Path(shots) / name)
    return out


# --- the run and the page as text ------------------------------------------------------------


@pytest.mark.slow
def test_the_sweep_is_the_scenario(oncall_run):
    ds = aorta.load_run(oncall_run)
    status = {c: ds.status.sel(cell=c).values.astype(str).tolist() for c in (BASE, FIX, HANG)}
    assert status[BASE].count("workload_failed") == 4 and status[BASE].count("ok") == 4
    assert status[FIX] == ["ok"] * 8
    assert status[HANG] == ["timeout"] * 8
    assert set(ds.signature.sel(cell=BASE).values.astype(str)) == {"", "nccl_error"}


@pytest.mark.slow
def test_page_opens_with_failure_first_findings(oncall_run):
    text = page_path(oncall_run).read_text()
    order = [text.index(f'<section id="{s}">') for s in ("findings", "matrix", "failures")]
    assert order == sorted(order) and text.index("<section ") == order[0]
    findings = text[order[0] : order[1]]
    items = findings.split('<li class="finding ')[1:]
    # the hang first, then the fix with the failures it removed and the command that decides it
    assert items[0].startswith('bad"><span class="topic">hang</span>')
    assert f"{HANG}: hangs in 8/8 trials, baseline 0/8 — more hangs" in items[0]
    [fix] = [i for i in items if f"{FIX}: fails in 0/8 trials, baseline 4/8" in i]
    assert "(baseline: nccl_error 4) — fewer failures" in fix
    if "not yet significant" in fix:  # 4/8 → 0/8 at 8 trials: Boschloo p_adj 0.056
        assert "aorta sweep extend" in fix
    timing = [k for k, i in enumerate(items) if '<span class="topic">timing' in i]
    assert all(k > items.index(fix) for k in timing)
    assert "NCCL/RCCL failed: rerun with NCCL_DEBUG=INFO" in findings  # the signature's hint


@pytest.mark.slow
def test_failures_list_every_failed_cell_with_hint_and_matched_line_first(oncall_run):
    text = page_path(oncall_run).read_text()
    start = text.index('<section id="failures">')
    failures = text[start : text.index("</section>", start)]
    assert f'id="{cell_anchor(HANG)}"' in failures  # the all-hang cell is listed
    assert f'id="{cell_anchor(BASE)}"' in failures
    assert f'id="{cell_anchor(FIX)}"' not in failures
    blocks = {b.split('"', 1)[0]: b for b in failures.split('<div class="fcell" id="')[1:]}
    assert list(blocks) == [cell_anchor(BASE), cell_anchor(HANG)]
    base = blocks[cell_anchor(BASE)]
    assert "<code>nccl_error</code>" in base
    assert "hint</b> NCCL/RCCL failed" in base and "hint</b> —" not in base
    # the matched line, marked, with its neighbours, before any other file of the trial
    mark = base.index("<mark>")
    assert "NCCL INFO Channel 00/02" in base[base.rindex("<pre", 0, mark) : mark]
    assert "ProcessGroupNCCL.cpp:1970" in base[mark : base.index("</mark>")]
    assert "teardown 0" in base[mark : base.index("</pre>", mark)]
    app_log = base.index(f"end of collected/app-{BASE}-")  # the collected file, after
    assert mark < app_log
    hang = blocks[cell_anchor(HANG)]
    assert "8 hang of 8 trial(s)" in hang and "<code>hang</code>" in hang
    assert "hint</b> no output and no CPU use" in hang
    # no line matched in a file: the error, then the end of the trial's output, open
    assert hang.index("its error") < hang.index("<details open>") < hang.index("end of stdout.log")


@pytest.mark.slow
def test_excerpts_read_the_matched_line_with_context(oncall_run):
    ds = aorta.load_run(oncall_run)
    files = read_run_files(RunDir.open(oncall_run), ds)
    [(key, excerpts)] = [(k, v) for k, v in files.excerpts.items() if k[0] == BASE]
    first = excerpts[0]
    assert first.name == "stderr.log" and first.match is not None
    assert first.lines[first.match - first.first].startswith(NCCL_LINE)
    assert first.match - first.first == 4 and len(first.lines) == 4 + 1 + 3
    assert len(max(first.lines, key=len)) <= 400  # a long line is cut
    rec = json.loads(RunDir.open(oncall_run).trial_path(*key).read_text())
    assert rec["signature_line"].startswith(f"stderr.log:{first.match}:")
    assert any(e.rel.endswith(f"app-{BASE}-{key[1]}.log") for e in excerpts[1:])


# --- the page in a browser -------------------------------------------------------------------

GEOMETRY = """
(() => {
  const box = e => { const b = e.getBoundingClientRect();
    return {left: b.left, right: b.right, top: b.top, bottom: b.bottom, height: b.height}; };
  const shown = e => e.getClientRects().length > 0;
  const th = [...document.querySelectorAll('table.matrix thead th')].filter(shown);
  const head = t => box(th.find(h => h.textContent.trim().startsWith(t)));
  const col = cls => [...document.querySelectorAll('table.matrix td.' + cls)].map(box);
  return {
    viewport: document.documentElement.clientWidth,
    pageWidth: document.documentElement.scrollWidth,
    sections: [...document.querySelectorAll('section')].map(s => s.id),
    headers: th.map(h => h.textContent.trim()),
    verdict: head('verdict'),
    topFailure: head('top failure'),
    verdictCells: col('verdictcell'),
    topCells: col('topfail'),
    findingsTop: box(document.getElementById('findings')),
    failedCells: [...document.querySelectorAll('#failures .fcell')].map(d => d.id),
    trialRows: [...document.querySelectorAll('table.trials tbody tr')].map(r => box(r).height),
    lineHeight: parseFloat(getComputedStyle(document.querySelector('table.trials td')).lineHeight)
      || 19,
  };
})()
"""


@pytest.mark.slow
@pytest.mark.parametrize("width, height", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_page_in_chromium(oncall_run, tmp_path, width, height):
    got = look(
        page_path(oncall_run).as_uri(),
        width=width,
        height=height,
        expression=GEOMETRY,
        profile=tmp_path / "profile",
    )
    g = got.value
    keep(f"oncall-{width}x{height}.png", got.screen, tmp_path)
    keep(f"oncall-{width}x{height}-full.png", got.full, tmp_path)
    assert g["viewport"] == width
    assert g["sections"][:3] == ["findings", "matrix", "failures"]
    assert g["findingsTop"]["top"] < height / 2  # the findings are on the first screen
    # verdict and top failure: headers and every row's cell inside the window, no page scroll
    for box in [g["verdict"], g["topFailure"], *g["verdictCells"], *g["topCells"]]:
        assert box["left"] >= 0 and box["right"] <= width, (box, g["headers"])
    assert g["pageWidth"] <= width, "the page scrolls sideways"
    assert "p_adj" not in g["headers"]  # a secondary column, behind the checkbox
    # every cell with a failed trial is listed, the all-hang cell included
    assert g["failedCells"] == [cell_anchor(BASE), cell_anchor(HANG)]
    # trial rows stay one or two lines high, whatever the error's length
    assert len(g["trialRows"]) == 24
    assert max(g["trialRows"]) <= 3.5 * g["lineHeight"] + 12, g["trialRows"]


@pytest.mark.slow
def test_hidden_columns_and_full_errors_open_on_a_click(oncall_run, tmp_path):
    steps = (
        "document.getElementById('matrix-all').click();"
        "document.querySelector('table.trials details.clamp').open = true;"
    )
    expression = """
    (() => ({
      headers: [...document.querySelectorAll('table.matrix thead th')]
        .filter(e => e.getClientRects().length > 0).map(h => h.textContent.trim()),
      opened: document.querySelector('table.trials details.clamp pre').getBoundingClientRect().height,
      text: document.querySelector('table.trials details.clamp pre').textContent,
    }))()
    """
    got = look(
        page_path(oncall_run).as_uri(),
        width=1280,
        height=800,
        expression=expression,
        profile=tmp_path / "profile",
        steps=steps,
    ).value
    assert {"p_adj", "confound", "mitigations", "mean step (ms)"} <= set(got["headers"])
    assert got["opened"] > 2 * 18  # the whole error, wrapped over lines
    assert got["text"].startswith("hang: no output and no CPU use by the trial's 1 process(es)")
