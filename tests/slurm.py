"""A real two-node Slurm cluster on this host, for the Slurm launcher's tests.

Debian's ``slurm-wlm`` (22.05) and ``munge``: one ``munged``, one ``slurmctld`` and two
``slurmd -N node1|node2`` on distinct ports, all pointing at 127.0.0.1, with every state,
spool, pid and log path in a temporary folder and ``proctrack/linuxproc`` + ``task/none`` so
nothing needs cgroups. ``srun -N2`` and ``sbatch -N2`` run, with ``SLURM_NODEID`` 0 and 1.

The daemons are started and stopped by pid (never ``pkill``): a test session leaves nothing
running, and a machine's own Slurm, if any, is untouched. Requires root (slurmd runs jobs as
the submitting user and must be able to switch to it) and the two packages; ``.ci/run``
installs them when it runs as root.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from aorta.run.ports import rendezvous_port

DAEMONS = ("/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged")
CLIENTS = ("srun", "sbatch", "squeue", "sinfo", "scancel", "sacct", "salloc")


def slurm_missing() -> str | None:
    """Why a real Slurm cannot run here, or ``None`` when it can."""
    if os.geteuid() != 0:
        return "needs root (slurmd switches to the submitting user)"
    missing = [p for p in DAEMONS if not Path(p).is_file()]
    missing += [c for c in CLIENTS if shutil.which(c) is None]
    if missing:
        return f"needs Debian's slurm-wlm and munge ({', '.join(missing)} missing; .ci/run installs them as root)"
    return None


def _pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


@dataclass
class SlurmCluster:
    """A running two-node cluster; :attr:`env` points Slurm's clients at it."""

    root: Path
    nodes: tuple[str, ...] = ("node1", "node2")
    partition: str = "debug"
    pids: list[int] = field(default_factory=list)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """The calling environment with ``SLURM_CONF`` set (and no leftover job variables)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = str(self.conf)
        return env

    def run(self, *argv: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )

    def _write_conf(self) -> None:
        host = socket.gethostname()
        ports: set[int] = set()
        while len(ports) < 3:  # three draws could repeat a port none has bound yet
            ports.add(rendezvous_port())
        ctld, p1, p2 = sorted(ports)
        for d in ("state", "log", "run", "spool-node1", "spool-node2"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        r = self.root
        self.conf.write_text(
            f"""ClusterName=aortatest
SlurmctldHost=localhost
SlurmctldPort={ctld}
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SlurmUser=root
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool-%n
SlurmctldPidFile={r}/run/slurmctld.pid
SlurmdPidFile={r}/run/slurmd-%n.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd-%n.log
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/linux
KillWait=3
InactiveLimit=0
MinJobAge=600
MessageTimeout=20
NodeName=node1 NodeHostname={host} NodeAddr=127.0.0.1 Port={p1} CPUs=2 State=UNKNOWN
NodeName=node2 NodeHostname={host} NodeAddr=127.0.0.1 Port={p2} CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=node1,node2 Default=YES MaxTime=INFINITE State=UP
"""
        )

    def _start(self, *argv: str) -> None:
        subprocess.run(argv, env=self.env, check=True, timeout=30, capture_output=True)

    def start(self, *, timeout: float = 60.0) -> SlurmCluster:
        self._write_conf()
        if subprocess.run(["pgrep", "-x", "munged"], capture_output=True).returncode != 0:
            Path("/run/munge").mkdir(parents=True, exist_ok=True)
            shutil.chown("/run/munge", "munge")
            self._start("/usr/sbin/munged", "--force")
        self._start("/usr/sbin/slurmctld", "-f", str(self.conf))
        for node in self.nodes:
            self._start("/usr/sbin/slurmd", "-f", str(self.conf), "-N", node)
        for name in ("slurmctld.pid", "slurmd-node1.pid", "slurmd-node2.pid"):
            pid_file = self.root / "run" / name
            end = time.monotonic() + 10
            # The daemon creates the file, then writes its pid: on a loaded box we may see it empty.
            while not (pid_file.is_file() and pid_file.read_text().split()):
                assert time.monotonic() < end, f"{pid_file}: no pid after 10 s"
                time.sleep(0.1)
            self.pids.append(int(pid_file.read_text().split()[0]))
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            out = self.run("sinfo", "-h", "-o", "%T", "-p", self.partition).stdout.split()
            if out and all(s == "idle" for s in out) and len(out) >= 1:
                return self
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"slurm did not come up: {self.logs()}")

    def logs(self) -> str:
        out = []
        for f in sorted((self.root / "log").glob("*.log")):
            out.append(f"--- {f.name}\n{f.read_text()[-2000:]}")
        return "\n".join(out)

    def stop(self) -> None:
        """Cancel every job, then stop the daemons this cluster started (by pid)."""
        with contextlib.suppress(Exception):
            self.run("scancel", "--full", "--user", str(os.getuid()), timeout=20)
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        end = time.monotonic() + 15
        while any(_pid_alive(p) for p in self.pids) and time.monotonic() < end:
            time.sleep(0.1)
        for pid in self.pids:
            if _pid_alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self.pids.clear()
