"""End to end on a hang recorded now: torchrun (gloo, 3 CPU ranks) with rank 2 stalled before
its 4th ``all_reduce``, its dumps and py-spy stacks taken while it hangs
(``tests/data/hang/record.py --quick``), then ``aorta hang analyze`` on the folder. The
goldens carry the cases; this checks that today's torch and py-spy still give what they
were recorded from."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from aorta.errors import ExitCode
from tests.hang.synth import HANG_DATA
from tests.processes import alive, torchrun_env

pytestmark = pytest.mark.slow


PY_SPY = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))


@pytest.mark.skipif(not Path(PY_SPY).exists(), reason="py-spy is not installed (make dev)")
def test_a_live_hang_is_analysed_from_its_folder(tmp_path, run_cli):
    record = subprocess.run(
        [sys.executable, str(HANG_DATA / "record.py"), "--out", str(tmp_path), "--quick", "sleep"],
        capture_output=True,
        text=True,
        timeout=300,
        env=torchrun_env(),
    )
    assert record.returncode == 0, record.stderr[-2000:]
    trial = tmp_path / "sleep"
    pids = [json.loads((trial / "hang" / f"capture_{r}.json").read_text())["pid"] for r in range(3)]
    assert not any(alive(pid) for pid in pids)  # the recording leaves no rank behind
    code, out, err = run_cli("hang", "analyze", trial, "--json")
    assert (code, err) == (ExitCode.OK, "")
    report = json.loads(out)
    assert (report["kind"], report["culprit_ranks"], report["op"], report["seq"]) == (
        "missing",
        [2],
        "all_reduce",
        4,
    )
    assert report["frames"][0]["where"].endswith(" in slow_data_loader")
    assert report["frames"][0]["source"] == "stacks"
