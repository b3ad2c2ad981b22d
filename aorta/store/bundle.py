"""A run as one redacted ``tar.gz`` for a ticket: ``<ticket>-<UTC>.tar.gz``.

Two steps, so a person can look before anything is written:

* :func:`plan_bundle` reads the run directory and decides, file by file, what goes in and
  what is left out (and why), redacting every text file as a stream to count what would be
  masked. It writes nothing to the run or the output — ``aorta bundle --review`` prints its
  plan.
* :func:`write_bundle` writes the plan: each included file as the scan redacted it (kept in
  memory up to a few MiB, else in an unnamed temporary file; a file changed since is
  redacted again), the bundle's own manifest (:data:`~aorta.store.rundir.BUNDLE_MANIFEST`)
  last.

What goes in: the run's manifest, resolved recipe, host snapshots, cell definitions, trial
records, a hung trial's evidence (``hang/*.json``, a node's ``gpu_<host>.txt``), matrix files and report
(``report/report.html`` too) always; trial logs, traces and
other artifacts while they fit in ``max_size`` (bytes on disk, a cap the user can raise).
Left out, with the reason in the manifest: ``results.nc`` (binary; :func:`aorta.load_run`
rebuilds it from the records), other binary files (they cannot be scanned; an image counts as
one only when its content is one — a text file named ``*.png`` is scanned), symbolic links
(never followed), the run's ``secret_hashes.json``, environment files, the lock and
half-written temporary files, and whatever is over the cap.

Redaction is the run's own (:meth:`~aorta.store.redact.Redactor.of_run`): the recipe's
``redaction:`` block plus the caller's extra settings, the secrets the run recorded as salted
hashes (so a bundle made from a shell without the run's variables still masks them), the
secret values readable in the run's own files (the 0600 recipe's ``extra_env`` and argv) and
in this process's environment, and every credential shape. It applies to every file that goes
in, as its format needs (:mod:`aorta.store.redact_stream`, in bounded memory): JSON token by
token, keys too (a value under a secret-named key, or after a secret argv flag, replaced
whole), YAML kept parseable, HTML and SVG text nodes and attributes (the marker escaped),
Markdown, logs in blocks of lines, and the contents of compressed members (``.gz``, ``.bz2``,
``.xz``: decompressed, scanned, recompressed on the fly). A file or folder name holding a
secret is renamed in the archive (``ckpt-[redacted].pt``) and its entry in the manifest says
``name_redacted``. ``recipe.resolved.yaml`` goes in only as its redacted copy.

Examples
--------
>>> parse_size("512M"), parse_size("2GiB"), parse_size("1000")
(536870912, 2147483648, 1000)
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import io
import json
import lzma
import os
import re
import tarfile
import tempfile
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from aorta.errors import UsageError
from aorta.recipe.limits import name_bytes_problem
from aorta.store.redact import Redactor
from aorta.store.redact_stream import (
    MAX_JSON_DEPTH,
    TooBig,
    TooDeep,
    Unscannable,
    redact_file,
    sniff,
)
from aorta.store.rundir import (
    BUNDLE_MANIFEST,
    CELLS,
    GPU_EVIDENCE_FILE,
    HANG_DIR,
    LOCK,
    RESULTS,
    SECRET_HASHES,
    TRACE_DIR,
    RunDir,
    _safe,
    is_evidence_rank_dir,
    utc_now,
)

__all__ = [
    "DEFAULT_MAX_SIZE",
    "MAX_JSON_DEPTH",
    "BundleEntry",
    "BundlePlan",
    "parse_size",
    "plan_bundle",
    "write_bundle",
]

#: The default cap on logs, traces and other trial artifacts (bytes on disk): 512 MiB.
DEFAULT_MAX_SIZE = 512 * 1024**2
#: What a file is to the bundle. ``core`` files always go in; the others while they fit.
Kind = Literal["core", "log", "trace", "artifact"]
_UNITS = {"": 1, "B": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)
_TEXT_SUFFIXES = frozenset(
    {".json", ".yaml", ".yml", ".md", ".html", ".htm", ".txt", ".log", ".csv", ".svg", ".out",
     ".err", ".env", ".cfg", ".ini", ".toml", ".sh", ".py", ".xml", ".tsv"}
)  # fmt: skip
_IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".gif", ".webp"})
_IMAGE_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a")
#: A text file is one without NUL bytes in its first this many bytes.
_SNIFF = 8192


def parse_size(text: str | int) -> int:
    """Bytes from ``"512M"``, ``"2G"``, ``"1.5GiB"`` or a plain number (binary units).

    Raises :class:`~aorta.errors.UsageError` for anything else.
    """
    if isinstance(text, int):
        return text
    m = _SIZE.match(str(text))
    if not m:
        raise UsageError(f"--max-size: expected a size like 512M, 2G or 1000000, got {text!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


@dataclass(frozen=True)
class BundleEntry:
    """One file of the run directory and what the bundle does with it."""

    #: The path inside the bundle (POSIX separators): the file's path relative to the run
    #: directory, with a secret in a file or folder name masked (``[redacted]``).
    path: str
    #: Bytes on disk.
    size: int
    kind: Kind
    included: bool
    #: How many things redaction masked in it (``None``: not scanned, e.g. an image).
    redactions: int | None = None
    #: Why it was left out, or a note on how it went in.
    note: str | None = None
    #: Its path relative to the run directory, when a name in it was redacted (never written).
    source: str | None = field(default=None, repr=False, compare=False)

    @property
    def run_path(self) -> str:
        """Where the file is, relative to the run directory."""
        return self.source or self.path

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "size": self.size,
            "kind": self.kind,
            "redactions": self.redactions,
            "note": self.note,
            "name_redacted": self.source is not None,
        }


@dataclass(frozen=True)
class BundlePlan:
    """What :func:`write_bundle` will write; cheap to print (``aorta bundle --review``)."""

    run_dir: Path
    ticket: str
    #: ``<ticket>-<UTC>``: the archive's name without ``.tar.gz`` and its top folder.
    name: str
    max_size: int
    traces: bool
    redactor: Redactor = field(repr=False)
    entries: tuple[BundleEntry, ...] = ()
    #: The redacted bytes of each scanned file, kept from the scan so :func:`write_bundle`
    #: need not redact it again (redaction is the slow part), with the file's size and mtime
    #: then: a file changed since is redacted again. In memory up to a few MiB each, else in an
    #: unnamed temporary file (gone when the plan is).
    spooled: Mapping[str, tuple[Any, int, int]] = field(
        default_factory=dict, repr=False, compare=False
    )

    @property
    def file_name(self) -> str:
        return f"{self.name}.tar.gz"

    @property
    def included(self) -> list[BundleEntry]:
        return [e for e in self.entries if e.included]

    @property
    def left_out(self) -> list[BundleEntry]:
        return [e for e in self.entries if not e.included]

    @property
    def redactions(self) -> int:
        return sum(e.redactions or 0 for e in self.included)

    def manifest(self, *, created_at: str | None = None) -> dict[str, Any]:
        """The bundle's own manifest: the run, the redaction settings (never the secret
        values), every file with its size and redaction count, and what was left out and why."""
        r = self.redactor
        return {
            "schema_version": 1,
            "ticket": self.ticket,
            "bundle": self.file_name,
            "created_at": created_at or utc_now(),
            "run": self.run_dir.name,
            "max_size": self.max_size,
            "traces": self.traces,
            "redaction": {
                "scrub_env_keys": list(r.scrub_keys),
                "scrub_paths": r.scrub_paths,
                "scrub_ip_addresses": r.scrub_ips,
                "secret_forms_looked_for": r.n_known,
            },
            "total_redactions": self.redactions,
            "names_redacted": sum(e.source is not None for e in self.entries),
            "files": [e.to_dict() for e in self.included],
            "left_out": [
                {"path": e.path, "size": e.size, "kind": e.kind, "reason": e.note}
                | {"name_redacted": e.source is not None}
                for e in self.left_out
            ],
        }


# --- what the run holds ------------------------------------------------------------------------


def _kind(rel: str) -> Kind:
    parts = rel.split("/")
    if parts[0] != CELLS or len(parts) < 3:
        return "core"
    if len(parts) == 3:  # cells/<cell>/cell.json, cells/<cell>/trial_0007.json
        return "core"
    in_hang = parts[-2] == HANG_DIR or (parts[-3] == HANG_DIR and is_evidence_rank_dir(parts[-2]))
    if in_hang and parts[-1].endswith(".json"):  # a hung trial's evidence (hang/rank<N>/), small
        return "core"
    if in_hang and GPU_EVIDENCE_FILE.fullmatch(parts[-1]):
        # A node's GPU evidence (``gpu_<host>.txt``, a few kB): the page links it beside the
        # node's lines, so it goes in with the rest of the hang's evidence, not past a cap.
        return "core"
    if TRACE_DIR in parts[2:-1] or ".pt.trace." in parts[-1]:
        return "trace"
    if parts[-1].endswith(".log"):
        return "log"
    return "artifact"


def _walk(root: Path) -> Iterator[Path]:
    """Every regular file and every symbolic link under ``root`` (links are not followed: a
    link could point anywhere on the machine; :func:`plan_bundle` lists them as left out)."""
    for folder, dirs, files in os.walk(root, followlinks=False):
        dirs.sort()
        links = [d for d in dirs if (Path(folder) / d).is_symlink()]
        for name in sorted([*files, *links]):
            path = Path(folder) / name
            if path.is_symlink() or path.is_file():
                yield path


def _link_note(path: Path) -> str:
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    return f"a symbolic link (to {target}): links are not followed"


def _skip_reason(rel: str) -> str | None:
    name = rel.rsplit("/", 1)[-1]
    if rel == LOCK:
        return "the run's lock file"
    if name.startswith(".") and ".tmp" in name:
        return "a half-written temporary file"
    if rel == RESULTS:
        return "binary netCDF; aorta.load_run rebuilds it from the trial records"
    if rel == BUNDLE_MANIFEST:
        return "an earlier bundle's manifest"
    if rel == SECRET_HASHES:
        return "the run's secret hashes: they would let anyone test guesses of its secrets"
    if name in ("env", "probe.env") or name.endswith(".env"):
        return "an environment file a trial ran with: its values are the environment itself"
    return None


def _is_image(path: Path) -> bool:
    """Whether ``path`` starts as a PNG, JPEG, GIF or WebP does (by content: a text file
    named ``*.png`` is scanned like any other text)."""
    try:
        with path.open("rb") as fh:
            head = fh.read(12)
    except OSError:
        return False
    return head.startswith(_IMAGE_MAGIC) or (head[:4] == b"RIFF" and head[8:12] == b"WEBP")


def _is_text(path: Path, suffix: str) -> bool:
    if suffix in _TEXT_SUFFIXES:
        return True
    try:
        with path.open("rb") as fh:
            head = fh.read(_SNIFF)
    except OSError:
        return False
    if b"\0" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start >= len(head) - 4  # a multi-byte character cut at the sniff's end
    return True


# --- redaction of one file ---------------------------------------------------------------------


#: Redacted bytes of one file kept in memory up to this size, then in a temporary file.
_SPOOL_MEMORY = 8 << 20
#: What a bundle cannot read: a bad archive, a broken compressed stream.
_UNREADABLE = (OSError, EOFError, zlib.error, lzma.LZMAError)


def _spool(path: Path, redactor: Redactor, limit: int) -> tuple[Any, int]:
    """``path`` redacted (:func:`~aorta.store.redact_stream.redact_file`) into a spooled
    temporary file, and the count; the file is closed if that fails."""
    kept = tempfile.SpooledTemporaryFile(max_size=_SPOOL_MEMORY)  # noqa: SIM115 - the plan's
    try:
        n = redact_file(path, kept, redactor, limit=limit)
    except BaseException:
        kept.close()
        raise
    return kept, n


def _entry(
    rel: str,
    path: Path,
    size: int,
    kind: Kind,
    plan: _Scan,
    limit: int,
) -> BundleEntry:
    """Scan one file that is to go in: redaction count, or why it cannot go in (its redacted
    bytes kept in ``plan.spool`` for the write)."""
    name = plan.names[rel]
    source = rel if name != rel else None
    suffix = path.suffix.lower()

    def entry(included: bool, redactions: int | None, note: str | None) -> BundleEntry:
        note = plan.redactor.text(note) if note else note  # an error may quote the name
        return BundleEntry(name, size, kind, included, redactions, note, source)

    if suffix in _IMAGE_SUFFIXES and _is_image(path):
        return entry(True, None, "image, not scanned")
    # By content, not name: gzip bytes named .log are decompressed, UTF-16 text decoded.
    try:
        found = sniff(path)
    except Unscannable as exc:
        return entry(False, None, str(exc))
    except _UNREADABLE as exc:
        return entry(False, None, f"unreadable ({''.join(path.suffixes[-2:]).lower()}): {exc}")
    plain = not found.layers and found.encoding == "utf-8"
    if (plain and not _is_text(path, suffix)) or (not plain and b"\0" in _decoded(found)):
        what = "binary file" if not found.layers else "compressed binary data"
        return entry(False, None, f"{what}: it cannot be scanned")
    packed = bool(found.layers)
    try:
        stat = path.stat()
        kept, n = _spool(path, plan.redactor, limit)
    except TooBig as exc:
        past = "decompresses past" if packed else "is larger than"
        cap = f"{past} the size cap ({limit:,} bytes); raise --max-size"
        return entry(False, None, str(exc) or cap)
    except (TooDeep, RecursionError):  # JSON past the bound; YAML past Python's stack
        return entry(
            False, None, f"nested deeper than {MAX_JSON_DEPTH} levels: it cannot be scanned"
        )
    except Unscannable as exc:
        return entry(False, None, str(exc))
    except _UNREADABLE as exc:
        return entry(False, None, f"unreadable ({''.join(path.suffixes[-2:]).lower()}): {exc}")
    plan.spool[rel] = (kept, stat.st_size, stat.st_mtime_ns)
    return entry(True, n, found.note)


def _decoded(found: Any) -> bytes:
    """The head of a file's content as UTF-8 (to tell text from binary data), whatever its
    encoding; a character cut at the head's end is dropped."""
    head = found.head[len(found.bom) :]
    if found.encoding != "utf-8":
        unit = 4 if "32" in found.encoding else 2
        head = head[: len(head) // unit * unit]
        text: str = head.decode(found.encoding, "replace")
        return text.encode("utf-8")
    return bytes(head)


# --- the plan and the archive ------------------------------------------------------------------


def _stamp(now: _dt.datetime | None) -> str:
    return (now or _dt.datetime.now(_dt.timezone.utc)).strftime("%Y%m%dT%H%M%SZ")


def plan_bundle(
    run_dir: str | Path,
    *,
    ticket: str | None = None,
    max_size: int | str = DEFAULT_MAX_SIZE,
    traces: bool = True,
    scrub_env_keys: Iterable[str] = (),
    scrub_paths: bool | None = None,
    scrub_ips: bool | None = None,
    env: Mapping[str, str] | None = None,
    now: _dt.datetime | None = None,
) -> BundlePlan:
    """Decide what a bundle of ``run_dir`` holds; write nothing.

    Parameters
    ----------
    run_dir
        A run directory.
    ticket
        Names the bundle (``<ticket>-<UTC>.tar.gz``); default the run's ticket, else
        ``_no_ticket_``.
    max_size
        Cap on the logs, traces and other trial artifacts that go in (bytes on disk, or
        ``"512M"``, ``"2G"``); files past it are left out and listed. Records, matrix,
        recipe, snapshots and report always go in.
    traces
        Include profiler traces (within the cap).
    scrub_env_keys, scrub_paths, scrub_ips
        Redaction on top of the recipe's ``redaction:`` block (``None``: as the recipe says).
    env
        Variables whose secret-named values are masked too (default: this process's).
    now
        The bundle's UTC time (default: now).

    Returns
    -------
    BundlePlan
        Every file with what happens to it; :func:`write_bundle` writes it.

    Raises
    ------
    UsageError
        ``run_dir`` is not a run directory, ``max_size`` is not a size, or ``ticket`` is
        longer than a file name allows (200 UTF-8 bytes, as a recipe's ``ticket``).
    """
    rd = RunDir.open(run_dir)
    cap = parse_size(max_size)
    if cap < 0:
        raise UsageError(f"--max-size must be ≥ 0, got {max_size!r}")
    redactor = Redactor.of_run(
        rd,
        scrub_env_keys=scrub_env_keys,
        scrub_paths=scrub_paths,
        scrub_ips=scrub_ips,
        env=os.environ if env is None else env,
    )
    if ticket is None:
        manifest = rd.manifest()
        ticket = manifest.get("ticket") or "_no_ticket_"
    problem = name_bytes_problem(_safe(str(ticket)))
    if problem:
        raise UsageError(f"--ticket {str(ticket)[:40]!r}…: {problem}")
    name = f"{_safe(str(ticket))}-{_stamp(now)}"
    paths = {path.relative_to(rd.path).as_posix(): path for path in _walk(rd.path)}
    scan = _Scan(redactor, _bundle_names(paths, redactor))
    entries: list[BundleEntry] = []
    heavy: list[tuple[str, Path, int, Kind]] = []
    for rel, path in paths.items():
        kind = _kind(rel)
        size = 0 if path.is_symlink() else path.stat().st_size
        skip = _link_note(path) if path.is_symlink() else _skip_reason(rel)
        if skip is None and kind == "trace" and not traces:
            skip = "traces not asked for"
        if skip is not None:
            entries.append(scan.left_out(rel, size, kind, skip))
        elif kind == "core":
            entries.append(_entry(rel, path, size, kind, scan, max(cap, 1 << 30)))
        else:
            heavy.append((rel, path, size, kind))
    # Logs first (the first thing a reader opens), then traces, then the rest; each in path
    # order, while the cap lasts.
    order = {"log": 0, "trace": 1, "artifact": 2}
    budget = cap
    for rel, path, size, kind in sorted(heavy, key=lambda h: (order[h[3]], h[0])):
        if size > budget:
            why = f"over the size cap ({cap:,} bytes, {budget:,} left); raise --max-size to include it"
            entries.append(scan.left_out(rel, size, kind, why))
            continue
        entry = _entry(rel, path, size, kind, scan, cap)
        budget -= size if entry.included else 0
        entries.append(entry)
    entries.sort(key=lambda e: e.path)
    return BundlePlan(rd.path, str(ticket), name, cap, traces, redactor, tuple(entries), scan.spool)


@dataclass
class _Scan:
    """What the plan's scan shares: the redactor, each file's name in the bundle, and the
    redacted bytes it keeps for the write."""

    redactor: Redactor
    names: Mapping[str, str]
    spool: dict[str, tuple[Any, int, int]] = field(default_factory=dict)

    def left_out(self, rel: str, size: int, kind: Kind, why: str) -> BundleEntry:
        name = self.names[rel]
        why = self.redactor.text(why)  # a link's target may name the secret
        return BundleEntry(name, size, kind, False, None, why, rel if name != rel else None)


def _bundle_names(rels: Iterable[str], redactor: Redactor) -> dict[str, str]:
    """Each file's path in the bundle: a secret in a file or folder name masked
    (:meth:`~aorta.store.redact.Redactor.name`), ``-2``, ``-3``, … before the suffixes when two
    names become one."""
    rels = list(rels)
    part = functools.cache(redactor.name)  # a run repeats its folder and file names
    names = {rel: "/".join(map(part, rel.split("/"))) for rel in rels}
    taken = {rel for rel in rels if names[rel] == rel}
    for rel in rels:
        if names[rel] == rel:
            continue
        folder, _, last = names[rel].rpartition("/")
        stem, dot, rest = last[1:].partition(".")
        stem, i = last[:1] + stem, 2
        while names[rel] in taken:
            names[rel] = f"{folder}/" * bool(folder) + f"{stem}-{i}{dot}{rest}"
            i += 1
        taken.add(names[rel])
    return names


def write_bundle(plan: BundlePlan, output: str | Path = ".") -> Path:
    """Write ``plan`` as ``<output>/<ticket>-<UTC>.tar.gz`` and return its path.

    Every member sits under the ``<ticket>-<UTC>/`` folder, owned by nobody in particular
    (uid/gid 0, no user names), mode 0644; ``bundle_manifest.json`` lists what is inside. The
    archive appears only when complete (written beside it, then renamed).

    Raises
    ------
    UsageError
        The archive exists already.
    """
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    target = out / plan.file_name
    if target.exists():
        raise UsageError(f"{target} exists already")
    created = utc_now()
    buffer_path = out / f".{plan.file_name}.tmp-{os.getpid()}"
    try:
        with tarfile.open(buffer_path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
            for entry in plan.included:
                path = plan.run_dir / entry.run_path
                with _member(plan, entry, path) as data:
                    _add(tar, f"{plan.name}/{entry.path}", data, path.stat().st_mtime)
            manifest = json.dumps(plan.manifest(created_at=created), indent=1) + "\n"
            _add(tar, f"{plan.name}/{BUNDLE_MANIFEST}", io.BytesIO(manifest.encode()), None)
        os.chmod(buffer_path, 0o644)
        os.replace(buffer_path, target)
    except BaseException:
        with contextlib.suppress(OSError):
            buffer_path.unlink()
        raise
    return target


@contextlib.contextmanager
def _member(plan: BundlePlan, entry: BundleEntry, path: Path) -> Iterator[IO[bytes]]:
    """What goes into the archive for ``entry``: the file (not scanned), the redacted bytes the
    scan kept (the file is as it was then), or the file redacted now."""
    if entry.redactions is None:
        with path.open("rb") as fh:
            yield fh
        return
    kept = plan.spooled.get(entry.run_path)
    stat = path.stat()
    if kept is not None and not kept[0].closed and kept[1:] == (stat.st_size, stat.st_mtime_ns):
        kept[0].seek(0)
        yield kept[0]
        return
    spool, _ = _spool(path, plan.redactor, max(plan.max_size, 1 << 30))  # changed since
    with spool:
        spool.seek(0)
        yield spool


def _add(tar: tarfile.TarFile, name: str, data: IO[bytes], mtime: float | None) -> None:
    """One member from ``data`` (read from where it is to its end, never whole in memory)."""
    start = data.tell()
    data.seek(0, os.SEEK_END)
    info = tarfile.TarInfo(name)
    info.size = data.tell() - start
    data.seek(start)
    info.mode = 0o644
    info.mtime = int(mtime if mtime is not None else _dt.datetime.now(_dt.timezone.utc).timestamp())
    tar.addfile(info, data)
