"""A real Docker daemon of the test session's own, and a local test image (no registry).

:class:`DockerDaemon` starts ``dockerd --storage-driver overlay2 --iptables=false
--bridge=none`` (``vfs`` where overlay2 cannot run) as root with its data root, exec root,
socket and pid file in a temporary folder (so several test processes can each run one beside
the machine's own daemon, if any), and imports the test image ``aorta-test``: Debian
bookworm's minimal root file system with ``python3`` (3.11, like this machine's), made by
``debootstrap`` from the Debian mirror and cached as a tarball in
``~/.cache/aorta-test-rootfs/`` (about 120 MB without apt's lists, locales and docs; building
it takes a minute or two, importing it seconds). Torch is not in the image: tests mount the
repo's ``.venv`` read-only at its own path and put its ``site-packages`` on ``PYTHONPATH`` for
Debian's ``python3`` (the venv's ``bin/python`` links to an interpreter outside the venv).

Used by ``tests/launch/test_container.py``; the :func:`docker_fixture` fixture skips
with the reason when docker, debootstrap or root is missing.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sshd import REPO

IMAGE = "aorta-test"
CACHE = Path(os.environ.get("AORTA_TEST_ROOTFS_CACHE", "~/.cache/aorta-test-rootfs")).expanduser()
ROOTFS_TAR = CACHE / "bookworm-python3-slim.tar"
PRUNED = (
    "var/lib/apt/lists",
    "var/cache/apt",
    "usr/share/locale",
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
)
#: overlay2 where the kernel and the backing file system allow it (containers start in well
#: under a second); vfs, which copies the whole image per container, everywhere else.
STORAGE_DRIVERS = ("overlay2", "vfs")
MIRROR = os.environ.get("AORTA_TEST_DEBIAN_MIRROR", "http://deb.debian.org/debian")
VENV = REPO / ".venv"


def venv_site_packages() -> str:
    """The test venv's ``site-packages`` (the tests run in it): torch for the image's python3."""
    return sysconfig.get_paths()["purelib"]


def missing() -> str | None:
    """Why the docker tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (a dockerd of the test session's own)"
    for tool in ("dockerd", "docker", "debootstrap"):
        if shutil.which(tool) is None:
            return (
                f"needs {tool} (Debian packages docker.io and debootstrap; .ci/run installs them)"
            )
    if not VENV.is_dir() or not sys.prefix.startswith(str(VENV)):
        return "the image's python3 borrows the repo's .venv (make dev) for torch"
    return None


def rootfs_tarball() -> Path:
    """The cached rootfs tarball, built once per machine (a lock keeps parallel workers from
    building it twice; a half-written one never gets the final name)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ROOTFS_TAR.is_file():
            return ROOTFS_TAR
        work = Path(tempfile.mkdtemp(prefix="aorta-rootfs-", dir=CACHE))
        try:
            root = work / "root"
            argv = ["debootstrap", "--variant=minbase", "--include=python3", "bookworm"]
            built = subprocess.run(
                [*argv, str(root), MIRROR],
                capture_output=True,
                text=True,
                check=False,
            )
            if built.returncode != 0:
                tail = (built.stdout + built.stderr).strip().splitlines()[-3:]
                raise RuntimeError(f"debootstrap failed: {' | '.join(tail)}")
            partial = work / "rootfs.tar"
            # apt's lists and downloaded packages, locales and docs are half the tree and no
            # test reads them: a smaller image imports and copies faster.
            skip = [f"--exclude=./{p}" for p in PRUNED]
            subprocess.run(["tar", "-C", str(root), *skip, "-cf", str(partial), "."], check=True)
            os.replace(partial, ROOTFS_TAR)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return ROOTFS_TAR


class DockerDaemon:
    """One ``dockerd`` with everything under ``root``; ``docker(...)`` talks to it."""

    def __init__(self) -> None:
        # Short paths: containerd's socket lives under the exec root (unix paths ≤ 108 bytes).
        self.root = Path(tempfile.mkdtemp(prefix="aorta-dockerd-", dir="/tmp"))
        self.socket = self.root / "docker.sock"
        self.host = f"unix://{self.socket}"
        self.log = self.root / "dockerd.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.storage_driver = ""

    @property
    def cli(self) -> list[str]:
        """The docker command line for this daemon (what ``container.runtime`` gets)."""
        return ["docker", "-H", self.host]

    def docker(self, *args: str, check: bool = True, timeout: float = 120.0) -> str:
        done = subprocess.run(
            [*self.cli, *args], capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"docker {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout.strip()

    def start(self, timeout: float = 60.0) -> None:
        """Start the daemon on the first storage driver that works here."""
        failures = []
        for driver in STORAGE_DRIVERS:
            try:
                self._start(driver, timeout)
            except RuntimeError as exc:
                failures.append(f"{driver}: {exc}")
                self._stop()
                continue
            self.storage_driver = driver
            return
        raise RuntimeError("; ".join(failures))

    def _start(self, driver: str, timeout: float) -> None:
        r = self.root / driver
        r.mkdir(parents=True, exist_ok=True)
        argv = ["dockerd", "--storage-driver", driver, "--iptables=false", "--bridge=none"]
        argv += ["--ip6tables=false"] if "ip6tables" in _dockerd_help() else []
        argv += ["--data-root", str(r / "data"), "--exec-root", str(r / "exec")]
        argv += ["-H", self.host, "--pidfile", str(r / "docker.pid")]
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"dockerd exited: {self.log.read_text()[-800:]}")
            ping = subprocess.run(
                [*self.cli, "version", "--format", "{{.Server.Version}}"],
                capture_output=True,
                check=False,
            )
            if ping.returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError(
            f"dockerd did not answer in {timeout:g} s: {self.log.read_text()[-800:]}"
        )

    def import_image(self, tarball: Path) -> None:
        with open(tarball, "rb") as fh:
            done = subprocess.run(
                [*self.cli, "import", "-", IMAGE], stdin=fh, capture_output=True, check=False
            )
        if done.returncode != 0:
            raise RuntimeError(f"docker import: {done.stderr.decode(errors='replace').strip()}")

    def containers(self, prefix: str = "") -> list[str]:
        """Names of every container (running or not) whose name starts with ``prefix``."""
        names = self.docker("ps", "-a", "--format", "{{.Names}}").split()
        return sorted(n for n in names if n.startswith(prefix))

    def close(self) -> None:
        """Remove every container, stop the daemon, delete its folder."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(Exception):
                ids = self.docker("ps", "-aq", check=False, timeout=30).split()
                if ids:
                    self.docker("rm", "-f", *ids, check=False, timeout=60)
        self._stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def _stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None
        # vfs layers hold read-only files and overlay2 leaves its mounts; the daemon is gone
        for mount in _mounts_under(self.root):
            subprocess.run(["umount", "-l", mount], check=False, capture_output=True)


def _dockerd_help() -> str:
    done = subprocess.run(["dockerd", "--help"], capture_output=True, text=True, check=False)
    return done.stdout


def _mounts_under(root: Path) -> list[str]:
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return []
    points = [line.split()[1] for line in lines if len(line.split()) > 1]
    return sorted((p for p in points if p.startswith(str(root))), reverse=True)


@pytest.fixture(scope="session", name="docker")
def docker_fixture() -> Iterator[DockerDaemon]:
    """A running daemon with the ``aorta-test`` image; everything removed at session end."""
    why = missing()
    if why:
        pytest.skip(why)
    try:
        tarball = rootfs_tarball()
    except (RuntimeError, OSError) as exc:
        pytest.skip(f"cannot build the test image's root file system: {exc}")
    daemon = DockerDaemon()
    try:
        daemon.start()
        daemon.import_image(tarball)
        yield daemon
    finally:
        daemon.close()
