"""Failure signatures, hang detection and the probe fixes of issue 13: real sweeps, real
processes (``sleep``, busy loops), real files."""

from __future__ import annotations

import importlib.metadata
import json
import os
import stat
import time
import uuid
from pathlib import Path

import pytest

from aorta.cli import main
from aorta.errors import ExitCode, RecipeError
from aorta.matrix.compare import compare
from aorta.matrix.load import load_run
from aorta.recipe import load_recipe_text
from aorta.run.hang import GpuProbe, HangWatch, parse_amd_smi, parse_nvidia_smi, parse_rocm_smi
from aorta.run.signatures import SIGNATURES_GROUP, SignatureLibrary, classify
from aorta.run.sweep import sweep
from tests.conftest import DATA

LOGS = DATA / "signature_logs"
LIB = SignatureLibrary.load(entry_points=False)


def run(text: str, tmp_path: Path, command: list[str] | None = None):
    return sweep(load_recipe_text(text, command=command), output=tmp_path / "out", progress="none")


def marked_alive(marker: str) -> list[int]:
    """Live processes whose command line holds ``marker``."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker.encode() in cmd and state != "Z":
            found.append(int(pid))
    return found


# --- the library ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [s.name for s in LIB.signatures])
def test_each_signature_names_its_captured_log(name):
    log = LOGS / f"{name}.log"
    assert log.is_file(), f"every signature ships a captured log: {log}"
    got = classify(LIB, failed=True, logs=[log])
    assert got.top is not None and got.top.name == name, [m.name for m in LIB.scan([log])]
    assert got.top.hint and got.record_fields()["signature_line"].startswith(f"{log.name}:")


def test_library_is_versioned_and_documented():
    assert LIB.version >= 1
    for sig in LIB.signatures:
        assert sig.hint and 1 <= sig.tier <= 7 and sig.keywords, sig.name
    doc = (Path(__file__).parents[2] / "docs" / "triage.md").read_text()
    missing = [s.name for s in LIB.signatures if f"`{s.name}`" not in doc]
    assert not missing, f"docs/triage.md does not list {missing}"


def test_benign_output_matches_nothing(tmp_path):
    log = tmp_path / "ok.log"
    log.write_text(
        "NCCL INFO Channel 00/08 : 0[0] -> 1[1] via P2P/IPC\n"
        "ECC errors: 0\nstep 3 loss 0.125 info inference ok\nRAS features: enabled\n"
    )
    assert LIB.scan([log]) == []


def test_lowest_tier_wins_and_line_numbers(tmp_path):
    log = tmp_path / "stderr.log"
    lines = ["x"] * 5 + [
        "[E ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout: WorkNCCL(...)",
        "RuntimeError: HIP error: an illegal memory access was encountered",
    ]
    log.write_text("\n".join(lines) + "\n")
    got = classify(LIB, failed=True, logs=[log])
    assert got.top.name == "illegal_memory_access"
    assert got.record_fields()["signature_line"].startswith("stderr.log:7: RuntimeError")


def test_scan_streams_blocks_caps_lines_and_bounds_big_logs(tmp_path):
    log = tmp_path / "big.log"
    with open(log, "wb") as fh:
        fh.write(b"A" * 200_000 + b"\n")  # a line far over MAX_LINE_BYTES: matched in pieces
        for i in range(20_000):
            fh.write(f"step {i} ok\n".encode())
        fh.write(b"torch.OutOfMemoryError: HIP out of memory. " + b"z" * 5000 + b"\n")
    [m] = [m for m in LIB.scan([log], block_bytes=4096) if m.name == "out_of_memory"]
    assert m.line_number == 20_002 and len(m.line) <= 500 and m.line.endswith("…")
    # Over the budget: head and tail are read, the middle is named as skipped.
    skipped: list[str] = []
    found = LIB.scan([log], block_bytes=4096, max_bytes=64 * 1024, skipped=skipped)
    assert [m.name for m in found] == ["out_of_memory", "python_exception"]
    assert skipped and "big.log" in skipped[0]


def test_plugins_add_signatures_and_a_broken_one_is_named(monkeypatch):
    good = importlib.metadata.EntryPoint(
        name="site", value="tests.run.test_signatures:PLUGIN", group=SIGNATURES_GROUP
    )
    bad = importlib.metadata.EntryPoint(
        name="broken", value="tests.no_such_module:X", group=SIGNATURES_GROUP
    )
    real = importlib.metadata.entry_points

    def fake(**kw):  # the registry reads the installed entry points; add two of ours
        return [good, bad] if kw.get("group") == SIGNATURES_GROUP else real(**kw)

    monkeypatch.setattr(importlib.metadata, "entry_points", fake)
    with pytest.warns(RuntimeWarning, match="broken"):
        lib = SignatureLibrary.load()
    sig = lib["site_fabric_down"]
    assert sig.source.startswith("entry point 'site'") and sig.tier == 3
    assert [m.name for m in lib.scan_text(["fabric link 7 is DOWN"])] == ["site_fabric_down"]


PLUGIN = {
    "signatures": [
        {
            "name": "site_fabric_down",
            "tier": 3,
            "regex": r"fabric link \d+ is DOWN",
            "hint": "page the fabric team",
        }
    ]
}


# --- recipes' custom_patterns --------------------------------------------------------------------

PROBE = "mode: probe\nmitigation_axis: [none]\ntimeout_per_trial: 60\n"


@pytest.mark.parametrize(
    ("patterns", "message"),
    [
        ("- {id: a, match: {regex: '('}}", "not a valid regular expression"),
        ("- {id: a, match: {regex: x}}\n- {id: a, match: {regex: y}}", r"duplicate id\(s\) 'a'"),
        ("- {id: a, match: {regex: x, condition: 'open(1)'}}", "a call other than"),
        ("- {id: a, match: {regex: x}, on_match: warn, required_for_pass: true}", "on_match: fail"),
        ("- {id: a, match: {regex: x}, on_match: maybe}", "on_match"),
    ],
)
def test_custom_patterns_are_checked_when_the_recipe_loads(patterns, message):
    with pytest.raises(RecipeError, match=message):
        load_recipe_text(f"{PROBE}custom_patterns:\n{patterns}\n", command=["true"])


def test_custom_patterns_decide_trials(tmp_path):
    text = PROBE.replace("[none]", "[none, xnack]") + (
        "custom_patterns:\n"
        "  - {id: slow_step, match: {regex: 'step (?P<ms>[0-9]+) ms', condition: 'int(capture[\"ms\"]) > 50'}}\n"
        "  - {id: note, match: {regex: 'driver (?P<driver>[0-9.]+)'}, on_match: info}\n"
        "  - {id: warn_line, match: {regex: 'deprecated'}, on_match: warn}\n"
        "  - {id: done, match: {regex: '^DONE$'}, required_for_pass: true}\n"
    )
    script = (
        'echo "driver 6.4.1"; echo "deprecated flag"; echo "step 10 ms"; '
        'if [ -n "$HSA_XNACK" ]; then echo "step 90 ms"; else echo DONE; fi'
    )
    result = run(text, tmp_path, command=["bash", "-c", script])
    by_cell = {r.cell: r for r in result.records}
    ok, bad = by_cell["none-none"], by_cell["xnack-none"]
    assert ok.status.value == "ok" and ok.signature is None, ok.error
    assert ok.info["capture.driver"] == "6.4.1"
    assert any(w.startswith("custom:warn_line: deprecated") for w in ok.warnings)
    # A passing command is failed by the recipe's pattern (the condition held on the 2nd line).
    assert bad.status.value == "workload_failed" and bad.signature == "custom:slow_step"
    assert bad.signature_line.endswith("stdout.log:4: step 90 ms")


def test_required_line_missing_fails_the_trial(tmp_path):
    text = (
        PROBE + "custom_patterns:\n  - {id: done, match: {regex: DONE}, required_for_pass: true}\n"
    )
    rec = run(text, tmp_path, command=["true"]).records[0]
    assert rec.status.value == "workload_failed" and rec.signature == "missing_pass_signal"
    assert "custom:done" in rec.error


# --- signatures downstream: records, matrix, Dataset, compare ---------------------------------


@pytest.mark.slow
def test_failed_trials_get_signatures_in_the_matrix_and_compare(tmp_path):
    text = "mode: probe\ntrials: 4\nmitigation_axis: [none, pytorch_alloc_expandable_segments]\n"
    script = (
        'if [ -z "$PYTORCH_HIP_ALLOC_CONF$PYTORCH_CUDA_ALLOC_CONF" ]; then '
        'echo "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB" >&2; exit 1; fi'
    )
    result = run(text, tmp_path, command=["bash", "-c", script])
    base = [r for r in result.records if r.cell == "none-none"]
    assert {r.signature for r in base} == {"out_of_memory"}
    assert base[0].signature_line.startswith("stderr.log:1: torch.OutOfMemoryError")
    assert "lower the batch" in base[0].signature_hint
    doc = json.loads((result.run_dir / "matrix.json").read_text())
    cells = {c["name"]: c for c in doc["cells"]}
    assert cells["none-none"]["top_failure"] == "out_of_memory"
    assert cells["none-none"]["signatures"] == {"out_of_memory": 4}
    assert cells["none-none"]["trials"][0]["signature"] == "out_of_memory"
    assert "out_of_memory" in doc["signature_hints"]
    md = (result.run_dir / "matrix.md").read_text()
    assert "top failure" in md and "## Failure signatures" in md and "Hints:" in md
    ds = load_run(result.run_dir)
    assert ds.signature.sel(cell="none-none").values.tolist() == ["out_of_memory"] * 4
    df = compare(ds, signature="out_of_memory")
    assert df.loc["none-none", "n_failed"] == 4
    assert df.loc["pytorch_alloc_expandable_segments-none", "n_failed"] == 0
    assert df.attrs["signature"] == "out_of_memory"


# --- hangs ---------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["in_process", "process"])
def test_sleeping_trial_is_a_hang_long_before_its_deadline(tmp_path, isolation):
    marker = str(900_000 + int(uuid.uuid4().int % 99_999))  # a unique `sleep` argument
    text = (
        "mode: probe\nmitigation_axis: [none]\nhang_after: 2\ntimeout_per_trial: 60\n"
        f"trial_isolation: {isolation}\n"
    )
    script = f"echo started; sleep {marker} & sleep {marker}; wait"
    t0 = time.monotonic()
    rec = run(text, tmp_path, command=["bash", "-c", script]).records[0]
    took = time.monotonic() - t0
    assert rec.status.value == "timeout" and rec.failure_kind == "hang", rec.error
    assert rec.signature == "hang" and "no output and no CPU use" in rec.error
    assert took < 30, f"took {took:.1f} s: the deadline (60 s), not the hang, ended it"
    assert marked_alive(f"sleep\x00{marker}") == []


@pytest.mark.slow
@pytest.mark.parametrize(
    "script",
    [
        "end=$((SECONDS+5)); while [ $SECONDS -lt $end ]; do :; done",  # busy on the CPU
        "for i in $(seq 10); do echo tick $i; sleep 0.5; done",  # talks every 0.5 s
    ],
    ids=["busy-loop", "printing"],
)
def test_busy_or_talking_trials_are_not_hangs(tmp_path, script):
    text = "mode: probe\nmitigation_axis: [none]\nhang_after: 2\ntimeout_per_trial: 60\n"
    rec = run(text, tmp_path, command=["bash", "-c", script]).records[0]
    assert rec.status.value == "ok", rec.error
    assert rec.failure_kind is None


def test_hang_after_is_off_by_default():
    assert load_recipe_text(PROBE, command=["true"]).hang_after is None


# --- GPU idleness: the tools are absent here ----------------------------------------------------

NVIDIA_SMI = "0\n0\n0\n0\n0\n0\n0\n0\n"
ROCM_SMI = json.dumps({f"card{i}": {"GPU use (%)": "0" if i else "37"} for i in range(8)})
AMD_SMI = json.dumps(
    [
        {
            "gpu": i,
            "usage": {
                "gfx_activity": {"value": 0, "unit": "%"},
                "umc_activity": {"value": 2, "unit": "%"},
                "mm_activity": "N/A",
            },
        }
        for i in range(8)
    ]
)


def test_gpu_tool_outputs_parse():
    assert parse_nvidia_smi(NVIDIA_SMI) == [0.0] * 8
    assert parse_rocm_smi(ROCM_SMI) == [37.0] + [0.0] * 7
    assert parse_amd_smi(AMD_SMI) == [0.0] * 8


def test_no_gpu_tool_is_skipped_and_said():
    probe = GpuProbe(which=lambda name: None)
    assert probe.name is None and probe.busy() is None


def write_tool(tmp_path: Path, name: str, output: str) -> None:
    tool = tmp_path / name
    tool.write_text(f"#!/bin/sh\ncat <<'EOF'\n{output}\nEOF\n")
    tool.chmod(0o755)


@pytest.mark.parametrize(("output", "hangs"), [("0\n0", True), ("0\n57", False)])
def test_gpu_signal_vetoes_a_hang_where_a_tool_answers(tmp_path, output, hangs):
    # A real executable on PATH that prints what nvidia-smi prints (no GPU on this machine).
    write_tool(tmp_path, "nvidia-smi", output)
    probe = GpuProbe(which=lambda name: str(tmp_path / name) if name == "nvidia-smi" else None)
    now = [0.0]
    log = tmp_path / "stdout.log"
    log.write_text("")
    watch = HangWatch(os.getpid(), [log], hang_after=2, gpu=probe, clock=lambda: now[0])
    # This test process is not idle, so look at a process that is: a real sleep.
    import subprocess

    sleeper = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        watch.root = sleeper.pid
        reason = None
        for _ in range(12):
            now[0] += 0.5
            reason = watch() or reason
        assert (reason is not None) == hangs, reason
        if hangs:
            assert "GPUs idle (nvidia-smi)" in reason
    finally:
        sleeper.kill()
        sleeper.wait()


# --- probe fixes -------------------------------------------------------------------------------


def test_probe_without_a_command_is_refused_before_a_run_dir_exists(tmp_path, capsys):
    recipe = tmp_path / "probe.yaml"
    recipe.write_text("mode: probe\nmitigation_axis: [none, xnack]\n")
    out = tmp_path / "out"
    assert main(["sweep", "run", "--recipe", str(recipe), "--output", str(out)]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "aorta sweep run --recipe R -- cmd" in err, err
    # A dry run shows the plan and says where the command comes from (issue 20).
    argv = ["sweep", "run", "--recipe", str(recipe), "--output", str(out), "--dry-run"]
    assert main(argv) == ExitCode.OK
    assert "command: none yet: a probe recipe's command comes after '--'" in capsys.readouterr().out
    assert not out.exists()
    # Validating the recipe file is fine: it says where the command will come from.
    assert main(["recipe", "validate", str(recipe)]) == ExitCode.OK
    assert "give the command after '--'" in capsys.readouterr().out
    assert main(["sweep", "run", "--recipe", str(recipe), "--dry-run", "--", "true"]) == 0


def test_env_file_mode_keeps_the_env_writes_a_private_file_and_removes_it(tmp_path):
    text = "mode: probe\nmitigation_axis: [xnack]\nenv_passthrough_mode: file\n"
    script = (
        'cd /tmp && test "$HSA_XNACK" = 1 && stat -c %a "$AORTA_ENV_FILE" && '
        'cat "$AORTA_ENV_FILE" && echo "$AORTA_ENV_FILE" && echo here > "$AORTA_ARTIFACT_DIR/mine" && '
        'echo "$AORTA_RUN_DIR"'
    )
    result = run(text, tmp_path, command=["bash", "-c", script])
    rec = result.records[0]
    assert rec.status.value == "ok", rec.error
    art = result.run_dir / "cells/xnack-none/trial_0000"
    mode, content, env_file, run_dir = (art / "stdout.log").read_text().splitlines()
    assert (mode, content) == ("600", "HSA_XNACK=1")
    assert env_file == str((art / "probe.env").resolve()) and Path(run_dir).is_absolute()
    assert not Path(env_file).exists()
    assert (art / "mine").read_text() == "here\n"  # written after `cd /tmp`
    assert stat.S_IMODE((art / "stdout.log").stat().st_mode) & 0o077 != 0o077
