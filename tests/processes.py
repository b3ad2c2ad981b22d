"""Real processes the tests start: torchrun sweeps and /proc liveness checks."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

BIN = Path(sys.executable).parent
AORTA = str(BIN / "aorta")
TORCHRUN = str(BIN / "torchrun")
ROOT = Path(__file__).resolve().parent.parent


def torchrun_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {
        **os.environ,
        "GLOO_SOCKET_IFNAME": "lo",
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
    }
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    return {**env, **(extra or {})}


def sweep_run(recipe: Path, out: Path, *extra: str) -> list[str]:
    """argv of ``aorta sweep run`` for ``recipe`` into ``out`` (what torchrun or a launcher runs)."""
    return [AORTA, "sweep", "run", "--recipe", str(recipe), "-o", str(out), *extra]


def torchrun(
    recipe: Path, out: Path, *extra: str, nproc: int = 2, timeout: int = 420
) -> subprocess.CompletedProcess:
    # The timeout is a safety net, not a check: in the first minutes of `make test` on 2 cores
    # ~20 processes are runnable and a 2-rank sweep that takes 12 s alone took 174 s.
    cmd = [TORCHRUN, f"--nproc-per-node={nproc}", "--standalone", *sweep_run(recipe, out, *extra)]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=torchrun_env(), cwd=out.parent
    )


def only_run_dir(out: Path) -> Path:
    dirs = [p for p in out.glob("*/*/*") if p.is_dir()]
    assert len(dirs) == 1, dirs
    return dirs[0]


def alive(pid: int) -> bool:
    """True if ``pid`` runs (zombies count as gone: nobody may reap them in a container)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def capture_a_sleeper(capture: Callable[[int, str], object]) -> None:
    """Run a hang capture (``aorta.run.forensics.Capture``) on a Python that sleeps without
    aorta's listener (no torch.distributed), and stop that Python after."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    try:
        capture(proc.pid, "deadline")
    finally:
        proc.kill()
        proc.wait()
