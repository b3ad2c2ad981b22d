"""The parts of ``report.html`` that an on-call engineer reads first, on run directories
written here through ``RunDir`` (real records and log files, no sweep): the findings, the
Failures section's excerpts and the Trials table. The real sweep and the browser are in
``test_report_page.py``."""

from __future__ import annotations

import re
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aorta.matrix.dataset import build_dataset
from aorta.matrix.summary import summarize
from aorta.report.findings import findings_markdown
from aorta.report.page.details import clamped, trials_section
from aorta.report.page.failures import failures_section
from aorta.report.page.findings import findings_section, page_findings
from aorta.report.page.kit import breakable, esc
from aorta.report.page.sections import RunPage, matrix_section, parse_signature_line
from aorta.report.page.write import read_run_files
from aorta.store.record import TrialRecord
from aorta.store.rundir import RunDir

CELLS = ("base", "fix", "stuck")
NCCL = "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error"
HINT = "NCCL/RCCL failed: rerun with NCCL_DEBUG=INFO"


def _trial(rd: RunDir, cell: str, t: int, *, stderr_lines: list[str] | None = None) -> TrialRecord:
    art = rd.artifact_dir(cell, t)
    art.mkdir(parents=True, exist_ok=True)
    (art / "stdout.log").write_text("".join(f"step {10 + s * 0.01} ms\n" for s in range(5)))
    (art / "app.log").write_text("app: started\napp: waiting on the store\n")
    artifacts = {
        "stdout.log": rd.relative(art / "stdout.log"),
        "collected/app.log": rd.relative(art / "app.log"),
    }
    common = {"cell": cell, "cell_id": "", "trial": t, "artifacts": artifacts, "wall_clock_s": 1.0}
    if cell == "stuck":
        error = "hang: no output and no CPU use for 1.0 s (hang_after: 1 s)" + " more" * 80
        return TrialRecord(
            **common,
            status="timeout",
            passed=False,
            main_work_started=True,
            error=error,
            signature="hang",
            signature_hint="attach py-spy dump",
            signature_line=error,
        )
    if cell == "base" and t % 2:
        lines = stderr_lines or [*(f"init {i}" for i in range(10)), NCCL, "teardown 0", "x", "y"]
        (art / "stderr.log").write_text("\n".join(lines) + "\n")
        artifacts["stderr.log"] = rd.relative(art / "stderr.log")
        number = next(i for i, line in enumerate(lines, start=1) if line.startswith(NCCL[:20]))
        return TrialRecord(
            **common,
            status="workload_failed",
            passed=False,
            main_work_started=True,
            error="the command exited 1",
            signature="nccl_error",
            signature_hint=HINT,
            signature_line=f"stderr.log:{number}: {lines[number - 1][:500]}",
        )
    times = [10.0 + t * 0.01 + (cell == "fix") * 0.02] * 5
    return TrialRecord(**common, status="ok", passed=True, step_times_ms=times)


def make_run(tmp_path, trials: int = 8, **kw) -> tuple[RunDir, RunPage]:
    rd = RunDir.create(tmp_path, ticket="T", workload="command")
    records = [_trial(rd, c, t, **kw) for c in CELLS for t in range(trials)]
    for rec in records:
        rd.write_trial(rec)
    specs = [{"name": c, "trials": trials} for c in CELLS]
    ds = build_dataset(specs, records, attrs={"baseline": "base", "threshold": 1.15})
    summary = summarize(ds, resamples=300)
    page = RunPage(ds=ds, summary=summary, files=read_run_files(rd, ds), link_prefix="..")
    return rd, page


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("parts"))


def test_findings_put_hangs_and_failures_before_timing(run):
    _, page = run
    found = page_findings(page)
    assert found[0].topic == "hang" and found[0].cell == "stuck" and found[0].tone == "bad"
    assert found[0].text.startswith("stuck: hangs in 8/8 trials, baseline 0/8 — more hangs")
    assert found[0].detail == "attach py-spy dump"  # the hang signature's hint
    fix = next(f for f in found if f.cell == "fix" and f.topic in ("fix", "undecided"))
    assert fix.text.startswith("fix: fails in 0/8 trials, baseline 4/8 (baseline: nccl_error 4)")
    assert fix.detail == HINT  # the hint of what went away
    topics = [f.topic for f in found]
    assert max(i for i, t in enumerate(topics) if t in ("hang", "fix", "undecided")) < min(
        (i for i, t in enumerate(topics) if t in ("timing", "no data")), default=len(topics)
    )
    html = findings_section(page).body
    assert html.count('<li class="finding') == len(found)


def test_findings_escape_what_they_embed(tmp_path):
    _, page = make_run(tmp_path, trials=5)
    renamed = page.summary.rename(index={"stuck": "<b>stuck</b>"})
    ds = page.ds.assign_coords(cell=["base", "fix", "<b>stuck</b>"])
    body = findings_section(RunPage(ds=ds, summary=renamed)).body
    assert "<b>stuck" not in body and esc("<b>stuck</b>") in body


def test_failures_list_the_hung_cell_and_the_matched_line_first(run):
    _, page = run
    body = failures_section(page).body
    assert [m for m in re.findall(r'class="fcell" id="([^"]+)"', body)] == [
        "fail-base",
        "fail-stuck",
    ]
    base = body[body.index('id="fail-base"') : body.index('id="fail-stuck"')]
    assert f"hint</b> {esc(HINT)}" in base
    # matched line marked with four lines before and three after, then the other files
    pre = base[base.index('<pre class="excerpt">') : base.index("</pre>")]
    assert re.findall(r'<span class="ln">(\d+)</span>', pre) == [str(n) for n in range(7, 15)]
    assert "<mark>" in pre and esc(NCCL) in pre[pre.index("<mark>") :]
    assert base.index("</pre>") < base.index("end of stdout.log") < base.index("end of collected")
    stuck = body[body.index('id="fail-stuck"') :]
    assert "8 hang of 8 trial(s)" in stuck and "hint</b> attach py-spy dump" in stuck
    assert "its error" in stuck and "<details open>" in stuck  # the end of its output, open


def test_excerpt_reading_is_bounded_for_huge_lines(tmp_path):
    huge = "x" * 3_000_000
    lines = [huge, *(f"init {i}" for i in range(5)), NCCL + " " + huge, "after", huge]
    rd, page = make_run(tmp_path, trials=2, stderr_lines=lines)
    del lines, huge
    tracemalloc.start()
    files = read_run_files(rd, page.ds)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    [ex, *_] = files.excerpts[("base", 1)]
    assert ex.match == 7 and ex.first == 3
    assert max(len(line) for line in ex.lines) <= 400 and ex.lines[-1].startswith("xxx")
    assert ex.lines[ex.match - ex.first].startswith(NCCL)
    assert peak < 1_500_000, f"peak {peak / 1e6:.1f} MB while reading lines of 3 MB"


def test_trials_table_has_failure_kind_signature_and_clamped_errors(run):
    _, page = run
    body = trials_section(page).body
    head = re.search(r"<thead><tr>(.*?)</tr></thead>", body).group(1)
    assert re.findall(r"<th[^>]*>([^<]*)</th>", head)[3:5] == ["failure", "signature"]
    row = next(r for r in body.split("<tr>") if "stuck" in r and "timeout" in r)
    assert '<td class="status-bad">hang</td>' in row and "<code>hang</code>" in row
    assert '<details class="clamp"><summary title="show all">' in row  # long: one line, expands


def test_matrix_shows_outcomes_and_top_failure_with_secondary_columns_marked(run):
    _, page = run
    body = matrix_section(page).body
    assert 'id="matrix-all"' in body and "input.allcols" not in body
    stuck = next(r for r in body.split("<tr>") if "stuck" in r)
    assert '<span class="nw">8 hang</span>' in stuck
    assert 'href="#fail-stuck"><code>hang</code></a> <span class="muted">8/8</span>' in stuck
    assert re.search(r'<th class="num sec"[^>]*>p_adj</th>', body)


@pytest.mark.parametrize(
    "value, expected",
    [
        ("stderr.log:12: NCCL error", ("stderr.log", 12, "NCCL error")),
        ("rank 3: out.log:7: a: b", ("out.log", 7, "a: b")),
        ("error: RuntimeError: x", ("", 0, "RuntimeError: x")),
        ("hang: no output", None),
        (42, None),
    ],
)
def test_parse_signature_line(value, expected):
    assert parse_signature_line(value) == expected


@settings(deadline=None, max_examples=200)
@given(st.text(max_size=200))
def test_breakable_and_clamped_keep_the_text_and_escape_it(text):
    plain = re.sub(r"<wbr>", "", breakable(text))
    assert plain == esc(text)
    out = clamped(text)
    tags = r'</?(?:span|details|summary|pre)(?: class="clamp"| title="show all")?>'
    assert "<" not in re.sub(tags, "", out)  # only its own tags: the text is escaped
    for line in text.strip().splitlines()[:1]:
        assert esc(line) in out


def test_no_finding_does_not_say_nothing_fails_when_every_trial_failed():
    """A one-cell probe whose command exits 3 every time: no cell differs from the baseline,
    but report.html said "Nothing changed: no cell fails", matrix.md only "no cell differs"."""
    recs = [
        TrialRecord(cell="base", cell_id="", trial=t, status="workload_failed", passed=False,
                    main_work_started=True, wall_clock_s=0.2, error="the command exited 3")
        for t in range(2)
    ]  # fmt: skip
    ds = build_dataset(
        [{"name": "base", "trials": 2}], recs, attrs={"baseline": "base", "threshold": 1.15}
    )
    summary = summarize(ds)
    page = RunPage(ds=ds, summary=summary)
    assert page_findings(page) == []
    said = re.sub(r"<[^>]+>", "", findings_section(page).body)
    assert "no cell fails" not in said
    assert "trials failed: base 2/2" in said, said
    md = findings_markdown([], summary=summary, alpha=0.05)
    assert "trials failed: `base` 2/2" in md, md


def test_trials_of_a_run_without_steps_show_the_wall_clock_once():
    # The metric column repeated the wall clock column: "wall clock (s)", "wall_clock_s (s)".
    recs = [
        TrialRecord(cell=c, cell_id="", trial=t, status="ok", passed=True, wall_clock_s=1.0 + t)
        for c in ("base", "fix")
        for t in range(2)
    ]
    ds = build_dataset(
        [{"name": c, "trials": 2} for c in ("base", "fix")],
        recs,
        attrs={"baseline": "base", "threshold": 1.15},
    )
    summary = summarize(ds)
    assert summary.attrs["metric"] == "wall_clock_s"
    body = trials_section(RunPage(ds=ds, summary=summary)).body
    heads = re.findall(r"<th[^>]*>(.*?)</th>", body)
    assert sum("wall" in re.sub(r"<[^>]+>", "", h) for h in heads) == 1, heads
