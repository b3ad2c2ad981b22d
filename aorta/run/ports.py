"""A rendezvous port: free on this host now, and outside the kernel's ephemeral range.

The usual way to find a free port — bind port 0, read the number, close — draws from the
ephemeral range (Linux: ``net.ipv4.ip_local_port_range``, 32768–60999), the same range every
outgoing connection's source port comes from. Between that probe and the bind it was for
(torchrun's store on the head node, a trial's store on rank 0) any ``connect()`` on the host —
an ssh session, a gloo pair, another job's store client — may take the port, and the bind fails
with ``EADDRINUSE``: a launch lost, or a trial recorded as a setup error. A port below the range
is taken only by a process that binds that very number, so the choice is drawn at random from
the ports between :data:`LOWEST` and the range's start (22,768 with Linux's default range),
and checked free, on IPv4 and IPv6, before it is returned. torchrun's own default (29500) sits
below the range for the same reason.

Three callers share it: a sweep's per-trial rendezvous (:func:`aorta.run.ranks.trial_endpoint`)
and the launchers' probes on the head node — the node agent (:mod:`aorta.launch._remote`) and
the Slurm step — which run where aorta may be missing, so the launcher ships this file's source,
as it ships :mod:`aorta.run.proctree`: standard library only, Python 3.8 syntax, no state.

Examples
--------
>>> import socket
>>> port = rendezvous_port("127.0.0.1")
>>> LOWEST <= port < ephemeral_range()[0] or ephemeral_range()[0] - LOWEST < ROOM
True
>>> with socket.socket() as s:  # free: the caller can bind it
...     s.bind(("127.0.0.1", port))
"""

from __future__ import annotations

import errno
import random
import socket

__all__ = ["LOWEST", "ROOM", "ephemeral_range", "rendezvous_port"]

#: The lowest port drawn: above the registered services most hosts run (databases, web
#: servers and their admin ports sit mostly below it).
LOWEST = 10000
#: Fewer ports than this between :data:`LOWEST` and the ephemeral range (a kernel configured
#: to hand out almost every port to connections): the kernel's own pick, as before.
ROOM = 1000
_TRIES = 64
_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"


def ephemeral_range(path: str = _RANGE_FILE) -> tuple[int, int]:
    """The kernel's ephemeral port range, ``(first, last)``; Linux's default where it cannot
    be read (another OS, a container without ``/proc/sys``)."""
    try:
        with open(path) as fh:
            first, last = (int(word) for word in fh.read().split())
    except (OSError, ValueError):
        return 32768, 60999
    return first, last


def _free(host: str, port: int) -> bool:
    """Whether ``port`` can be bound on ``host`` now, on IPv4 and — where the host has it —
    on IPv6 (a store may listen on either, or on both at once)."""
    families = [(socket.AF_INET, host or "0.0.0.0")]
    if not host and socket.has_ipv6:
        families.append((socket.AF_INET6, "::"))
    for family, address in families:
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:  # no IPv6 on this host: nothing can take the port there
            continue
        with sock:
            try:
                sock.bind((address, port))
            except OSError as exc:
                if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                    return False
                if family == socket.AF_INET:
                    raise
    return True


def rendezvous_port(host: str = "", rng: random.Random | None = None) -> int:
    """A TCP port free on ``host`` (every address: ``""``) right now, below the ephemeral range;
    the caller binds it soon after. ``rng`` makes the draw repeatable (tests)."""
    first, _ = ephemeral_range()
    if first - LOWEST >= ROOM:
        draw = rng or random.SystemRandom()
        for _ in range(_TRIES):
            port = draw.randrange(LOWEST, first)
            if _free(host, port):
                return port
    with socket.socket() as sock:  # no room, or 64 draws all taken: the kernel's pick
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
