"""Environment snapshots: what a host is and what it runs with (``host_env.json``).

This module is the one implementation of every ``host_env.json``: the sweep's (this host) and
the launch's (each node, taken by the node agent, where aorta may not be installed — the
launcher ships this file's source to it). So it imports only the standard library, its syntax
runs on Python 3.8, and it never imports torch (versions are read from files).

Secrets never reach disk: :func:`redact_env` replaces the value of every variable whose name
matches :data:`SECRET_NAME_GLOBS` (case-insensitive) or one of the caller's ``scrub_keys`` globs
(a recipe's ``redaction.scrub_env_keys``); with ``scrub_paths`` / ``scrub_ips`` home paths and IP
addresses in the other values are masked. Values are also scrubbed by shape
(:func:`redact_secret_shapes`: credentials in URLs, bearer tokens, ``--password=…``, well-known
token formats), whatever their variable is called.

Examples
--------
>>> redact_env({"HF_TOKEN": "abc", "DB_PASSWD": "x", "NCCL_DEBUG": "INFO", "MY_VAR": "v"},
...            scrub_keys=["MY_*"])
{'HF_TOKEN': '<redacted>', 'DB_PASSWD': '<redacted>', 'NCCL_DEBUG': 'INFO', 'MY_VAR': '<redacted>'}
"""

from __future__ import annotations

import datetime
import fnmatch
import importlib.metadata
import importlib.util
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping  # noqa: UP035 - Python 3.8 on the nodes

__all__ = [
    "REDACTED",
    "RELEVANT_PREFIXES",
    "SECRET_NAME_GLOBS",
    "redact_env",
    "redact_secret_shapes",
    "redact_secret_shapes_counted",
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
#: Name globs (matched upper-cased) whose values are never written down.
SECRET_NAME_GLOBS = ("*TOKEN*", "*SECRET*", "*KEY*", "*PASSWORD*", "*PASSWD*", "*CREDENTIAL*")
REDACTED = "<redacted>"
_IP = re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}\b")
#: Values that carry a credential whatever the variable is called: the secret part of each
#: match (group ``s``) becomes ``<redacted>``.
_SECRET_SHAPES = (
    # scheme://user:SECRET@host (postgres, https, redis, amqp, …)
    re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s:/@]+:(?P<s>[^\s@/]+)@"),
    # Authorization: Bearer SECRET / token SECRET / Basic SECRET
    re.compile(r"(?i)\b(?:bearer|basic|token)\s+(?P<s>[A-Za-z0-9._~+/=-]{8,})"),
    # --password=SECRET, --token SECRET, api_key=SECRET, secret: SECRET, passwd=SECRET
    re.compile(
        r"(?i)(?:--?|\b)[a-z0-9_-]*(?:password|passwd|token|secret|api[_-]?key|credential)s?"
        r"(?:\s*[=:]\s*|\s+)(?P<s>[^\s'\"&;,]{4,})"
    ),
    # Well-known token formats: GitHub, Hugging Face, Slack, AWS access keys, JWTs.
    re.compile(r"\b(?P<s>(?:gh[pousr]_|hf_|xox[abposr]-)[A-Za-z0-9_-]{16,})"),
    re.compile(r"\b(?P<s>AKIA[0-9A-Z]{16})\b"),
    re.compile(r"\b(?P<s>eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})"),
)


def redact_secret_shapes(text: str) -> str:
    """``text`` with credentials recognised by their shape redacted.

    >>> redact_secret_shapes("postgres://u:hunter2@db/x --password=s3cret Bearer abcdefgh123")
    'postgres://u:<redacted>@db/x --password=<redacted> Bearer <redacted>'
    """
    return redact_secret_shapes_counted(text)[0]


def _mask_secret_part(m: re.Match[str]) -> str:
    whole = m.group(0)
    if m.group("s") == REDACTED:
        return whole  # already masked: do not count it twice
    return whole[: m.start("s") - m.start()] + REDACTED + whole[m.end("s") - m.start() :]


def redact_secret_shapes_counted(text: str) -> tuple[str, int]:
    """:func:`redact_secret_shapes` and how many credentials it masked (for bundle manifests).

    >>> redact_secret_shapes_counted("Bearer abcdefgh123 and token <redacted>")
    ('Bearer <redacted> and token <redacted>', 1)
    """
    total = 0
    for shape in _SECRET_SHAPES:
        masked = 0

        def mask(m: re.Match[str]) -> str:
            nonlocal masked
            out = _mask_secret_part(m)
            masked += out != m.group(0)
            return out

        text = shape.sub(mask, text)
        total += masked
    return text, total


def redact_env(
    env: Mapping[str, str],
    *,
    scrub_keys: Iterable[str] = (),
    scrub_paths: bool = False,
    scrub_ips: bool = False,
) -> dict[str, str]:
    """A copy of ``env`` safe to write down (see the module docstring).

    ``scrub_keys`` are name globs redacted on top of :data:`SECRET_NAME_GLOBS`, matched as
    written (``fnmatch`` case-sensitive), e.g. a recipe's ``redaction.scrub_env_keys``.
    """
    globs = list(scrub_keys)
    home = str(Path.home())
    out = {}
    for key, value in env.items():
        if any(fnmatch.fnmatchcase(key.upper(), g) for g in SECRET_NAME_GLOBS) or any(
            fnmatch.fnmatchcase(key, g) for g in globs
        ):
            out[key] = REDACTED
            continue
        value = redact_secret_shapes(value)
        if scrub_paths and home and home != "/":
            value = value.replace(home, "~")
        if scrub_ips:
            value = _IP.sub("<ip>", value)
        out[key] = value
    return out


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


def _gpus() -> dict[str, Any]:
    gpus: dict[str, Any] = {}
    query = "--query-gpu=index,name,driver_version,memory.total"
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
    CUDA/HIP, NCCL/RCCL libraries, GPU drivers and devices, tools the launch uses, the git commit
    of ``cwd`` when it is a checkout, and the relevant variables of ``env`` (redacted)."""
    env = os.environ if env is None else env
    relevant = {k: v for k, v in sorted(env.items()) if k.startswith(RELEVANT_PREFIXES)}
    torch, torch_root = _torch()
    now = datetime.datetime.now(datetime.timezone.utc)
    return {
        "taken_at": now.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "executable": sys.executable,
        "aorta": _version("aorta"),
        "torch": torch,
        "libraries": _libraries(torch_root),
        "drivers": _drivers(),
        "gpus": _gpus(),
        "tools": {name: shutil.which(name) is not None for name in ("setsid", "tar")},
        "git_commit": _run(["git", "-C", str(cwd or Path.cwd()), "rev-parse", "HEAD"], 3.0),
        "env": redact_env(
            relevant, scrub_keys=scrub_keys, scrub_paths=scrub_paths, scrub_ips=scrub_ips
        ),
    }
