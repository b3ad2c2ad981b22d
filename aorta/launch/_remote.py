"""The helper aorta runs on each node: ``python -c <this file> setup|kill`` with a JSON request
on stdin and one JSON line on stdout.

Sent as source: standard library only, Python 3.8+, nothing from aorta (which may be missing).

* ``setup`` — the node's per-run folder (not in a dry run) with the shipped files, the snapshot
  (:mod:`aorta.store.hostenv`, its source in the request), a free port when asked, the missing
  required modules.
* ``kill`` — (over a second connection, or by the run's watchdog) drop a ``cancel`` marker and
  the unread env file, SIGTERM the pid file's session and every process carrying this run's and
  node's identity (torchrun's workers have sessions of their own), SIGKILL after the grace,
  rescan until nothing is left; given the head's folder, also say whether this node shares the
  head's disk (its token) and sees the head's output path.
"""

import binascii
import importlib.util
import json
import os
import signal
import socket
import sys
import time


def snapshot(req, env):
    """The node's ``host_env.json``: aorta.store.hostenv's source, shipped in the request."""
    scope = {"__name__": "aorta_hostenv"}
    exec(compile(req["hostenv"], "aorta/store/hostenv.py", "exec"), scope)
    return scope["snapshot"](env=env, scrub_keys=req.get("scrub_env_keys", []))


def _read(path, limit=4096):
    try:
        with open(path, "rb") as fh:
            return fh.read(limit).decode("utf-8", "replace").strip()
    except OSError:
        return None


def _free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("", 0))
        return s.getsockname()[1]
    finally:
        s.close()


def _installed(module):
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def setup(req):
    node_dir = os.path.abspath(os.path.expanduser(req["node_dir"]))
    out = {"node_dir": node_dir, "port": None, "missing": [], "created": False}
    for module in req.get("requires", []):
        if not _installed(module):
            out["missing"].append(module)
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
    workdir = req.get("workdir") or "."
    out["workdir"] = os.path.abspath(os.path.expanduser(workdir))
    if not req.get("dry_run"):
        os.makedirs(out["workdir"], exist_ok=True)
    if req.get("probe_port"):
        out["port"] = _free_port()
    out["snapshot"] = snapshot(req, dict(os.environ, **req.get("env", {})))
    return out


# -- kill ------------------------------------------------------------------------------------


def _stat(pid):
    text = _read(f"/proc/{pid}/stat")
    if not text or ")" not in text:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return fields[0], int(fields[3])  # state, session id


WATCHDOG_MARK = b"AORTA_LAUNCH_WATCHDOG=1"  # aorta.launch.command.WATCHDOG_MARK


def _environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return set(fh.read().split(b"\0"))
    except OSError:
        return set()


def _targets(session, marks, spare):
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in spare:
            continue
        pid = int(entry)
        st = _stat(pid)
        if st is None or st[0] in ("Z", "X"):  # zombies are dead; their parent reaps them
            continue
        env = _environ(pid)
        if WATCHDOG_MARK in env:
            continue
        if (session and st[1] == session) or all(mark in env for mark in marks):
            found.append(pid)
    return found


def _signal(pid, sig):
    try:
        os.kill(pid, sig)
        return True
    except OSError:
        return False


def kill(req):
    node_dir = os.path.abspath(os.path.expanduser(req["node_dir"]))
    if os.path.isdir(node_dir):
        with open(os.path.join(node_dir, "cancel"), "w") as fh:
            fh.write(f"{os.getpid()}\n")
        if os.path.exists(os.path.join(node_dir, "env.sh")):  # no run read (and removed) it
            os.remove(os.path.join(node_dir, "env.sh"))
    text = _read(os.path.join(node_dir, "pid"))
    session = int(text) if text and text.isdigit() else 0
    marks = [f"{k}={v}".encode() for k, v in sorted(req["match"].items())]
    spare = {os.getpid(), os.getppid()}
    grace = float(req.get("grace", 5.0))
    started = time.time()
    termed, killed, quiet, left = set(), set(), 0, []
    while True:
        left = _targets(session, marks, spare)
        now = time.time() - started
        if not left:
            quiet += 1
            if quiet >= 3:  # a wrapper that was just starting has had time to show up
                break
            time.sleep(0.05)
            continue
        quiet = 0
        for pid in left:
            if pid not in termed and _signal(pid, signal.SIGTERM):
                termed.add(pid)
            if now > grace and pid not in killed and _signal(pid, signal.SIGKILL):
                killed.add(pid)
        if now > grace + 5.0:
            break
        time.sleep(0.05)
    report = {"terminated": len(termed), "killed": len(killed), "left": left}
    head = req.get("head_dir")
    if head:
        token = _read(os.path.join(head, "head.token"))
        report["shares_head"] = token is not None and token == req.get("head_token")
        report["head_out"] = os.path.isdir(os.path.join(head, "out"))
    return report


def main(argv):
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
