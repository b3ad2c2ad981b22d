"""The files hang forensics writes on a rank: its own evidence folder, and the pipes' temp folder.

A sweep's ranks of one node share a trial folder, so each owns what it writes
(:class:`EvidenceDir`: ``hang/rank<N>/``, which only rank N creates, writes and removes); the
``hang/`` folder above is shared, created by whoever comes first and removed only when empty
(``rmdir``), which cannot take anything another rank uses: a rank that finds it gone between
two steps of creating its own folder starts again.

What a trial can reach is never trusted: the folders are opened one component at a time with
``O_NOFOLLOW`` (a trial that puts a link at ``hang/`` or ``hang/rank0/`` gets its evidence
refused on disk, never written through the link), files are written and renamed relative to
the opened folder, and read only when they are regular files, opened without blocking (a FIFO
named like a log or a dump is passed over, not waited on).

NCCL's dump trigger needs a folder of pipes outside the trial (:func:`make_pipes_folder`,
``$TMPDIR/aorta-fr-<pid namespace>.<pid>-XXXX``): it is removed when the trial ends, by the
sweep's guard after a ``kill -9``, and, for a process that died some other way,
:func:`clear_stale_pipes` at the next sweep's start removes it once its owner is gone.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from aorta.store.rundir import HANG_DIR, evidence_rank_dir

__all__ = [
    "PIPES_PREFIX",
    "EvidenceDir",
    "UnsafeEvidenceDir",
    "clear_stale_pipes",
    "make_pipes_folder",
    "pipes_prefix",
    "read_regular",
]

#: The start of every pipes folder's name in the temp folder.
PIPES_PREFIX = "aorta-fr-"
#: A pipes folder named the old way (no owner in its name) is stale after this long.
LEGACY_STALE_S = 24 * 3600.0
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: Tries to create a rank's folder while other ranks remove an empty ``hang/`` under it.
_MAKE_TRIES = 100


class UnsafeEvidenceDir(OSError):
    """A folder on the way to a rank's evidence is a link or not a folder: nothing is written."""


def _pid_namespace() -> str:
    try:
        link = os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]"
    except OSError:
        return "0"
    digits = "".join(c for c in link if c.isdigit())
    return digits or "0"


def pipes_prefix(pid: int | None = None) -> str:
    """The name prefix of the pipes folders of process ``pid`` (default: this one): its pid
    namespace and pid, so a later sweep can tell whether the owner still runs.

    >>> pipes_prefix(42).startswith("aorta-fr-") and pipes_prefix(42).endswith(".42-")
    True
    """
    return f"{PIPES_PREFIX}{_pid_namespace()}.{os.getpid() if pid is None else pid}-"


def make_pipes_folder() -> Path:
    """A fresh private folder (0700) for one trial's NCCL pipes, named by this process."""
    return Path(tempfile.mkdtemp(prefix=pipes_prefix()))


def _started_at(pid: int) -> float | None:
    """When ``pid`` started (epoch seconds), from ``/proc``; ``None`` if it is not running."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
        fields = raw[raw.rfind(b")") + 2 :].split()
        if fields[0] in (b"Z", b"X"):
            return None
        ticks = int(fields[19])
        boot = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def _owner_gone(name: str, mtime: float, now: float, legacy_s: float) -> bool:
    rest = name[len(PIPES_PREFIX) :]
    owner, dash, _ = rest.partition("-")
    ns, dot, pid = owner.partition(".")
    if not (dash and dot and ns.isdigit() and pid.isdigit()):
        return now - mtime > legacy_s  # the old name (no owner): by age alone
    if ns != _pid_namespace():
        return False  # another container's sweep: its pids are not ours to judge
    started = _started_at(int(pid))
    # Gone, or the pid now belongs to a process that started after the folder was made.
    return started is None or started > mtime + 2.0


def clear_stale_pipes(folder: str | Path | None = None, *, legacy_s: float = LEGACY_STALE_S) -> int:
    """Remove the pipes folders in ``folder`` (default: the temp folder) whose owner is gone:
    this user's only, never a link, never one whose process still runs. How many went.

    >>> clear_stale_pipes("/nonexistent-aorta-tmp")
    0
    """
    root = Path(folder) if folder is not None else Path(tempfile.gettempdir())
    me, now, removed = os.getuid(), time.time(), 0
    try:
        entries = [e for e in os.scandir(root) if e.name.startswith(PIPES_PREFIX)]
    except OSError:
        return 0
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != me:
            continue
        if _owner_gone(entry.name, st.st_mtime, now, legacy_s):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed += not os.path.lexists(entry.path)
    return removed


def _open_dir(name: str | Path, dir_fd: int | None = None) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafeEvidenceDir(
                exc.errno, f"{name} is a link or not a folder: no evidence written through it"
            ) from None
        raise


def _mkdir_at(name: str, dir_fd: int) -> None:
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o755, dir_fd=dir_fd)


def read_regular(
    name: str | Path, limit: int, *, dir_fd: int | None = None, tail: bool = False
) -> bytes | None:
    """At most ``limit`` bytes of ``name`` (its last ones with ``tail``), or ``None`` when it
    is missing, a link, or not a regular file (a FIFO is opened without blocking and left).

    >>> read_regular("/nonexistent-aorta-file", 10) is None
    True
    """
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        if tail and st.st_size > limit:
            os.lseek(fd, st.st_size - limit, os.SEEK_SET)
        chunks, left = [], limit + (0 if tail else 1)
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


class EvidenceDir:
    """``<trial>/hang/rank<N>/``: the folder aorta rank ``rank`` alone writes its evidence into.

    Building it touches nothing. :meth:`make` creates it (and ``hang/`` when missing); the
    other methods open it afresh, one component at a time without following a link, and raise
    :class:`UnsafeEvidenceDir` when the trial put a link (or a file) in the way.

    >>> d = EvidenceDir(Path("/nonexistent-aorta-trial"), 2)
    >>> d.relative("fr_2.json")
    'hang/rank2/fr_2.json'
    """

    def __init__(self, trial: Path, rank: int) -> None:
        self.trial = Path(trial)
        self.rank = int(rank)
        self.name = evidence_rank_dir(self.rank)
        #: The folder's path (what the trial's processes are given; they may follow links).
        self.path = self.trial / HANG_DIR / self.name

    def relative(self, name: str) -> str:
        """``name``'s path relative to the trial folder (what a record's ``files`` say)."""
        return f"{HANG_DIR}/{self.name}/{name}"

    def make(self) -> None:
        """Create the folder (the trial folder and ``hang/`` too when missing)."""
        self.trial.mkdir(parents=True, exist_ok=True)
        for _ in range(_MAKE_TRIES):
            top = _open_dir(self.trial)
            try:
                _mkdir_at(HANG_DIR, top)
                hang = _open_dir(HANG_DIR, top)
                try:
                    _mkdir_at(self.name, hang)
                    os.close(_open_dir(self.name, hang))
                    return
                finally:
                    os.close(hang)
            except FileNotFoundError:
                continue  # another rank removed the empty hang/ in between: again
            finally:
                os.close(top)
        raise OSError(errno.EAGAIN, f"{self.path}: could not be created (it kept vanishing)")

    @contextlib.contextmanager
    def _opened(self) -> Iterator[int]:
        top = _open_dir(self.trial)
        try:
            hang = _open_dir(HANG_DIR, top)
            try:
                fd = _open_dir(self.name, hang)
                try:
                    yield fd
                finally:
                    os.close(fd)
            finally:
                os.close(hang)
        finally:
            os.close(top)

    def names(self) -> list[str]:
        """The names in the folder ([] when it is missing)."""
        try:
            with self._opened() as fd:
                return sorted(os.listdir(fd))
        except FileNotFoundError:
            return []

    def write(self, name: str, data: bytes | str) -> str:
        """Write ``name`` atomically (a temporary file, then a rename, both in the folder);
        its path relative to the trial folder back."""
        payload = data.encode() if isinstance(data, str) else data
        tmp = f".{name}.tmp-{os.getpid()}"
        with self._opened() as fd:
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644,
                          dir_fd=fd)  # fmt: skip
            try:
                with os.fdopen(out, "wb") as fh:
                    fh.write(payload)
                os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=fd)
                raise
        return self.relative(name)

    def read(self, name: str, limit: int) -> bytes | None:
        """``name``'s bytes when it is a regular file of at most ``limit`` bytes, else ``None``."""
        try:
            with self._opened() as fd:
                data = read_regular(name, limit, dir_fd=fd)
        except FileNotFoundError:
            return None
        return data if data is not None and len(data) <= limit else None

    def is_file(self, name: str) -> bool:
        """Whether ``name`` is a regular file in the folder (a link is not)."""
        try:
            with self._opened() as fd:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            return False
        return stat.S_ISREG(st.st_mode)

    def rename(self, src: str, dst: str) -> str:
        """Move ``src`` to ``dst`` inside the folder; ``dst``'s relative path back."""
        with self._opened() as fd:
            os.replace(src, dst, src_dir_fd=fd, dst_dir_fd=fd)
        return self.relative(dst)

    def unlink(self, name: str) -> None:
        """Remove ``name`` (nothing when it is gone)."""
        with contextlib.suppress(FileNotFoundError), self._opened() as fd:
            os.unlink(name, dir_fd=fd)

    def remove_if_empty(self) -> None:
        """Remove the folder if nothing is in it, then ``hang/`` if no rank's folder is left
        (``rmdir``: never what another rank uses; never through a link)."""
        with contextlib.suppress(OSError):
            top = _open_dir(self.trial)
            try:
                with contextlib.suppress(OSError):
                    hang = _open_dir(HANG_DIR, top)
                    try:
                        with contextlib.suppress(OSError):
                            os.rmdir(self.name, dir_fd=hang)
                    finally:
                        os.close(hang)
                with contextlib.suppress(OSError):
                    os.rmdir(HANG_DIR, dir_fd=top)
            finally:
                os.close(top)
