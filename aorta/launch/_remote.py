"""The helper aorta runs on each node: ``python -c <this file> setup|kill`` with a JSON request
on stdin and one JSON line on stdout.

It is sent as source text, so it runs wherever the node's Python runs (3.8+): standard library
only, no annotations, nothing imported from aorta (which may be missing — that is one of the
things ``setup`` reports).

* ``setup`` — resolve (and unless a dry run, create) the node's per-run folder, write the files
  the launch ships (the recipe), snapshot the environment (versions read without importing
  torch, so it takes milliseconds), probe a free TCP port when asked (the head, for the
  rendezvous), and list required modules that are missing.
* ``kill`` — stop what the launch started on this node (run by the launch over a second
  connection, or by the run's watchdog from ``<node dir>/helper.py`` when the orchestrator's
  connection closes): drop a ``cancel`` marker (a wrapper
  not yet started will not start), then SIGTERM every process of the run's session (pid file)
  and every process whose environment carries this run's and node's identity (torchrun puts
  its workers in sessions of their own), SIGKILL what is left after the grace period, and scan
  again until nothing is left. Given the head's per-run folder, it also says whether this node
  sees the head's token there (a file system shared with the head) and whether the head's output
  path exists here (ranks on this node wrote into the run directory path rank 0 published).
"""

import binascii
import importlib.util
import json
import os
import signal
import socket
import sys
import time

# Kept to C-implemented or already-loaded modules (no glob/re/platform/base64): the helper
# runs on every node before every launch, so its start-up time is the launch's.

ENV_PREFIXES = (
    "NCCL_", "RCCL_", "HSA_", "HIP_", "ROCR_", "ROCM_", "ROC_", "CUDA_", "NVIDIA_", "TORCH_",
    "PYTORCH_", "GLOO_", "OMP_", "MKL_", "UCX_", "FI_", "GPU_", "AMD_", "DEBUG_", "MIOPEN_",
    "HIPBLASLT_", "AORTA_",
)  # fmt: skip
ENV_NAMES = ("PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "DISABLE_TF32", "VIRTUAL_ENV", "CONDA_PREFIX")
SECRET_MARKS = ("TOKEN", "SECRET", "KEY", "PASSWORD")
PACKAGES = ("aorta", "torch", "numpy", "nvidia-nccl-cu11", "nvidia-nccl-cu12", "nvidia-nccl-cu13")


_DISTS = None


def _version(dist):
    # importlib.metadata costs ~50 ms to import and scan; the dist-info folder names in sys.path
    # say the same in ~1 ms (setup runs on every node of every launch).
    global _DISTS
    if _DISTS is None:
        _DISTS = {}
        for folder in sys.path:
            try:
                names = os.listdir(folder or ".")
            except OSError:
                continue
            for entry in names:
                base = entry.rsplit(".", 1)[0]
                if entry.endswith((".dist-info", ".egg-info")) and "-" in base:
                    name, version = base.split("-", 1)
                    _DISTS.setdefault(name.lower().replace("_", "-").replace(".", "-"), version)
    return _DISTS.get(dist.lower().replace("_", "-"))


def _listdir(folder, prefix):
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return [os.path.join(folder, n) for n in sorted(names) if n.startswith(prefix)]


def _read(path, limit=4096):
    try:
        with open(path, "rb") as fh:
            return fh.read(limit).decode("utf-8", "replace").strip()
    except OSError:
        return None


def _torch_build():
    # torch/version.py holds the build's CUDA/HIP versions; executing it avoids importing torch.
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return {}, None
    root = next(iter(spec.submodule_search_locations))
    scope = {}
    try:
        with open(os.path.join(root, "version.py")) as fh:
            exec(compile(fh.read(), "torch/version.py", "exec"), scope)
    except Exception:
        return {}, root
    return {
        "cuda": scope.get("cuda"),
        "hip": scope.get("hip"),
        "git": scope.get("git_version"),
    }, root


def _library_versions(torch_root):
    # NCCL/RCCL as the loader would find them: real names of the shared objects on disk.
    dirs = ["/opt/rocm/lib", "/usr/lib/x86_64-linux-gnu", "/usr/local/lib"]
    if torch_root:
        dirs.insert(0, os.path.join(torch_root, "lib"))
    found = {}
    for lib in ("nccl", "rccl"):
        names = []
        for d in dirs:
            for path in _listdir(d, f"lib{lib}.so"):
                names.append(os.path.basename(os.path.realpath(path)))
        found[lib] = max(names, key=len) if names else None
    return found


def _drivers():
    nvidia = _read("/proc/driver/nvidia/version")
    if nvidia:
        words = nvidia.split()
        nvidia = next((w for w in words if w[:1].isdigit() and w.count(".") >= 1), nvidia[:80])
    nv_gpus = len(_listdir("/proc/driver/nvidia/gpus", ""))
    amd_gpus = 0
    for node in _listdir("/sys/class/kfd/kfd/topology/nodes", ""):
        props = os.path.join(node, "properties")
        text = _read(props, 65536) or ""
        if any(
            line.startswith("simd_count") and line.split()[-1] != "0" for line in text.splitlines()
        ):
            amd_gpus += 1
    rocm = _read("/opt/rocm/.info/version")
    return {
        "nvidia": nvidia,
        "amdgpu": _read("/sys/module/amdgpu/version"),
        "rocm": rocm,
        "gpus_nvidia": nv_gpus,
        "gpus_amd": amd_gpus,
    }


def _which(name):
    for d in os.environ.get("PATH", "").split(os.pathsep):
        path = os.path.join(d, name)
        if d and os.access(path, os.X_OK) and not os.path.isdir(path):
            return path
    return None


def _env():
    env = {}
    for name, value in os.environ.items():
        if name in ENV_NAMES or name.startswith(ENV_PREFIXES):
            if any(mark in name.upper() for mark in SECRET_MARKS):
                value = "<redacted>"
            env[name] = value
    return env


def snapshot():
    """What a version skew between nodes would show up in."""
    build, torch_root = _torch_build()
    uname = os.uname()
    return {
        "hostname": socket.gethostname(),
        "os": f"{uname.sysname} {uname.release}",
        "machine": uname.machine,
        "python": ".".join(str(v) for v in sys.version_info[:3]),
        "executable": sys.executable,
        "packages": {name: _version(name) for name in PACKAGES},
        "torch_build": build,
        "libraries": _library_versions(torch_root),
        "drivers": _drivers(),
        "tools": {name: _which(name) is not None for name in ("rsync", "setsid")},
        "env": _env(),
    }


def _free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("", 0))
        return s.getsockname()[1]
    finally:
        s.close()


def _installed(module):
    # Importable, or at least installed (its dist-info is on sys.path).
    try:
        if importlib.util.find_spec(module) is not None:
            return True
    except (ImportError, ValueError):
        pass
    return _version(module) is not None


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
    out["snapshot"] = snapshot()
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
    result = {"setup": setup, "kill": kill, "snapshot": lambda _req: snapshot()}[argv[0]](request)
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
