"""The engines' rendezvous without an agent store (srun, static launchers): the reserved ports."""

from __future__ import annotations

import socket

import pytest

from aorta import envvars
from aorta.errors import AortaError
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
