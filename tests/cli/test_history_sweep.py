"""`aorta history` over real sweeps of a probe whose step time follows an environment variable
that changes between runs: quiet nights pass the gate, the night of the change trips it, and
once enough runs sit on the new level the change point is found exactly, with the variable
named in its environment changes; `aorta history bless` adds the blessed reference."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aorta.cli import main
from aorta.errors import ExitCode
from aorta.recipe import load_recipe_text
from aorta.run.sweep import sweep

pytestmark = pytest.mark.slow

# Each trial sleeps NCCL_PROBE_MS five times and prints what each sleep measured: the step
# time is real (the sleep as the machine gave it), and its level follows the variable.
PROBE = (
    "import os, time\n"
    "d = float(os.environ['NCCL_PROBE_MS']) / 1000\n"
    "for _ in range(5):\n"
    "    t = time.perf_counter(); time.sleep(d)\n"
    "    print(f'step time: {(time.perf_counter() - t) * 1000:.3f} ms', flush=True)\n"
)
RECIPE = """
ticket: NIGHTLY
trials: 6
confound: {threshold: 1.2}
step_time_regex: 'step time: ([0-9.]+) ms'
cells: [{name: base, mitigations: [none]}]
"""


def _night(root: Path, ms: int, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NCCL_PROBE_MS", str(ms))
    recipe = load_recipe_text(RECIPE, command=["python3", "-c", PROBE])
    return sweep(recipe, output=root, progress="none").run_dir


def _history(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    capsys.readouterr()
    code = main(["history", *args, "--json", "--fail-on-regression"])
    return code, json.loads(capsys.readouterr().out)


def test_nightly_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "store"
    nights = [_night(root, 15, monkeypatch) for _ in range(5)]
    code, doc = _history(capsys, str(root))
    assert code == ExitCode.OK, doc["gate"]
    assert doc["change_points"] == [] and len(doc["runs"]) == 5

    # The night the variable doubles the step: no change point yet (one run on the new
    # level is an outlier as far as exchangeable runs go), but the gate trips at once.
    nights.append(_night(root, 30, monkeypatch))
    code, doc = _history(capsys, str(root))
    assert code == ExitCode.GATE
    tripped = [f for f in doc["gate"]["findings"] if f["tripped"]]
    assert [f["against"] for f in tripped] == ["previous runs"]
    assert tripped[0]["newest"] == str(nights[-1]) and tripped[0]["ratio"] > 1.5

    nights += [_night(root, 30, monkeypatch) for _ in range(4)]
    code, doc = _history(capsys, str(root))
    (change,) = [c for c in doc["change_points"] if c["metric"] == "step_time_ms"]
    assert (change["before"], change["after"]) == (str(nights[4]), str(nights[5]))
    assert change["direction"] == "slower" and change["band"] == "beyond band"
    assert change["ci"][0] > 1.2 and change["p"] <= change["level"]
    assert change["environment_changes"]["env.NCCL_PROBE_MS"] == ["15", "30"]
    # The newest segment is slower than the one before it: the gate still trips.
    assert code == ExitCode.GATE
    assert {f["against"] for f in doc["gate"]["findings"] if f["tripped"]} == {"previous segment"}
    series = doc["series"][0]
    assert series["runs"] == [str(n) for n in nights]
    assert all(
        lo <= m <= hi
        for lo, m, hi in zip(
            *series["median_ci"][:1], series["median"], series["median_ci"][1], strict=True
        )
    )

    # Bless the last night: the slower level is now the reference, and the text says so.
    capsys.readouterr()
    assert main(["history", "bless", str(nights[-1])]) == ExitCode.OK
    nights.append(_night(root, 30, monkeypatch))
    code, doc = _history(capsys, str(root))
    blessed = [f for f in doc["gate"]["findings"] if f["against"] == "blessed"]
    assert blessed and not blessed[0]["tripped"] and blessed[0]["reference"] == str(nights[-2])
    capsys.readouterr()
    main(["history", str(root)])
    text = capsys.readouterr().out
    assert "env.NCCL_PROBE_MS 15 → 30" in text and "11 runs" in text


def test_history_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["history", str(tmp_path / "nope")]) == ExitCode.USAGE
    assert "no such folder" in capsys.readouterr().err
    assert main(["history", str(tmp_path)]) == ExitCode.USAGE
    assert "no aorta run directory" in capsys.readouterr().err
    assert main(["history", "bless", str(tmp_path)]) == ExitCode.USAGE
    assert "not an aorta run directory" in capsys.readouterr().err
    assert main(["history", str(tmp_path), "--metric", "gemm_tlfops"]) == ExitCode.USAGE
    assert "reads step_time_ms, wall_clock_s or a trace metric" in capsys.readouterr().err
    # A broken run among good ones is skipped, not a traceback.
    (tmp_path / "T" / "w" / "broken").mkdir(parents=True)
    (tmp_path / "T" / "w" / "broken" / "manifest.json").write_text("{not json")
    assert main(["history", str(tmp_path)]) == ExitCode.USAGE
    assert "no aorta run directory" in capsys.readouterr().err
