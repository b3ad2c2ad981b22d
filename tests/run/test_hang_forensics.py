"""Who hung, and where (issue 35): one real torchrun sweep (4 ranks, gloo on CPU), one cell per
injected fault (tests/hang_faults.py), ``hang_after`` catching them; each hung trial's record,
matrix.md, matrix.json, report.html (in Chromium), the bundle and ``aorta hang analyze`` say
which rank stopped in which collective at which line, and nothing is left running."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest

import aorta
from aorta.cli import main
from aorta.errors import ExitCode
from aorta.store.bundle import plan_bundle, write_bundle
from tests.chromium import look
from tests.processes import only_run_dir, torchrun

pytestmark = pytest.mark.slow

#: Fault → (the culprit rank, the incident's kind, the collective, its sequence number).
FAULTS = {
    "sleep": (2, "missing", "all_reduce", 3),
    "gil": (2, "gil", "all_reduce", 3),
    "extra": (2, "extra", "all_reduce", 5),
    "shape": (2, "mismatch", "all_reduce", 3),
}
#: Where each culprit is, by its stack (tests/hang_faults.py).
FRAMES = {
    "sleep": "in _stall_in_python",
    "gil": "in _stall_holding_the_gil",
    "extra": "in HangFault.run",
    "shape": "in _stall_in_python",
}
# A divergence inside a sub-group (new_group) is held by the goldens recorded from real runs
# (tests/data/hang/subgroup, tests/hang/test_goldens.py): one cell less here, ~12 CPU-s of CI.


@pytest.fixture(scope="module")
def hung(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hangs")
    cells = "".join(
        f"  - {{name: {f}, mitigations: [none], workload_config: {{fault: {f}}}}}\n"
        for f in [*FAULTS, "die"]
    )
    recipe = root / "r.yaml"
    recipe.write_text(
        "workload: tests.hang_faults:HangFault\ntimeout_per_trial: 300\nhang_after: 6\n"
        "workload_config: {rank: 2, at: 3, collectives: 4}\n"
        f"cells:\n  - {{name: baseline, mitigations: [none], workload_config: {{fault: none}}}}\n{cells}"
    )
    proc = torchrun(recipe, root / "out", nproc=4)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return only_run_dir(root / "out")


def _record(run: Path, cell: str) -> dict:
    return json.loads((run / "cells" / cell / "trial_0000.json").read_text())


@pytest.mark.parametrize("fault", list(FAULTS))
def test_the_record_names_the_rank_the_collective_and_the_line(hung, fault):
    rank, kind, op, seq = FAULTS[fault]
    rec = _record(hung, fault)
    assert rec["status"] == "timeout", rec["error"]
    f = rec["forensics"]
    assert (f["kind"], f["culprit_ranks"], f["op"], f["seq"]) == (kind, [rank], op, seq), f[
        "summary"
    ]
    (frame,) = f["frames"]
    assert frame["rank"] == rank and frame["where"].endswith(FRAMES[fault]), frame
    if fault == "gil":
        assert frame["owns_gil"] is True
    # The culprit's main thread travels in the record, with the file it was read from.
    assert any(line.endswith(FRAMES[fault]) for line in frame["stack"]), frame
    assert frame["stack_file"] == f"hang/rank{rank}/stacks_{rank}.json", frame
    # Every rank still in the trial gave its dump and stacks (a rank whose part had ended, as
    # the other group's in `subgroup`, is said to have), named in the record and on disk.
    files = {e["rank"]: e["files"] for e in f["evidence"]}
    done = {r["rank"] for r in rec["ranks"] if r["status"] == "ok"}
    for r in sorted(set(range(4)) - done):
        # Each rank in its own folder (hang/rank<r>/): no rank removes what another uses.
        names = (f"fr_{r}.json", f"stacks_{r}.json", f"capture_{r}.json")
        for name in (f"hang/rank{r}/{n}" for n in names):
            if not (fault == "gil" and r == rank and "/fr_" in name):
                assert name in files[r], files
                assert (hung / "cells" / fault / "trial_0000" / name).is_file()
    assert rec["signature_hint"].startswith("no output and no CPU use: the record's forensics")
    # The evidence travels to rank 0 in the outcomes, not into the record's ranks.
    assert all("evidence" not in r or r["evidence"] == [] for r in rec["ranks"])


def test_a_rank_that_dies_is_named_by_the_ranks_that_waited_for_it(hung):
    rec = _record(hung, "die")
    # gloo fails the survivors' collective at once (no hang): they are stopped and read.
    assert rec["status"] == "workload_failed"
    f = rec["forensics"]
    assert f["culprit_ranks"] == [2] and f["kind"] == "exited" and f["seq"] == 3, f["summary"]


def test_matrix_md_and_json_say_who_hung_and_where(hung):
    md = (hung / "matrix.md").read_text()
    assert (
        "- `sleep`: in 1/1 hung trials rank 2 (node " in md
        and "never reached all_reduce #3 (default_pg, ranks 0-3) — at hang_faults.py" in md
    ), md
    # The hang finding carries it too.
    line = next(x for x in md.splitlines() if x.startswith("- `gil`: hangs in 1/1"))
    assert "rank 2 (node" in line and "held the GIL (no dump)" in line
    doc = json.loads((hung / "matrix.json").read_text())
    cells = {c["name"]: c for c in doc["cells"]}
    (pattern,) = cells["extra"]["hangs"]["patterns"]
    assert pattern["culprit_ranks"] == [2] and pattern["trials"] == [0]
    assert "hangs" not in cells["baseline"]


def test_load_run_groups_trials_by_culprit(hung):
    ds = aorta.load_run(hung)
    first = ds.hang_culprit_ranks.sel(trial=0, culprit=0).values.tolist()
    culprits = dict(zip(ds.cell.values.tolist(), first, strict=True))
    assert culprits == {"baseline": -1, "sleep": 2, "gil": 2, "extra": 2, "shape": 2,
                        "die": 2}  # fmt: skip
    assert ds.hang_kind.sel(cell="sleep", trial=0).item() == "missing"
    assert ds.hang_seq.sel(cell="sleep", trial=0).item() == 3


def test_the_page_shows_the_incident_and_the_culprits_stack(hung, tmp_path):
    assert main(["report", str(hung), "--html"]) == ExitCode.OK
    page = hung / "report" / "report.html"
    seen = look(
        page.as_uri(),
        width=1300,
        height=900,
        profile=tmp_path / "profile",
        expression="""(() => {
          const block = document.getElementById('cell-gil') || document.querySelector('.fcell');
          const inc = [...document.querySelectorAll('.forensics')];
          return {n: inc.length,
                  text: inc.map(e => e.innerText).join('\\n---\\n'),
                  tables: document.querySelectorAll('table.incident').length};
        })()""",
    )
    v = seen.value
    assert v["n"] >= 5 and v["tables"] >= 5, v
    assert "rank 2's main thread" in v["text"] and "_stall_holding_the_gil" in v["text"]
    assert "answered no dump and holds the GIL" in v["text"]


def test_the_bundle_carries_the_evidence(hung, tmp_path):
    archive = write_bundle(plan_bundle(hung, ticket="HANG-1", env={}), tmp_path)
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    for kind in ("fr", "stacks", "capture"):
        assert any(n.endswith(f"cells/sleep/trial_0000/hang/rank2/{kind}_2.json") for n in names), (
            names
        )


def test_hang_analyze_says_the_same_offline(hung, capsys):
    trial = hung / "cells" / "shape" / "trial_0000"
    assert main(["hang", "analyze", str(trial), "--json"]) == ExitCode.OK
    report = json.loads(capsys.readouterr().out)
    assert report["culprit_ranks"] == [2] and report["kind"] == "mismatch"


def test_hang_analyze_of_the_run_says_each_hung_trial(hung, capsys):
    assert main(["hang", "analyze", str(hung), "--json"]) == ExitCode.OK
    found = {t["trial"]: t for t in json.loads(capsys.readouterr().out)["trials"]}
    for fault, (rank, kind, _op, _seq) in FAULTS.items():
        got = found[f"cells/{fault}/trial_0000"]
        assert (got["culprit_ranks"], got["kind"]) == ([rank], kind)
    assert "cells/baseline/trial_0000" not in found


def test_a_trial_without_evidence_does_not_stop_the_runs_analysis(hung, tmp_path, capsys):
    run = Path(shutil.copytree(hung, tmp_path / "run"))
    (run / "cells" / "sleep" / "trial_0099" / "hang").mkdir(
        parents=True
    )  # a capture that got nothing
    assert main(["hang", "analyze", str(run), "--json"]) == ExitCode.OK
    out, err = capsys.readouterr()
    found = {t["trial"]: t for t in json.loads(out)["trials"]}
    for fault, (rank, kind, _op, _seq) in FAULTS.items():
        assert (
            found[f"cells/{fault}/trial_0000"]["culprit_ranks"],
            found[f"cells/{fault}/trial_0000"]["kind"],
        ) == ([rank], kind)
    assert (
        "no flight-recorder dump, stacks or log lines found"
        in found["cells/sleep/trial_0099"]["error"]
    )
    assert "warning: cells/sleep/trial_0099: left out:" in err


def test_no_trial_process_is_left_running(hung):
    mark = f"AORTA_RUN_DIR={hung}".encode()
    left = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and mark in (proc / "environ").read_bytes().split(b"\0"):
                left.append(proc.name)
        except OSError:
            continue
    assert not left
