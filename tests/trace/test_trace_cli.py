"""``aorta trace summarize|merge``, called in-process."""

from __future__ import annotations

import json
import shutil

from aorta.cli import main
from aorta.errors import ExitCode
from tests.trace_helpers import DATA


def _copy(tmp_path, *names):
    out = []
    for name in names:
        shutil.copy(DATA / name, tmp_path / name)
        out.append(str(tmp_path / name))
    return out


def test_summarize_text(tmp_path, capsys):
    (path,) = _copy(tmp_path, "mi300_rccl_resnet_rank0.json.gz")
    assert main(["trace", "summarize", path, "--top", "3"]) == ExitCode.OK
    out = capsys.readouterr().out
    assert "== gpu_timeline" in out and "exposed_comm_time" in out and "== collectives" in out
    assert "cache written" in out


def test_summarize_json_of_two_ranks(tmp_path, capsys):
    paths = _copy(tmp_path, "a100_nccl_sampled_rank-0.json.gz", "a100_nccl_sampled_rank-1.json.gz")
    assert main(["trace", "summarize", *paths, "--json", "--cache", "off"]) == ExitCode.OK
    doc = json.loads(capsys.readouterr().out)
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert doc["tables"]["stragglers"][0]["rank"] == 1
    assert doc["units"]["collectives"]["busbw"].startswith("GB/s")


def test_summarize_csv(tmp_path, capsys):
    (path,) = _copy(tmp_path, "cpu_only_gloo.pt.trace.json.gz")
    out = tmp_path / "tables"
    assert main(["trace", "summarize", path, "--csv", str(out)]) == ExitCode.OK
    assert (out / "gpu_timeline.csv").exists() and (out / "ops.csv").read_text().startswith("name,")
    # A CPU-only trace gets its host breakdown as a tenth table (beside the two perf tables).
    assert (out / "host_timeline.csv").read_text().startswith("rank,type,time ms,percent")
    assert "wrote 10 tables" in capsys.readouterr().out


def test_summarize_errors(tmp_path, capsys):
    assert main(["trace", "summarize", str(tmp_path / "nope.json")]) == ExitCode.ERROR
    assert capsys.readouterr().err.startswith("Error: ")
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X"}, x]}')
    assert main(["trace", "summarize", str(bad)]) == ExitCode.ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{bad}: malformed JSON" in err and "at byte" in err
    assert (
        main(["trace", "summarize", str(bad), "--json", "--csv", str(tmp_path)]) == ExitCode.USAGE
    )


def test_merge_command(tmp_path, capsys):
    paths = _copy(tmp_path, "a100_nccl_sampled_rank-0.json.gz", "a100_nccl_sampled_rank-1.json.gz")
    out = tmp_path / "merged.json.gz"
    assert (
        main(["trace", "merge", *paths, "-o", str(out), "--align", "collective-end"]) == ExitCode.OK
    )
    assert out.exists() and "2 ranks" in capsys.readouterr().out
    assert main(["trace", "merge", *paths, "-o", str(out), "--align", "sideways"]) == ExitCode.USAGE
