"""aorta's flight-recorder listener for a trial's Python processes (standard library only).

A trial armed for hang forensics (``aorta/run/forensics.py``) has this folder first on its
``PYTHONPATH`` and ``AORTA_FR_LISTEN=<trial token>`` in its environment, so every Python
process it starts -- aorta's own worker, or the ranks a probe command's ``torchrun`` starts --
imports this file as ``sitecustomize``. It costs such a process one entry in ``sys.meta_path``;
only a process that imports ``torch.distributed`` starts a listener thread, bound to the
abstract Unix socket ``aorta-fr.<token>.<pid>`` (no file; gone with the process).

When a hang is detected, the engine connects and sends one line; the listener writes PyTorch's
flight-recorder dump (``_dump_fr_trace_json``: the collectives, without C++ stacks, which can
hang a starved process) to ``$AORTA_FR_DIR/.fr.<token>.<pid>.json`` and answers one JSON line
with its rank. The socket's name is visible to every user of the node, so the peer's user is
checked the moment a connection is accepted, before anything is read: another user's
connection is refused and closed at once. Each accepted connection of this user (or root) is
served by a thread of its own with a short read deadline, so a client that connects and says
nothing holds up nobody. It writes only there. A thread is needed because a rank stuck in a
collective never returns to the eval loop, so a signal handler would never run; the thread
needs the GIL, so a rank that holds it in a C call does not answer -- py-spy shows that one.

Another ``sitecustomize`` further on ``sys.path`` (a distribution's, a site's) still runs: this
one executes it after itself -- once, even when this folder (or another aorta's) appears on the
path several times. Written for every Python a trial may start: Python 2.7 and 3.x parse it;
before 3.8 (no PyTorch with a flight recorder runs there) it only chains.
"""

import os
import sys

_TOKEN = os.environ.get("AORTA_FR_LISTEN", "")
_HERE = os.path.realpath(os.path.dirname(os.path.abspath(__file__)))
#: Seconds an accepted connection has to send its request line.
_READ_S = 2.0
#: Connections served at once; more wait in the backlog.
_SERVING = 4


def _peer_uid(conn):
    import socket
    import struct

    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def _dump(folder):
    """Write this process's flight-recorder dump into ``folder``; the reply's fields."""
    import torch.distributed as dist
    from torch._C import _distributed_c10d as c10d

    reply = {}
    if dist.is_available() and dist.is_initialized():
        reply["rank"] = dist.get_rank()
        reply["world_size"] = dist.get_world_size()
    data = c10d._dump_fr_trace_json(includeCollectives=True, onlyActive=False)
    path = os.path.join(folder, ".fr.%s.%d.json" % (_TOKEN, os.getpid()))
    tmp = path + ".tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(tmp, flags, 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)
    reply["bytes"] = len(data)
    return reply


def _answer(conn, lock):
    import json

    conn.settimeout(_READ_S)
    request = b""
    while not request.endswith(b"\n") and len(request) < 4096:
        chunk = conn.recv(4096)
        if not chunk:
            break
        request += chunk
    # The dump goes where the trial's environment says, named by this process: never where
    # the request says (whoever can reach the socket cannot choose a file to overwrite).
    folder = os.environ.get("AORTA_FR_DIR", "")
    reply = {"pid": os.getpid()}
    try:
        if not folder:
            raise RuntimeError("AORTA_FR_DIR is not set: nowhere to write")
        with lock:  # two requests at once write one file, one after the other
            reply.update(_dump(folder))
    except Exception as exc:  # the engine records why, the rank carries on
        reply["error"] = "%s: %s" % (type(exc).__name__, exc)
    conn.sendall(json.dumps(reply).encode() + b"\n")


def _serve_one(conn, lock, slots):
    try:
        _answer(conn, lock)
    except Exception:
        pass
    finally:
        conn.close()
        slots.release()


def _serve(sock):
    import threading

    lock, slots = threading.Lock(), threading.BoundedSemaphore(_SERVING)
    while True:
        try:
            conn, _ = sock.accept()
        except OSError:
            return
        try:
            # Only this user (or root) may ask, checked before anything is read: an abstract
            # socket has no file permissions, and its name is in /proc/net/unix for all to see.
            if _peer_uid(conn) not in (0, os.getuid()):
                conn.setblocking(False)
                conn.send(b'{"error": "refused: another user asked"}\n')
                conn.close()
                continue
        except Exception:
            conn.close()
            continue
        slots.acquire()
        worker = threading.Thread(
            target=_serve_one, args=(conn, lock, slots), name="aorta-fr-answer"
        )
        worker.daemon = True
        worker.start()


def _listen():
    import socket
    import threading

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind("\0aorta-fr.%s.%d" % (_TOKEN, os.getpid()))
    except OSError:
        sock.close()
        return
    sock.listen(16)
    thread = threading.Thread(target=_serve, args=(sock,), name="aorta-fr-listener")
    thread.daemon = True
    thread.start()


class _WhenDistributedLoads(object):
    """A meta-path finder that finds nothing: it notices ``import torch.distributed`` and
    starts the listener once, then leaves ``sys.meta_path``."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name == "torch.distributed":
            if cls in sys.meta_path:
                sys.meta_path.remove(cls)
            _listen()
        return None


def _seen():
    """The folders of the aorta shims that already ran in this process (shared by all)."""
    seen = getattr(sys, "_aorta_frshim_seen", None)
    if seen is None:
        seen = []
        sys._aorta_frshim_seen = seen
    return seen


def _chain(seen):
    """Run the next ``sitecustomize`` on ``sys.path``, the one this file shadows (never an
    aorta shim that already ran: a path listing this folder twice would recurse)."""
    rest = [p for p in sys.path if os.path.realpath(os.path.abspath(p or os.curdir)) not in seen]
    if sys.version_info >= (3, 5):
        # importlib.machinery only: importlib.util would import contextlib, warnings and
        # collections into every process a trial starts (~5 ms each), for module_from_spec.
        import importlib.machinery

        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
        if spec is None or spec.loader is None:
            return
        module = type(sys)(spec.name)
        module.__spec__, module.__loader__ = spec, spec.loader
        module.__file__ = spec.origin
        module.__cached__ = getattr(spec, "cached", None)
        sys.modules[__name__] = module
        spec.loader.exec_module(module)
        return
    import imp

    try:
        found = imp.find_module("sitecustomize", rest)
    except ImportError:
        return
    try:
        sys.modules[__name__] = imp.load_module("sitecustomize", *found)
    finally:
        if found[0] is not None:
            found[0].close()


def _main():
    seen = _seen()
    first = not seen
    if _HERE not in seen:
        seen.append(_HERE)
    armed = first and _TOKEN and os.name == "posix" and sys.version_info >= (3, 8)
    if armed:
        if "torch.distributed" in sys.modules:
            _listen()
        else:
            sys.meta_path.insert(0, _WhenDistributedLoads)
    if first and os.environ.get("AORTA_NUMERICS_DIR") and sys.version_info >= (3, 8):
        import aorta_numerics  # noqa: F401  # check_numerics: the numerics locator, beside this
    _chain(seen)


_main()
