"""The page reads a hang through its record (#48): a hung trial's incident and its culprits'
stacks come from the record's ``forensics`` (a :class:`~aorta.hang.HangReport`), so they still
show once the trial's ``hang/`` evidence files are gone (retention, a bundle without them, a
copied record)."""

from __future__ import annotations

import dataclasses
import html
import json
import shutil
from pathlib import Path

from aorta.errors import ExitCode
from aorta.hang import CulpritFrame, GroupIncident, HangReport, NodeEvidence
from aorta.store.record import TrialRecord
from tests.conftest import DATA

STACK = ("pp.py:88 in fwd", "train.py:41 in step", "train.py:120 in <module>")
REPORT = HangReport(
    summary="rank 2 never reached all_reduce #41 (default_pg, ranks 0-3); ranks 0,1,3 wait in it",
    kind="missing",
    culprit_ranks=(2,),
    culprit_hosts=("gpu-r3",),
    op="all_reduce",
    seq=41,
    process_group="default_pg",
    frames=(
        CulpritFrame(
            2,
            "pp.py:88 in fwd",
            "stacks",
            "MainThread",
            stack=STACK,
            stack_file="hang/rank2/stacks_2.json",
        ),
    ),
    groups=(
        GroupIncident(
            "0",
            "default_pg",
            (0, 1, 2, 3),
            "world",
            "missing",
            41,
            "all_reduce",
            sizes=((4, 1024),),
            dtypes=("Float",),
            waiting=(0, 1, 3),
            missing=(2,),
            culprits=(2,),
        ),
    ),
)


def test_the_page_shows_a_culprits_stack_from_the_record_alone(tmp_path, run_cli):
    run = Path(shutil.copytree(DATA / "golden_run", tmp_path / "run"))
    hung = []
    for path in sorted((run / "cells" / "flaky").glob("trial_*.json")):
        rec = json.loads(path.read_text())
        if rec["status"] == "timeout":
            rec["forensics"] = REPORT.to_dict()
            path.write_text(json.dumps(rec))
            hung.append(TrialRecord.model_validate(rec))
    assert hung and all(r.forensics == REPORT for r in hung)
    # No evidence file of any trial is there to read: only the records hold the stacks.
    assert not list(run.rglob("hang"))
    code, _, err = run_cli("report", run, "--html")
    assert code == ExitCode.OK, err
    page = (run / "report" / "report.html").read_text()
    assert html.escape(REPORT.summary) in page
    assert "rank 2&#x27;s main thread" in page or "rank 2's main thread" in page
    assert html.escape("\n".join(STACK)) in page
    # Linked to the file it was read from, inside the trial's folder.
    trial = hung[0].trial
    assert f"cells/flaky/trial_{trial:04d}/hang/rank2/stacks_2.json" in page
    # The group named as the summary names it (one phrase in every output).
    assert "<td>default_pg, ranks 0-3</td><td>missing</td><td>all_reduce #41</td>" in page


def test_a_version_1_records_culprit_stacks_are_read_once_from_its_files(tmp_path, run_cli):
    """A run recorded before the stacks went into the record (schema 1) keeps them on its
    page: the run directory's reader fills each culprit frame from its stacks file, once."""
    run = Path(shutil.copytree(DATA / "golden_run", tmp_path / "run"))
    threads = [
        {
            "thread_name": "pt_watchdog",
            "frames": [{"name": "wait", "filename": "c10d.py", "line": 1}],
        },
        {
            "thread_name": "MainThread",
            "pid": 7,
            "frames": [
                {"name": "fwd", "filename": "/w/pp.py", "short_filename": "pp.py", "line": 88},
                {
                    "name": "step",
                    "filename": "/w/train.py",
                    "short_filename": "train.py",
                    "line": 41,
                },
            ],
        },
    ]
    v1 = REPORT.to_dict()
    for frame in v1["frames"]:
        del frame["stack"], frame["stack_file"]
    trials = []
    for path in sorted((run / "cells" / "flaky").glob("trial_*.json")):
        rec = json.loads(path.read_text())
        if rec["status"] == "timeout":
            rec.update(schema_version=1, forensics=v1)
            path.write_text(json.dumps(rec))
            folder = path.with_suffix("") / "hang" / "rank2"
            folder.mkdir(parents=True)
            (folder / "stacks_2.json").write_text(json.dumps(threads))
            trials.append(rec["trial"])
    assert trials
    code, _, err = run_cli("report", run, "--html")
    assert code == ExitCode.OK, err
    page = (run / "report" / "report.html").read_text()
    assert html.escape("pp.py:88 in fwd\ntrain.py:41 in step") in page
    assert f"cells/flaky/trial_{trials[0]:04d}/hang/rank2/stacks_2.json" in page


def test_the_page_shows_each_nodes_device_lines_from_the_record_alone(tmp_path, run_cli):
    """A node's GPU evidence (``gpu_<host>.txt``) is shown per host from the record's
    ``forensics.nodes``: the file is not there to read, and a node without device lines
    gets no block."""
    xid = "[Sat Dec 6 19:01:51 2026] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."
    report = dataclasses.replace(
        REPORT,
        nodes=(
            NodeEvidence("gpu-r1", "hang/rank0/gpu_gpu-r1.txt"),
            NodeEvidence("gpu-r3", "hang/rank2/gpu_gpu-r3.txt", (xid, "<b>late</b>")),
        ),
    )
    run = Path(shutil.copytree(DATA / "golden_run", tmp_path / "run"))
    trials = []
    for path in sorted((run / "cells" / "flaky").glob("trial_*.json")):
        rec = json.loads(path.read_text())
        if rec["status"] == "timeout":
            rec["forensics"] = report.to_dict()
            path.write_text(json.dumps(rec))
            trials.append(rec["trial"])
    assert trials and not list(run.rglob("gpu_*.txt"))
    code, _, err = run_cli("report", run, "--html")
    assert code == ExitCode.OK, err
    page = (run / "report" / "report.html").read_text()
    assert "node <b>gpu-r3</b>" in page
    assert f"<pre>{html.escape(xid)}\n&lt;b&gt;late&lt;/b&gt;</pre>" in page
    assert f"cells/flaky/trial_{trials[0]:04d}/hang/rank2/gpu_gpu-r3.txt" in page
    assert "gpu-r1" not in page
