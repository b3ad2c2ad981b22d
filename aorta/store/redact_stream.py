"""Whole files redacted as streams, in bounded memory, as each format needs.

:func:`redact_file` reads a file of a run and writes its redacted bytes: the text of a log in
blocks of whole lines, JSON token by token (every object key and string value scanned; a value
under a secret-named key or after a secret argv flag replaced whole; numbers, layout and
escapes kept as written), HTML, SVG, XML and YAML whole (:meth:`~aorta.store.redact.Redactor.html`,
:func:`~aorta.store.redact.yaml_counted`), and the contents of compressed members (``.gz``,
``.bz2``, ``.xz``) decompressed, redacted and compressed again on the fly. Memory is a few
blocks whatever the size: a gzip bomb of 4 GB of whitespace streams through (and is left out
once it decompresses past the caller's ``limit``: :class:`TooBig`).

A ``.json`` file that is not JSON (JSON lines, a truncated dump) is redacted as text instead;
one nested deeper than :data:`MAX_JSON_DEPTH` raises :class:`TooDeep` (the bundle leaves it out).

What a file holds is told by its bytes, not its name (:func:`sniff`): gzip, bzip2 or xz data
is decompressed whatever it is called (gzip bytes in a ``.log``; gzip inside gzip, up to
:data:`MAX_LAYERS` deep) and compressed again alike; UTF-16 and UTF-32 text (a byte-order
mark, or every other byte NUL) is decoded, redacted and written back in its encoding. What
cannot be scanned (zip, zstd, 7z or lz4 data; deeper nesting; UTF-16 that does not decode)
raises :class:`Unscannable`, whose message says why (the bundle leaves it out with it).

>>> import io, tempfile, pathlib
>>> from aorta.store.redact import Redactor
>>> path = pathlib.Path(tempfile.mkdtemp()) / "fr_0.json"
>>> _ = path.write_text('{"s3cretTok-42": {"HF_TOKEN": "x1", "argv": ["--token", "x2"]}, "n": 1e400}')
>>> out = io.BytesIO()
>>> redact_file(path, out, Redactor().with_values(["s3cretTok-42"]), limit=1 << 20)
3
>>> out.getvalue().decode()
'{"<redacted>": {"HF_TOKEN": "<redacted>", "argv": ["--token", "<redacted>"]}, "n": 1e400}'
"""

from __future__ import annotations

import bz2
import codecs
import contextlib
import functools
import gzip
import io
import itertools
import json
import lzma
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, NamedTuple

from aorta.store.record import RECORD_KEYS, TrialStatus
from aorta.store.redact import DELIMITERS, Redactor, yaml_counted
from aorta.store.secrets import REDACTED, is_secret_flag, numbers_are_secret

__all__ = [
    "COMPRESSED",
    "MAX_JSON_DEPTH",
    "MAX_LAYERS",
    "Sniffed",
    "TooBig",
    "TooDeep",
    "Unscannable",
    "redact_file",
    "sniff",
]

#: JSON nested deeper than this is not scanned (a hostile artifact must not exhaust memory or
#: the stack): :class:`TooDeep`.
MAX_JSON_DEPTH = 100
#: Compressed members whose contents are scanned: suffix → how to open them.
COMPRESSED: dict[str, Callable[..., Any]] = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}
#: Formats redacted whole (their markup spans lines), not in blocks.
_WHOLE = frozenset({".html", ".htm", ".svg", ".xml", ".yaml", ".yml", ".md"})
#: Characters of text redacted at once (cut at a line's end), and the longest line kept whole.
BLOCK = 1 << 20
MAX_LINE = 4 << 20
#: A larger HTML, YAML or Markdown file is redacted in blocks of lines too (its markup rarely
#: spans them; the text rules always apply).
MAX_WHOLE = 64 << 20
#: A longer JSON string cannot be scanned (:class:`TooBig`).
MAX_STRING = 16 << 20
_READ = 1 << 20
_JSON_TOKEN = re.compile(r'[ \t\n\r]+|"[^"\\]*(?:\\.[^"\\]*)*"|[{}\[\]:,]|[^ \t\n\r{}\[\]:,"]+')
_PEM = ("-----BEGIN ", "-----END ")
#: What ends a token (:data:`aorta.store.redact.DELIMITERS`): a long line is cut after one.
_DELIM = re.compile(f"[{DELIMITERS}]")


class TooBig(Exception):
    """The file decompresses past the caller's limit (no message), or holds a JSON string
    past :data:`MAX_STRING` (the message says so)."""


class TooDeep(Exception):
    """JSON nested deeper than :data:`MAX_JSON_DEPTH`."""


class Unscannable(Exception):
    """Content whose text cannot be reached (an archive, a compressor aorta cannot read,
    compression nested past :data:`MAX_LAYERS`, broken UTF-16); the message says which."""


#: Compression inside compression decompressed at most this deep (a file is one layer).
MAX_LAYERS = 3
#: Compressed data by its first bytes: what is decompressed, and what is refused.
_MAGIC = ((b"\x1f\x8b", ".gz"), (b"BZh", ".bz2"), (b"\xfd7zXZ\x00", ".xz"))
_OPAQUE = (
    (b"PK\x03\x04", "zip"),
    (b"(\xb5/\xfd", "zstd"),
    (b"7z\xbc\xaf\x27\x1c", "7z"),
    (b"\x04\x22\x4d\x18", "lz4"),
)
#: Byte-order marks, longest first (UTF-32's starts as UTF-16's does).
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_HEAD = 4096


class Sniffed(NamedTuple):
    """What a file holds: its compression layers, outermost first (``(".gz", ".gz")``: gzip
    inside gzip), its text encoding and byte-order mark, and the first bytes of its content."""

    layers: tuple[str, ...]
    encoding: str
    bom: bytes
    head: bytes

    @property
    def note(self) -> str | None:
        """How it went in, for the bundle's manifest (``None``: plain UTF-8)."""
        parts = []
        if len(self.layers) == 1:
            parts.append("decompressed, scanned, recompressed")
        elif self.layers:
            names = " inside ".join(reversed([_NAMES[x] for x in self.layers]))
            parts.append(f"{names}: decompressed, scanned, recompressed")
        if self.encoding != "utf-8":
            parts.append(f"{self.encoding.upper().removesuffix('-LE').removesuffix('-BE')} text")
        return "; ".join(parts) or None


_NAMES = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz"}


def _open_layer(src: IO[bytes], packed: str) -> IO[bytes]:
    inner: Any
    if packed == ".gz":
        inner = gzip.GzipFile(fileobj=src, mode="rb")
    elif packed == ".bz2":
        inner = bz2.BZ2File(src, "rb")
    else:
        inner = lzma.LZMAFile(src, "rb")  # noqa: SIM115 - closed by the caller's stack
    return io.BufferedReader(inner)


def _layer_of(head: bytes) -> str | None:
    found = next((packed for magic, packed in _MAGIC if head.startswith(magic)), None)
    if found is None and (opaque := next((n for m, n in _OPAQUE if head.startswith(m)), None)):
        raise Unscannable(f"{opaque} data: it cannot be scanned")
    return found


def _encoding_of(head: bytes) -> tuple[str, bytes]:
    """The text encoding of content starting ``head``, and its byte-order mark."""
    for bom, name in _BOMS:
        if head.startswith(bom):
            return name, bom
    pairs = len(head) // 2
    if pairs >= 8 and head.count(0) >= pairs * 9 // 10:
        # ASCII as UTF-16 without a mark: every other byte is NUL.
        # (NUL padding, a run of zeros, is not: the other bytes must not be NUL either.)
        even, odd = head[0 : 2 * pairs : 2].count(0), head[1 : 2 * pairs : 2].count(0)
        if odd >= pairs * 9 // 10 and even <= pairs // 10:
            return "utf-16-le", b""
        if even >= pairs * 9 // 10 and odd <= pairs // 10:
            return "utf-16-be", b""
    return "utf-8", b""


@contextlib.contextmanager
def _content(path: Path) -> Iterator[tuple[IO[bytes], Sniffed]]:
    """``path``'s content, decompressed through every layer its bytes show, and what it is."""
    with contextlib.ExitStack() as stack:
        src: IO[bytes] = stack.enter_context(open(path, "rb"))
        layers: list[str] = []
        while (packed := _layer_of(src.peek(_HEAD)[:_HEAD])) is not None:  # type: ignore[attr-defined]
            if len(layers) == MAX_LAYERS:
                raise Unscannable(
                    f"compressed more than {MAX_LAYERS} levels deep: it cannot be scanned"
                )
            layers.append(packed)
            src = stack.enter_context(_open_layer(src, packed))
        head = src.peek(_HEAD)[:_HEAD]  # type: ignore[attr-defined]
        encoding, bom = _encoding_of(head)
        if bom:
            src.read(len(bom))
        yield src, Sniffed(tuple(layers), encoding, bom, head)


def sniff(path: Path) -> Sniffed:
    """What ``path`` holds, by its bytes (:class:`Sniffed`); :class:`Unscannable` for what
    cannot be scanned, and what reading raises (``OSError``, a broken stream).

    >>> import gzip, pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "rank0.log"
    >>> _ = path.write_bytes(gzip.compress(gzip.compress("tok=x\\n".encode("utf-16"))))
    >>> sniff(path).layers, sniff(path).encoding, sniff(path).note
    (('.gz', '.gz'), 'utf-16-le', 'gzip inside gzip: decompressed, scanned, recompressed; UTF-16 text')
    """
    with _content(path) as (_src, found):
        return found


class _NotJson(Exception):
    pass


def _suffixes(name: str) -> tuple[str | None, str]:
    """The compression suffix of ``name`` (or ``None``) and the suffix of what it holds."""
    low = name.lower()
    packed = next((s for s in COMPRESSED if low.endswith(s)), None)
    inner = low[: -len(packed)] if packed else low
    return packed, inner[inner.rfind(".") :] if "." in inner else ""


def redact_file(path: Path, out: IO[bytes], redactor: Redactor, *, limit: int) -> int:
    """Write ``path`` redacted to ``out`` (compressed again and encoded as it was: see
    :func:`sniff`) and return how many things were masked. Raises :class:`TooBig` past
    ``limit`` bytes of (decompressed) content, :class:`TooDeep`, :class:`Unscannable`, and
    what reading raises (``OSError``, ``EOFError``, a bad archive)."""
    _packed, inner = _suffixes(path.name)
    if inner == ".json":
        start = out.tell()
        try:
            return _through(path, out, limit, lambda c, w: _json(c, w, redactor))
        except _NotJson:  # JSON lines, a truncated dump: its text is redacted instead
            out.seek(start)
            out.truncate()
    if inner in _WHOLE:
        return _through(path, out, limit, lambda c, w: _whole(c, w, inner, redactor))
    return _through(path, out, limit, lambda c, w: _text(c, w, redactor.text_counted))


def _through(
    path: Path,
    out: IO[bytes],
    limit: int,
    body: Callable[[Iterator[str], Callable[[str], None]], int],
) -> int:
    """Decode ``path`` (decompressed) into ``body``'s chunks, encode what it writes to ``out``
    (compressed and encoded alike); the round trip keeps stray bytes as they were."""
    with _content(path) as (src, found), contextlib.ExitStack() as sinks:
        sink: Any = out
        for packed in found.layers:  # outermost first: each wraps the one outside it
            if packed == ".gz":
                sink = gzip.GzipFile(fileobj=sink, mode="wb", compresslevel=6, mtime=0)
            else:
                sink = {".bz2": bz2.BZ2File, ".xz": lzma.LZMAFile}[packed](sink, "wb")
            sinks.callback(sink.close)  # the compressors' trailers, innermost first
        errors = "surrogateescape" if found.encoding == "utf-8" else "surrogatepass"
        sink.write(found.bom)
        try:
            return body(
                _chunks(src, limit, found.encoding),
                lambda t: sink.write(t.encode(found.encoding, errors)),
            )
        except UnicodeDecodeError as exc:
            raise Unscannable(f"not {found.encoding.upper()} text ({exc.reason})") from None


def _chunks(src: IO[bytes], limit: int, encoding: str = "utf-8") -> Iterator[str]:
    errors = "surrogateescape" if encoding == "utf-8" else "surrogatepass"
    decode = codecs.getincrementaldecoder(encoding)(errors).decode
    read = 0
    while data := src.read(_READ):
        read += len(data)
        if read > limit:
            raise TooBig
        yield decode(data)
    yield decode(b"", final=True)


def _whole(chunks: Iterator[str], write: Callable[[str], None], inner: str, r: Redactor) -> int:
    """A markup file at once, as its format needs; past :data:`MAX_WHOLE`, in blocks."""
    scrub: Callable[[str], tuple[str, int]] = r.html_counted
    if inner in (".yaml", ".yml"):
        scrub = functools.partial(yaml_counted, r)
    elif inner == ".md":
        scrub = r.markdown_counted
    parts, size = [], 0
    for chunk in chunks:
        parts.append(chunk)
        size += len(chunk)
        if size > MAX_WHOLE:  # not held whole: a bomb of markup must stream too
            return _text(itertools.chain(["".join(parts)], chunks), write, scrub)
    clean, n = scrub("".join(parts))
    write(clean)
    return n


def _text(
    chunks: Iterator[str], write: Callable[[str], None], scrub: Callable[[str], tuple[str, int]]
) -> int:
    """Text in blocks of whole lines (a PEM key block kept in one; a line past
    :data:`MAX_LINE` cut at a blank where it can be)."""
    n, buf = 0, ""
    for chunk in chunks:
        buf += chunk
        while len(buf) >= BLOCK:
            cut = _cut(buf)
            if cut == 0:
                break  # a long line or key block: wait for its end
            clean, m = scrub(buf[:cut])
            write(clean)
            n, buf = n + m, buf[cut:]
    if buf:
        clean, m = scrub(buf)
        write(clean)
        n += m
    return n


def _cut(buf: str) -> int:
    """Where a block of ``buf`` ends: after its last line break, before a PEM key block that is
    not closed in it; 0 to read on (unless the buffer is past :data:`MAX_LINE`)."""
    cut = buf.rfind("\n") + 1
    begin = buf.rfind(_PEM[0], 0, cut)
    if begin > buf.rfind(_PEM[1], 0, cut):
        cut = buf.rfind("\n", 0, begin) + 1
    if cut == 0 and len(buf) > MAX_LINE:  # after a delimiter: no token-level secret is split
        seen = [m.end() for m in _DELIM.finditer(buf, MAX_LINE - (64 << 10), MAX_LINE)]
        cut = seen[-1] if seen else MAX_LINE
    return cut


class _Frame:
    """One open object or array: where the scan is in it, the last key, whether the last item
    was a secret argv flag."""

    __slots__ = ("flag", "key", "kind", "masked", "state")

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.state = "first"
        self.key = ""
        self.flag = False
        #: The keys of this object that redaction changed, as written (made unique).
        self.masked: set[str] | None = None


#: Keys aorta writes itself — a trial record's fields, a manifest's —: never masked, even
#: when a secret is the same word, so the redacted record still loads.
OWN_KEYS = RECORD_KEYS | frozenset(
    {
        "aorta_version", "cells", "extensions", "launcher", "mitigations_files", "n_cells",
        "n_trials", "pid", "recipe_sha256", "resumed_at", "schedule", "trials_override",
    }
)  # fmt: skip
#: Values of aorta's own vocabulary under its own keys, kept as written (a status masked
#: inside, ``<redacted>_failed``, would make the record unreadable).
OWN_VALUES = {"status": frozenset(s.value for s in TrialStatus)}


def _json(chunks: Iterator[str], write: Callable[[str], None], r: Redactor) -> int:
    """JSON token by token; :class:`_NotJson` as soon as it is not JSON."""
    scan, buf, pos, eof = _JsonScan(r), "", 0, False
    chunks = iter(chunks)
    while True:
        parts, end = [], pos
        for m in _JSON_TOKEN.finditer(buf, pos):
            if m.start() != end:
                break  # an unclosed string (or not JSON): read on
            if m.end() == len(buf) and not eof and buf[end] not in ' \t\n\r"{}[]:,':
                break  # a number or literal the chunk may have cut
            parts.append(scan.step(m.group()))
            end = m.end()
        write("".join(parts))  # one write per chunk: a compressor's write is not cheap
        pos = end
        if eof:
            if pos != len(buf):
                raise _NotJson  # an unclosed string, a stray quote
            break
        if len(buf) - pos > MAX_STRING:
            raise TooBig(
                f"a JSON string longer than {MAX_STRING:,} characters: it cannot be scanned"
            )
        chunk = next(chunks, None)
        eof = chunk is None
        buf, pos = buf[pos:] + (chunk or ""), 0
    if scan.stack or not scan.done:
        raise _NotJson
    return scan.count


class _JsonScan:
    """Where a JSON scan is (the open objects and arrays), what it masked, and each token's
    redacted form (:meth:`step`)."""

    def __init__(self, redactor: Redactor) -> None:
        self.redactor = redactor
        self.stack: list[_Frame] = []
        self.done = False  # the one top-level value was read
        self.count = 0
        self.memo: dict[str, tuple[str, int]] = {}  # a trace repeats its names and keys

    def step(self, token: str) -> str:
        """``token`` as it goes out; :class:`_NotJson` where JSON cannot have it."""
        first = token[0]
        if first in " \t\n\r":
            return token
        frame = self.stack[-1] if self.stack else None
        if frame is None:
            at_value = not self.done
        elif frame.kind == "{":
            if frame.state in ("first", "key") and first == '"':
                frame.key, frame.state = _plain(token), "colon"
                if frame.key in OWN_KEYS:
                    return token
                out = self.scrub(token, whole=False)
                return token if out is token else _unique_key(frame, out)
            at_value = frame.state == "value"
        else:
            at_value = frame.state in ("first", "value")
        if first in "{[" and at_value:
            if len(self.stack) >= MAX_JSON_DEPTH:
                raise TooDeep
            self.stack.append(_Frame(first))
            return token
        if first in "}]" and frame and frame.kind == "{["[first == "]"]:
            if frame.state not in ("first", "comma"):
                raise _NotJson
            self.stack.pop()
            self.value_done(None)
            return token
        if first == ":" and frame and frame.kind == "{" and frame.state == "colon":
            frame.state = "value"
            return token
        if first == "," and frame and frame.state == "comma":
            frame.state = "key" if frame.kind == "{" else "value"
            return token
        if not at_value or first in "{}[]:,":
            raise _NotJson
        if first != '"':
            self.value_done(None)  # a number, true, false, null (NaN as Python's json reads)
            if (
                first in "-0123456789"
                and frame is not None
                and frame.kind == "{"
                and frame.key not in OWN_KEYS
                and numbers_are_secret(frame.key)
                and self.redactor.is_secret_name(frame.key)
            ):
                # A PIN or a numeric password written as a number (still JSON as a string).
                self.count += 1
                return f'"{REDACTED}"'
            return token
        own = OWN_VALUES.get(frame.key) if frame is not None and frame.kind == "{" else None
        if own is not None and _plain(token) in own:
            self.value_done(token)
            return token
        whole = frame is not None and (
            (frame.kind == "{" and self.redactor.is_secret_name(frame.key))
            or (frame.kind == "[" and frame.flag)
        )
        out = self.scrub(token, whole=whole)
        self.value_done(token)
        return out

    def value_done(self, token: str | None) -> None:
        """A value ended (``token``: a string's): the next is a comma or a close."""
        if not self.stack:
            self.done = True
            return
        frame = self.stack[-1]
        frame.state = "comma"
        if frame.kind == "[":
            frame.flag = token is not None and is_secret_flag(_plain(token))

    def scrub(self, raw: str, *, whole: bool) -> str:
        """A string token redacted as text, or replaced whole."""
        text = raw[1:-1] if "\\" not in raw else _decode(raw)
        if whole:
            self.count += text != REDACTED
            return f'"{REDACTED}"'
        hit = self.memo.get(text)
        if hit is None:
            hit = self.redactor.text_counted(text)
            if len(self.memo) > 100_000:
                self.memo.clear()
            self.memo[text] = hit
        clean, n = hit
        self.count += n
        return raw if not n else json.dumps(clean, ensure_ascii=False)


def _unique_key(frame: _Frame, token: str) -> str:
    """A masked key made unique in its object: two keys that redact to the same text would
    otherwise be one key twice (JSON readers keep only the last).

    >>> f = _Frame("{")
    >>> _unique_key(f, '"<redacted>"'), _unique_key(f, '"<redacted>"'), _unique_key(f, '"<redacted>"')
    ('"<redacted>"', '"<redacted> (2)"', '"<redacted> (3)"')
    """
    seen = frame.masked if frame.masked is not None else set()
    frame.masked = seen
    text = _plain(token)
    if text not in seen:
        seen.add(text)
        return token
    n = 2
    while f"{text} ({n})" in seen:
        n += 1
    seen.add(f"{text} ({n})")
    return json.dumps(f"{text} ({n})", ensure_ascii=False)


def _plain(token: str) -> str:
    """A string token's text (``""`` for any other token)."""
    if token[:1] != '"':
        return ""
    return token[1:-1] if "\\" not in token else _decode(token)


def _decode(token: str) -> str:
    try:
        text: str = json.loads(token)
    except ValueError:
        raise _NotJson from None
    return text
