"""``[memory]`` events of real GPU traces (aorta.trace.memory, ``aorta trace memory``) against
an independent reading with nothing but gzip and json: H100 (CUDA) and MI300X (ROCm) runs of
the same model, and MI300X normalization layers (tests/data/traces, MIT, see its README)."""

from __future__ import annotations

import gzip
import json
import math
import shutil
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
    # A copy: summarize and diff write their parse cache beside the trace, which in tests/data
    # every later test loading it (in any worker, any later run) read instead of the trace.
    trace, nowhere = tmp_path / "cpu_only_gloo.pt.trace.json.gz", tmp_path / "not" / "here"
    shutil.copyfile(DATA / trace.name, trace)
    shipped_cache = DATA / f"{trace.name}.aorta-cache"  # an older checkout's run may have left one
    before = shipped_cache.stat().st_mtime_ns if shipped_cache.exists() else None
    for argv in (
        ["memory", str(trace), "--plot", str(nowhere / "m.png")],
        ["summarize", str(trace), "--csv", str(tmp_path / "file" / "tables")],
        ["diff", str(trace), str(trace), "--csv", str(nowhere / "d.csv")],
    ):
        (tmp_path / "file").write_text("a file where --csv wants a folder")
        assert main(["trace", *argv]) == ExitCode.ERROR, argv
        _one_error_line(capsys, "cannot write")
    after = shipped_cache.stat().st_mtime_ns if shipped_cache.exists() else None
    assert after == before  # the shipped trace's folder as this test found it


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


def _mem(ts: int, **args: int) -> dict[str, object]:
    names = {"nbytes": "Bytes", "alloc": "Total Allocated", "res": "Total Reserved"}
    names |= {"dtype": "Device Type", "did": "Device Id"}
    return {"ph": "i", "name": "[memory]", "ts": ts, "tid": 1,
            "args": {names[k]: v for k, v in args.items()}}  # fmt: skip


def test_fields_an_event_lacks_are_unknown_not_sentinel_numbers(tmp_path, capsys):
    # No device type, no reserved total; then a device whose events never give the totals;
    # then a CUDA device where one of two events lacks the reserved total.
    ops = [{"ph": "X", "cat": "cpu_op", "name": "aten::empty", "ts": 0, "dur": 10, "tid": 1}]
    events = [
        *ops,
        _mem(2, nbytes=512, alloc=512),
        _mem(3, nbytes=256, dtype=0),
        _mem(4, nbytes=512, alloc=1024, res=4096, dtype=1, did=0),
        _mem(5, nbytes=512, alloc=1536, dtype=1, did=0),
    ]
    rows = {r["device"]: r for r in report_from_events(events).devices.to_dict("records")}
    assert set(rows) == {"unknown", "cpu", "cuda:0"}
    unknown, cpu, cuda = rows["unknown"], rows["cpu"], rows["cuda:0"]
    assert unknown["device_type"] == "unknown" and unknown["peak_allocated_bytes"] == 512
    assert math.isnan(unknown["peak_reserved_bytes"])
    assert math.isnan(cpu["peak_allocated_bytes"]) and math.isnan(cpu["peak_reserved_bytes"])
    assert cpu["peak_op"] == "" and math.isnan(cpu["peak_ts_us"])
    # A missing total is left out of the peak, never taken as a size.
    assert (cuda["peak_allocated_bytes"], cuda["peak_reserved_bytes"]) == (1536, 4096)

    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    png = tmp_path / "m.png"
    assert main(["trace", "memory", str(trace), "--plot", str(png)]) == ExitCode.OK
    out = capsys.readouterr().out
    assert "  unknown: peak allocated 512 bytes, peak reserved unknown; 1 allocations" in out
    assert "  cpu: peak allocated unknown, peak reserved unknown; 1 allocations (256 bytes), " \
        "0 frees (0 bytes)\n" in out  # fmt: skip
    assert "cuda:0: peak allocated 1.50 KiB, peak reserved 4.00 KiB" in out
    devices = "\n".join(line for line in out.splitlines() if line.startswith("  "))
    assert "-1" not in devices and "type" not in devices  # (the tmp path may hold "-1")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    assert main(["trace", "memory", str(trace), "--json"]) == ExitCode.OK
    data = {d["device"]: d for d in json.loads(capsys.readouterr().out)["devices"]}
    assert data["unknown"]["device_id"] == -1 and data["unknown"]["peak_reserved_bytes"] is None
    assert data["cpu"]["peak_allocated_bytes"] is None
    assert (data["cuda:0"]["device_id"], data["cuda:0"]["peak_reserved_bytes"]) == (0, 4096)
