"""A node's device line reads the same in every output (#48): report.html, matrix.md and
matrix.json, ``aorta compare`` (text and JSON) and the Dataset (``results.nc`` too) name the
same node and the same line, in the summary's words (:func:`aorta.hang.render.node_fault`);
a bundle holds the node's file the page links. So does a culprit's own device line (its own
log's CUDA error), in the words of :func:`aorta.hang.render.device_fault`.

The run is the golden run (tests/data/golden_run) copied; ``flaky``'s two hung trials get the
evidence of tests/data/hang/node — four NCCL ranks on two nodes, rank 2 (``gpu-r3``) stalled
at ``all_reduce`` #5 its peers completed, its node's kernel log an Xid 79 — in their folders,
and the incident :func:`aorta.hang.analyze` makes of it in their records, as a capture does.
The second run is the same but for one line rank 2's own log ends with (a CUDA error), which
its summary cites before the node's.
"""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

import pytest
import xarray as xr

from aorta.hang import analyze, load_incident
from aorta.matrix.dataset import DATASET_VERSION
from aorta.matrix.load import load_run
from aorta.report.matrix_files import write_matrix
from aorta.store.bundle import plan_bundle
from aorta.store.netcdf import read_netcdf, write_netcdf
from tests.conftest import DATA

NODE = DATA / "hang" / "node"
LATEST = "[Sat Dec 6 19:01:51 2026] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus."
#: What every output says of the node's line: the summary's own words.
CITED = "rank 2 (node gpu-r3) never finished all_reduce #5"
SENTENCE = f"— a device fault on its node: {LATEST}"


#: What rank 2's own log says in the second run: a CUDA error, cited before its node's line.
OWN = "RuntimeError: CUDA error: an illegal memory access was encountered"
OWN_SENTENCE = f"— a device fault: {OWN}"


def _hung_run(root: Path, evidence_dir: Path) -> tuple[Path, list[int]]:
    """The golden run at ``root`` with ``flaky``'s hung trials given ``evidence_dir``'s
    evidence and incident, and its matrix files written again."""
    shutil.copytree(DATA / "golden_run", root)
    evidence, nodes = load_incident([evidence_dir])
    report = analyze(evidence, nodes=nodes)
    hung = []
    for path in sorted((root / "cells" / "flaky").glob("trial_*.json")):
        rec = json.loads(path.read_text())
        if rec["status"] == "timeout":
            shutil.copytree(evidence_dir / "hang", path.with_suffix("") / "hang")
            rec["forensics"] = report.to_dict()
            path.write_text(json.dumps(rec))
            hung.append(int(rec["trial"]))
    assert hung
    write_matrix(root)
    return root, hung


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, list[int]]:
    return _hung_run(tmp_path_factory.mktemp("nodes") / "run", NODE)


@pytest.fixture(scope="module")
def own(tmp_path_factory) -> tuple[Path, Path, list[int]]:
    """(the evidence, the run): ``NODE`` with rank 2's log ending in a CUDA error."""
    base = tmp_path_factory.mktemp("own")
    evidence = Path(shutil.copytree(NODE, base / "evidence"))
    with (evidence / "rank2.stderr.log").open("a") as log:
        log.write(f"[rank2]: {OWN}\n")
    return (evidence, *_hung_run(base / "run", evidence))


def _plain(text: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", text)).replace("**", "").replace("`", "")


def _compare_says(run_cli, root: Path, line: str) -> None:
    """``aorta compare`` prints ``line`` for the flaky cell, and its JSON carries it."""
    code, out, err = run_cli("compare", root)
    assert code == 0, err
    assert line in out
    code, out, err = run_cli("compare", root, "--json")
    assert code == 0, err
    (compared,) = [c for c in json.loads(out)["cells"] if c["cell"] == "flaky"]
    assert compared["hang_incident"] == line


def test_every_output_cites_the_same_node_and_line(run, run_cli):
    root, hung = run
    # The analysis: the node's latest line, cited for the culprit on it.
    evidence, nodes = load_incident([NODE])
    summary = analyze(evidence, nodes=nodes).summary
    assert summary.startswith(CITED) and summary.endswith(SENTENCE)

    # The Dataset: the node, its line, and that the summary cites it.
    ds = load_run(root, source="records")
    flaky = ds.sel(cell="flaky")
    for t in hung:
        trial = flaky.sel(trial=t)
        hosts = trial.hang_node_hosts.values.tolist()
        assert hosts == ["gpu-r1", "gpu-r3"]
        assert trial.hang_node_line.values.tolist() == ["", LATEST]
        assert trial.hang_node_cited.values.tolist() == [False, True]
        assert trial.hang_summary.item() == summary
    assert not flaky.sel(trial=0).hang_node_hosts.values.any()  # a trial that did not hang

    # matrix.json and matrix.md: the cell's hang line in the same words.
    doc = json.loads((root / "matrix.json").read_text())
    (cell,) = [c for c in doc["cells"] if c["name"] == "flaky"]
    line = cell["hangs"]["line"]
    assert line.startswith(f"in {len(hung)}/{len(hung)} hung trials {CITED}") and SENTENCE in line
    assert cell["hangs"]["patterns"][0]["nodes"] == [{"host": "gpu-r3", "line": LATEST}]
    md = (root / "matrix.md").read_text()
    assert f"- `flaky`: {line}" in md

    _compare_says(run_cli, root, line)  # aorta compare, text and JSON: the same line

    # report.html: the summary and the node's block, linked to its file in the trial.
    code, _, err = run_cli("report", root, "--html")
    assert code == 0, err
    raw = (root / "report" / "report.html").read_text()
    page = _plain(raw)
    assert summary in page and line in page
    assert "node <b>gpu-r3</b>" in raw and "gpu-r1" not in page
    assert f"cells/flaky/trial_{hung[0]:04d}/hang/rank2/gpu_gpu-r3.txt" in raw


def test_the_nodes_evidence_survives_results_nc_exactly(run, tmp_path):
    root, _ = run
    ds = load_run(root, source="records")
    assert ds.attrs["aorta_dataset_version"] == DATASET_VERSION
    assert ds.sizes["node"] == 2 and ds.hang_node_cited.dtype == bool
    back = read_netcdf(write_netcdf(ds, tmp_path / "results.nc"))
    xr.testing.assert_identical(back, ds)
    again = load_run(tmp_path / "results.nc")
    for name in ("hang_node_hosts", "hang_node_line", "hang_node_cited"):
        xr.testing.assert_identical(again[name], ds[name])


def test_the_bundle_holds_the_nodes_file_whatever_the_cap(run):
    # The page links a node's file beside its lines: it goes in as the hang's other
    # evidence does, not as an artifact past the cap (one byte here).
    root, hung = run
    plan = plan_bundle(root, max_size=1, env={})
    entries = {e.path: e for e in plan.entries}
    rel = f"cells/flaky/trial_{hung[0]:04d}/hang/rank2/gpu_gpu-r3.txt"
    assert entries[rel].included and entries[rel].kind == "core"
    assert entries[f"cells/flaky/trial_{hung[0]:04d}/hang/rank0/gpu_gpu-r1.txt"].included
    # An artifact of the same size is left out at that cap: the kind is what keeps it.
    assert all(e.included == (e.kind == "core") for e in plan.entries if e.size > 1)


def test_every_output_cites_the_culprits_own_device_line(own, run_cli):
    evidence_dir, root, hung = own
    # The analysis: rank 2's own line, cited instead of its node's.
    evidence, nodes = load_incident([evidence_dir])
    summary = analyze(evidence, nodes=nodes).summary
    assert summary.startswith(CITED) and summary.endswith(OWN_SENTENCE)
    assert LATEST not in summary

    # `aorta hang analyze` prints that summary.
    code, out, err = run_cli("hang", "analyze", evidence_dir)
    assert code == 0, err
    assert summary in out

    # The Dataset: the line beside its culprit; no node cited.
    ds = load_run(root, source="records")
    flaky = ds.sel(cell="flaky")
    for t in hung:
        trial = flaky.sel(trial=t)
        assert trial.hang_culprit_ranks.values.tolist() == [2]
        assert trial.hang_device_line.values.tolist() == [OWN]
        assert not trial.hang_node_cited.values.any()
        assert trial.hang_summary.item() == summary
    assert flaky.sel(trial=0).hang_device_line.values.tolist() == [""]  # a trial that did not hang

    # matrix.json and matrix.md: the cell's hang line in the summary's words.
    doc = json.loads((root / "matrix.json").read_text())
    (cell,) = [c for c in doc["cells"] if c["name"] == "flaky"]
    line = cell["hangs"]["line"]
    assert line.startswith(f"in {len(hung)}/{len(hung)} hung trials {CITED}")
    assert f"its peers completed {OWN_SENTENCE} — at train.py:41" in line
    assert "device fault?" not in line
    (pattern,) = cell["hangs"]["patterns"]
    assert pattern["device_lines"] == [{"rank": 2, "line": OWN}] and pattern["nodes"] == []
    assert f"- `flaky`: {line}" in (root / "matrix.md").read_text()

    _compare_says(run_cli, root, line)  # aorta compare, text and JSON: the same line

    # report.html: the summary and the cell's line, each once with the line in its words.
    code, _, err = run_cli("report", root, "--html")
    assert code == 0, err
    page = _plain((root / "report" / "report.html").read_text())
    assert summary in page and line in page
    assert page.count(OWN_SENTENCE) == page.count(OWN) >= 2


def test_the_culprits_own_line_survives_results_nc_exactly(own, tmp_path):
    _, root, _ = own
    ds = load_run(root, source="records")
    back = read_netcdf(write_netcdf(ds, tmp_path / "results.nc"))
    xr.testing.assert_identical(back, ds)
    assert back.hang_device_line.dims == ("cell", "trial", "culprit")
    # A results.nc of version 3 had no such variable: it loads with none, its summary intact.
    old = ds.drop_vars("hang_device_line")
    old.attrs["aorta_dataset_version"] = 3
    got = load_run(write_netcdf(old, tmp_path / "v3.nc"))
    assert not got.hang_device_line.values.astype(bool).any()
    assert got.hang_device_line.dims == ds.hang_device_line.dims
    xr.testing.assert_identical(got.hang_summary, ds.hang_summary)
