"""The engines' rendezvous without an agent store (srun, static launchers): the reserved ports,
and waiting on the other ranks through a real TCPStore."""

from __future__ import annotations

import dataclasses
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from aorta import envvars
from aorta.errors import AortaError
from aorta.run.ports import rendezvous_port
from aorta.run.ranks import DistEnv, StoreCoordinator


def test_a_base_port_held_by_another_process_is_named_not_a_traceback():
    # torch's TCPStore raises DistNetworkError (a RuntimeError) with a C++ message; a rank must
    # say which port and which variable instead (a Slurm job's base once landed on a port a
    # connection held: the run died with a traceback).
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        env = DistEnv(rank=0, world_size=2, master_addr="127.0.0.1", port_base=port)
        with pytest.raises(AortaError) as caught:
            StoreCoordinator(env, connect_timeout_s=5)
    message = str(caught.value)
    assert f"127.0.0.1:{port} ({envvars.TRIAL_MASTER_PORT_BASE}) is held" in message
    assert "ephemeral port range" in message


def test_slurm_port_bases_lie_below_the_ephemeral_range_and_clear_of_29500():
    bases = {envvars.slurm_trial_port_base(job) for job in range(1000)}
    assert len(bases) == 21
    assert all(b >= 10_000 and b + 999 < 32_768 for b in bases)
    assert not any(b <= 29_500 <= b + 999 for b in bases)


class _Stopped(Exception):
    pass


def test_a_rank_waiting_on_the_others_still_answers_a_signal():
    # torchrun and Slurm stop a rank with SIGTERM (aorta makes it a KeyboardInterrupt). A rank
    # blocked in torch's store.wait ran no Python signal handler until the wait ended: a rank
    # waiting for rank 0 ignored torchrun's SIGTERM and was killed 30 s later.
    env = DistEnv(rank=0, world_size=2, master_addr="127.0.0.1", port_base=rendezvous_port())
    rank0 = StoreCoordinator(env, connect_timeout_s=5)
    rank1 = StoreCoordinator(dataclasses.replace(env, rank=1), connect_timeout_s=5)

    def stop(signum, frame):
        raise _Stopped

    previous = signal.signal(signal.SIGUSR1, stop)
    timer = threading.Timer(0.3, signal.raise_signal, args=(signal.SIGUSR1,))
    try:
        timer.start()  # raise_signal from a thread: the handler runs in the main thread
        start = time.monotonic()
        with pytest.raises(_Stopped):
            rank1.share("decision", lambda: "unused", timeout_s=60)
        assert time.monotonic() - start < 5  # not the wait's 60 s
        # An answer that comes while it waits is taken at once, and the deadline still holds.
        threading.Timer(
            0.2, rank0.share, args=("late", lambda: "run"), kwargs={"timeout_s": 1}
        ).start()
        assert rank1.share("late", lambda: "unused", timeout_s=60) == "run"
        start = time.monotonic()
        with pytest.raises(
            AortaError, match="rank 1: no answer for 'never' from the other ranks within 1 s"
        ):
            rank1.share("never", lambda: "unused", timeout_s=1)
        assert time.monotonic() - start < 5
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, previous)
        rank1.close()
        rank0.close()


LAUNCHER_MISTAKES = """
import sys
from aorta.errors import UsageError
from aorta.run.ranks import DistEnv, StoreCoordinator
for env in (DistEnv(rank=1, world_size=2),
            DistEnv(rank=1, world_size=2, master_addr="127.0.0.1"),
            DistEnv(rank=1, world_size=2, master_addr="127.0.0.1", agent_store=True)):
    try:
        StoreCoordinator(env)
    except UsageError as exc:
        print(str(exc).split(":")[0])
print("torch" in sys.modules)
"""


def test_a_launcher_mistake_is_told_before_torch_is_imported():
    # A fresh interpreter: this one holds torch. Each rank would import it (~1.5 s) only to
    # be told that the launcher left a variable out.
    out = subprocess.run(
        [sys.executable, "-c", LAUNCHER_MISTAKES], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out == [
        "WORLD_SIZE > 1 but MASTER_ADDR is not set",
        "WORLD_SIZE=2 without torchrun's agent store",
        "TORCHELASTIC_USE_AGENT_STORE is set but MASTER_PORT is not",
        "False",
    ]
