"""The node helper: ``python -c <this file> setup|kill``, a JSON request on stdin, one JSON
line on stdout. Sent as source: standard library only, nothing from aorta (maybe missing).

* ``setup`` — the per-run folder (not in a dry run) with the shipped files, the snapshot
  (``aorta.store.hostenv`` and ``.secrets``, sources in the request), a port, missing modules.
* ``kill`` — (over a second connection, or by the run's watchdog) drop a ``cancel`` marker and
  the unread env file, SIGTERM the pid file's session and every process carrying this run's
  identity (torchrun's workers have sessions of their own), SIGKILL after the grace, until
  none is left (:mod:`aorta.run.proctree`, its source in the request); given the head's folder, say whether this node shares the head's disk.
"""

from __future__ import annotations

import binascii
import functools
import importlib.util
import json
import os
import sys
import types
from typing import Any


def snapshot(req: dict[str, Any], env: dict[str, str]) -> object:
    for name in ("secrets", "hostenv"):  # hostenv imports aorta.store.secrets: the one shipped
        module = sys.modules["aorta.store." + name] = types.ModuleType("aorta.store." + name)
        exec(compile(req[name], f"aorta/store/{name}.py", "exec"), module.__dict__)
    return module.snapshot(env=env, scrub_keys=req.get("scrub_env_keys", []))


def _read(path: str, limit: int = 4096) -> str | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(limit).decode("utf-8", "replace").strip()
    except OSError:
        return None


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def setup(req: dict[str, Any]) -> dict[str, Any]:
    node_dir = os.path.abspath(os.path.expanduser(req["node_dir"]))
    missing = [m for m in req.get("requires", []) if not _installed(m)]
    out: dict[str, Any] = {"node_dir": node_dir, "port": None, "missing": missing, "created": False}
    out["workdir"] = os.path.abspath(os.path.expanduser(req.get("workdir") or "."))
    if not req.get("dry_run"):
        os.makedirs(os.path.join(node_dir, "out"), exist_ok=True)
        out["created"] = True
        if req.get("head_token"):
            with open(os.path.join(node_dir, "head.token"), "w") as fh:
                fh.write(req["head_token"])
        for name, payload in sorted(req.get("files", {}).items()):
            with open(os.path.join(node_dir, name), "wb") as fh:
                fh.write(binascii.a2b_base64(payload))
        if req.get("kill"):
            # What the run's watchdog hands to `helper.py kill` if the orchestrator goes away.
            with open(os.path.join(node_dir, "kill.json"), "w") as fh:
                json.dump(dict(req["kill"], node_dir=node_dir), fh)
        os.makedirs(out["workdir"], exist_ok=True)
    if req.get("probe_port"):  # aorta/run/ports.py, its source in the request
        scope: dict[str, Any] = {"__name__": "aorta_ports"}
        exec(compile(req["ports"], "aorta/run/ports.py", "exec"), scope)
        out["port"] = scope["rendezvous_port"]()
    out["snapshot"] = snapshot(req, dict(os.environ, **req.get("env", {})))
    return out


WATCHDOG_MARK = b"AORTA_LAUNCH_WATCHDOG=1"  # aorta.launch.node_command.WATCHDOG_MARK


def proctree(req: dict[str, Any]) -> dict[str, Any]:
    # aorta/run/proctree.py, shipped as source like the snapshot: find by marker, signal, reap.
    scope: dict[str, Any] = {"__name__": "aorta_proctree"}
    exec(compile(req["proctree"], "aorta/run/proctree.py", "exec"), scope)
    return scope


def kill(req: dict[str, Any]) -> dict[str, Any]:
    node_dir = os.path.abspath(os.path.expanduser(req["node_dir"]))
    if os.path.isdir(node_dir):
        with open(os.path.join(node_dir, "cancel"), "w") as fh:
            fh.write(f"{os.getpid()}\n")
        if os.path.exists(os.path.join(node_dir, "env.sh")):  # no run read (and removed) it
            os.remove(os.path.join(node_dir, "env.sh"))
    session = int(pid) if (pid := _read(os.path.join(node_dir, "pid"))) and pid.isdigit() else 0
    marks = [f"{k}={v}".encode() for k, v in sorted(req["match"].items())]
    spare = {os.getpid(), os.getppid()}
    tree = proctree(req)
    # the pid file's session and every process of this run; settle: for a wrapper just starting
    targets = functools.partial(
        tree["find"], marks, session=session, spare=spare, unless=WATCHDOG_MARK
    )
    report: dict[str, Any] = tree["stop"](targets, grace_s=float(req.get("grace", 5.0)), settle=3)
    if head := req.get("head_dir"):
        token = _read(os.path.join(head, "head.token"))
        report["shares_head"] = token is not None and token == req.get("head_token")
        report["head_out"] = os.path.isdir(os.path.join(head, "out"))
    return report


def main(argv: list[str]) -> None:
    request = json.loads(sys.stdin.read() or "{}")
    result = {"setup": setup, "kill": kill}[argv[0]](request)
    try:
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()
    except OSError:
        # Nobody is reading: the launch gave up on this node (its setup deadline passed, or the
        # launcher died). A setup that finished anyway tears itself down: the cancel mark keeps
        # anything from starting in this run's folder, and nothing of the run is left running.
        if argv[0] == "setup" and result.get("created") and request.get("kill"):
            kill(dict(request["kill"], node_dir=result["node_dir"]))


if __name__ == "__main__":
    main(sys.argv[1:])
