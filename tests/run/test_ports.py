"""The rendezvous port: below the ephemeral range, free, and the same rule for every caller."""

from __future__ import annotations

import random
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aorta.launch.node_command import port_probe
from aorta.run import ports
from aorta.run.ports import LOWEST, ephemeral_range, rendezvous_port
from aorta.run.ranks import DistEnv, LocalCoordinator, trial_endpoint


def _below_the_range(port: int) -> bool:
    return LOWEST <= port < ephemeral_range()[0]


def test_the_port_is_below_the_ephemeral_range_and_can_be_bound() -> None:
    # Why it matters: a port from the range can be taken by any outgoing connection between
    # the probe and the bind (CI lost a two-node launch to EADDRINUSE on 43833 that way).
    assert ephemeral_range()[0] - LOWEST >= ports.ROOM  # this machine has room below the range
    port = rendezvous_port()
    assert _below_the_range(port)
    with socket.socket() as sock:
        sock.bind(("", port))
        sock.listen()


def test_a_bound_port_is_never_returned() -> None:
    first = random.Random(7).randrange(LOWEST, ephemeral_range()[0])
    with socket.socket() as held:
        try:
            held.bind(("127.0.0.1", first))
        except OSError:
            pytest.skip(f"port {first} is taken on this machine already")
        held.listen()
        # The same draw, seeded: its first pick is the held port, so it must draw again.
        port = rendezvous_port(rng=random.Random(7))
        assert port != first and _below_the_range(port)


@settings(max_examples=30, deadline=None)
@given(first=st.integers(1024, 65535), last=st.integers(1024, 65535))
def test_any_kernel_range_gives_a_free_port_outside_it_or_the_kernels_pick(
    first: int, last: int
) -> None:
    # The kernel's setting is read from /proc; other ranges are stood in for (changing the
    # machine's sysctl would disturb every other test running beside this one).
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ports, "ephemeral_range", lambda: (first, last))
        port = rendezvous_port("127.0.0.1")
    if first - LOWEST >= ports.ROOM:
        assert LOWEST <= port < first
    else:  # no room below the range: the kernel's pick, which is free too
        assert 1024 <= port <= 65535
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_an_unreadable_range_file_reads_as_linuxs_default(tmp_path: Path) -> None:
    (tmp_path / "range").write_text("not numbers\n")
    assert ephemeral_range(str(tmp_path / "range")) == (32768, 60999)
    assert ephemeral_range(str(tmp_path / "missing")) == (32768, 60999)


def test_the_node_probe_prints_such_a_port_without_aorta() -> None:
    # What the launchers run on a head node where aorta may be missing: -I -S, no site.
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", port_probe()], capture_output=True, text=True, check=True
    )
    assert _below_the_range(int(done.stdout))


def test_a_trials_rendezvous_under_torchrun_uses_it() -> None:
    env = DistEnv(rank=0, world_size=2, master_addr="127.0.0.1", agent_store=True)
    endpoint = trial_endpoint(LocalCoordinator(), env, 0, timeout_s=1.0)
    assert endpoint["addr"] == "127.0.0.1" and _below_the_range(endpoint["port"])
