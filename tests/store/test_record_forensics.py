"""A trial record whose ``forensics`` no reader can take (a string, a count where a list
belongs: a hand edit, another version's layout) loads with an :class:`AortaWarning` and
without them; the HTML report, ``sweep resume``, ``load_run``, the matrix files and the
bundle all go on (they broke for good on it)."""

from __future__ import annotations

import json
import tarfile
import warnings

import pytest

from aorta.errors import AortaWarning, ExitCode
from aorta.hang import HangReport
from aorta.matrix.load import load_run
from aorta.store.record import RECORD_SCHEMA_VERSION, TrialRecord, readable_forensics

# Trial 0 is the one the HTML page shows the evidence of (its failure group's first).
BAD = {0: {"culprit_ranks": 5, "frames": 3, "summary": 7}, 1: "x"}


@pytest.fixture
def run_dir(tmp_path, run_cli):
    """A real 3-trial sweep of a failing command, two of its records' forensics broken."""
    code, out, _ = run_cli(
        "sweep", "run", "--trials", "3", "--mitigation-axis", "none",
        "--output", tmp_path / "out", "--", "false",
    )  # fmt: skip
    assert code == ExitCode.OK, out
    (rd,) = (p.parent for p in (tmp_path / "out").rglob("manifest.json"))
    for trial, value in BAD.items():
        path = rd / "cells" / "none-local" / f"trial_{trial:04d}.json"
        record = json.loads(path.read_text())
        record["forensics"] = value
        path.write_text(json.dumps(record))
    (rd / "results.nc").unlink()  # the readers read the records, not the finished matrix
    return rd


def test_every_reader_goes_on_without_them(run_dir, run_cli, tmp_path):
    with pytest.warns(AortaWarning) as caught:
        ds = load_run(run_dir)
    said = sorted(str(w.message) for w in caught)
    assert said == [
        "none-local trial 0: its forensics are left out: report.summary: must be a string, "
        "got integer 7 (and 3 more)",
        "none-local trial 1: its forensics are left out: a string, not a mapping",
    ]
    assert ds.sizes["trial"] == 3 and (ds.status.values != "missing").all()
    code, _, err = run_cli("report", run_dir, "--html")
    assert code == ExitCode.OK and "Traceback" not in err
    assert "warning: none-local trial 0: its forensics are left out" in err
    assert "trial 0 · its error" in (run_dir / "report" / "report.html").read_text()
    code, out, err = run_cli("sweep", "resume", run_dir)
    assert code == ExitCode.OK, out + err
    # once per record, however many times the command reads it (each read warns again)
    assert err.count("warning: none-local trial 1: its forensics are left out") == 1, err
    assert "2 already done" not in out and (run_dir / "matrix.md").is_file()
    # resume ran nothing again: each record is still the broken one, read as it is
    for trial, value in BAD.items():
        record = json.loads(
            (run_dir / "cells" / "none-local" / f"trial_{trial:04d}.json").read_text()
        )
        assert record["forensics"] == value
    code, out, _ = run_cli("bundle", run_dir, "-o", tmp_path / "b")
    assert code == ExitCode.OK
    (tgz,) = (tmp_path / "b").glob("*.tar.gz")
    with tarfile.open(tgz) as tar:
        assert any(n.endswith("trial_0000.json") for n in tar.getnames())


@pytest.mark.parametrize("value", ["x", 3, [1], {"summary": "s"}, {"summary": "s", "kind": "?"}])
def test_a_record_loads_without_what_cannot_be_read(value):
    record = {"status": "ok", "passed": True, "cell": "c", "cell_id": "c", "trial": 4}
    with pytest.warns(AortaWarning, match=r"^c trial 4: its forensics are left out: "):
        loaded = TrialRecord.model_validate({**record, "forensics": value})
    assert loaded.forensics is None and loaded.trial == 4
    good = {"summary": "s", "kind": "none", "culprit_ranks": [2]}
    report = HangReport(summary="s", kind="none", culprit_ranks=(2,))
    assert TrialRecord.model_validate({**record, "forensics": good}).forensics == report
    assert readable_forensics(good) == (report, None)


def test_a_version_1_record_reads_as_the_model():
    """A record written before the typed forensics (schema 1: the report's dict with its own
    ``schema`` key, frames without stacks) loads as a report, warning of nothing."""
    v1 = {
        "schema_version": 1, "status": "timeout", "passed": False, "cell": "c", "cell_id": "c",
        "trial": 0,
        "forensics": {
            "schema": 1, "summary": "rank 2 never reached all_reduce #4", "kind": "missing",
            "culprit_ranks": [2], "culprit_hosts": ["gpu-r3"], "op": "all_reduce", "seq": 4,
            "process_group": "default_pg", "group_name": "0", "group_ranks": [0, 1, 2],
            "frames": [{"rank": 2, "where": "train.py:41 in step", "source": "stacks",
                        "thread": "MainThread", "owns_gil": False, "in_collective": None}],
            "groups": [], "evidence": [], "world_size": 3, "notes": [],
        },
    }  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = TrialRecord.model_validate_json(json.dumps(v1))
    assert loaded.schema_version == 1 and loaded.forensics is not None
    (frame,) = loaded.forensics.frames
    assert (frame.where, frame.stack, frame.stack_file) == ("train.py:41 in step", (), None)
    assert loaded.forensics.culprit_ranks == (2,) and loaded.forensics.seq == 4
    # written again, it is a version-2 record whose report is the model's own fields
    again = json.loads(TrialRecord(**{**loaded.model_dump(), "schema_version": 2}).to_json())
    assert again["schema_version"] == RECORD_SCHEMA_VERSION == 2
    assert "schema" not in again["forensics"] and again["forensics"]["frames"][0]["stack"] == []
