"""Environment snapshots: what a host is and what it runs with (``host_env.json``).

This module is the one implementation of every ``host_env.json``: the sweep's (this host) and
the launch's (each node, taken by the node agent, where aorta may not be installed — the
launcher ships this file's source to it). So it imports only the standard library and
:mod:`aorta.store.secrets` (shipped with it), its syntax runs on Python 3.8, and it never
imports torch (versions are read from files).

Secrets never reach disk: the snapshot's variables go through
:func:`~aorta.store.secrets.redact_env` (secret names and the caller's ``scrub_keys`` globs
masked, values scrubbed by shape, with ``scrub_paths`` / ``scrub_ips`` homes and IP addresses
too) — the rules of :mod:`aorta.store.secrets`, which every other redaction builds on.

Snapshots of several hosts are compared with :func:`diff_snapshots`: a classic cluster-only bug
is a version, a driver or an NCCL/RCCL variable that differs between nodes.

Examples
--------
>>> snapshot(env={"NCCL_IB_PASSWD": "abc", "NCCL_DEBUG": "INFO", "HOME": "/root"})["env"]
{'NCCL_DEBUG': 'INFO', 'NCCL_IB_PASSWD': '<redacted>'}
>>> sorted(diff_snapshots({
...     "node0": {"torch": {"version": "2.4.0"}, "env": {"NCCL_DEBUG": "INFO"}, "host": "a"},
...     "node1": {"torch": {"version": "2.3.1"}, "env": {}, "host": "b"},
... }))
['env.NCCL_DEBUG', 'torch.version']
"""

from __future__ import annotations

import datetime
import importlib.metadata
import importlib.util
import os
import platform
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping  # noqa: UP035 - Python 3.8 on the nodes

from aorta.store.secrets import redact_env

__all__ = [
    "PER_HOST_KEYS",
    "PER_RUN_KEYS",
    "RELEVANT_PREFIXES",
    "diff_snapshots",
    "environment_changes",
    "snapshot",
]

#: Variables worth keeping in a snapshot: the stacks a triage touches.
RELEVANT_PREFIXES = (
    "NCCL_", "RCCL_", "HSA_", "HIP_", "ROC", "AMD_", "GPU_", "DEBUG_HIP", "DEBUG_CLR", "MIOPEN_",
    "HIPBLASLT_", "CUDA_", "NVIDIA_", "CUBLAS", "TORCH_", "PYTORCH_", "OMP_", "MKL_", "KMP_",
    "GLOO_", "UCX_", "FI_", "AORTA_", "MASTER_", "WORLD_SIZE", "RANK", "LOCAL_RANK",
    "LD_LIBRARY_PATH", "PATH", "PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX", "DISABLE_TF32",
    "ATEN_", "XLA_", "TRITON_",
)  # fmt: skip


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _read(path: str, limit: int = 65536) -> str | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(limit).decode("utf-8", "replace").strip()
    except OSError:
        return None


def _listdir(folder: str, prefix: str = "") -> list[str]:
    try:
        return [os.path.join(folder, n) for n in sorted(os.listdir(folder)) if n.startswith(prefix)]
    except OSError:
        return []


def _run(argv: list[str], timeout: float = 5.0) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def _torch() -> tuple[dict[str, Any], str | None]:
    # torch/version.py holds the build's CUDA/HIP versions: executing it avoids importing torch.
    info: dict[str, Any] = {"version": _version("torch"), "cuda": None, "hip": None, "git": None}
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return info, None
    root = next(iter(spec.submodule_search_locations))
    scope: dict[str, Any] = {}
    try:
        with open(os.path.join(root, "version.py")) as fh:
            exec(compile(fh.read(), "torch/version.py", "exec"), scope)
    except Exception:  # an odd build: the version from the metadata is still worth having
        return info, root
    info.update(cuda=scope.get("cuda"), hip=scope.get("hip"), git=scope.get("git_version"))
    return info, root


def _libraries(torch_root: str | None) -> dict[str, Any]:
    # NCCL/RCCL as the loader would find them (real names of the shared objects), and the
    # NCCL wheel pip installs beside CUDA builds of torch.
    dirs = ["/opt/rocm/lib", "/usr/lib/x86_64-linux-gnu", "/usr/local/lib"]
    if torch_root:
        dirs.insert(0, os.path.join(torch_root, "lib"))
    found: dict[str, Any] = {}
    for lib in ("nccl", "rccl"):
        names = [
            os.path.basename(os.path.realpath(p)) for d in dirs for p in _listdir(d, f"lib{lib}.so")
        ]
        found[lib] = max(names, key=len) if names else None
    wheels = (_version(f"nvidia-nccl-cu{v}") for v in (13, 12, 11))
    found["nccl_wheel"] = next((w for w in wheels if w), None)
    return found


def _drivers() -> dict[str, Any]:
    nvidia = _read("/proc/driver/nvidia/version")
    if nvidia:
        nvidia = next((w for w in nvidia.split() if w[:1].isdigit() and "." in w), nvidia[:80])
    amd_gpus = 0
    for node in _listdir("/sys/class/kfd/kfd/topology/nodes"):
        lines = (_read(os.path.join(node, "properties")) or "").splitlines()
        amd_gpus += any(line.startswith("simd_count") and line.split()[-1] != "0" for line in lines)
    return {
        "nvidia": nvidia,
        "amdgpu": _read("/sys/module/amdgpu/version"),
        "rocm": _read("/opt/rocm/.info/version"),
        "gpus_nvidia": len(_listdir("/proc/driver/nvidia/gpus")),
        "gpus_amd": amd_gpus,
    }


def _distributions() -> dict[str, str]:
    # Installed Python distributions with their versions, from the names of their metadata
    # folders (``name-1.2.dist-info``) on sys.path: a listing per folder, not a parse of every
    # METADATA file (importlib.metadata's way costs ~90 ms for a hundred distributions).
    found: dict[str, str] = {}
    for entry in sys.path:
        for path in _listdir(entry or "."):
            name = os.path.basename(path)
            for suffix in (".dist-info", ".egg-info"):
                dist, _, version = name[: -len(suffix)].partition("-")
                if name.endswith(suffix) and version:
                    key = dist.lower().replace("_", "-").replace(".", "-")
                    found.setdefault(key, version.split("-")[0])
    return dict(sorted(found.items()))


def _container() -> dict[str, Any]:
    # Whether this process runs in a container, its id from the cgroup, and the image digest
    # when the launcher (or the image's author) put it in the environment: a container cannot
    # see its own image's digest.
    ident = None
    for line in (_read("/proc/self/cgroup") or "").splitlines():
        tail = line.rsplit("/", 1)[-1]
        tail = tail[len("docker-") :] if tail.startswith("docker-") else tail
        tail = tail[: -len(".scope")] if tail.endswith(".scope") else tail
        if len(tail) == 64 and all(c in "0123456789abcdef" for c in tail):
            ident = tail
    in_container = os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv")
    image = os.environ.get("AORTA_IMAGE_DIGEST") or os.environ.get("IMAGE_DIGEST")
    return {"in_container": in_container or ident is not None, "id": ident, "image": image}


def _firmware() -> dict[str, Any]:
    # AMD GPUs' VBIOS from sysfs (NVIDIA's comes with nvidia-smi's query in _gpus).
    versions = [
        _read(os.path.join(card, "device", "vbios_version"))
        for card in _listdir("/sys/class/drm", "card")
        if "-" not in os.path.basename(card)
    ]
    return {"amdgpu_vbios": sorted({v for v in versions if v}) or None}


def _gpus() -> dict[str, Any]:
    gpus: dict[str, Any] = {}
    query = "--query-gpu=index,name,driver_version,memory.total,vbios_version"
    nvidia = _run(["nvidia-smi", query, "--format=csv,noheader"])
    if nvidia:
        gpus["nvidia"] = [line.strip() for line in nvidia.splitlines() if line.strip()]
    rocm = _run(["rocm-smi", "--showproductname", "--showdriverversion", "--csv"])
    if rocm:
        gpus["rocm_smi"] = rocm.splitlines()
    return gpus


def snapshot(
    *,
    env: Mapping[str, str] | None = None,
    scrub_keys: Iterable[str] = (),
    scrub_paths: bool = False,
    scrub_ips: bool = False,
    cwd: Path | None = None,
) -> dict[str, Any]:
    """This host's facts (one schema everywhere): Python, aorta and torch with the build's
    CUDA/HIP, NCCL/RCCL libraries, GPU drivers, firmware and devices, the kernel, the container
    (id, and the image digest when ``AORTA_IMAGE_DIGEST`` names it), every installed Python
    distribution with its version, tools the launch uses, the git commit of ``cwd`` when it is
    a checkout, and the relevant variables of ``env`` (redacted)."""
    env = os.environ if env is None else env
    relevant = {k: v for k, v in sorted(env.items()) if k.startswith(RELEVANT_PREFIXES)}
    torch, torch_root = _torch()
    now = datetime.datetime.now(datetime.timezone.utc)
    return {
        "taken_at": now.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "executable": sys.executable,
        "aorta": _version("aorta"),
        "torch": torch,
        "libraries": _libraries(torch_root),
        "drivers": _drivers(),
        "gpus": _gpus(),
        "firmware": _firmware(),
        "container": _container(),
        "distributions": _distributions(),
        "tools": {name: shutil.which(name) is not None for name in ("setsid", "tar")},
        "git_commit": _run(["git", "-C", str(cwd or Path.cwd()), "rev-parse", "HEAD"], 3.0),
        "env": redact_env(
            relevant, scrub_keys=scrub_keys, scrub_paths=scrub_paths, scrub_ips=scrub_ips
        ),
    }


#: Snapshot keys that differ between hosts by design.
PER_HOST_KEYS = frozenset({"host", "taken_at"})


def _flatten(snapshot: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in snapshot.items():
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def diff_snapshots(
    snapshots: Mapping[str, Mapping[str, Any] | None], *, ignore: Iterable[str] = ()
) -> dict[str, dict[str, Any]]:
    """Where the hosts' snapshots differ, but for :data:`PER_HOST_KEYS` and ``ignore`` (dotted
    keys): ``{"torch.version": {name: value}}``, a key some lack ``(unset)`` there; ``{}`` with
    fewer than two snapshots (``None``: a host that has none)."""
    flat = {name: _flatten(s) for name, s in snapshots.items() if s}
    if len(flat) < 2:
        return {}
    return _diff_flat(flat, ignore)


def _diff_flat(
    flat: Mapping[str, Mapping[str, Any]], ignore: Iterable[str]
) -> dict[str, dict[str, Any]]:
    skew: dict[str, dict[str, Any]] = {}
    for key in sorted(set().union(*flat.values()) - PER_HOST_KEYS - set(ignore)):
        values = {name: f.get(key, "(unset)") for name, f in flat.items()}
        if len({repr(v) for v in values.values()}) > 1:
            skew[key] = values
    return skew


#: Snapshot keys that differ between two runs of the same thing by design (dotted, flattened).
PER_RUN_KEYS = frozenset(
    f"env.{name}"
    for name in (
        "AORTA_RUN_ID", "AORTA_RUN_DIR", "AORTA_LAUNCH_OUTPUT", "AORTA_SWEEP_TOKEN",
        "AORTA_TRIAL_TOKEN", "AORTA_MASTER_PORT", "AORTA_TRIAL_MASTER_PORT_BASE", "MASTER_PORT",
        "AORTA_FR_LISTEN", "AORTA_FR_DIR", "AORTA_ENV_FILE",
    )
)  # fmt: skip


def environment_changes(
    before: Mapping[str, Mapping[str, Any] | None],
    after: Mapping[str, Mapping[str, Any] | None],
    *,
    ignore: Iterable[str] = (),
) -> dict[str, Any]:
    """What changed between two runs' environments, node by node: ``{"torch.version":
    ["2.12.0", "2.13.0"], "env.NCCL_ALGO": [None, "Ring"]}`` (``None``: unset).

    ``before`` and ``after`` map a node's name to its snapshot (a single-host run: one
    entry). Nodes are paired by name, else by position in name order; a key that changed the
    same way on every pair is given once, and the pairs whose changes differ are added under
    ``"nodes": {name: {key: [before, after]}}``. The same rule as :func:`diff_snapshots`
    (one diff for nodes and for runs), without :data:`PER_HOST_KEYS` and
    :data:`PER_RUN_KEYS`.

    >>> environment_changes({"a": {"torch": {"version": "2.12"}, "env": {}}},
    ...                     {"a": {"torch": {"version": "2.13"}, "env": {"NCCL_ALGO": "Ring"}}})
    {'env.NCCL_ALGO': [None, 'Ring'], 'torch.version': ['2.12', '2.13']}
    """
    skip = set(ignore) | PER_RUN_KEYS
    pairs: dict[str, tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]] = {}
    common = sorted(set(before) & set(after))
    if common:
        pairs = {n: (before[n], after[n]) for n in common}
    else:
        pairs = {
            str(b if b == a else f"{b}→{a}"): (before[b], after[a])
            for b, a in zip(sorted(before), sorted(after))  # noqa: B905 - Python 3.8 on the nodes
        }
    per_node: dict[str, dict[str, list[Any]]] = {}
    for name, (b, a) in pairs.items():
        diff = _diff_flat({"0": _flatten(b or {}), "1": _flatten(a or {})}, skip)
        per_node[name] = {
            k: [None if v["0"] == "(unset)" else v["0"], None if v["1"] == "(unset)" else v["1"]]
            for k, v in diff.items()
        }
    if not per_node:
        return {}
    keys = set().union(*per_node.values())
    shared = {
        k: next(iter(per_node.values()))[k]
        for k in sorted(keys)
        if all(
            repr(d.get(k)) == repr(next(iter(per_node.values())).get(k)) for d in per_node.values()
        )
    }
    out: dict[str, Any] = dict(shared)
    if len(per_node) > 1:
        rest = {n: {k: v for k, v in d.items() if k not in shared} for n, d in per_node.items()}
        rest = {n: d for n, d in rest.items() if d}
        if rest:
            out["nodes"] = rest
    return out
