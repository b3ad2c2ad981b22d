"""The built-in signature data (aorta/run/signatures.yaml) on real driver lines.

The NVIDIA lines are the kernel driver's Xid 79 messages as dmesg prints them; their forms
(``pid=N`` and ``pid='<unknown>', name=<unknown>``) are the ones quoted in NVIDIA's XID
catalogue and in node-health tools' parsers (leptonai/gpud, ``RegexNVRMXid``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from aorta.recipe import load_recipe_text
from aorta.run.signatures import SignatureLibrary, classify
from aorta.run.sweep import sweep

LIB = SignatureLibrary.load(entry_points=False)
XID_79 = [
    "[ 9467.122160] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, "
    "GPU has fallen off the bus.",
    "[ 1021.384752] NVRM: Xid (PCI:0000:01:00): 79, pid=1015, GPU has fallen off the bus.",
]
# What follows the Xid line in dmesg: the driver says it again without the code.
AFTER = "[ 9467.122165] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.\n"


@pytest.mark.parametrize("line", XID_79)
def test_xid_79_fallen_off_the_bus_is_nvidia_xid(tmp_path, line):
    log = tmp_path / "dmesg.log"
    log.write_text(f"{line}\n{AFTER}")
    got = classify(LIB, failed=True, logs=[log])
    assert got.top is not None and got.top.name == "nvidia_xid", [m.name for m in LIB.scan([log])]
    assert got.record_fields()["signature_line"].startswith("dmesg.log:1:")
    # Both entries still match that line: the order of the data decides, not a lost pattern.
    assert {m.name for m in LIB.scan([log]) if m.line_number == 1} == {
        "nvidia_xid",
        "gpu_hw_exception",
    }


def test_fallen_off_the_bus_without_an_xid_stays_gpu_hw_exception(tmp_path):
    log = tmp_path / "dmesg.log"
    log.write_text(AFTER)
    assert classify(LIB, failed=True, logs=[log]).top.name == "gpu_hw_exception"


@pytest.mark.slow
def test_a_trial_printing_xid_79_is_signed_nvidia_xid(tmp_path):
    # A real sweep: the trial prints the driver's line on stderr and fails.
    script = f"echo {XID_79[0]!r} >&2; echo {AFTER.strip()!r} >&2; exit 1"
    recipe = load_recipe_text(
        "mode: probe\nmitigation_axis: [none]\n", command=["bash", "-c", script]
    )
    result = sweep(recipe, output=tmp_path / "out", progress="none")
    (record,) = result.records
    assert record.signature == "nvidia_xid", record.signature_line
    assert "79, pid='<unknown>'" in (record.signature_line or "")
    assert Path(result.run_dir).is_dir()
