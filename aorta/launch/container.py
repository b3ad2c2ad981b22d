"""Launch inside a container on every node, as CVS does (docs/launch.md, "Containers"): per
node, over its SSH session and the docker CLI there, a probe, the container started or found,
this aorta shipped into the run's folder (its source tree and a ``dist-info``, first on
``PYTHONPATH``, nothing written into the image); then every command goes through ``docker
exec``; teardown gives the run's files back and removes a ``per_run`` container.

>>> from aorta.recipe.cluster import Container
>>> c = Container(image="rocm/pytorch:latest", env={"HF_TOKEN": "s3cret"})
>>> argv = run_argv(c, "aorta-r1-0", "/w", {"rocm": True}, env_file="/w/c.env")
>>> " ".join(argv[:11])
'docker run -d --name aorta-r1-0 --network host --ipc host --user root'
>>> "s3cret" in " ".join(argv), argv[-4:]
(False, ['rocm/pytorch:latest', 'tail', '-f', '/dev/null'])
"""

from __future__ import annotations

import functools
import importlib.metadata
import io
import posixpath
import re
import shlex
import tarfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import aorta
from aorta.recipe.cluster import Container, Node

from .node_command import LAUNCH_DIR
from .ssh import ExecResult, NodeSession, RemoteError

__all__ = ["ContainerSession", "aorta_requirements", "run_argv", "ship_aorta"]

SHIP_DIR = "aorta-src"  # in the run's folder on the node: this aorta, first on PYTHONPATH
#: What :meth:`ContainerSession.probe` prints, one ``key=value`` line each.
_PROBE = """\
{mkdir}cd {workdir} && echo "workdir=$(pwd)" || exit 3
echo "uid=$(id -u)"; echo "gid=$(id -g)"
command -v {docker0} >/dev/null 2>&1 || {{ echo "error={docker0}: command not found"; exit 4; }}
v=$({docker} version --format '{{{{.Server.Version}}}}' 2>&1) || {{ echo "error=docker does not answer: $(echo "$v" | tail -n 1)"; exit 5; }}
echo "docker=$v"
echo "image=$({docker} image inspect --format '{{{{.Id}}}}' {image} 2>/dev/null)"
echo "state=$({docker} inspect --format '{{{{.State.Running}}}} {{{{.Image}}}}' {name} 2>/dev/null)"
test -e /dev/kfd && echo rocm=1
command -v nvidia-smi >/dev/null 2>&1 && echo nvidia=1
exit 0
"""


def run_argv(
    spec: Container, name: str, workdir: str, facts: Mapping[str, Any], *, env_file: str
) -> list[str]:
    """``docker run`` for a node: detached, host network and IPC, the spec's user, ``video`` and
    ``render`` on a ROCm node (``/dev/kfd`` and ``/dev/dri`` passed in), ``--gpus all`` on an
    NVIDIA one, the workdir mounted at its own path, environment values only in ``env_file``;
    ``tail -f /dev/null`` keeps it up for ``docker exec``."""
    argv = [*shlex.split(spec.runtime), "run", "-d", "--name", name, "--network", "host"]
    argv += ["--ipc", "host", "--user", spec.user]
    rocm, nvidia = bool(facts.get("rocm")), bool(facts.get("nvidia"))
    groups = spec.groups if spec.groups is not None else (("video", "render") if rocm else ())
    devices = [*spec.devices, *(("/dev/kfd", "/dev/dri") if rocm else ())]
    argv += [f"--group-add={g}" for g in groups] + [f"--device={d}" for d in devices]
    gpus = spec.gpus or ("all" if nvidia else None)
    argv += [f"--gpus={gpus}"] if gpus else []
    argv += ["--privileged"] if spec.privileged else []
    argv += ["-v", f"{workdir}:{workdir}", *(f"-v{m}" for m in spec.mounts)]
    argv += ["--env-file", env_file, *spec.run_args]
    return [*argv, spec.image, "tail", "-f", "/dev/null"]


def ship_aorta() -> bytes:
    """A tar of the running aorta's package and a ``dist-info`` carrying its entry points."""
    buf = io.BytesIO()
    root = Path(aorta.__file__).parent
    try:
        dist = importlib.metadata.distribution("aorta")
        entry_points = dist.read_text("entry_points.txt") or ""
    except importlib.metadata.PackageNotFoundError:
        entry_points = ""
    info = f"aorta-{aorta.__version__}.dist-info"
    meta = f"Metadata-Version: 2.1\nName: aorta\nVersion: {aorta.__version__}\n"
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(root, "aorta", filter=lambda t: None if "__pycache__" in t.name else t)
        for name, text in (("METADATA", meta), ("entry_points.txt", entry_points)):
            data = text.encode()
            member = tarfile.TarInfo(f"{info}/{name}")
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    return buf.getvalue()


@functools.cache
def aorta_requirements() -> tuple[str, ...]:
    """One module per dependency of aorta (``yaml`` for PyYAML, ...): the image must import
    them, aorta ships without them."""
    try:
        wanted = {
            re.split(r"[\s;\[<>=!~]", r, maxsplit=1)[0].lower()
            for r in importlib.metadata.requires("aorta") or []
            if "extra ==" not in r
        }
    except importlib.metadata.PackageNotFoundError:
        return ()
    per_dist: dict[str, list[str]] = {}
    for module, dists in importlib.metadata.packages_distributions().items():
        for dist in (d.lower() for d in dists if d.lower() in wanted):
            if module.isidentifier() and not module.startswith("_"):
                per_dist.setdefault(dist, []).append(module)
    pick = [dist if dist in mods else sorted(mods)[0] for dist, mods in per_dist.items()]
    return tuple(sorted(pick))


class ContainerSession:
    """One node's :class:`~aorta.launch.ssh.NodeSession` whose commands run in its container:
    :meth:`prepare`, then :meth:`exec` through ``docker exec`` (a dry run: a throwaway ``docker
    run --rm``, which proves the image runs), then :meth:`teardown`."""

    def __init__(self, inner: NodeSession, spec: Container, run_id: str) -> None:
        self.inner, self.spec, self.run_id = inner, spec, run_id
        self.node: Node = replace(inner.node, python=spec.python)
        self.name = spec.container_name(run_id, inner.node.rank)
        self.docker = shlex.split(spec.runtime)
        self.facts: dict[str, str] = {}
        self.workdir: str | None = None  # absolute, as the host and the container see it
        self.up = False  # the container runs and this run may exec in it
        self.dry = False
        self.dry_env = ""  # a dry run's env file on the node (mktemp), removed after use
        self.attempted = False  # a `docker run` was sent: teardown removes whatever it made
        self.creating = threading.Lock()  # held while a `docker run` may be creating it
        self.notes: list[str] = []

    # -- NodeSession ------------------------------------------------------------------------

    def exec(self, command: str, *, timeout: float, **options: Any) -> ExecResult:
        return self.inner.exec(self.wrap(command), timeout=timeout, **options)

    def pull(self, remote_dir: str, local_dir: Path, *, timeout: float) -> str:
        return self.inner.pull(remote_dir, local_dir, timeout=timeout)

    def close(self) -> None:
        self.inner.close()

    # -- the docker lines -------------------------------------------------------------------

    @property
    def run_folder(self) -> str:
        return posixpath.join(str(self.workdir), LAUNCH_DIR, self.run_id)

    def _cli(self, *args: str) -> str:
        return shlex.join([*self.docker, *args])

    def wrap(self, command: str) -> str:
        """``command`` as the node's shell line that runs it in the container, this aorta first
        on ``PYTHONPATH`` (the container's own ``PYTHONPATH`` after it)."""
        ship = posixpath.join(self.run_folder, SHIP_DIR)
        inner = (
            f'PYTHONPATH={shlex.quote(ship)}"${{PYTHONPATH:+:$PYTHONPATH}}"; export PYTHONPATH; '
        )
        where = ["-w", str(self.workdir)]
        line = shlex.quote(inner + command)
        if not self.dry:
            return f"{shlex.join([*self.docker, 'exec', '-i', *where, self.name])} sh -c {line}"
        spec, env = self.spec, self.dry_env or "/dev/null"
        mounts = ["-v", f"{self.workdir}:{self.workdir}:ro", *(f"-v{m}" for m in spec.mounts)]
        head = [*self.docker, "run", "--rm", "-i", "--network", "host", "--user", spec.user]
        head += [*mounts, *where, "--env-file", env, *spec.run_args, spec.image]
        rm = f"; rc=$?; rm -f {shlex.quote(env)}; exit $rc" if self.dry_env else ""
        return f"{shlex.join(head)} sh -c {line}{rm}"

    def run_env(self, env: Mapping[str, str]) -> dict[str, str]:
        """The run's environment: a ``PYTHONPATH`` the cluster file sets keeps this aorta first."""
        ship = posixpath.join(self.run_folder, SHIP_DIR)
        path = {"PYTHONPATH": f"{ship}:{env['PYTHONPATH']}"} if "PYTHONPATH" in env else {}
        return {**env, **path}

    def describe(self) -> list[str]:
        """This node's docker lines for ``--dry-run`` and ``launch.json`` (no values: the
        environment is in the env file)."""
        workdir = str(self.workdir or self.node.workdir)
        env_file = posixpath.join(workdir, LAUNCH_DIR, self.run_id, "container.env")
        start = {
            "per_run": f"{self._cli('rm', '-f', self.name)}; "
            + shlex.join(run_argv(self.spec, self.name, workdir, self.facts, env_file=env_file)),
            "persistent": "reuse the running container, else as per_run (kept afterwards)",
            "no_launch": f"use the running container {self.name} (started by you, kept)",
        }[self.spec.lifetime]
        keys = ", ".join(sorted(self.spec.env)) or "none"
        return [
            f"container: {start}",
            f"container env file keys: {keys}",
            "then: " + self.wrap("…"),
        ]

    def snapshot(self) -> dict[str, str]:
        """What the node's ``host_env.json`` (and the skew report) says of the container."""
        keep = {"image": self.spec.image, "image_id": self.facts.get("image", "")}
        return {**keep, "docker": self.facts.get("docker", "")}  # the name differs per node

    # -- lifecycle --------------------------------------------------------------------------

    def _host(self, line: str, timeout: float, stdin: bytes | None = None) -> ExecResult:
        return self.inner.exec(line, timeout=timeout, stdin=stdin)

    def probe(self, *, timeout: float) -> dict[str, str]:
        """Ask the node (its shell, no Python): workdir (created: it is mounted), ids, docker,
        image, container, GPUs."""
        q = shlex.quote
        script = _PROBE.format(
            mkdir=f"mkdir -p {q(self.node.workdir)} && ",
            workdir=q(self.node.workdir),
            docker0=q(self.docker[0]),
            docker=shlex.join(self.docker),
            image=q(self.spec.image),
            name=q(self.name),
        )
        result = self._host(f"sh -c {q(script)}", timeout)
        facts = dict(
            line.split("=", 1) for line in result.stdout.splitlines() if "=" in line.strip()
        )
        if "error" in facts:
            raise RemoteError(facts["error"])
        if result.exit_code != 0 or "workdir" not in facts:
            raise RemoteError(f"cannot enter the workdir {self.node.workdir}: {result.cause}")
        self.facts, self.workdir = facts, facts["workdir"]
        return facts

    def prepare(self, *, timeout: float, cancel: threading.Event, dry_run: bool = False) -> None:
        """Setup's first step on this node: probe, then start (``per_run``, or a missing
        ``persistent`` one), reuse or find the container; ship aorta. A dry run only probes.
        Raises :class:`~aorta.launch.ssh.RemoteError` with what is wrong."""
        self.dry = dry_run
        facts = self.probe(timeout=timeout)
        spec, (state, _, image) = self.spec, facts.get("state", "").partition(" ")
        running = state == "true"
        if running and spec.lifetime == "persistent" and image != facts.get("image"):
            self.notes.append(f"{self.name} ran another image than {spec.image}")
            running = False  # replaced below
        if not facts.get("image") and not (spec.lifetime == "no_launch" and running):
            raise RemoteError(
                f"image {spec.image} is not on this node (docker {facts['docker']}): "
                "`docker pull` it there (aorta pulls nothing)"
            )
        if spec.lifetime == "no_launch" and not running:
            what = "is stopped" if facts.get("state") else "does not exist"
            raise RemoteError(
                f"container {self.name} {what} on this node; lifetime no_launch uses the one "
                "you started (start it, or use lifetime per_run)"
            )
        if dry_run:  # the throwaway container's environment, removed by the one command
            line = 'umask 077 && f=$(mktemp) && cat > "$f" && echo "$f"'
            self.dry_env = self._host(line, timeout, stdin=self._env_bytes()).stdout.strip()
            return
        if running and spec.lifetime != "per_run":
            self.notes.append(f"reused the running container {self.name}")
        else:
            with self.creating:  # teardown waits for it, and cancel is set before teardown
                if cancel.is_set():
                    raise RemoteError("the launch gave up before the container started")
                self._start(timeout, replace_stale=bool(facts.get("state")))
            if cancel.is_set():  # the launch gave up on this node meanwhile: undo it here
                self._remove(timeout)
                raise RemoteError("setup deadline passed while the container started")
        self.up = True
        folder = posixpath.join(self.run_folder, SHIP_DIR)
        q = shlex.quote
        line = f"mkdir -p {q(folder)} && tar -xf - -C {q(folder)}"
        shipped = self._host(line, timeout, stdin=ship_aorta())
        if shipped.exit_code != 0:
            raise RemoteError(f"cannot unpack aorta into {folder}: {shipped.cause}")
        seen = self._host(self._cli("exec", self.name, "test", "-d", folder), timeout)
        if seen.exit_code != 0:
            raise RemoteError(
                f"container {self.name} does not see {self.workdir}: mount the node's workdir "
                "at the same path in it"
            )

    def _env_bytes(self) -> bytes:
        return "".join(f"{k}={v}\n" for k, v in self.spec.env.items()).encode()

    def _start(self, timeout: float, *, replace_stale: bool) -> None:
        self.attempted = True
        q, env_file = shlex.quote, posixpath.join(self.run_folder, "container.env")
        argv = run_argv(self.spec, self.name, str(self.workdir), self.facts, env_file=env_file)
        stale = f"{self._cli('rm', '-f', self.name)} >/dev/null 2>&1; " if replace_stale else ""
        line = (
            f"mkdir -p {q(self.run_folder)} && (umask 077 && cat > {q(env_file)}) && "
            f"{stale}{shlex.join(argv)} 2>&1; rc=$?; rm -f {q(env_file)}; exit $rc"
        )
        result = self._host(line, timeout, stdin=self._env_bytes())
        if replace_stale:
            self.notes.append(f"replaced a stale container {self.name}")
        if result.exit_code != 0:
            raise RemoteError(f"docker run {self.spec.image} failed: {result.cause}")

    def _remove(self, timeout: float) -> str:
        # Setup (undoing a start the launch gave up on) and teardown may both remove it: the
        # second `rm` is told "already in progress" and waits for the first to finish.
        deadline = time.monotonic() + timeout
        while True:
            left = max(deadline - time.monotonic(), 1.0)
            result = self._host(f"{self._cli('rm', '-f', self.name)} 2>&1", left)
            if "already in progress" not in result.stdout or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        self.up = False
        if result.exit_code != 0 and "No such container" not in result.stdout:
            return f"container {self.name} not removed: {result.cause}"
        return f"container {self.name} removed"

    def teardown(
        self, stop: Callable[[], dict[str, Any]], *, timeout: float, wait: float
    ) -> dict[str, Any]:
        """After a ``docker run`` in flight has returned (up to ``wait`` s, its own deadline):
        ``stop()`` this run's processes (the node helper's ``kill``, in the container), give the
        run's files to the login user, remove a ``per_run`` container (reported: ``container``)."""
        got = self.creating.acquire(timeout=wait)
        report: dict[str, Any] = {"terminated": 0, "killed": 0, "left": []}
        notes = list(self.notes)
        try:
            if self.up:
                try:
                    report = stop()
                finally:
                    notes.append(self._give_back(timeout))
        finally:  # a failed stop still removes the container
            if self.spec.lifetime == "per_run" and self.attempted:
                notes.append(self._remove(timeout))
            elif self.up:
                notes.append(f"container {self.name} kept ({self.spec.lifetime})")
            if got:
                self.creating.release()
        return {**report, "container": "; ".join(n for n in notes if n)}

    def _give_back(self, timeout: float) -> str:
        owner = f"{self.facts.get('uid', '0')}:{self.facts.get('gid', '0')}"
        line = self._cli("exec", "-u", "0", self.name, "chown", "-R", owner, self.run_folder)
        result = self._host(line + " 2>&1", timeout)
        if result.exit_code != 0:
            return f"files not given back to {owner}: {result.cause}"
        return ""
