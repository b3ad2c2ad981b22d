"""A failed probe's console summary says what the job said (#45.7): the matched signature line
under the first failing record, not only "the command exited 1"."""

from __future__ import annotations

import pytest

from aorta.errors import ExitCode


@pytest.mark.slow
def test_a_failed_probe_shows_its_signature_line(run_cli, tmp_path) -> None:
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    code, out, err = run_cli(
        "sweep", "run", "--workload", "command", "--mitigation-axis", "none,tf32_off",
        "-o", tmp_path / "runs", "--", "bash", "-c", f"echo step; echo '{oom}' >&2; exit 1",
    )  # fmt: skip
    assert code == ExitCode.OK, err
    lines = out.splitlines()
    at = lines.index("Failing trials (first record of each cell):")
    block = lines[at + 1 : at + 7]
    assert "    the command exited 1" in block
    assert f"    out_of_memory: stderr.log:1: {oom}" in block
