"""``aorta trace summarize``: the "Against the hardware" section, coverage and ``--device``."""

from __future__ import annotations

import json

from aorta.cli import main
from aorta.errors import ExitCode
from tests.trace_helpers import DATA

BERT = str(DATA / "mi300_bert_small.json.gz")
ARCH = DATA / "tracelens_golden" / "perf" / "roofline" / "MI300X.json"


def test_summarize_prints_coverage_and_roofline(capsys):
    assert main(["trace", "summarize", BERT, "--cache", "off", "--top", "3"]) == ExitCode.OK
    out = capsys.readouterr().out
    section = out[out.index("== against_the_hardware") :]
    assert "99.4% of GPU kernel time (communication aside) has a perf model" in section
    assert "roofline against MI300X datasheet peaks" in section
    assert "SDPA_fwd" in section and "pct_roofline" in section and "== perf_ops" in section


def test_summarize_json_carries_coverage_and_the_given_device(capsys):
    args = ["trace", "summarize", BERT, "--cache", "off", "--json", "--device", str(ARCH)]
    assert main(args) == ExitCode.OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["perf"]["device"] == "MI300X" and round(doc["perf"]["coverage"], 3) == 0.994
    gemm = next(r for r in doc["tables"]["against_the_hardware"] if r["family"] == "GEMM")
    assert gemm["calls"] == 26 and gemm["pct_roofline"] > 0


def test_summarize_device_errors_are_one_line(tmp_path, capsys):
    assert main(["trace", "summarize", BERT, "--cache", "off", "--device", "TPU"]) == ExitCode.USAGE
    assert "unknown device 'TPU'" in capsys.readouterr().err
    bad = tmp_path / "arch.json"
    bad.write_text('{"mem_bw_gbps": 1}')
    assert (
        main(["trace", "summarize", BERT, "--cache", "off", "--device", str(bad)]) == ExitCode.USAGE
    )
    assert "max_achievable_tflops" in capsys.readouterr().err
