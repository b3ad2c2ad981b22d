"""What hang forensics costs: the capture of a stuck trial, and arming a healthy one.

    .venv/bin/python benchmarks/hang_capture.py [--ranks 1,4,16] [--trials 8] [--steps 30]

1. **Capture time.** A trial of N Python ranks (real gloo process groups, aorta's listener
   loaded as a trial's processes load it), each stuck in a sleep after three all_reduces;
   :class:`aorta.run.forensics.Capture` takes every rank's flight-recorder dump and stacks.
   The peer, measured in the same run on the same processes: ``py-spy dump`` of each rank one
   after another — the manual procedure (upstream's ``debug_hang.sh`` does the same with gdb),
   without the dumps.
2. **The recorder's cost per collective.** A one-rank gloo group times 4,000 small
   all_reduces (best of 5) with the recorder armed (2,000 entries) and off
   (``TORCH_FR_BUFFER_SIZE=0``), processes alternated: what arming adds to each collective,
   which times a step's collectives (the race sweep's flight-recorder entries per step) is what
   it costs a step.
3. **Arming a healthy trial.** A 2-rank torchrun sweep of the race workload (gloo, CPU) with
   two cells, interleaved: the default (armed) and the recorder off; ``aorta.compare`` gives
   the step-time ratio with its CI.
4. **Arming's fixed cost per trial** (issue 44): what a rank spends arming and cleaning one
   trial (its own ``hang/rank<N>/`` folder, the pipes' temp folder, both removed again), median
   of ``--rounds``, and what the listener shim adds to the start of each of the trial's Python
   processes (``python -c pass`` with and without it, alternated); both against a trial's steps
   of the race workload (3.).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from aorta import envvars
from aorta.recipe.blocks import Forensics
from aorta.run.forensics import SHIM_DIR, Capture

RANK = """
import os, time
import torch, torch.distributed as dist
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo", store=dist.FileStore(os.environ["STORE"], world), rank=rank,
                        world_size=world)
t = torch.ones(1024)
for _ in range(3):
    dist.all_reduce(t)
open(os.environ["READY"], "w").close()
time.sleep(600)
"""


def _trial(n: int, folder: Path, capture: Capture) -> subprocess.Popen[bytes]:
    """A root process (its own session) whose N children are the ranks."""
    env = {**os.environ, envvars.TRIAL_TOKEN: capture.token, "OMP_NUM_THREADS": "1"}
    env.update(capture.arming_env(env))
    script = folder / "rank.py"
    script.write_text(RANK)
    launcher = textwrap.dedent(f"""
        import os, subprocess, sys, time
        kids = [subprocess.Popen([sys.executable, {str(script)!r}],
                                 env={{**os.environ, "RANK": str(r), "READY": f"{folder}/ready{{r}}",
                                      "WORLD_SIZE": "{n}", "STORE": "{folder}/store"}})
                for r in range({n})]
        time.sleep(600)
    """)
    root = subprocess.Popen([sys.executable, "-c", launcher], env=env, start_new_session=True)
    end = time.monotonic() + 600
    while sum((folder / f"ready{r}").exists() for r in range(n)) < n:
        if time.monotonic() > end or root.poll() is not None:
            raise SystemExit("the ranks never got ready")
        time.sleep(0.1)
    return root


def capture_times(ranks: list[int]) -> None:
    print("capture of a stuck trial (every rank's dump and stacks):")
    print(f"  {'ranks':>5}  {'aorta capture':>14}  {'py-spy one by one':>18}  {'ratio':>6}")
    for n in ranks:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            capture = Capture(
                Forensics(), folder=folder / "trial", token=f"bench{n}", rank=0,
                local_rank=0, host="bench", logs=[],
            )  # fmt: skip
            root = _trial(n, folder, capture)
            try:
                kids = [
                    int(p) for p in subprocess.check_output(["pgrep", "-P", str(root.pid)]).split()
                ]
                start = time.monotonic()
                capture(root.pid, "hang")
                ours = time.monotonic() - start
                spy = capture.py_spy
                if spy is None:  # the capture took no stacks either: nothing to compare
                    raise SystemExit("py-spy is not installed (pip install py-spy)")
                start = time.monotonic()
                for pid in kids:
                    subprocess.run(
                        [spy, "dump", "--pid", str(pid)], capture_output=True, check=False
                    )
                peer = time.monotonic() - start
            finally:
                subprocess.run(["pkill", "-KILL", "-s", str(root.pid)], check=False)
                root.wait()
                capture.close()
            got = sum(1 for e in capture.evidence if e.fr and e.stacks)
            print(f"  {n:>5}  {ours:>12.2f} s  {peer:>16.2f} s  {ours / peer:>6.2f}"
                  f"   ({got}/{n} ranks with dump and stacks)")  # fmt: skip


COLLECTIVES = """
import os, tempfile, time, torch, torch.distributed as dist
dist.init_process_group("gloo", store=dist.FileStore(tempfile.mktemp(), 1), rank=0, world_size=1)
t = torch.ones(256)
for _ in range(500):
    dist.all_reduce(t)
best = float("inf")
for _ in range(5):
    start = time.perf_counter()
    for _ in range(4000):
        dist.all_reduce(t)
    best = min(best, (time.perf_counter() - start) / 4000)
print(f"US_PER_OP {best * 1e6:.3f}")
dist.destroy_process_group()
"""


def recorder_cost(runs: int) -> float:
    """µs the recorder adds to one collective: a one-rank gloo group (no network, so the
    recorder's bookkeeping is not lost in a loopback's noise), best of 5 × 4,000 all_reduces
    per process, processes alternated armed and off."""
    times: dict[str, list[float]] = {"2000": [], "0": []}
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "ops.py"
        script.write_text(COLLECTIVES)
        for _ in range(runs):
            for size in times:
                env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_FR_BUFFER_SIZE": size}
                out = subprocess.run(
                    [sys.executable, str(script)], env=env, capture_output=True, text=True,
                    check=True,
                ).stdout  # fmt: skip
                times[size].append(float(out.split("US_PER_OP")[1].split()[0]))
    armed, off = statistics.median(times["2000"]), statistics.median(times["0"])
    print(
        f"the recorder's cost per collective (one-rank gloo group, 1 KiB all_reduce, median of {runs}):"
    )
    print(f"  armed {armed:.2f} µs, off {off:.2f} µs: {armed - off:+.2f} µs per collective")
    return armed - off


RECIPE = """\
workload: race
trials: {trials}
steps: {steps}
workload_config: {{mode: fsdp, model_dim: 256, num_layers: 2, verify_iterations: {steps},
                  warmup_iterations: 2, simulate_compute: true, dtype: float32}}
cells:
  - {{name: armed, mitigations: [none]}}
  - {{name: recorder_off, mitigations: [none], extra_env: {{TORCH_FR_BUFFER_SIZE: "0"}}}}
"""


def arming_cost(trials: int, steps: int) -> float:
    import aorta

    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    with tempfile.TemporaryDirectory() as tmp:
        recipe = Path(tmp) / "r.yaml"
        recipe.write_text(RECIPE.format(trials=trials, steps=steps))
        env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
        aorta_bin = str(Path(sys.executable).with_name("aorta"))
        done = subprocess.run(
            [torchrun or "torchrun", "--nproc-per-node=2", "--standalone", aorta_bin, "sweep",
             "run", "--recipe", str(recipe), "-o", f"{tmp}/out"],
            env=env, capture_output=True, text=True,
        )  # fmt: skip
        if done.returncode:
            raise SystemExit(f"the sweep failed: {done.stderr[-2000:]}")
        (run,) = Path(tmp, "out").glob("*/*/*")
        df = aorta.compare(aorta.load_run(run), baseline="recorder_off")
    row = df.loc["armed"]
    step_ms = float(df.loc["recorder_off", "median"])
    print(f"arming a healthy trial (race fsdp, 2 ranks, {trials} trials x {steps} steps per cell):")
    print(f"  step time armed / recorder off: {row['ratio']:.3f} "
          f"[{row['ratio_ci_low']:.3f}, {row['ratio_ci_high']:.3f}] ({row['difference']}); "
          f"a step of the recorder off: {step_ms:.2f} ms")  # fmt: skip
    return step_ms


def files_cost(rounds: int) -> float:
    """ms a rank spends arming and closing one trial (folders and the pipes folder), median."""
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(rounds):
            capture = Capture(Forensics(), folder=Path(tmp) / f"trial_{n:04d}", token=f"t{n}",
                              rank=0, local_rank=0, host="h", logs=[])  # fmt: skip
            start = time.perf_counter()
            capture.arming_env(os.environ)
            capture.close()
            times.append(time.perf_counter() - start)
    ms = 1000 * statistics.median(times)
    print(f"arming and closing one trial on a rank (folders + pipes folder, median of {rounds}): "
          f"{ms:.3f} ms")  # fmt: skip
    return ms


def shim_cost(runs: int) -> float:
    """ms the listener shim adds to a Python process's start (``-c pass``), median, alternated."""
    times: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(runs):
        for shim in (True, False):
            env = {**os.environ}
            if shim:
                env.update({"PYTHONPATH": str(SHIM_DIR), envvars.FR_LISTEN: "bench"})
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
            times[shim].append(time.perf_counter() - start)
    on, off = (1000 * statistics.median(times[k]) for k in (True, False))
    print(f"a Python process's start with the shim {on:.2f} ms, without {off:.2f} ms "
          f"(median of {runs}): {on - off:+.2f} ms")  # fmt: skip
    return on - off


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="1,4,16")
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--skip-arming", action="store_true")
    parser.add_argument("--skip-capture", action="store_true")
    parser.add_argument("--rounds", type=int, default=200, help="trials armed and closed (4.)")
    args = parser.parse_args()
    if not args.skip_capture:
        capture_times([int(n) for n in args.ranks.split(",")])
    per_op = recorder_cost(args.runs)
    per_trial_ms = files_cost(args.rounds) + max(0.0, shim_cost(4 * args.runs))
    if not args.skip_arming:
        step_ms = arming_cost(args.trials, args.steps)
        # race fsdp: an all_gather and a reduce_scatter per layer, and the stop flag's all_reduce
        ops = 2 * 2 + 1
        print(f"  the recorder's cost per collective x {ops} collectives per step: "
              f"{max(per_op, 0) * ops / 1000:.4f} ms, {max(per_op, 0) * ops / 10 / step_ms:.3f}% "
              "of a step (0 where the difference is below the noise)")  # fmt: skip
        # one worker process per rank and trial loads the shim
        print(f"  arming's fixed cost per trial: {per_trial_ms:.2f} ms, "
              f"{100 * per_trial_ms / (args.steps * step_ms):.3f}% of a trial's {args.steps} "
              f"steps")  # fmt: skip


if __name__ == "__main__":
    main()
