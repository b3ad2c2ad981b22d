"""Environment snapshots: what this host is and what it runs with (``host_env.json``).

Secrets never reach disk: variables whose names contain TOKEN, SECRET, KEY or PASSWORD are
redacted, as are names matching a recipe's ``redaction.scrub_env_keys`` globs; with
``scrub_paths`` / ``scrub_ip_addresses`` home paths and IP addresses in values are masked.

Examples
--------
>>> redact_env({"HF_TOKEN": "abc", "NCCL_DEBUG": "INFO"})
{'HF_TOKEN': '<redacted>', 'NCCL_DEBUG': 'INFO'}
"""

from __future__ import annotations

import fnmatch
import importlib.metadata
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from aorta.store.rundir import utc_now

__all__ = ["RELEVANT_PREFIXES", "redact_env", "snapshot"]

#: Variables worth keeping in a snapshot: the stacks a triage touches.
RELEVANT_PREFIXES = (
    "NCCL_",
    "RCCL_",
    "HSA_",
    "HIP_",
    "ROC",
    "AMD_",
    "GPU_",
    "DEBUG_HIP",
    "DEBUG_CLR",
    "MIOPEN_",
    "CUDA_",
    "NVIDIA_",
    "CUBLAS",
    "TORCH_",
    "PYTORCH_",
    "OMP_",
    "MKL_",
    "KMP_",
    "GLOO_",
    "UCX_",
    "FI_",
    "AORTA_",
    "MASTER_",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "LD_LIBRARY_PATH",
    "PATH",
    "DISABLE_TF32",
    "ATEN_",
    "XLA_",
    "TRITON_",
)
_SECRET = re.compile(r"TOKEN|SECRET|KEY|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
_IP = re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}\b")
REDACTED = "<redacted>"


def redact_env(
    env: Mapping[str, str],
    *,
    scrub_keys: Iterable[str] = (),
    scrub_paths: bool = False,
    scrub_ips: bool = False,
) -> dict[str, str]:
    """A copy of ``env`` safe to write down (see the module docstring)."""
    globs = list(scrub_keys)
    home = str(Path.home())
    out = {}
    for key, value in env.items():
        if _SECRET.search(key) or any(fnmatch.fnmatchcase(key, g) for g in globs):
            out[key] = REDACTED
            continue
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


def _run(argv: list[str], timeout: float = 5.0) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def _gpus() -> dict[str, Any]:
    gpus: dict[str, Any] = {}
    nvidia = _run(
        [
            "nvidia-smi",
            "--query-gpu=index,name,driver_version,memory.total",
            "--format=csv,noheader",
        ]
    )
    if nvidia:
        gpus["nvidia"] = [line.strip() for line in nvidia.splitlines() if line.strip()]
    rocm = _run(["rocm-smi", "--showproductname", "--showdriverversion", "--csv"])
    if rocm:
        gpus["rocm_smi"] = rocm.splitlines()
    version_file = Path("/opt/rocm/.info/version")
    if version_file.is_file():
        gpus["rocm_version"] = version_file.read_text().strip()
    return gpus


def _torch_info() -> dict[str, Any]:
    # Only ask torch for details if something already imported it: importing it here would
    # cost a second or more for a probe sweep that never uses it.
    info: dict[str, Any] = {"version": _version("torch")}
    torch = sys.modules.get("torch")
    if torch is not None:
        info["cuda"] = getattr(torch.version, "cuda", None)
        info["hip"] = getattr(torch.version, "hip", None)
        try:
            info["nccl"] = (
                ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None
            )
        except Exception:  # not built with NCCL/RCCL
            info["nccl"] = None
    return info


def _git_commit(cwd: Path) -> str | None:
    return _run(["git", "-C", str(cwd), "rev-parse", "HEAD"], timeout=3.0)


def snapshot(
    *,
    env: Mapping[str, str] | None = None,
    scrub_keys: Iterable[str] = (),
    scrub_paths: bool = False,
    scrub_ips: bool = False,
    cwd: Path | None = None,
) -> dict[str, Any]:
    """This host's facts: python, torch, GPUs and driver versions, relevant env vars (redacted),
    and the git commit of ``cwd`` when it is a checkout."""
    env = os.environ if env is None else env
    relevant = {k: v for k, v in sorted(env.items()) if k.startswith(RELEVANT_PREFIXES)}
    return {
        "taken_at": utc_now(),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "aorta": _version("aorta"),
        "torch": _torch_info(),
        "gpus": _gpus(),
        "git_commit": _git_commit(cwd or Path.cwd()),
        "env": redact_env(
            relevant, scrub_keys=scrub_keys, scrub_paths=scrub_paths, scrub_ips=scrub_ips
        ),
    }
