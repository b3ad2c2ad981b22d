"""``[memory]`` events of real GPU traces (aorta.trace.memory, ``aorta trace memory``) against
an independent reading with nothing but gzip and json: H100 (CUDA) and MI300X (ROCm) runs of
the same model, and MI300X normalization layers (tests/data/traces, MIT, see its README)."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aorta.cli import main
from aorta.errors import ExitCode
from aorta.trace.memory import memory_peaks, memory_report, report_from_events

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
TRACES = [
    "h100_bert_small.json.gz",
    "mi300_bert_small.json.gz",
    "mi300_normalization_layers.json.gz",
]


def _plain(path: Path) -> dict[tuple[int, int], dict[str, int]]:
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    out: dict[tuple[int, int], dict[str, int]] = defaultdict(
        lambda: {"n": 0, "alloc": 0, "allocs": 0, "frees": 0, "peak_a": 0, "peak_r": 0}
    )
    for e in events:
        if e.get("name") != "[memory]":
            continue
        a = e["args"]
        d = out[(a["Device Type"], a["Device Id"])]
        d["n"] += 1
        d["allocs"] += a["Bytes"] > 0
        d["frees"] += a["Bytes"] < 0
        d["alloc"] += max(a["Bytes"], 0)
        d["peak_a"] = max(d["peak_a"], a["Total Allocated"])
        d["peak_r"] = max(d["peak_r"], a["Total Reserved"])
    return dict(out)


@pytest.mark.parametrize("name", TRACES)
def test_every_device_matches_a_plain_reading(name):
    report = memory_report(DATA / name)
    plain = _plain(DATA / name)
    assert len(report.devices) == len(plain)
    by_type = {"cpu": 0, "cuda": 1, "hip": 6}
    for row in report.devices.to_dict("records"):
        p = plain[(by_type[row["device_type"]], row["device_id"])]
        assert (row["events"], row["allocations"], row["frees"]) == (
            p["n"],
            p["allocs"],
            p["frees"],
        )
        assert row["allocated_bytes"] == p["alloc"]
        assert (row["peak_allocated_bytes"], row["peak_reserved_bytes"]) == (
            p["peak_a"],
            p["peak_r"],
        )


def test_the_op_at_the_peak_and_its_step():
    report = memory_report(DATA / "h100_bert_small.json.gz")
    gpu = report.devices.set_index("device").loc["cuda:0"]
    assert gpu["peak_stack"] == "aten::linear > aten::addmm > aten::empty"
    assert gpu["peak_step"] == "ProfilerStep#6"
    assert memory_peaks(report)["peak_allocated_bytes"] == gpu["peak_allocated_bytes"]


def test_cli_json_text_and_plot(tmp_path, capsys):
    trace = DATA / "mi300_bert_small.json.gz"
    png = tmp_path / "m.png"
    assert main(["trace", "memory", str(trace), "--json", "--plot", str(png)]) == ExitCode.OK
    data = json.loads(capsys.readouterr().out)
    assert {d["device"] for d in data["devices"]} == {"cpu", "hip:0"}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["trace", "memory", str(trace)]) == ExitCode.OK
    assert "hip:0: peak allocated 139.61 MiB" in capsys.readouterr().out


def test_a_trace_without_memory_events_says_how_to_get_them(capsys):
    assert main(["trace", "memory", str(DATA / "cpu_only_gloo.pt.trace.json.gz")]) == ExitCode.OK
    assert "profile_memory=True" in capsys.readouterr().out


def _one_error_line(capsys, *words: str) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("Error: ") and "Traceback" not in err[0], err
    assert all(w in err[0] for w in words), err
    return err[0]


def test_bad_input_is_one_line(tmp_path, capsys):
    # A file that is not a trace, or none: one line naming it, ExitCode.ERROR as every trace
    # command says it (docs/traces.md); a folder is a usage mistake (this command takes one rank).
    missing, text = tmp_path / "nope.json", tmp_path / "notes.json"
    text.write_text("not a trace\n")
    assert main(["trace", "memory", str(missing)]) == ExitCode.ERROR
    _one_error_line(capsys, str(missing))
    for command in ("memory", "summarize"):
        assert main(["trace", command, str(text)]) == ExitCode.ERROR
        _one_error_line(capsys, f"{text}: not a JSON object")
    assert main(["trace", "memory", str(tmp_path)]) == ExitCode.USAGE
    _one_error_line(capsys, f"{tmp_path}: a folder")


def test_an_output_that_cannot_be_written_is_one_line(tmp_path, capsys):
    # --plot, --csv into a folder that is not there: a traceback before (merge said it already).
    trace, nowhere = DATA / "cpu_only_gloo.pt.trace.json.gz", tmp_path / "not" / "here"
    for argv in (
        ["memory", str(trace), "--plot", str(nowhere / "m.png")],
        ["summarize", str(trace), "--csv", str(tmp_path / "file" / "tables")],
        ["diff", str(trace), str(trace), "--csv", str(nowhere / "d.csv")],
    ):
        (tmp_path / "file").write_text("a file where --csv wants a folder")
        assert main(["trace", *argv]) == ExitCode.ERROR, argv
        _one_error_line(capsys, "cannot write")


@given(st.lists(st.tuples(st.integers(-(1 << 20), 1 << 20), st.integers(0, 1 << 40)), max_size=40))
def test_peaks_are_the_maxima_of_the_totals(rows):
    events = [
        {
            "ph": "i",
            "name": "[memory]",
            "ts": i,
            "tid": 1,
            "args": {
                "Bytes": b,
                "Total Allocated": t,
                "Total Reserved": t + 1,
                "Device Type": 1,
                "Device Id": 0,
            },
        }
        for i, (b, t) in enumerate(rows)
    ]
    report = report_from_events(events)
    if not rows:
        assert report.devices.empty
        return
    [row] = report.devices.to_dict("records")
    assert row["peak_allocated_bytes"] == max(t for _, t in rows)
    assert row["peak_reserved_bytes"] == max(t for _, t in rows) + 1
    assert row["allocations"] + row["frees"] == sum(b != 0 for b, _ in rows)
