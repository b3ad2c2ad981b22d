"""Launch fan-out: time until every node's torchrun has started, 8 loopback nodes vs 1.

    .venv/bin/python benchmarks/launch_fanout.py [--nodes 8] [--repeats 7] [--shell-rc]

Each node is a real ``sshd`` on 127.0.0.N (tests/sshd.py); each launch runs real ``torchrun``
(``--nproc-per-node 1``, a worker that exits at once). "Started" is when the orchestrator has
received, from every node, the line the remote wrapper prints right before it ``exec``s torchrun
(``LaunchResult.timings["all_started"]``, from the call to ``launch``): connecting,
authenticating, setup (per-run folder, recipe, environment snapshot, the head's port probe) and
starting the command — not torch's own import. Launches of 1 and of N nodes alternate so both
see the same machine state; medians are compared (target: N=8 ≤ 1.5 × N=1).

Context for the ratio on a machine where the "nodes" share the orchestrator's two cores: the
same launch with a plain ``true`` instead of torchrun (no node's torch import competing with the
others' start), a floor (the launch's own SSH sessions doing nothing but connect + ``true`` in
parallel), the CPU the orchestrator spent per launch, and the CPU the nodes spent (sshd, shells,
aorta's node helper and, in the torchrun rows, torchrun itself — read from the sshd listeners'
reaped-children times).

By default the sessions skip the login shell's profile (``SHLVL=1``; see tests/sshd.py): eight
copies of one user's ``.bashrc`` on two cores would be timed against each other, which a real
cluster never does. ``--shell-rc`` keeps the profile, to show that cost.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import resource
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aorta.launch import Cluster, Deadlines, LaunchSpec, launch, ssh_sessions  # noqa: E402
from tests.sshd import VENV_PYTHON, SshdFarm, make_key, sshd_available  # noqa: E402

DEADLINES = Deadlines(setup=60, run=120, collect=60, kill_grace=2, teardown=20)
HZ = os.sysconf("SC_CLK_TCK")


def node_cpu(farm: SshdFarm) -> float:
    """CPU seconds of every finished session of every node (children reaped by sshd)."""
    total = 0
    for node in farm.nodes:
        assert node.process is not None
        fields = Path(f"/proc/{node.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    return total / HZ


def own_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def measured(farm: SshdFarm, fn: Callable[[], float]) -> dict[str, float]:
    cpu0, nodes0 = own_cpu(), node_cpu(farm)
    value = fn()
    time.sleep(0.3)  # let sshd reap the sessions
    return {"time": value, "own_cpu": own_cpu() - cpu0, "node_cpu": node_cpu(farm) - nodes0}


TORCHRUN = LaunchSpec(argv=("-m", "json.tool", "--help"), nproc_per_node=1)
PLAIN = LaunchSpec(argv=("true",), torchrun=False)


def one_launch(farm: SshdFarm, n: int, out: Path, spec: LaunchSpec = TORCHRUN) -> float:
    cluster = Cluster.from_dict(farm.cluster_dict(nodes=farm.nodes[:n]))
    result = launch(cluster, spec, output=out, deadlines=DEADLINES)
    return result.timings["all_started"]


def floor(farm: SshdFarm, n: int) -> float:
    """Connect and run ``true`` on n nodes in parallel, with the launch's own SSH sessions."""
    sessions = ssh_sessions(Cluster.from_dict(farm.cluster_dict(nodes=farm.nodes[:n])))
    t0 = time.perf_counter()

    def one(name: str) -> None:
        sessions[name].exec("true", timeout=30)  # the first command connects

    threads = [threading.Thread(target=one, args=(name,)) for name in sessions]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    elapsed = time.perf_counter() - t0
    for s in sessions.values():
        s.close()
    return elapsed


def _cpu_model() -> str:
    with open("/proc/cpuinfo") as fh:
        models = [line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")]
    return models[0] if models else platform.processor() or "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--shell-rc", action="store_true", help="let bash read the login profile")
    args = parser.parse_args()
    if not sshd_available() or not VENV_PYTHON.is_file():
        raise SystemExit("needs /usr/sbin/sshd, ssh-keygen and the repo's .venv (make dev)")
    sizes = (1, args.nodes)
    runs: dict[tuple[str, int], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        key = make_key(root / "key")
        with SshdFarm(root / "farm", key, skip_shell_rc=not args.shell_rc) as farm:
            farm.start(args.nodes)
            one_launch(farm, args.nodes, root / "out")  # warm-up: page cache, known hosts
            for _ in range(args.repeats):
                for n in sizes:
                    runs.setdefault(("launch", n), []).append(
                        measured(farm, functools.partial(one_launch, farm, n, root / "out"))
                    )
                    runs.setdefault(("plain", n), []).append(
                        measured(farm, functools.partial(one_launch, farm, n, root / "out", PLAIN))
                    )
                    runs.setdefault(("floor", n), []).append(
                        measured(farm, functools.partial(floor, farm, n))
                    )
    med = {k: {m: statistics.median(r[m] for r in rs) for m in rs[0]} for k, rs in runs.items()}
    print(f"machine: {os.cpu_count()} cores, {_cpu_model()}, Python {platform.python_version()}")
    profile = "read" if args.shell_rc else "skipped (SHLVL=1)"
    print(f"shell profile: {profile}; {args.repeats} rounds, medians")
    print("| what | nodes | time | orchestrator CPU | nodes' CPU (all) |")
    print("|---|---|---|---|---|")
    labels = {
        "launch": "launch torchrun: every node's torchrun started",
        "plain": "launch `true` (no torchrun): every node's command started",
        "floor": "floor: SSH connect + `true`, nothing else",
    }
    for kind in ("launch", "plain", "floor"):
        for n in sizes:
            m = med[(kind, n)]
            print(
                f"| {labels[kind]} | {n} | {m['time'] * 1000:.0f} ms | {m['own_cpu'] * 1000:.0f} ms "
                f"| {m['node_cpu'] * 1000:.0f} ms |"
            )
    for kind in ("launch", "plain", "floor"):
        ratio = med[(kind, args.nodes)]["time"] / med[(kind, 1)]["time"]
        print(f"{kind} ratio {args.nodes} nodes / 1 node: {ratio:.2f}x")
    print("target: launch ratio ≤ 1.5x")


if __name__ == "__main__":
    main()
