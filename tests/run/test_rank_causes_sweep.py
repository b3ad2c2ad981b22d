"""Which rank ran out of memory, and which layer went non-finite first (issue 47): one real
probe sweep whose command is a real ``torchrun`` of 2 ranks (gloo, CPU;
tests/rank_causes_probe.py) with ``check_numerics: true``. Rank 1 dies of a real PyTorch CPU
OOM (``DefaultCPUAllocator``); of a real ``torch.OutOfMemoryError`` carrying the CUDA caching
allocator's message text (there is no GPU here, so the text is echoed, not provoked); or, at
step 3, its ``layers.1.proj`` overflows to +inf. The records, matrix.md, matrix.json,
``aorta compare``, report.html and the bundle name the rank, the figures, the layer and the
step; the clean baseline shows neither."""

from __future__ import annotations

import json
import subprocess
import tarfile
from pathlib import Path

import pytest

import aorta
from aorta.cli import main
from aorta.errors import ExitCode
from aorta.store.bundle import plan_bundle, write_bundle
from tests.processes import TORCHRUN, only_run_dir, sweep_run, torchrun_env

pytestmark = pytest.mark.slow

PROBE = Path(__file__).resolve().parents[1] / "rank_causes_probe.py"
GIB = 1 << 30


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("causes")
    recipe = root / "r.yaml"
    recipe.write_text(
        "workload: command\ntimeout_per_trial: 300\ncheck_numerics: true\n"
        f"command: [{TORCHRUN}, --nproc-per-node=2, --standalone, {PROBE}]\n"
        "cells:\n"
        "  - {name: baseline, mitigations: [none], extra_env: {PROBE_FAULT: none}}\n"
        "  - {name: cpu_oom, mitigations: [none], extra_env: {PROBE_FAULT: cpu_oom}, trials: 2}\n"
        "  - {name: cuda_oom, mitigations: [none], extra_env: {PROBE_FAULT: cuda_oom}}\n"
        "  - {name: nonfinite, mitigations: [none], extra_env: {PROBE_FAULT: inf}, trials: 2}\n"
    )
    proc = subprocess.run(
        sweep_run(recipe, root / "out"),
        capture_output=True,
        text=True,
        timeout=600,
        env=torchrun_env(),
        cwd=root,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return only_run_dir(root / "out")


def _record(run: Path, cell: str, trial: int = 0) -> dict:
    return json.loads((run / "cells" / cell / f"trial_{trial:04d}.json").read_text())


def test_a_real_cpu_oom_is_named_with_its_rank_and_request(run):
    for trial in (0, 1):
        rec = _record(run, "cpu_oom", trial)
        assert rec["signature"] == "out_of_memory"
        [oom] = rec["oom"]
        assert (oom["rank"], oom["kind"], oom["device"]) == (1, "cpu", "cpu")
        assert oom["requested_bytes"] == 1 << 50  # the probe's torch.empty(1 << 50)


def test_the_cuda_message_gives_every_figure(run):
    [oom] = _record(run, "cuda_oom")["oom"]
    assert oom["rank"] == 1 and oom["kind"] == "cuda" and oom["device"] == "GPU 1"
    assert oom["requested_bytes"] == 2 * GIB
    assert oom["free_bytes"] == round(1.20 * GIB) and oom["total_bytes"] == round(79.15 * GIB)
    assert oom["allocated_bytes"] == round(75.10 * GIB)
    assert oom["reserved_unallocated_bytes"] == round(2.11 * GIB)
    assert oom["process_in_use_bytes"] == round(77.94 * GIB)


def test_the_first_producing_layer_is_named_per_rank(run):
    for trial in (0, 1):
        events = {e["rank"]: e for e in _record(run, "nonfinite", trial)["numerics"]}
        first = events[1]
        assert (first["step"], first["module"], first["cls"]) == (3, "layers.1.proj", "Linear")
        assert first["kind"] == "inf" and first["inputs_finite"] is True
        # rank 0 only sees it after the all-reduced gradients reach its weights: a step later
        assert events[0]["step"] == 4 and events[0]["inputs_finite"] is True


def test_the_clean_baseline_shows_neither(run):
    rec = _record(run, "baseline")
    assert rec["status"] == "ok" and rec["oom"] == [] and rec["numerics"] == []


def test_matrix_md_opens_with_the_rank_and_figures(run):
    text = (run / "matrix.md").read_text()
    findings = text.split("## Findings", 1)[1]
    assert (
        "`cuda_oom`: out of memory on rank 1 in 1/1 trials (tried to allocate 2.00 GiB with "
        "1.20 GiB free of 79.15 GiB; 2.11 GiB reserved but unallocated — fragmentation: try "
        "expandable_segments)" in findings
    )
    assert (
        "`cpu_oom`: out of memory on rank 1 in 2/2 trials (tried to allocate 1.00 PiB)" in findings
    )
    assert (
        "`nonfinite`: rank 1's first non-finite output at step 3 in `layers.1.proj` (Linear), "
        "inf, inputs finite, in 2/2 trials" in findings
    )
    assert "`baseline`: out of memory" not in findings


def test_matrix_json_and_load_run_carry_them(run):
    found = json.loads((run / "matrix.json").read_text())["findings"]
    kinds = {(f["kind"], f["cell"]): f for f in found}
    assert kinds[("oom", "cuda_oom")]["rank"] == 1
    assert kinds[("numerics", "nonfinite")]["count"] == 2
    ds = aorta.load_run(run)
    payload = json.loads(str(ds.oom.sel(cell="cuda_oom", trial=0).values))
    assert payload["events"][0]["requested_bytes"] == 2 * GIB


def test_compare_says_the_same(run, capsys):
    assert main(["compare", str(run)]) == ExitCode.OK
    out = capsys.readouterr().out
    assert "out of memory on rank 1 in 2/2 trials" in out
    assert "rank 1's first non-finite output at step 3 in layers.1.proj (Linear)" in out


def test_report_html_and_the_bundle_carry_them(run, tmp_path):
    assert main(["report", str(run), "--html"]) == ExitCode.OK
    page = (run / "report" / "report.html").read_text()
    assert "out of memory on rank 1 in 1/1 trials (tried to allocate 2.00 GiB" in page
    assert "first non-finite output at step 3 in layers.1.proj" in page
    archive = write_bundle(plan_bundle(run, ticket="MEM-1", env={}), tmp_path)
    with tarfile.open(archive) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/matrix.md"))
        text = tar.extractfile(member).read().decode()  # type: ignore[union-attr]
    assert "out of memory on rank 1" in text
