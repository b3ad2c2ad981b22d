"""aorta's flight-recorder listener for a trial's Python processes (standard library only).

A trial armed for hang forensics (``aorta/run/forensics.py``) has this folder first on its
``PYTHONPATH`` and ``AORTA_FR_LISTEN=<trial token>`` in its environment, so every Python
process it starts — aorta's own worker, or the ranks a probe command's ``torchrun`` starts —
imports this file as ``sitecustomize``. It costs such a process one entry in ``sys.meta_path``;
only a process that imports ``torch.distributed`` starts a listener thread, bound to the
abstract Unix socket ``aorta-fr.<token>.<pid>`` (no file; gone with the process).

When a hang is detected, the engine connects and sends one line; the thread writes PyTorch's
flight-recorder dump (``_dump_fr_trace_json``: the collectives, without C++ stacks, which can
hang a starved process) to ``$AORTA_FR_DIR/.fr.<token>.<pid>.json`` and answers one JSON line
with its rank. It answers only its own user (or root), and writes only there: the socket's name
is visible to every user of the node. A thread is needed because a rank stuck in a collective never returns to the eval loop,
so a signal handler would never run; the thread needs the GIL, so a rank that holds it in a C
call does not answer — py-spy shows that one.

Another ``sitecustomize`` further on ``sys.path`` (a distribution's, a site's) still runs: this
one executes it after itself.
"""

from __future__ import annotations

import os
import sys

_TOKEN = os.environ.get("AORTA_FR_LISTEN", "")
_HERE = os.path.dirname(os.path.abspath(__file__))


def _answer(conn):
    import json
    import socket
    import struct

    request = b""
    while not request.endswith(b"\n") and len(request) < 4096:
        chunk = conn.recv(4096)
        if not chunk:
            break
        request += chunk
    # Only this user (or root) may ask: an abstract socket has no file permissions, and its
    # name is visible to every user of the node in /proc/net/unix.
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _, uid, _ = struct.unpack("3i", creds)
    if uid not in (0, os.getuid()):
        conn.sendall(b'{"error": "refused: another user asked"}\n')
        return
    # The dump goes where the trial's environment says, named by this process: never where
    # the request says (whoever can reach the socket cannot choose a file to overwrite).
    folder = os.environ.get("AORTA_FR_DIR", "")
    reply: dict[str, object] = {"pid": os.getpid()}
    try:
        if not folder:
            raise RuntimeError("AORTA_FR_DIR is not set: nowhere to write")
        import torch.distributed as dist
        from torch._C import _distributed_c10d as c10d

        if dist.is_available() and dist.is_initialized():
            reply["rank"] = dist.get_rank()
            reply["world_size"] = dist.get_world_size()
        data = c10d._dump_fr_trace_json(includeCollectives=True, onlyActive=False)
        path = os.path.join(folder, f".fr.{_TOKEN}.{os.getpid()}.json")
        tmp = f"{path}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
        reply["bytes"] = len(data)
    except Exception as exc:  # the engine records why, the rank carries on
        reply["error"] = f"{type(exc).__name__}: {exc}"
    conn.sendall(json.dumps(reply).encode() + b"\n")


def _serve(sock):
    while True:
        try:
            conn, _ = sock.accept()
        except OSError:
            return
        try:
            conn.settimeout(30)
            _answer(conn)
        except Exception:
            pass
        finally:
            conn.close()


def _listen() -> None:
    import socket
    import threading

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(f"\0aorta-fr.{_TOKEN}.{os.getpid()}")
    except OSError:
        sock.close()
        return
    sock.listen(8)
    threading.Thread(target=_serve, args=(sock,), name="aorta-fr-listener", daemon=True).start()


class _WhenDistributedLoads:
    """A meta-path finder that finds nothing: it notices ``import torch.distributed`` and
    starts the listener once, then leaves ``sys.meta_path``."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name == "torch.distributed":
            if cls in sys.meta_path:
                sys.meta_path.remove(cls)
            _listen()
        return None


def _chain() -> None:
    """Run the next ``sitecustomize`` on ``sys.path``, the one this file shadows."""
    import importlib.machinery
    import importlib.util

    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules[__name__] = module
    spec.loader.exec_module(module)


if _TOKEN and os.name == "posix":
    if "torch.distributed" in sys.modules:
        _listen()
    else:
        sys.meta_path.insert(0, _WhenDistributedLoads)
if os.environ.get("AORTA_NUMERICS_DIR"):  # check_numerics: the numerics locator, beside this
    import aorta_numerics  # noqa: F401
_chain()
